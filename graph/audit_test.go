package graph_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/generated"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/dev/audittest"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// auditCall is one call of a mutation in TestAuditEveryMutation.
type auditCall struct {
	user, vdc, query string
	vars             map[string]any
	// ids must be among the event's object ids.
	ids []string
}

// TestAuditEveryMutation calls every mutation of the schema (enumerated
// from the generated schema: a new mutation without a call here fails) and
// checks that each emits exactly one audit event: the caller, the VDC, the
// verb, the object ids, the outcome as the client saw it, the request
// time, the Proxmox tasks it started, and its secrets redacted.
func TestAuditEveryMutation(t *testing.T) {
	t.Parallel()
	rec := &audittest.Recorder{}
	// Every mutation, one after another, by a few callers: more than the
	// default rate limit lets through (whose refusals
	// TestAuditRefusedMutations and graph/server's tests audit).
	noLimits := server.RateLimits{MutationRate: -1, ConsoleRate: -1}
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1, Snippets: true}),
		meshtest.WithAPI(meshtest.APISpec{RateLimits: noLimits}), meshtest.WithAuditSink(rec))
	h.WaitOnline(t, 30*time.Second)
	url, sum := vmtest.ImageServer(t, 3<<20)
	var created struct {
		CreateNetwork struct{ ID string }
	}

	calls := map[string][]auditCall{
		"createEnrollmentKey": {{user: "admin", query: `mutation { createEnrollmentKey(input: {ttlSeconds: 600}) { key { id } secret } }`}},
		"revokeEnrollmentKey": {{user: "admin", query: `mutation { revokeEnrollmentKey(id: "999999") { id } }`, ids: []string{"999999"}}},
		"createComputeProfile": {{user: "admin", query: `mutation { createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 512}) { name } }`, ids: []string{"small"}},
			{user: "alice", vdc: "red", query: `mutation { createComputeProfile(input: {name: "big", vcpus: 8, memoryMiB: 512}) { name } }`, ids: []string{"big"}}},
		"updateComputeProfile": {{user: "admin", query: `mutation { updateComputeProfile(input: {name: "small", description: "s"}) { name } }`, ids: []string{"small"}}},
		"createStorageProfile": {{user: "admin", query: `mutation { createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "local-lvm"}]}) { name } }`, ids: []string{"ssd"}}},
		"updateStorageProfile": {{user: "admin", query: `mutation { updateStorageProfile(input: {name: "ssd", description: "s"}) { name } }`, ids: []string{"ssd"}}},
		"createImage": {{user: "admin", query: `mutation($u: String!, $c: String!) { createImage(input: {name: "tiny", version: "1", url: $u, checksum: $c, cloudInit: true}) { name } }`,
			vars: map[string]any{"u": url, "c": sum}, ids: []string{"tiny"}}},
		"updateImage":           {{user: "admin", query: `mutation { updateImage(input: {name: "tiny", description: "t"}) { name } }`, ids: []string{"tiny"}}},
		"stageImage":            {{user: "admin", query: `mutation { stageImage(name: "tiny", zone: "alpha") { state } }`, ids: []string{"tiny"}}},
		"createVDC":             {{user: "admin", query: `mutation { createVDC(input: {name: "green", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } }`, ids: []string{"green"}}},
		"updateVDC":             {{user: "admin", query: `mutation { updateVDC(input: {name: "green", description: "g"}) { name } }`, ids: []string{"green"}}},
		"createNetwork":         {{user: "bob", vdc: "blue", query: `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, ids: []string{"lan"}}},
		"createVM":              {{user: "bob", vdc: "blue", query: `mutation($in: CreateVMInput!) { createVM(input: $in) { vm { id } operation { id } } }`}},
		"startVM":               {{user: "bob", vdc: "blue", query: `mutation { startVM(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"stopVM":                {{user: "bob", vdc: "blue", query: `mutation { stopVM(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"shutdownVM":            {{user: "bob", vdc: "blue", query: `mutation { shutdownVM(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"rebootVM":              {{user: "bob", vdc: "blue", query: `mutation { rebootVM(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"deleteVM":              {{user: "bob", vdc: "blue", query: `mutation { deleteVM(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"migrateVM":             {{user: "bob", vdc: "blue", query: `mutation { migrateVM(input: {id: "nosuch", host: "pve2"}) { id } }`, ids: []string{"nosuch"}}},
		"createSnapshot":        {{user: "bob", vdc: "blue", query: `mutation { createSnapshot(vm: "nosuch", input: {name: "s1", withRAM: true}) { id } }`, ids: []string{"nosuch"}}},
		"rollbackSnapshot":      {{user: "bob", vdc: "blue", query: `mutation { rollbackSnapshot(vm: "nosuch", name: "s1") { id } }`, ids: []string{"nosuch"}}},
		"deleteSnapshot":        {{user: "bob", vdc: "blue", query: `mutation { deleteSnapshot(vm: "nosuch", name: "s1") { id } }`, ids: []string{"nosuch"}}},
		"attachDisk":            {{user: "bob", vdc: "blue", query: `mutation { attachDisk(input: {vm: "nosuch", sizeGiB: 1}) { slot } }`, ids: []string{"nosuch"}}},
		"resizeDisk":            {{user: "bob", vdc: "blue", query: `mutation { resizeDisk(input: {vm: "nosuch", disk: "scsi1", sizeGiB: 8}) { slot } }`, ids: []string{"nosuch"}}},
		"detachDisk":            {{user: "bob", vdc: "blue", query: `mutation { detachDisk(input: {vm: "nosuch", disk: "scsi1"}) { id } }`, ids: []string{"nosuch"}}},
		"resizeVM":              {{user: "bob", vdc: "blue", query: `mutation { resizeVM(input: {id: "nosuch", computeProfile: "small"}) { id } }`, ids: []string{"nosuch"}}},
		"openConsole":           {{user: "bob", vdc: "blue", query: `mutation { openConsole(id: "nosuch") { path } }`, ids: []string{"nosuch"}}},
		"createBackup":          {{user: "bob", vdc: "blue", query: `mutation { createBackup(vm: "nosuch", input: {description: "d"}) { id } }`, ids: []string{"nosuch"}}},
		"restoreBackup":         {{user: "bob", vdc: "blue", query: `mutation { restoreBackup(input: {backup: "nosuch", name: "r1"}) { id } }`, ids: []string{"nosuch", "r1"}}},
		"deleteBackup":          {{user: "bob", vdc: "blue", query: `mutation { deleteBackup(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"setBackupSchedule":     {{user: "bob", vdc: "blue", query: `mutation { setBackupSchedule(input: {vm: "nosuch", schedule: "daily", keepLast: 3}) { id } }`, ids: []string{"nosuch"}}},
		"removeBackupSchedule":  {{user: "bob", vdc: "blue", query: `mutation { removeBackupSchedule(vm: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"updateZone":            {{user: "admin", query: `mutation { updateZone(input: {name: "alpha", region: "eu-central"}) { name region } }`, ids: []string{"alpha"}}},
		"deleteNetwork":         {{user: "bob", vdc: "blue", query: `mutation($id: ID!) { deleteNetwork(id: $id) { id } }`}},
		"deleteVDC":             {{user: "admin", query: `mutation { deleteVDC(name: "green") { name } }`, ids: []string{"green"}}},
		"deleteImage":           {{user: "admin", query: `mutation { deleteImage(name: "nosuch") { name } }`, ids: []string{"nosuch"}}},
		"deleteComputeProfile":  {{user: "admin", query: `mutation { deleteComputeProfile(name: "small") { name } }`, ids: []string{"small"}}},
		"deleteStorageProfile":  {{user: "admin", query: `mutation { deleteStorageProfile(name: "nosuch") { name } }`, ids: []string{"nosuch"}}},
		"updateAgents":          {{user: "admin", query: `mutation { updateAgents(input: {version: "v1.0.0"}) { id } }`}},
		"createExternalNetwork": {{user: "admin", query: `mutation { createExternalNetwork(input: {zone: "alpha", bridge: "vmbr0", cidr: "203.0.113.0/24", gateway: "203.0.113.1", poolStart: "203.0.113.10", poolEnd: "203.0.113.20"}) { zone } }`}},
		"createFirewallRule":    {{user: "bob", vdc: "blue", query: `mutation { createFirewallRule(input: {zone: "alpha", direction: INBOUND, protocol: TCP, fromPort: 22, action: ALLOW}) { id } }`}},
		"deleteFirewallRule":    {{user: "bob", vdc: "blue", query: `mutation { deleteFirewallRule(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"createPortForward":     {{user: "bob", vdc: "blue", query: `mutation { createPortForward(input: {vmId: "nosuch", protocol: TCP, publicPort: 80, targetPort: 80}) { id } }`, ids: []string{"nosuch"}}},
		"deletePortForward":     {{user: "bob", vdc: "blue", query: `mutation { deletePortForward(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"createOneToOneAddress": {{user: "bob", vdc: "blue", query: `mutation { createOneToOneAddress(input: {vmId: "nosuch"}) { id } }`, ids: []string{"nosuch"}}},
		"deleteOneToOneAddress": {{user: "bob", vdc: "blue", query: `mutation { deleteOneToOneAddress(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"updateEdgeGateway":     {{user: "bob", vdc: "blue", query: `mutation { updateEdgeGateway(input: {zone: "alpha", egressMbps: 10}) { egressMbps } }`}},
		"createLoadBalancer": {{user: "bob", vdc: "blue", query: `mutation { createLoadBalancer(input: {name: "web", zone: "nosuch", listeners: [], pools: [],
			certificates: [{name: "c", certificatePem: "x", privateKeyPem: "AAAAC3Nza-secret"}]}) { id } }`}},
		"updateLoadBalancer": {{user: "bob", vdc: "blue", query: `mutation { updateLoadBalancer(input: {id: "nosuch"}) { id } }`, ids: []string{"nosuch"}}},
		"deleteLoadBalancer": {{user: "bob", vdc: "blue", query: `mutation { deleteLoadBalancer(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"deleteEdgeGateway":  {{user: "bob", vdc: "blue", query: `mutation { deleteEdgeGateway(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"createSecurityGroup": {{user: "bob", vdc: "blue", query: `mutation { createSecurityGroup(input: {name: "web", rules: [{direction: INBOUND, protocol: TCP, ports: "443"}]}) { id } }`,
			ids: []string{"web"}}},
		"updateSecurityGroup":     {{user: "bob", vdc: "blue", query: `mutation { updateSecurityGroup(input: {id: "nosuch"}) { id } }`, ids: []string{"nosuch"}}},
		"deleteSecurityGroup":     {{user: "bob", vdc: "blue", query: `mutation { deleteSecurityGroup(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"setVMSecurityGroups":     {{user: "bob", vdc: "blue", query: `mutation { setVMSecurityGroups(input: {vm: "nosuch", securityGroups: []}) { id } }`}},
		"setDefaultSecurityGroup": {{user: "admin", vdc: "blue", query: `mutation { setDefaultSecurityGroup(name: "nosuch") { name } }`, ids: []string{"nosuch"}}},
		"createPlacementGroup":    {{user: "bob", vdc: "blue", query: `mutation { createPlacementGroup(input: {name: "db", zone: "alpha", policy: SPREAD}) { id } }`}},
		"deletePlacementGroup":    {{user: "bob", vdc: "blue", query: `mutation { deletePlacementGroup(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"uploadImage":             {{user: "bob", vdc: "blue", query: uploadImage, vars: map[string]any{"name": "app", "format": "RAW"}, ids: []string{"app"}}},
		"stageVDCImage":           {{user: "bob", vdc: "blue", query: `mutation { stageVDCImage(name: "app", zone: "alpha") { state } }`, ids: []string{"app"}}},
		"deleteVDCImage":          {{user: "bob", vdc: "blue", query: `mutation { deleteVDCImage(name: "app") { name } }`, ids: []string{"app"}}},
		"createImageFromVM":       {{user: "bob", vdc: "blue", query: `mutation { createImageFromVM(input: {vm: "nosuch", name: "golden"}) { id } }`, ids: []string{"golden"}}},
		"detachISO":               {{user: "bob", vdc: "blue", query: `mutation { detachISO(vm: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		// The harness has no management cluster: these answer UNAVAILABLE
		// (graph's Kubernetes tests run them on one), and are audited so.
		"createKubernetesCluster": {{user: "bob", vdc: "blue", query: `mutation { createKubernetesCluster(input: {name: "dev", zone: "alpha", version: "v1.37.2", network: "nosuch"}) { id } }`}},
		"createNodePool": {{user: "bob", vdc: "blue", query: `mutation { createNodePool(input: {cluster: "nosuch", name: "w", computeProfile: "small", storageProfile: "ssd", size: 1}) { id } }`,
			ids: []string{"w"}}},
		"scaleNodePool":            {{user: "bob", vdc: "blue", query: `mutation { scaleNodePool(id: "nosuch/w", size: 2) { id } }`, ids: []string{"nosuch/w"}}},
		"deleteNodePool":           {{user: "bob", vdc: "blue", query: `mutation { deleteNodePool(id: "nosuch/w") { id } }`, ids: []string{"nosuch/w"}}},
		"upgradeKubernetesCluster": {{user: "bob", vdc: "blue", query: `mutation { upgradeKubernetesCluster(id: "nosuch", version: "v1.37.2") { id } }`, ids: []string{"nosuch"}}},
		"issueKubeconfig":          {{user: "bob", vdc: "blue", query: `mutation { issueKubeconfig(cluster: "nosuch") { expiresAt } }`, ids: []string{"nosuch"}}},
		"deleteKubernetesCluster":  {{user: "bob", vdc: "blue", query: `mutation { deleteKubernetesCluster(id: "nosuch") { id } }`, ids: []string{"nosuch"}}},
		"createServiceAccount": {{user: "admin", vdc: "blue", query: `mutation { createServiceAccount(input: {name: "ci", role: MEMBER}) { serviceAccount { id } token } }`,
			ids: []string{"ci"}}},
		"rotateServiceAccountToken": {{user: "admin", vdc: "blue", query: `mutation { rotateServiceAccountToken(input: {id: "sa-00000000000000000000", graceSeconds: 60}) { token } }`,
			ids: []string{"sa-00000000000000000000"}}},
		"deleteServiceAccount": {{user: "admin", vdc: "blue", query: `mutation { deleteServiceAccount(id: "sa-00000000000000000000") { id } }`,
			ids: []string{"sa-00000000000000000000"}}},
		"addVDCMember":    {{user: "admin", vdc: "blue", query: `mutation { addVDCMember(input: {user: "carol", role: VIEWER}) { user } }`}},
		"removeVDCMember": {{user: "admin", vdc: "blue", query: `mutation { removeVDCMember(user: "carol") { user } }`}},
		"addSSHKey": {{user: "alice", query: `mutation($k: String!) { addSSHKey(input: {name: "laptop", publicKey: $k}) { name } }`,
			vars: map[string]any{"k": sshKey}, ids: []string{"laptop"}}},
		"setHostMaintenance": {{user: "admin", query: `mutation { setHostMaintenance(input: {host: "nosuch", enabled: true}) { id } }`, ids: []string{"nosuch"}}},
		"deleteSSHKey":       {{user: "alice", query: `mutation { deleteSSHKey(name: "laptop") { name } }`, ids: []string{"laptop"}}},
	}
	// The order the calls run in: creates before what uses them.
	order := []string{"createEnrollmentKey", "revokeEnrollmentKey", "createComputeProfile", "updateComputeProfile",
		"createStorageProfile", "updateStorageProfile", "createImage", "updateImage", "stageImage", "createVDC", "updateVDC",
		"createNetwork", "createVM", "startVM", "stopVM", "shutdownVM", "rebootVM", "deleteVM",
		"createSnapshot", "rollbackSnapshot", "deleteSnapshot", "attachDisk", "resizeDisk", "detachDisk", "resizeVM", "createBackup", "restoreBackup", "deleteBackup", "setBackupSchedule", "removeBackupSchedule", "openConsole", "updateZone", "migrateVM", "setHostMaintenance", "deleteNetwork",
		"deleteVDC", "deleteImage", "deleteComputeProfile", "deleteStorageProfile", "updateAgents",
		"createExternalNetwork", "createFirewallRule", "deleteFirewallRule", "createPortForward", "deletePortForward",
		"createOneToOneAddress", "deleteOneToOneAddress", "updateEdgeGateway", "createLoadBalancer", "updateLoadBalancer", "deleteLoadBalancer", "deleteEdgeGateway",
		"createSecurityGroup", "updateSecurityGroup", "deleteSecurityGroup", "setVMSecurityGroups", "setDefaultSecurityGroup",
		"createPlacementGroup", "deletePlacementGroup", "uploadImage", "stageVDCImage", "deleteVDCImage", "createImageFromVM", "detachISO",
		"createKubernetesCluster", "createNodePool", "scaleNodePool", "deleteNodePool", "upgradeKubernetesCluster", "issueKubeconfig", "deleteKubernetesCluster",
		"addSSHKey", "deleteSSHKey",
		"createServiceAccount", "rotateServiceAccountToken", "deleteServiceAccount", "addVDCMember", "removeVDCMember"}

	schema := generated.NewExecutableSchema(generated.Config{}).Schema()
	var mutations []string
	for _, f := range schema.Mutation.Fields {
		if !strings.HasPrefix(f.Name, "__") {
			mutations = append(mutations, f.Name)
		}
	}
	for _, m := range mutations {
		if len(calls[m]) == 0 || !slices.Contains(order, m) {
			t.Errorf("mutation %s has no call in TestAuditEveryMutation: add one", m)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	for _, verb := range order {
		for _, c := range calls[verb] {
			vars := c.vars
			switch verb {
			case "createVM":
				// The create clones the template stageImage started: wait for
				// it, so that the create has its VM at once.
				poll.True(t, 2*time.Minute, "image tiny staged in alpha", func() bool {
					var imgs []struct{ Zones []struct{ State string } }
					h.GraphQL(t, "admin", "", `{ images { zones(zone: "alpha") { state } } }`, nil).OK(t).Into(t, "images", &imgs)
					return len(imgs) == 1 && len(imgs[0].Zones) == 1 && imgs[0].Zones[0].State == "STAGED"
				})
				vars = map[string]any{"in": map[string]any{"name": "a-1", "zone": "alpha", "image": "tiny", "computeProfile": "small",
					"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": created.CreateNetwork.ID}},
					"sshKeys": []string{sshKey}, "user": "bob", "userData": "#cloud-config\nruncmd:\n  - echo user-data-secret-42\n"}}
			case "deleteNetwork":
				vars = map[string]any{"id": created.CreateNetwork.ID}
				c.ids = []string{created.CreateNetwork.ID}
			}
			n := rec.Len()
			var r *gqltest.Response
			if verb == "uploadImage" {
				// A multipart request, its file streamed.
				var err error
				if r, err = upload(t, h, c.user, c.vdc, vars, strings.NewReader("raw disk bytes")); err != nil {
					t.Fatal(err)
				}
			} else {
				r = h.GraphQL(t, c.user, c.vdc, c.query, vars)
			}
			if verb == "createNetwork" {
				r.OK(t).Into(t, "createNetwork", &created.CreateNetwork)
			}
			evs := rec.Since(n)
			if len(evs) != 1 {
				t.Errorf("%s as %s: %d audit events, want 1: %+v", verb, c.user, len(evs), evs)
				continue
			}
			ev := evs[0]
			wantCode := "OK"
			if len(r.Errors) > 0 {
				wantCode = r.Errors[0].Code()
			}
			if ev.Verb != verb || ev.ResponseStatus.Code != wantCode || ev.User.Name == "" || ev.User.Subject == "" ||
				ev.VDC != c.vdc || ev.Kind != "Event" || ev.APIVersion != audit.APIVersion || ev.AuditID == "" ||
				ev.RequestReceivedTimestamp.IsZero() || ev.StageTimestamp.Before(ev.RequestReceivedTimestamp) {
				t.Errorf("%s as %s (answer %s): event %+v", verb, c.user, r.Raw, ev)
			}
			for _, id := range c.ids {
				if !slices.Contains(ev.ObjectRef.IDs, id) {
					t.Errorf("%s: object ids %v lack %q", verb, ev.ObjectRef.IDs, id)
				}
			}
			b, _ := json.Marshal(ev)
			switch verb {
			case "createNetwork":
				if len(ev.UPIDs) == 0 || !strings.HasPrefix(ev.UPIDs[0], "UPID:") {
					t.Errorf("createNetwork: no Proxmox task in %s", b)
				}
			case "createLoadBalancer":
				if strings.Contains(string(b), "AAAAC3Nza-secret") || !strings.Contains(string(b), audit.Redacted) {
					t.Errorf("createLoadBalancer: the private key is not redacted: %s", b)
				}
			case "createVM":
				if strings.Contains(string(b), "AAAAC3Nza") || !strings.Contains(string(b), audit.Redacted) {
					t.Errorf("createVM: the SSH key is not redacted: %s", b)
				}
				if strings.Contains(string(b), "user-data-secret-42") || strings.Contains(string(b), "runcmd") {
					t.Errorf("createVM: the user-data is not redacted: %s", b)
				}
				if ev.ResponseStatus.Code != "OK" || len(ev.ObjectRef.IDs) < 3 || ev.ObjectRef.Resource != "CreateVMPayload" {
					t.Errorf("createVM: event %s", b)
				}
			case "createServiceAccount", "rotateServiceAccountToken":
				if strings.Contains(string(b), "fpsa_") {
					t.Errorf("%s: the token is in the audit event: %s", verb, b)
				}
			case "addSSHKey":
				if strings.Contains(string(b), "AAAAC3Nza") || ev.ResponseStatus.Code != "OK" {
					t.Errorf("addSSHKey: refused, or the key is not redacted: %s", b)
				}
			case "createComputeProfile":
				if c.user == "alice" && ev.ResponseStatus.Code != "NOT_FOUND" {
					t.Errorf("a member's createComputeProfile: %s", b)
				}
			}
		}
	}
}

// TestAuditRefusedMutations: a mutation refused before any of its fields
// ran — it does not parse or validate, its variables are wrong, it exceeds
// a limit, its VDC is not the caller's, its token is bad or missing — is
// audited too: one event per field it names (verb "mutation" when it is
// too broken to name them) with the code the client saw. Refused queries
// are not audited.
func TestAuditRefusedMutations(t *testing.T) {
	t.Parallel()
	rec := &audittest.Recorder{}
	// One agent: a refused mutation reaches none.
	h := meshtest.New(t, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}), meshtest.WithAPI(meshtest.APISpec{}),
		meshtest.WithAuditSink(rec))
	const create = `mutation { createVDC(input: {name: "x", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } `
	for _, c := range []struct {
		name, authz, vdc, query string
		vars                    map[string]any
		verbs                   []string
		code, user              string
	}{
		{"does not parse", "admin", "", `mutation { deleteVDC(name: "red" { name } }`, nil, []string{"mutation"}, "BAD_USER_INPUT", "Ada Admin"},
		{"unknown argument", "admin", "", `mutation { deleteVDC(nosuch: "red") { name } }`, nil, []string{"deleteVDC"}, "BAD_USER_INPUT", "Ada Admin"},
		{"two fields, one unknown", "bob", "blue", `mutation { startVM(id: "x") { id } stopVM(id: "x") { nosuch } }`, nil,
			[]string{"startVM", "stopVM"}, "BAD_USER_INPUT", "Bob"},
		{"bad variables", "admin", "", `mutation Del($n: String!) { deleteVDC(name: $n) { name } }`, map[string]any{"n": 5},
			[]string{"deleteVDC"}, "BAD_USER_INPUT", "Ada Admin"},
		{"over the token limit", "admin", "", create + strings.Repeat("f: __typename ", 800) + "}", nil, []string{"createVDC"}, "BAD_USER_INPUT", "Ada Admin"},
		{"over the size limit", "admin", "", create + strings.Repeat("f: __typename ", 1500) + "}", nil, []string{"createVDC"}, "BAD_USER_INPUT", "Ada Admin"},
		{"another VDC", "alice", "blue", `mutation { startVM(id: "x") { id } }`, nil, []string{"startVM"}, "NOT_FOUND", "Alice"},
		{"bad token", "Bearer not-a-token", "", `mutation { deleteVDC(name: "red") { name } }`, nil, []string{"deleteVDC"}, "UNAUTHENTICATED", ""},
		{"no token", "", "", `mutation { deleteVDC(name: "red") { name } }`, nil, []string{"deleteVDC"}, "UNAUTHENTICATED", ""},
		{"a refused query", "admin", "", `{ vdcs { nosuch } }`, nil, nil, "", ""},
	} {
		n := rec.Len()
		var r *meshtest.GraphQLResponse
		switch c.authz {
		case "admin", "alice", "bob":
			r = h.GraphQL(t, c.authz, c.vdc, c.query, c.vars)
		default:
			r = meshtest.PostGraphQL(t, h.GraphQLURL(), c.authz, c.vdc, c.query, c.vars)
		}
		if len(r.Errors) == 0 {
			t.Errorf("%s: not refused: %s", c.name, r.Raw)
			continue
		}
		evs := rec.Since(n)
		if len(evs) != len(c.verbs) {
			t.Errorf("%s: %d events, want %d: %+v", c.name, len(evs), len(c.verbs), evs)
			continue
		}
		for i, ev := range evs {
			if ev.Verb != c.verbs[i] || ev.ResponseStatus.Code != c.code || ev.ResponseStatus.Code != r.Errors[0].Code() ||
				ev.User.Name != c.user || ev.VDC != c.vdc || ev.AuditID == "" || ev.Kind != "Event" || ev.RequestReceivedTimestamp.IsZero() {
				t.Errorf("%s: event %d: %+v (answer %.300s)", c.name, i, ev, r.Raw)
			}
		}
	}
}
