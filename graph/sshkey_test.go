package graph_test

import (
	"crypto/rand"
	"crypto/rsa"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/catalogtest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// sshKeyView is a key as me.sshKeys shows it.
type sshKeyView struct {
	Name, Type, Fingerprint string
	Comment                 *string
	Options                 []string
	CreatedAt               string
}

const (
	addSSHKey    = `mutation($n: String!, $k: String!) { addSSHKey(input: {name: $n, publicKey: $k}) { name type fingerprint comment options createdAt } }`
	deleteSSHKey = `mutation($n: String!) { deleteSSHKey(name: $n) { name fingerprint } }`
	mySSHKeys    = `{ me { sshKeys { name type fingerprint comment options createdAt } } }`
)

// fingerprint is the SHA256 fingerprint of an authorized_keys line, as
// ssh-keygen -l prints it.
func fingerprint(t *testing.T, line string) string {
	t.Helper()
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return ssh.FingerprintSHA256(pub)
}

func myKeys(t *testing.T, h *meshtest.Harness, user string) []sshKeyView {
	t.Helper()
	var me struct{ SSHKeys []sshKeyView }
	h.GraphQL(t, user, "", mySSHKeys, nil).OK(t).Into(t, "me", &me)
	return me.SSHKeys
}

// smallRSA is the authorized_keys line of a new RSA key of 1024 bits.
func smallRSA(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

func keyNames(keys []sshKeyView) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Name)
	}
	return out
}

// TestSSHKeysPerUser: each user adds, sees and deletes their own keys
// only (a name only another user has is NOT_FOUND, never FORBIDDEN; the
// same name for two users is two keys), bad keys are BAD_USER_INPUT
// naming the field and change nothing, and createVM takes the caller's
// keys by name, merged with sshKeys, each key once, while another user's
// key name is BAD_USER_INPUT.
func TestSSHKeysPerUser(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "sshkeys")
	aliceLaptop, bobLaptop := catalogtest.SSHKey(31, "alice@laptop"), catalogtest.SSHKey(32, "bob@laptop")
	backup := `command="/usr/local/bin/backup",from="10.0.0.0/8",no-pty ` + catalogtest.SSHKey(33, "")
	deploy := catalogtest.SSHKey(34, "deploy")

	var added sshKeyView
	h.GraphQL(t, tn.alice, "", addSSHKey, map[string]any{"n": "laptop", "k": aliceLaptop}).OK(t).Into(t, "addSSHKey", &added)
	if added.Type != "ssh-ed25519" || added.Fingerprint != fingerprint(t, aliceLaptop) || added.Comment == nil || *added.Comment != "alice@laptop" ||
		len(added.Options) != 0 || added.CreatedAt == "" {
		t.Fatalf("alice's laptop: %+v", added)
	}
	h.GraphQL(t, tn.alice, "", addSSHKey, map[string]any{"n": "deploy", "k": deploy}).OK(t)
	h.GraphQL(t, tn.bob, "", addSSHKey, map[string]any{"n": "laptop", "k": bobLaptop}).OK(t)
	h.GraphQL(t, tn.bob, "", addSSHKey, map[string]any{"n": "backup", "k": backup}).OK(t).Into(t, "addSSHKey", &added)
	if want := []string{`command="/usr/local/bin/backup"`, `from="10.0.0.0/8"`, "no-pty"}; !slices.Equal(added.Options, want) || added.Comment != nil {
		t.Fatalf("bob's backup key: %+v, want options %q and no comment", added, want)
	}

	t.Run("bad input changes nothing", func(t *testing.T) {
		blob := strings.Fields(deploy)[1]
		for _, c := range []struct{ what, name, key, field string }{
			{"a malformed key", "x", "ssh-ed25519 AAAAnotbase64!", "input.publicKey"},
			{"an unknown type", "x", "ssh-foo " + blob, "input.publicKey"},
			{"an RSA key of 1024 bits", "x", smallRSA(t), "input.publicKey"},
			{"a too-long key", "x", catalogtest.SSHKey(35, strings.Repeat("c", catalog.MaxSSHKeyLen)), "input.publicKey"},
			{"too-long options", "x", `command="` + strings.Repeat("a", catalog.MaxSSHKeyOptionsLen) + `" ` + catalogtest.SSHKey(35, ""), "input.publicKey"},
			{"two keys", "x", deploy + "\n" + aliceLaptop, "input.publicKey"},
			{"a duplicate name", "laptop", catalogtest.SSHKey(35, ""), "input.name"},
			{"a bad name", "my key", catalogtest.SSHKey(35, ""), "input.name"},
		} {
			r := h.GraphQL(t, tn.alice, "", addSSHKey, map[string]any{"n": c.name, "k": c.key})
			if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != c.field {
				t.Errorf("%s: %.300s, want BAD_USER_INPUT of %s", c.what, r.Raw, c.field)
			}
		}
		if got := keyNames(myKeys(t, h, tn.alice)); !slices.Equal(got, []string{"laptop", "deploy"}) {
			t.Errorf("alice's keys after refused adds: %v", got)
		}
	})

	t.Run("each sees their own", func(t *testing.T) {
		alice, bob := myKeys(t, h, tn.alice), myKeys(t, h, tn.bob)
		if !slices.Equal(keyNames(alice), []string{"laptop", "deploy"}) || alice[0].Fingerprint != fingerprint(t, aliceLaptop) {
			t.Errorf("alice's keys: %+v", alice)
		}
		if !slices.Equal(keyNames(bob), []string{"laptop", "backup"}) || bob[0].Fingerprint != fingerprint(t, bobLaptop) {
			t.Errorf("bob's keys: %+v", bob)
		}
		// Alice deletes a name only bob has: not found, and bob keeps it.
		if r := h.GraphQL(t, tn.alice, "", deleteSSHKey, map[string]any{"n": "backup"}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("alice deleting bob's backup: %s", r.Raw)
		}
		if got := keyNames(myKeys(t, h, tn.bob)); !slices.Equal(got, []string{"laptop", "backup"}) {
			t.Errorf("bob's keys after alice's delete: %v", got)
		}
	})

	t.Run("createVM by name", func(t *testing.T) {
		in := func(names ...string) map[string]any {
			return map[string]any{"in": map[string]any{"name": "keyed", "zone": "alpha", "image": "tiny", "computeProfile": "small",
				"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}},
				"sshKeys": []string{strings.TrimSuffix(bobLaptop, "bob@laptop") + "the same key"}, "sshKeyNames": names, "user": "ops"}}
		}
		for names, field := range map[string]string{"deploy": "input.sshKeyNames[0]", "laptop,nope": "input.sshKeyNames[1]"} {
			r := h.GraphQL(t, tn.bob, tn.blue, createVM, in(strings.Split(names, ",")...))
			if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != field {
				t.Errorf("createVM with sshKeyNames %s: %s, want BAD_USER_INPUT of %s", names, r.Raw, field)
			}
		}
		var created struct{ Operation gqlOp }
		h.GraphQL(t, tn.bob, tn.blue, createVM, in("laptop", "backup")).OK(t).Into(t, "createVM", &created)
		id := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
		z := h.Zone(t, h.Clusters[0])
		c := h.Orchestrator.Zones().Client(z.ID)
		g, ok, err := pveapi.FindGuest(t.Context(), c, mustRef(t, id))
		if err != nil || !ok {
			t.Fatalf("the VM's guest: %v %v", ok, err)
		}
		cfg, err := pveapi.GuestConfig(t.Context(), c, g.Node, g.VMID)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := url.QueryUnescape(cfg.Str("sshkeys"))
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{strings.TrimSuffix(bobLaptop, "bob@laptop") + "the same key", backup}; !slices.Equal(strings.Split(keys, "\n"), want) {
			t.Errorf("the guest's sshkeys: %q, want %q", keys, want)
		}
	})

	t.Run("delete", func(t *testing.T) {
		var gone struct{ Name, Fingerprint string }
		h.GraphQL(t, tn.alice, "", deleteSSHKey, map[string]any{"n": "laptop"}).OK(t).Into(t, "deleteSSHKey", &gone)
		if gone.Name != "laptop" || gone.Fingerprint != fingerprint(t, aliceLaptop) {
			t.Errorf("deleted: %+v", gone)
		}
		if r := h.GraphQL(t, tn.alice, "", deleteSSHKey, map[string]any{"n": "laptop"}); r.Code(t) != "NOT_FOUND" {
			t.Errorf("deleting again: %s", r.Raw)
		}
		if got := keyNames(myKeys(t, h, tn.alice)); !slices.Equal(got, []string{"deploy"}) {
			t.Errorf("alice's keys after the delete: %v", got)
		}
		if got := keyNames(myKeys(t, h, tn.bob)); !slices.Equal(got, []string{"laptop", "backup"}) {
			t.Errorf("bob's keys after alice's delete: %v", got)
		}
	})
}
