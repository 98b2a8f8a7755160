# flexplane — developer entry points. `make test` and `make dev` are the two
# commands a newcomer needs; everything they depend on is installed by them.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Packages whose tests also run under the race detector. Packages whose tests
# run the embedded Headscale are covered by the plain run only: headscale
# v0.28.0 has data races of its own (hscontrol/noise.go, its NodeStore, and
# the grpc-zerolog global its Serve writes) that fail any -race run; a -race
# run of them reports no race in flexplane's own code, and they are the
# slowest to build with -race.
RACE_PKGS   ?= $(shell $(GO) list ./pkg/... | grep -v -e /pkg/meshcontrol -e /pkg/meshtest -e /pkg/orchestrator)
BENCH_PKGS  ?= ./...
BENCHTIME   ?= 1s
# Code generators, pinned and installed into ./.bin by `make generate`.
BIN                    := $(CURDIR)/.bin
PROTOC_GEN_GO_VERSION  ?= v1.36.12
PROTOC_GEN_GRPC_VERSION ?= v1.6.2
BUF_VERSION            ?= v1.75.0
# Full Proxmox VE api-viewer schema that pkg/pveschema/apidata.json is trimmed from.
PVE_APIDATA ?= ../shared/pve-api/apidata.json

.PHONY: all build test lint bench generate generate-proto generate-graphql generate-pveschema check-generated

all: build

build:
	$(GO) build ./...

## test: the whole suite (plain run, then the race detector on RACE_PKGS).
test:
	$(GO) test -count=1 -timeout 20m ./...
	$(GO) test -count=1 -race -timeout 20m $(RACE_PKGS)

## lint: gofmt, go vet and staticcheck (pinned, run via `go run`).
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## bench: every benchmark once, as ratios against baselines measured in the same run.
bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem $(BENCH_PKGS)

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GRPC_VERSION)

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

## generate: regenerate every generated file from its source.
generate: generate-proto generate-graphql generate-pveschema

# The agent gRPC API (buf lint, then buf generate with pinned local plugins).
generate-proto: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/buf
	$(BIN)/buf lint
	$(BIN)/buf generate

# GraphQL server code from gqlgen.yml and graph/*.graphqls.
generate-graphql:
	$(GO) tool gqlgen generate

# The trimmed Proxmox VE API schema the simulator enforces.
generate-pveschema:
	@if [ -f "$(PVE_APIDATA)" ]; then \
		$(GO) run ./pkg/pveschema/internal/trim -in $(PVE_APIDATA) -out pkg/pveschema/apidata.json; \
	else echo "generate: $(PVE_APIDATA) absent, keeping pkg/pveschema/apidata.json"; fi

# Paths holding generated files; check-generated fails when they differ from a fresh run.
GENERATED_PATHS ?= proto graph pkg/pveschema/apidata.json

## check-generated: fail when generated code is stale or was edited by hand.
check-generated: generate
	git diff --exit-code -- $(GENERATED_PATHS)
	@untracked=$$(git ls-files --others --exclude-standard -- $(GENERATED_PATHS)); \
	if [ -n "$$untracked" ]; then echo "generated files not committed:"; echo "$$untracked"; exit 1; fi
