package server_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/generated"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/dev/audittest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

const (
	createSA = `mutation($in: CreateServiceAccountInput!) { createServiceAccount(input: $in) {
		serviceAccount { id name role createdAt expiresAt lastUsedAt } token } }`
	rotateSA = `mutation($in: RotateServiceAccountTokenInput!) { rotateServiceAccountToken(input: $in) {
		serviceAccount { id name } token } }`
	deleteSA = `mutation($id: ID!) { deleteServiceAccount(id: $id) { id name } }`
)

type issued struct {
	ServiceAccount struct {
		ID, Name, Role, CreatedAt string
		ExpiresAt, LastUsedAt     *string
	}
	Token string
}

func (h *harness) createSA(t *testing.T, user, vdc string, in map[string]any) issued {
	t.Helper()
	var out issued
	h.do(t, user, vdc, createSA, map[string]any{"in": in}).OK(t).Into(t, "createServiceAccount", &out)
	return out
}

// unauthenticated checks that token is refused with 401 and a reason
// containing why, and on the subscription websocket with close code 4403
// and the same reason, before any message.
func unauthenticated(t *testing.T, url, token, why string) {
	t.Helper()
	r := post(t, url, "Bearer "+token, "prod", `{ me { subject } }`, nil)
	if r.Status != http.StatusUnauthorized || r.Code(t) != "UNAUTHENTICATED" || !strings.Contains(r.Errors[0].Message, why) {
		t.Errorf("token %.20s…: %d %s, want 401 saying %q", token, r.Status, r.Raw, why)
	}
	msgs, err := wsQuery(t, url, map[string]any{"Authorization": "Bearer " + token, "FlexPlane-VDC-ID": "prod"}, `{ me { subject } }`)
	var ce websocket.CloseError
	if len(msgs) != 0 || !errors.As(err, &ce) || ce.Code != 4403 || !strings.HasPrefix(ce.Reason, "UNAUTHENTICATED: ") || !strings.Contains(ce.Reason, why) {
		t.Errorf("token %.20s… on the websocket: messages %+v, end %v, want 4403 saying %q", token, msgs, err, why)
	}
}

// TestServiceAccounts: a VDC admin makes a service account; its token,
// shown once with the fpsa_ prefix, works over HTTP and the websocket in
// its VDC with its role (FORBIDDEN above it, NOT_FOUND in another VDC),
// is audited with the account's id, and records lastUsedAt. Rotation keeps
// the old token for the grace period only; deletion and expiry refuse it
// with 401 and the reason, on every replica; malformed tokens likewise.
// Bad input (taken name, a 51st account, a bad name, a past expiry) and
// callers below ADMIN change nothing.
func TestServiceAccounts(t *testing.T) {
	t.Parallel()
	events := &audittest.Recorder{}
	h := newHarness(t, harnessOptions{rateLimits: server.RateLimits{MutationRate: -1}, audit: events})
	other := h.startAPI(t) // a second replica on the same catalog

	ci := h.createSA(t, "pam", "prod", map[string]any{"name": "ci", "role": "MEMBER"})
	if !strings.HasPrefix(ci.Token, "fpsa_prod_"+ci.ServiceAccount.ID+"_") || ci.ServiceAccount.Role != "MEMBER" ||
		ci.ServiceAccount.LastUsedAt != nil || ci.ServiceAccount.ExpiresAt != nil {
		t.Fatalf("created %+v", ci)
	}
	if strings.Contains(h.snapshot(t), strings.TrimPrefix(ci.Token, "fpsa_prod_"+ci.ServiceAccount.ID+"_")) {
		t.Fatal("the catalog holds the token's secret")
	}
	bearer := "Bearer " + ci.Token
	var me struct{ Subject, Name string }
	post(t, h.url, bearer, "prod", `{ me { subject name } }`, nil).OK(t).Into(t, "me", &me)
	if me.Subject != ci.ServiceAccount.ID || me.Name != "ci" {
		t.Errorf("me: %+v", me)
	}
	// Its VDC only: another VDC is NOT_FOUND, as for users.
	if r := post(t, h.url, bearer, "dev", `{ currentVDC { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("in another VDC: %s", r.Raw)
	}
	// Its role only: an ADMIN field is FORBIDDEN to a MEMBER account.
	if r := post(t, h.url, bearer, "prod", `{ serviceAccounts { id } }`, nil); r.Code(t) != "FORBIDDEN" {
		t.Errorf("a member account lists accounts: %s", r.Raw)
	}
	if r := post(t, h.url, bearer, "prod", createSA, map[string]any{"in": map[string]any{"name": "x", "role": "VIEWER"}}); r.Code(t) != "FORBIDDEN" {
		t.Errorf("a member account makes an account: %s", r.Raw)
	}
	if ev, ok := events.Last(); !ok || ev.User.Subject != ci.ServiceAccount.ID || ev.Verb != "createServiceAccount" || ev.VDC != "prod" {
		t.Errorf("the account's audit event: %+v", ev)
	}
	// The websocket takes it as a user's token.
	msgs, _ := wsQuery(t, h.url, map[string]any{"Authorization": bearer, "FlexPlane-VDC-ID": "prod"}, `{ currentVDC { name } }`)
	if len(msgs) < 2 || string(msgs[1].Payload) != `{"data":{"currentVDC":{"name":"prod"}}}` {
		t.Errorf("websocket: %+v", msgs)
	}
	// lastUsedAt is recorded (once a minute at most).
	var listed []struct {
		ID         string
		LastUsedAt *string
	}
	h.do(t, "pam", "prod", `{ serviceAccounts { id lastUsedAt } }`, nil).OK(t).Into(t, "serviceAccounts", &listed)
	if len(listed) != 1 || listed[0].ID != ci.ServiceAccount.ID || listed[0].LastUsedAt == nil {
		t.Errorf("listed %+v", listed)
	}
	// Others below ADMIN cannot manage accounts: a member and a viewer of
	// prod get FORBIDDEN, bob (not of prod) NOT_FOUND; nothing changes.
	before := h.snapshot(t)
	for user, want := range map[string]string{"alice": "FORBIDDEN", "val": "FORBIDDEN", "bob": "NOT_FOUND"} {
		for _, q := range []struct {
			q    string
			vars map[string]any
		}{
			{createSA, map[string]any{"in": map[string]any{"name": "mine", "role": "VIEWER"}}},
			{deleteSA, map[string]any{"id": ci.ServiceAccount.ID}},
			{rotateSA, map[string]any{"in": map[string]any{"id": ci.ServiceAccount.ID}}},
			{`{ serviceAccounts { id } }`, nil},
		} {
			if r := h.do(t, user, "prod", q.q, q.vars); r.Code(t) != want {
				t.Errorf("%s: %s: %s, want %s", user, q.q, r.Raw, want)
			}
		}
	}
	// Bad input.
	for _, c := range []struct {
		in          map[string]any
		code, field string
	}{
		{map[string]any{"name": "ci", "role": "VIEWER"}, "CONFLICT", ""},
		{map[string]any{"name": "Not A Label", "role": "VIEWER"}, "BAD_USER_INPUT", "input.name"},
		{map[string]any{"name": "late", "role": "VIEWER", "expiresAt": "2001-01-01T00:00:00Z"}, "BAD_USER_INPUT", "input.expiresAt"},
	} {
		r := h.do(t, "pam", "prod", createSA, map[string]any{"in": c.in})
		if r.Code(t) != c.code || (c.field != "" && r.Errors[0].Extensions["field"] != c.field) {
			t.Errorf("create %v: %s, want %s %s", c.in, r.Raw, c.code, c.field)
		}
	}
	if r := h.do(t, "pam", "prod", rotateSA, map[string]any{"in": map[string]any{"id": ci.ServiceAccount.ID, "graceSeconds": -1}}); r.Code(t) != "BAD_USER_INPUT" {
		t.Errorf("a negative grace: %s", r.Raw)
	}
	if r := h.do(t, "pam", "prod", deleteSA, map[string]any{"id": "sa-00000000000000000000"}); r.Code(t) != "NOT_FOUND" {
		t.Errorf("delete an unknown account: %s", r.Raw)
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("refused requests changed the catalog:\n%s\n%s", before, after)
	}

	// Malformed tokens: 401 with the reason.
	for _, tok := range []string{"fpsa_", "fpsa_prod_sa-1_short", "fpsa_prod_nothing"} {
		unauthenticated(t, h.url, tok, "malformed")
	}
	unauthenticated(t, h.url, "fpsa_prod_"+ci.ServiceAccount.ID+"_"+strings.Repeat("A", 43), "rotated or is wrong")

	// Rotation with a grace period: both tokens work, then only the new
	// one; without: the old one stops at once, on both replicas.
	var rot issued
	h.do(t, "pam", "prod", rotateSA, map[string]any{"in": map[string]any{"id": ci.ServiceAccount.ID, "graceSeconds": 3600}}).OK(t).Into(t, "rotateServiceAccountToken", &rot)
	for _, tok := range []string{ci.Token, rot.Token} {
		post(t, other, "Bearer "+tok, "prod", `{ currentVDC { name } }`, nil).OK(t)
	}
	var rot2 issued
	h.do(t, "pam", "prod", rotateSA, map[string]any{"in": map[string]any{"id": ci.ServiceAccount.ID}}).OK(t).Into(t, "rotateServiceAccountToken", &rot2)
	for _, url := range []string{h.url, other} {
		unauthenticated(t, url, ci.Token, "rotated or is wrong")
		unauthenticated(t, url, rot.Token, "rotated or is wrong")
		post(t, url, "Bearer "+rot2.Token, "prod", `{ currentVDC { name } }`, nil).OK(t)
	}

	// Deletion: refused by every replica within 10 s (a shared directory
	// shows it at once; kubestore's watch within its delay).
	var del struct{ ID, Name string }
	h.do(t, "pam", "prod", deleteSA, map[string]any{"id": ci.ServiceAccount.ID}).OK(t).Into(t, "deleteServiceAccount", &del)
	if del.Name != "ci" {
		t.Errorf("deleted %+v", del)
	}
	poll.True(t, 10*time.Second, "every replica to refuse the deleted account's token", func() bool {
		for _, url := range []string{h.url, other} {
			if r := post(t, url, "Bearer "+rot2.Token, "prod", `{ me { subject } }`, nil); r.Status != http.StatusUnauthorized {
				return false
			}
		}
		return true
	})
	unauthenticated(t, other, rot2.Token, "does not exist")

	// Expiry.
	soon := h.createSA(t, "pam", "prod", map[string]any{"name": "soon", "role": "VIEWER", "expiresAt": time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)})
	post(t, h.url, "Bearer "+soon.Token, "prod", `{ currentVDC { name } }`, nil).OK(t)
	poll.True(t, 10*time.Second, "the account to expire", func() bool {
		return post(t, h.url, "Bearer "+soon.Token, "prod", `{ me { subject } }`, nil).Status == http.StatusUnauthorized
	})
	unauthenticated(t, other, soon.Token, "expired")

	// At most 50 per VDC: the 51st is refused and changes nothing.
	for i := range 49 {
		h.createSA(t, "pam", "prod", map[string]any{"name": fmt.Sprintf("bot%d", i), "role": "VIEWER"})
	}
	before = h.snapshot(t)
	if r := h.do(t, "pam", "prod", createSA, map[string]any{"in": map[string]any{"name": "bot50", "role": "VIEWER"}}); r.Code(t) != "CONFLICT" ||
		!strings.Contains(r.Errors[0].Message, "50") {
		t.Errorf("the 51st account: %s", r.Raw)
	}
	if after := h.snapshot(t); after != before {
		t.Fatal("the refused 51st account changed the catalog")
	}
}

// TestVDCMembers: a VDC admin grants roles here; the effective role is
// the higher of the claim and the grant; members lists grants and the
// caller's own claim; removing a grant takes the VDC away again. A
// viewer's grant may read but not mutate (FORBIDDEN); bad input and
// callers below ADMIN change nothing.
func TestVDCMembers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{rateLimits: server.RateLimits{MutationRate: -1}})
	add := `mutation($u: String!, $r: VDCRole!) { addVDCMember(input: {user: $u, role: $r}) { user role source } }`
	remove := `mutation($u: String!) { removeVDCMember(user: $u) { user } }`
	type member struct{ User, Role, Source string }

	// bob has no claim of prod: NOT_FOUND until granted.
	if r := h.do(t, "bob", "prod", `{ currentVDC { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Fatalf("bob before the grant: %s", r.Raw)
	}
	var m member
	h.do(t, "pam", "prod", add, map[string]any{"u": "bob", "r": "VIEWER"}).OK(t).Into(t, "addVDCMember", &m)
	if m != (member{"bob", "VIEWER", "GRANTED"}) {
		t.Errorf("added %+v", m)
	}
	h.do(t, "bob", "prod", `{ currentVDC { name } }`, nil).OK(t)
	if r := h.do(t, "bob", "prod", add, map[string]any{"u": "carl", "r": "VIEWER"}); r.Code(t) != "FORBIDDEN" {
		t.Errorf("a viewer grants: %s", r.Raw)
	}
	var me struct {
		Vdcs []struct {
			Vdc  struct{ Name string }
			Role string
		}
	}
	h.do(t, "bob", "", `{ me { vdcs { vdc { name } role } } }`, nil).OK(t).Into(t, "me", &me)
	if fmt.Sprint(me.Vdcs) != "[{{prod} VIEWER} {{staging} MEMBER}]" {
		t.Errorf("bob's VDCs: %v", me.Vdcs)
	}
	// Changing the role; an ADMIN grant lets bob manage the VDC.
	h.do(t, "pam", "prod", add, map[string]any{"u": "bob", "r": "ADMIN"}).OK(t)
	h.do(t, "bob", "prod", `{ serviceAccounts { id } }`, nil).OK(t)
	// The higher of claim and grant: alice is a MEMBER of prod by claim.
	h.do(t, "pam", "prod", add, map[string]any{"u": "alice", "r": "VIEWER"}).OK(t)
	h.do(t, "alice", "", `{ me { vdcs { vdc { name } role } } }`, nil).OK(t).Into(t, "me", &me)
	if fmt.Sprint(me.Vdcs) != "[{{dev} VIEWER} {{prod} MEMBER}]" {
		t.Errorf("alice's VDCs: %v", me.Vdcs)
	}
	var cur struct{ Members []member }
	h.do(t, "alice", "prod", `{ currentVDC { members { user role source } } }`, nil).OK(t).Into(t, "currentVDC", &cur)
	if fmt.Sprint(cur.Members) != "[{alice MEMBER CLAIMS} {bob ADMIN GRANTED}]" {
		t.Errorf("members as alice sees them: %v", cur.Members)
	}
	h.do(t, "pam", "prod", `{ currentVDC { members { user role source } } }`, nil).OK(t).Into(t, "currentVDC", &cur)
	if fmt.Sprint(cur.Members) != "[{alice VIEWER GRANTED} {bob ADMIN GRANTED} {pam ADMIN CLAIMS}]" {
		t.Errorf("members as pam sees them: %v", cur.Members)
	}

	// Refusals change nothing.
	before := h.snapshot(t)
	for _, c := range []struct {
		user, q string
		vars    map[string]any
		code    string
	}{
		{"alice", add, map[string]any{"u": "carl", "r": "VIEWER"}, "FORBIDDEN"},
		{"val", remove, map[string]any{"u": "bob"}, "FORBIDDEN"},
		{"admin", remove, map[string]any{"u": "nobody"}, "NOT_FOUND"},
		{"pam", remove, map[string]any{"u": "pam"}, "NOT_FOUND"}, // a claim is changed at the provider
		{"pam", add, map[string]any{"u": "", "r": "VIEWER"}, "BAD_USER_INPUT"},
		{"pam", add, map[string]any{"u": "carl", "r": "OWNER"}, "BAD_USER_INPUT"},
	} {
		if r := h.do(t, c.user, "prod", c.q, c.vars); r.Code(t) != c.code {
			t.Errorf("%s: %s %v: %s, want %s", c.user, c.q, c.vars, r.Raw, c.code)
		}
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("refused requests changed the catalog:\n%s\n%s", before, after)
	}

	h.do(t, "pam", "prod", remove, map[string]any{"u": "bob"}).OK(t)
	if r := h.do(t, "bob", "prod", `{ currentVDC { name } }`, nil); r.Code(t) != "NOT_FOUND" {
		t.Errorf("bob after the grant was removed: %s", r.Raw)
	}
}

// mutationRoles is the role each VDC-level mutation needs, by class:
// ADMIN manages who may use the VDC (members, service accounts); MEMBER
// creates, changes and deletes its resources; VIEWER only what reading
// needs (a read-only kubeconfig). Every mutation with @vdc is listed here
// with the role its directive names (TestMutationRoles).
var mutationRoles = map[string]string{
	// Who may use the VDC.
	"createServiceAccount": "ADMIN", "rotateServiceAccountToken": "ADMIN", "deleteServiceAccount": "ADMIN",
	"addVDCMember": "ADMIN", "removeVDCMember": "ADMIN",
	// The VDC's settings.
	"setDefaultSecurityGroup": "ADMIN",
	// VMs, their consoles and snapshots.
	"createVM": "MEMBER", "startVM": "MEMBER", "stopVM": "MEMBER", "shutdownVM": "MEMBER", "rebootVM": "MEMBER",
	"deleteVM": "MEMBER", "migrateVM": "MEMBER", "openConsole": "MEMBER",
	"createSnapshot": "MEMBER", "rollbackSnapshot": "MEMBER", "deleteSnapshot": "MEMBER",
	"createBackup": "MEMBER", "restoreBackup": "MEMBER", "deleteBackup": "MEMBER",
	"setBackupSchedule": "MEMBER", "removeBackupSchedule": "MEMBER",
	"attachDisk": "MEMBER", "resizeDisk": "MEMBER", "detachDisk": "MEMBER", "resizeVM": "MEMBER",
	// Security groups.
	"createSecurityGroup": "MEMBER", "updateSecurityGroup": "MEMBER", "deleteSecurityGroup": "MEMBER", "setVMSecurityGroups": "MEMBER",
	// Placement groups.
	"createPlacementGroup": "MEMBER", "deletePlacementGroup": "MEMBER",
	"uploadImage": "MEMBER", "stageVDCImage": "MEMBER", "deleteVDCImage": "MEMBER", "createImageFromVM": "MEMBER", "detachISO": "MEMBER",
	// Networks and edge gateways.
	"createNetwork": "MEMBER", "deleteNetwork": "MEMBER",
	"createFirewallRule": "MEMBER", "deleteFirewallRule": "MEMBER", "createPortForward": "MEMBER", "deletePortForward": "MEMBER",
	"createOneToOneAddress": "MEMBER", "deleteOneToOneAddress": "MEMBER", "updateEdgeGateway": "MEMBER", "deleteEdgeGateway": "MEMBER",
	// Load balancers and Kubernetes.
	"createLoadBalancer": "MEMBER", "updateLoadBalancer": "MEMBER", "deleteLoadBalancer": "MEMBER",
	"createKubernetesCluster": "MEMBER", "deleteKubernetesCluster": "MEMBER", "upgradeKubernetesCluster": "MEMBER",
	"createNodePool": "MEMBER", "scaleNodePool": "MEMBER", "deleteNodePool": "MEMBER",
	"issueKubeconfig": "VIEWER",
}

// literal is a GraphQL literal of type t with every required field set
// (the first value of enums, [] for lists): enough for the request to
// pass validation, so that only the directive decides.
func literal(s *ast.Schema, t *ast.Type) string {
	if t.Elem != nil {
		return "[]"
	}
	def := s.Types[t.NamedType]
	switch def.Kind {
	case ast.Enum:
		return def.EnumValues[0].Name
	case ast.InputObject:
		var fields []string
		for _, f := range def.Fields {
			if f.Type.NonNull && f.DefaultValue == nil {
				fields = append(fields, f.Name+": "+literal(s, f.Type))
			}
		}
		return "{" + strings.Join(fields, ", ") + "}"
	}
	switch t.NamedType {
	case "Int", "Float":
		return "1"
	case "Boolean":
		return "false"
	case "Time":
		return `"2030-01-01T00:00:00Z"`
	}
	return `"x"`
}

// TestMutationRoles: every VDC-level mutation needs the role the table
// lists for its class, and the directive holds it: a member of the VDC
// below that role gets FORBIDDEN (a VIEWER on a MEMBER mutation, a MEMBER
// and a VIEWER on an ADMIN one), someone outside the VDC NOT_FOUND, and
// nothing changes.
func TestMutationRoles(t *testing.T) {
	t.Parallel()
	schema := generated.NewExecutableSchema(generated.Config{Resolvers: &graph.Resolver{}}).Schema()
	h := newHarness(t, harnessOptions{rateLimits: server.RateLimits{MutationRate: -1}})
	roles := map[string]int{"VIEWER": 1, "MEMBER": 2, "ADMIN": 3}
	// In prod: val is a VIEWER, alice a MEMBER, pam an ADMIN; bob is not of prod.
	callers := map[string]string{"val": "VIEWER", "alice": "MEMBER"}
	before := h.snapshot(t)
	seen := map[string]bool{}
	for _, f := range schema.Mutation.Fields {
		d := f.Directives.ForName("vdc")
		if d == nil {
			continue
		}
		seen[f.Name] = true
		role := "VIEWER"
		if a := d.Arguments.ForName("role"); a != nil {
			role = a.Value.Raw
		}
		if want, ok := mutationRoles[f.Name]; !ok || want != role {
			t.Errorf("%s needs %s; the table says %q: list it under its class", f.Name, role, want)
			continue
		}
		var args []string
		for _, a := range f.Arguments {
			if a.Type.NonNull && a.DefaultValue == nil {
				args = append(args, a.Name+": "+literal(schema, a.Type))
			}
		}
		q := "mutation { " + f.Name
		if len(args) > 0 {
			q += "(" + strings.Join(args, ", ") + ")"
		}
		if def := schema.Types[f.Type.Name()]; def.Kind != ast.Scalar && def.Kind != ast.Enum {
			q += " { __typename }"
		}
		q += " }"
		for user, has := range callers {
			if roles[has] >= roles[role] {
				continue
			}
			if r := h.do(t, user, "prod", q, nil); r.Code(t) != "FORBIDDEN" {
				t.Errorf("a %s: %s: %s, want FORBIDDEN", has, q, r.Raw)
			}
		}
		if r := h.do(t, "bob", "prod", q, nil); r.Code(t) != "NOT_FOUND" {
			t.Errorf("outside the VDC: %s: %s, want NOT_FOUND", q, r.Raw)
		}
	}
	for name := range mutationRoles {
		if !seen[name] {
			t.Errorf("the table lists %s, which is no @vdc mutation", name)
		}
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("refused mutations changed the catalog:\n%s\n%s", before, after)
	}
}
