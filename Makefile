# flexplane — developer entry points. `make test` and `make dev` are the two
# commands a newcomer needs; everything they depend on is installed by them.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Packages whose tests also run under the race detector (tools/race/pkgs.sh):
# those under pkg/ whose own code is concurrent (goroutines, package sync,
# channels), and pkg/portal, whose browser test drives the API layer and the
# catalog in-process; a package with no concurrency of its own cannot race
# in it, and the plain run runs its tests. Packages whose tests
# run the embedded Headscale are covered by the plain run only: headscale
# v0.28.0 has data races of its own (hscontrol/noise.go, its NodeStore, and
# the grpc-zerolog global its Serve writes) that fail any -race run; a -race
# run of them reports no race in flexplane's own code, and they are the
# slowest to build with -race. pkg/dev/kubenode is left out too: its one
# test is a real node's processes (containerd, kubelet) it only waits on.
RACE_PKGS   ?= $(shell GO=$(GO) RACE_ALSO=github.com/flexplane/flexplane/pkg/portal tools/race/pkgs.sh /pkg/mesh/meshcontrol /pkg/dev/meshtest /pkg/orchestrator /pkg/rollout /pkg/dev/partitiontest /pkg/dev/kubenode)
# Tests the race run does not select (the plain run runs them): the ones
# that run the whole stack as child processes built without the race
# detector, and the 100 creates across a restart (a load test: under the
# detector it takes minutes, and its concurrency is what the other compute
# tests race). So are two whole-system tests of pkg/tenantkube, the
# slowest of the race run, whose concurrent code narrower tests race:
# TestUpgrade (Cluster API's rolling update of a cluster, about 50 s under
# the detector, run alone before the package's parallel tests; the
# provider's reconcilers it drives are raced by
# TestNodePoolsThroughClusterAPI, which creates, scales and deletes the
# same machines) and TestHostedControlPlaneServes (a control plane's
# containers as child processes, about 45 s; the Manager's concurrent
# paths are raced by the other TestEnsure* and TestRenewal* tests).
# Test files that start the mesh harness (embedded Headscale, see above)
# outside the excluded packages carry `//go:build !race` instead.
RACE_SKIP   ?= ^(TestStack|TestPortalOnDevStack|TestOrchestratorKilledDuringCreateVM|TestCreatesInFlightAcrossARestart|TestCreatesAcrossOrchestratorRestarts|TestKubeStack|TestUpgrade|TestHostedControlPlaneServes)$$
# Every fuzz target, as package:Target. Each checks properties of a parser
# at a trust boundary (see docs/develop/fuzzing.md); its seed corpus is in the
# package's testdata/fuzz/<Target>/, which every plain `go test` runs.
# `make fuzz` runs those of FUZZ (all by default), one after another,
# FUZZTIME each.
FUZZ_TARGETS := \
	./pkg/agent:FuzzAllowlist \
	./pkg/tenancy:FuzzParseID \
	./pkg/tenancy:FuzzTags \
	./pkg/tenancy:FuzzVNetAlias \
	./pkg/network:FuzzSpecValidate \
	./pkg/network/ipam:FuzzAssignable \
	./pkg/compute:FuzzCreateInput \
	./pkg/compute:FuzzParseIntent \
	./pkg/compute:FuzzParseHardware \
	./pkg/compute:FuzzParseSize \
	./pkg/compute:FuzzParseOpID \
	./pkg/catalog:FuzzDecodeManifest \
	./pkg/pvesim/pveschema:FuzzValidate \
	./pkg/pvesim/pveschema:FuzzLookup \
	./pkg/pvesim/pveschema:FuzzPropertyString \
	./pkg/pvesim/pveschema:FuzzFormat \
	./pkg/inventory:FuzzDecodeAnswer \
	./pkg/proxmox/pveapi:FuzzUPID \
	./pkg/proxmox/pveapi:FuzzConfig \
	./pkg/support/calendar:FuzzParse
FUZZ        ?= $(FUZZ_TARGETS)
FUZZTIME    ?= 10s
BENCH_PKGS  ?= ./...
BENCHTIME   ?= 1s
# Where `make bench` writes its JSON report (bench-results/ is git-ignored).
BENCH_OUT   ?= $(CURDIR)/bench-results/latest.json
# Where `make bench-scale` writes its JSON report.
BENCH_SCALE_OUT ?= $(CURDIR)/bench-results/scale.json
# Code generators, pinned and installed into ./.bin by `make generate`.
BIN                    := $(CURDIR)/.bin
PROTOC_GEN_GO_VERSION  ?= v1.36.12
PROTOC_GEN_GRPC_VERSION ?= v1.6.2
BUF_VERSION            ?= v1.75.0
# Full Proxmox VE api-viewer schema that pkg/pvesim/pveschema/apidata.json is
# trimmed from: the repository carries it, compressed. PVE_APIDATA_SRC is where
# `make import-pve-apidata` takes a newer one from.
PVE_APIDATA ?= pkg/pvesim/pveschema/upstream/apidata.json.gz
PVE_APIDATA_SRC ?= ../shared/pve-api/apidata.json

# The Kubernetes API server and etcd of the tests (pkg/dev/kubetest), the
# controller manager and scheduler of hosted control planes (pkg/dev/podrun), and
# the kubelet, kube-proxy and CoreDNS of the test node (pkg/dev/kubenode), built
# from the Go modules pinned in tools/kube, tools/etcd and tools/coredns. They are cached
# outside the checkout, in a directory named by a hash of the pins, so a
# fresh clone reuses them and a changed pin builds anew (pkg/dev/kubetest
# derives the same directory when FLEXPLANE_KUBE_BIN is unset).
KUBE_PINS   := tools/kube/go.mod tools/kube/go.sum tools/kube/cmd/kube/main.go tools/kube/build.sh tools/etcd/go.mod tools/etcd/go.sum tools/coredns/go.mod tools/coredns/go.sum tools/coredns/main.go
KUBE_BIN    ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/flexplane/kube-$(shell cat $(KUBE_PINS) | sha256sum | cut -c1-16)
export FLEXPLANE_KUBE_BIN := $(KUBE_BIN)

# The OpenTofu CLI of the Terraform provider's tests (pkg/tfprovider), built
# from the module pinned in tools/tofu, cached like KUBE_BIN in a directory
# named by a hash of the pins (the tests derive the same directory when
# FLEXPLANE_TOFU_BIN is unset); and the provider itself, built into the
# checkout (docs/use/terraform.md).
TOFU_PINS    := tools/tofu/go.mod tools/tofu/go.sum tools/tofu/tools.go tools/tofu/build.sh
TOFU_BIN     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/flexplane/tofu-$(shell cat $(TOFU_PINS) | sha256sum | cut -c1-16)
PROVIDER_BIN ?= $(CURDIR)/bin/terraform-provider-flexplane
export FLEXPLANE_TOFU_BIN := $(TOFU_BIN)

NPM         ?= npm
# Every file the portal build reads (not its outputs, packages or tests).
PORTAL_SRC  := $(shell find portal \( -name node_modules -o -name .output -o -name .nuxt \
                 -o -name test-artifacts -o -name tests \) -prune -o -type f -print 2>/dev/null)
export NUXT_TELEMETRY_DISABLED := 1

.PHONY: release all build flexctl dev test fuzz lint lint-portal bench bench-scale bench-all generate generate-proto generate-graphql generate-pveschema generate-graphiql \
	generate-deps generate-crds import-pve-apidata lint-schema check-generated check-proto-breaking portal portal-deps browser postgres systemd-analyze python3 image image-flexgateway test-portal kube-bin kube-node print-kube-bin \
	tofu-bin print-tofu-bin print-provider-bin provider

all: build

build:
	$(GO) build ./...

## flexctl: the command-line client (docs/use/flexctl.md) as bin/flexctl.
flexctl:
	$(GO) build -o bin/flexctl ./cmd/flexctl

## dev: the whole system on one machine (see pkg/dev/devstack and docs/develop/make-dev.md):
## builds the portal and the binaries, starts everything, prints
## "flexplane dev ready: http://$(DEV_ADDR)"; Ctrl-C stops it all.
DEV_ADDR ?= 127.0.0.1:8080
DEV_DIR  ?= .dev
export DEV_ADDR DEV_DIR
dev: portal $(if $(DEV_KUBE),kube-bin kube-node postgres)
	$(GO) build -o $(DEV_DIR)/bin/devstack ./cmd/devstack
	exec $(DEV_DIR)/bin/devstack

## test: the whole suite (plain run, then the race detector on RACE_PKGS),
## including the portal's browser tests. The plain run's longest packages
## (the dev stack, the mesh, graph, the portal) spend most of their time
## waiting on processes they started, so TEST_P of them run at once: more
## than the 2 cores the suite is budgeted for. go test starts the packages'
## runs in the order it is given them, so TEST_FIRST, the longest two,
## start first rather than after the twenty-odd packages before them in
## the alphabet; the other TEST_P - 2 run the rest meanwhile. The binaries
## the tests build (the orchestrator, the agent, the dev stack, flexctl,
## the provider) are kept in TEST_BIN_CACHE (pkg/dev/gobin), in the
## checkout, where go build links one again only when its sources changed. Meanwhile, at the
## lowest CPU priority, RACE_PKGS and what they import are compiled with
## the race detector into Go's build cache, with the cycles the plain run
## leaves idle, so the race run that follows compiles little of its own.
TEST_P     ?= 5
TEST_FIRST ?= ./pkg/dev/devstack ./pkg/dev/meshtest
TEST_BIN_CACHE ?= $(CURDIR)/.testbin
test: export FLEXPLANE_TEST_BIN_CACHE := $(TEST_BIN_CACHE)
test: portal browser postgres systemd-analyze python3 kube-bin kube-node tofu-bin
	nice -n 19 $(GO) build -race $(RACE_PKGS) >/dev/null 2>&1 & warm=$$!; \
	$(GO) test -count=1 -p $(TEST_P) -timeout 30m $(TEST_FIRST) ./...; plain=$$?; \
	wait $$warm; exit $$plain
	$(GO) test -count=1 -race -timeout 20m -skip '$(RACE_SKIP)' $(RACE_PKGS)

## fuzz: each of FUZZ for about FUZZTIME, one after another
## (tools/fuzz/fuzz.sh: a count of executions, the target's measured rate
## times FUZZTIME, so that the engine ends cleanly and whatever it reports
## fails the run); stops at the first failure, whose input go writes to the
## package's testdata/fuzz/<Target>/ (fix the bug, commit the input: it is
## then a regression test). Fails too when a Fuzz function is missing from
## the list.
fuzz:
	@missing=$$(for f in $$(git grep -h -o '^func Fuzz[A-Za-z0-9_]*' -- '*_test.go' | sed 's/^func //'); do \
		case " $(FUZZ_TARGETS) " in *":$$f "*) ;; *) echo "$$f";; esac; done); \
	if [ -n "$$missing" ]; then echo "fuzz targets missing from FUZZ_TARGETS:"; echo "$$missing"; exit 1; fi
	GO=$(GO) tools/fuzz/fuzz.sh $(FUZZTIME) $(FUZZ)

## lint: gofmt, go vet and staticcheck (pinned, run via `go run`), the
## schema's descriptions and the portal's type check.
lint: lint-schema lint-portal
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## bench: the stack benchmark of pkg/dev/benchmark (GraphQL vs asking Proxmox
## directly at 1, 8 and 32 zones, throughput, enrollment, memory, a VDC in 2
## of 64 zones vs a 2-zone deployment; JSON report
## in BENCH_OUT plus a table), then gRPC over the mesh vs loopback TCP
## (pkg/dev/meshtest), 60 VMs placed in a 3-node zone vs cloned without
## placement (pkg/compute), a 1,000-rule edge ruleset (pkg/edge), a disk moved
## across zones vs raw TCP over the mesh and loopback (pkg/dev/meshtest), and
## an agent's update and the rollback of bad releases vs a plain restart
## (pkg/rollout; the agents' probation is BENCH_UPDATE_PROBATION, default
## 40s), and the portal's first-page JavaScript gzipped against its 350 KB
## budget (pkg/portal, on the build), create -> hosted Kubernetes control
## plane ready vs a bare kube-apiserver start (pkg/tenantkube/controlplane),
## the latency flexgateway adds to an HTTP request vs the backend direct
## at a fixed rate (pkg/loadbalancer/gateway), `flexctl vm list` of 100
## VMs vs the same GraphQL query sent by curl (pkg/flexctl), and security
## groups (graph, as root): a TCP stream to a guest behind a 50-rule group
## vs one in no group, and a rule change of a 100-VM group in 3 zones until
## every member's firewall has it (p99 against 2 s), a VM's backup and
## restore vs a raw copy (pkg/pvesim), and 100 VMs' backup schedules run by
## Proxmox at one time, the orchestrator's CPU meanwhile against an absolute
## 1 s (graph). Every other figure is a ratio against a baseline of the same
## run. Tune with BENCH_SCALES, BENCH_VMS, ...
## (docs/performance/index.md).
bench: portal kube-bin tofu-bin
	BENCH_OUT=$(BENCH_OUT) $(GO) test -run '^$$' -bench '^BenchmarkStack$$' -benchtime 1x -timeout 25m ./pkg/dev/benchmark
	$(GO) test -run '^$$' -bench '^BenchmarkGRPCLatency$$' -benchtime 300x -timeout 5m ./pkg/dev/meshtest \
		| tee $(dir $(BENCH_OUT))grpc-latency.txt
	$(GO) test -run '^$$' -bench '^BenchmarkPlacement$$' -benchtime 1x -timeout 10m ./pkg/compute \
		| tee $(dir $(BENCH_OUT))placement.txt
	$(GO) test -run '^$$' -bench '^BenchmarkDrain$$' -benchtime 1x -timeout 10m ./pkg/compute \
		| tee $(dir $(BENCH_OUT))drain.txt
	$(GO) test -run '^$$' -bench '^BenchmarkHARecovery$$' -benchtime 1x -timeout 5m ./pkg/compute \
		| tee $(dir $(BENCH_OUT))ha.txt
	$(GO) test -run '^$$' -bench '^BenchmarkRuleset$$' -benchtime 20x -timeout 5m ./pkg/edge \
		| tee $(dir $(BENCH_OUT))edge-ruleset.txt
	$(GO) test -run '^$$' -bench '^BenchmarkWorkers0To10$$' -benchtime 1x -timeout 15m ./pkg/tenantkube \
		| tee $(dir $(BENCH_OUT))kube-workers.txt
	$(GO) test -run '^$$' -bench '^(BenchmarkClusterReadyThroughAPI|BenchmarkPoolWorkers0To10ThroughAPI)$$' -benchtime 1x -timeout 20m ./graph \
		| tee $(dir $(BENCH_OUT))kube-api.txt
	$(GO) test -run '^$$' -bench '^BenchmarkMigrationThroughput$$' -benchtime 3x -timeout 15m ./pkg/dev/meshtest \
		| tee $(dir $(BENCH_OUT))migration.txt
	$(GO) test -run '^$$' -bench '^BenchmarkAgentUpdate$$' -benchtime 1x -timeout 15m ./pkg/rollout \
		| tee $(dir $(BENCH_OUT))agent-update.txt
	$(GO) test -run '^$$' -bench '^BenchmarkFirstPageJS$$' -benchtime 1x ./pkg/portal \
		| tee $(dir $(BENCH_OUT))portal-js.txt
	$(GO) test -run '^$$' -bench '^BenchmarkControlPlaneReady$$' -benchtime 3x -timeout 20m ./pkg/tenantkube/controlplane \
		| tee $(dir $(BENCH_OUT))control-plane-ready.txt
	$(GO) test -run '^$$' -bench '^BenchmarkAddedLatency$$' -benchtime 1x -timeout 5m ./pkg/loadbalancer/gateway \
		| tee $(dir $(BENCH_OUT))lb-latency.txt
	$(GO) test -run '^$$' -bench '^BenchmarkVMList$$' -benchtime 10x -timeout 10m ./pkg/flexctl \
		| tee $(dir $(BENCH_OUT))flexctl-vm-list.txt
	$(GO) test -run '^$$' -bench '^BenchmarkSecurityGroupThroughput$$' -benchtime 6x -timeout 15m ./graph \
		| tee $(dir $(BENCH_OUT))sg-throughput.txt
	$(GO) test -run '^$$' -bench '^BenchmarkSecurityGroupRuleChange$$' -benchtime 100x -timeout 20m ./graph \
		| tee $(dir $(BENCH_OUT))sg-rule-change.txt
	$(GO) test -run '^$$' -bench '^BenchmarkBackupRestore$$' -benchtime 1x -timeout 10m ./pkg/pvesim \
		| tee $(dir $(BENCH_OUT))backup-restore.txt
	$(GO) test -run '^$$' -bench '^BenchmarkScheduledBackups$$' -benchtime 1x -timeout 20m ./graph \
		| tee $(dir $(BENCH_OUT))scheduled-backups.txt
	$(GO) test -run '^$$' -bench '^BenchmarkTofuApply$$' -benchtime 3x -timeout 15m ./pkg/tfprovider \
		| tee $(dir $(BENCH_OUT))tofu-apply.txt
	$(GO) test -run '^$$' -bench '^BenchmarkUploadThroughput$$' -benchtime 1x -timeout 15m ./pkg/dev/benchmark \
		| tee $(dir $(BENCH_OUT))upload.txt

## release: build the agent at RELEASE_VERSION for RELEASE_PLATFORM and sign
## it with the minisign key RELEASE_KEY (make one with `go run ./cmd/flexrelease
## keygen -key release.key -pub release.pub`; a password-protected key is
## opened with $$FLEXPLANE_RELEASE_KEY_PASSWORD). Writes the binary, its
## manifest and signature into RELEASE_DIR; publish them with
## `orchestrator releases add BINARY BINARY.manifest.json BINARY.manifest.json.minisig`.
RELEASE_VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' 2>/dev/null || echo v0.0.0-dev)
RELEASE_PLATFORM ?= linux/amd64
RELEASE_KEY      ?= release.key
RELEASE_DIR      ?= dist
RELEASE_VALID    ?= 336h
RELEASE_BIN       = $(RELEASE_DIR)/flexplane-agent-$(RELEASE_VERSION)-$(subst /,-,$(RELEASE_PLATFORM))
release:
	GOOS=$(word 1,$(subst /, ,$(RELEASE_PLATFORM))) GOARCH=$(word 2,$(subst /, ,$(RELEASE_PLATFORM))) CGO_ENABLED=0 \
		$(GO) build -trimpath -ldflags "-X main.buildVersion=$(RELEASE_VERSION)" -o $(RELEASE_BIN) ./cmd/agent
	$(GO) run ./cmd/flexrelease sign -key $(RELEASE_KEY) -version $(RELEASE_VERSION) -platform $(RELEASE_PLATFORM) \
		-valid $(RELEASE_VALID) $(RELEASE_BIN)

## bench-scale: the scale harness of pkg/dev/benchmark: BENCH_SCALE_CP_NODES
## (default 512) control-plane-only nodes registered with Headscale, then
## BENCH_SCALE_AGENTS (default 64) real agents, one per simulated single-node
## cluster, added in steps of 64 and 256 (BENCH_SCALE_BATCH at a time); the
## orchestrator's idle CPU, RSS and the agents' idle calls per agent at each
## step, the vms query of a VDC in 2 zones, gateway changes to their agent,
## Headscale's netmap update on a join, enrollment and offline detection at
## the largest; JSON report in BENCH_SCALE_OUT plus a table
## (docs/performance/index.md). Not part of `make bench`.
bench-scale:
	BENCH_SCALE_OUT=$(BENCH_SCALE_OUT) $(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 30m ./pkg/dev/benchmark

## bench-all: every benchmark of BENCH_PKGS for BENCHTIME each.
bench-all:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem $(BENCH_PKGS)

## kube-bin: kube-apiserver, kube-controller-manager, kube-scheduler,
## kubelet, kube-proxy, etcd and CoreDNS for the tests, built from the pinned Go
## modules into KUBE_BIN; afterwards nothing is rebuilt until a pin changes. The five Kubernetes
## commands are one binary (tools/kube/cmd/kube, chosen by the name it runs
## as): one build shares their packages and link work. tools/kube/build.sh
## prints its progress; docs/develop gives the measured cold times. The
## controller manager and scheduler run a hosted control plane's rendered
## containers as processes (pkg/dev/podrun); the kubelet runs a real node's
## pods (pkg/dev/kubenode, make kube-node), and CoreDNS (tools/coredns: only
## the plugins the node's cluster DNS uses) is its cluster DNS.
kube-bin: $(KUBE_BIN)/kube $(KUBE_BIN)/etcd $(KUBE_BIN)/coredns

print-kube-bin:
	@echo $(KUBE_BIN)

$(KUBE_BIN)/kube:
	GO=$(GO) tools/kube/build.sh $(KUBE_BIN)

$(KUBE_BIN)/etcd:
	@mkdir -p $(@D)
	@echo "kube-bin: building etcd into $(@D)"
	cd tools/etcd && $(GO) build -trimpath -ldflags "-s -w" -o $@.tmp go.etcd.io/etcd/server/v3
	mv $@.tmp $@

$(KUBE_BIN)/coredns:
	@mkdir -p $(@D)
	@echo "kube-bin: building CoreDNS into $(@D)"
	cd tools/coredns && $(GO) build -trimpath -ldflags "-s -w" -o $@.tmp .
	mv $@.tmp $@

## tofu-bin: the OpenTofu CLI (built from the module pinned in tools/tofu
## into TOFU_BIN, then never again until a pin changes; tools/tofu/build.sh
## prints its progress, docs/develop/testing.md gives the cold time) and the
## Terraform provider (PROVIDER_BIN). print-tofu-bin and print-provider-bin
## print only their paths, for a dev_overrides CLI configuration
## (docs/use/terraform.md).
tofu-bin: $(TOFU_BIN)/tofu provider

print-tofu-bin:
	@echo $(TOFU_BIN)/tofu

print-provider-bin:
	@echo $(PROVIDER_BIN)

$(TOFU_BIN)/tofu:
	GO=$(GO) tools/tofu/build.sh $(TOFU_BIN)

## provider: the Terraform provider as PROVIDER_BIN.
provider:
	$(GO) build -o $(PROVIDER_BIN) ./cmd/terraform-provider-flexplane

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GRPC_VERSION)

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

## generate: regenerate every generated file from its source.
generate: generate-proto generate-graphql generate-pveschema generate-graphiql generate-crds generate-deps

# The agent gRPC API (buf lint, then buf generate with pinned local plugins).
generate-proto: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/buf
	$(BIN)/buf lint
	$(BIN)/buf generate

# GraphQL server code from gqlgen.yml and graph/*.graphqls, the whole
# schema as one SDL file for client code generation (graph/flexplane.graphql),
# and flexctl's client from it and the operations in pkg/flexctl/api
# (genqlient, pinned in go.mod's tool block).
generate-graphql:
	$(GO) tool gqlgen generate
	$(GO) run ./graph/internal/sdl -in 'graph/*.graphqls' -out graph/flexplane.graphql
	cd pkg/flexctl/api && $(GO) tool genqlient genqlient.yaml

# The catalog's Kubernetes API (pkg/catalog/kubestore/v1alpha1): DeepCopy
# methods, and the CRDs with their OpenAPI validation, embedded by
# pkg/catalog/kubestore and shipped by the chart (charts/flexplane/crds);
# Cluster API's CRDs and manager roles from the module, and the
# providers' CRDs, for the chart's managed Kubernetes (charts/flexplane/files).
CRD_API := ./pkg/catalog/kubestore/v1alpha1
CAPI_API := ./pkg/tenantkube/capiprovider/v1alpha1
generate-crds:
	$(GO) tool controller-gen object paths=$(CRD_API)
	$(GO) tool controller-gen crd paths=$(CRD_API) output:crd:dir=pkg/catalog/kubestore/crds
	mkdir -p charts/flexplane/crds
	rm -f charts/flexplane/crds/flexplane.io_*.yaml
	cp pkg/catalog/kubestore/crds/flexplane.io_*.yaml charts/flexplane/crds/
	$(GO) tool controller-gen object paths=$(CAPI_API)
	$(GO) tool controller-gen crd paths=$(CAPI_API) output:crd:dir=pkg/tenantkube/capiprovider/crds
	$(GO) run ./pkg/dev/capitest/internal/chartfiles -out charts/flexplane/files/clusterapi

# The full dependency list of the agent, the binary on every hypervisor
# (cmd/agent's TestDepList fails when it is stale).
generate-deps:
	$(GO) run ./pkg/dev/deptest/internal/deplist -out cmd/agent/deps.txt ./cmd/agent

# The trimmed Proxmox VE API schema the simulator enforces, from the full one.
generate-pveschema:
	$(GO) run ./pkg/pvesim/pveschema/internal/trim -in $(PVE_APIDATA) -out pkg/pvesim/pveschema/apidata.json

## import-pve-apidata: replace the full Proxmox schema the repository carries
## with PVE_APIDATA_SRC (plain api-viewer JSON); run `make generate` after it.
import-pve-apidata:
	@test -f "$(PVE_APIDATA_SRC)" || { echo "import-pve-apidata: $(PVE_APIDATA_SRC) is missing (set PVE_APIDATA_SRC)"; exit 1; }
	gzip -9nc "$(PVE_APIDATA_SRC)" > pkg/pvesim/pveschema/upstream/apidata.json.gz

# GraphiQL and React as the npm registry ships them, embedded by
# graph/server/graphiql so the API's GraphiQL page needs no CDN.
GRAPHIQL_VERSION ?= 4.1.2
GRAPHIQL_REACT_VERSION ?= 18.2.0
generate-graphiql:
	graph/server/graphiql/fetch.sh $(GRAPHIQL_VERSION) $(GRAPHIQL_REACT_VERSION)

# Paths holding generated files; check-generated fails when they differ from a fresh run.
GENERATED_PATHS ?= proto graph pkg/flexctl/api pkg/pvesim/pveschema/apidata.json pkg/catalog/kubestore/crds pkg/catalog/kubestore/v1alpha1 pkg/tenantkube/capiprovider/crds pkg/tenantkube/capiprovider/v1alpha1 charts/flexplane/crds charts/flexplane/files graph/server/graphiql/assets cmd/agent/deps.txt

## check-proto-breaking: fail when the agent API breaks compatibility with
## any earlier version of it on main (buf breaking, FILE rules): agents of
## several versions talk to one orchestrator while they update themselves.
check-proto-breaking: $(BIN)/buf
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	for c in $$(git log --format=%H -- proto buf.yaml); do \
		mkdir -p "$$tmp/$$c"; git archive "$$c" buf.yaml proto | tar -x -C "$$tmp/$$c"; \
		echo "buf breaking against $$c"; $(BIN)/buf breaking --against "$$tmp/$$c"; \
	done

## check-generated: fail when generated code is stale or was edited by hand.
check-generated: generate
	git diff --exit-code -- $(GENERATED_PATHS)
	@untracked=$$(git ls-files --others --exclude-standard -- $(GENERATED_PATHS)); \
	if [ -n "$$untracked" ]; then echo "generated files not committed:"; echo "$$untracked"; exit 1; fi

## portal-deps: the portal's npm packages, exactly as package-lock.json says.
portal-deps: portal/node_modules/.package-lock.json

portal/node_modules/.package-lock.json: portal/package.json portal/package-lock.json
	cd portal && $(NPM) ci --no-audit --no-fund
	@touch $@

## portal: the static build of the portal (portal/.output/public), rebuilt
## when its sources change; pkg/portal serves it.
portal: portal/.output/public/index.html

portal/.output/public/index.html: portal/node_modules/.package-lock.json $(PORTAL_SRC) graph/flexplane.graphql
	cd portal && $(NPM) run --silent build
	@test -f $@ && touch $@

## lint-schema: every type, field, argument, enum value and input field of
## the published schema has a description (graphql-schema-linter, pinned in
## portal/package.json).
SCHEMA_RULES := types-have-descriptions,fields-have-descriptions,arguments-have-descriptions,enum-values-have-descriptions,input-object-values-have-descriptions
lint-schema: portal-deps
	cd portal && npx --no-install graphql-schema-linter --rules $(SCHEMA_RULES) ../graph/flexplane.graphql

## lint-portal: type-check the portal (vue-tsc) against the types
## @graphql-codegen generates from the schema and the portal's documents:
## a query that does not fit the schema fails here.
lint-portal: portal-deps
	cd portal && $(NPM) run --silent typecheck

## browser: Debian's chromium for the browser tests (apt-get when missing).
browser:
	@portal/scripts/install-browser.sh

## image: the orchestrator's container image, built without Docker
## (pkg/dev/ociimage): a static linux binary, the built portal and the CA
## bundle on an empty base, as an image tarball (IMAGE_OUT; docker load,
## podman load, ctr images import, kind load image-archive). Reproducible:
## the same sources give the same digest (timestamps from
## SOURCE_DATE_EPOCH, else 0). Its tag is the flexplane chart's default image.
IMAGE_OUT ?= bin/orchestrator-image.tar
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image: portal
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -buildvcs=false \
		-tags ts_omit_captiveportal -ldflags '-s -w -buildid=' -o bin/linux-$(IMAGE_ARCH)/orchestrator ./cmd/orchestrator
	$(GO) run ./pkg/dev/ociimage/internal/build -arch $(IMAGE_ARCH) -binary bin/linux-$(IMAGE_ARCH)/orchestrator \
		-portal portal/.output/public -out $(IMAGE_OUT)

## image-flexgateway: flexgateway's container image the same way (the
## static binary alone on an empty base; IMAGE_FLEXGATEWAY_OUT). Its tag is
## the flexgateway chart's default image.
IMAGE_FLEXGATEWAY_OUT ?= bin/flexgateway-image.tar
image-flexgateway:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -buildvcs=false \
		-ldflags '-s -w -buildid=' -o bin/linux-$(IMAGE_ARCH)/flexgateway ./cmd/flexgateway
	$(GO) run ./pkg/dev/ociimage/internal/build -component flexgateway -arch $(IMAGE_ARCH) \
		-binary bin/linux-$(IMAGE_ARCH)/flexgateway -out $(IMAGE_FLEXGATEWAY_OUT)

## postgres: Debian's postgresql server binaries for the tests that run a
## throwaway PostgreSQL (pkg/dev/pgtest; apt-get when missing).
postgres:
	@pkg/dev/pgtest/install-postgres.sh

## systemd-analyze: Debian's systemd, whose systemd-analyze verifies the
## agent's units (cmd/agent's TestSystemdUnits; apt-get when missing).
systemd-analyze:
	@deploy/systemd/install-systemd-analyze.sh

## kube-node: what a real Kubernetes node of the tests (pkg/dev/kubenode)
## runs: the kubelet, built into KUBE_BIN with the API server (kube-bin),
## and Debian's containerd, runc, CNI plugins and iptables (apt-get when
## missing). docs/develop/testing.md says what the node is and how its test
## keeps off the machine.
kube-node: kube-bin
	@pkg/dev/kubenode/install-node.sh

## python3: Debian's python3, which the cloud-init data-plane tests run in
## a simulated guest (nettest.FileServerPy; apt-get when missing).
python3:
	@pkg/dev/nettest/install-python3.sh

## test-portal: only the portal's browser tests: against an in-process
## backend, the mesh harness and the real dev stack.
test-portal: portal browser
	$(GO) test -count=1 -run '^TestBrowser' -v ./pkg/portal/
	$(GO) test -count=1 -run '^TestPortalOnDevStack$$' -v ./pkg/dev/devstack/
