package graph_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// TestUserDataThroughGraphQL: createVM's userData is checked (a YAML error
// names its line; too large, neither a cloud-config nor a script, or a
// users entry that would take over the VM's user is BAD_USER_INPUT on
// input.userData, and creates nothing); a VM created with it gets, as its
// cloud-init user-data, the caller's runcmd merged with flexplane's user
// and keys, from a snippet and not from its description; deleting the VM
// deletes the snippet.
func TestUserDataThroughGraphQL(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "userdata")
	input := func(name, userData string) map[string]any {
		return map[string]any{"in": map[string]any{"name": name, "zone": "alpha", "image": "tiny", "computeProfile": "small",
			"storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": tn.net}},
			"sshKeys": []string{sshKey}, "user": "bob", "userData": userData}}
	}
	for _, c := range []struct{ name, userData, want string }{
		{"bad-yaml", "#cloud-config\nruncmd:\n  - ls\nhostname: a: b\n", "line 4"},
		{"too-large", "#cloud-config\n" + strings.Repeat("#", 64<<10), "more than 65536"},
		{"neither", "runcmd:\n  - ls\n", "#cloud-config"},
		{"include", "#include https://example.com/x\n", "#cloud-config"},
		{"takeover", "#cloud-config\nusers:\n  - name: bob\n    ssh_authorized_keys: [ssh-ed25519 AAAA other]\n", "users[0]"},
	} {
		r := h.GraphQL(t, tn.bob, tn.blue, createVM, input(c.name, c.userData))
		if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "input.userData" || !strings.Contains(r.Errors[0].Message, c.want) {
			t.Errorf("%s: %s, want BAD_USER_INPUT on input.userData naming %q", c.name, r.Raw, c.want)
		}
	}
	var vms []struct{ Name string }
	h.GraphQL(t, tn.bob, tn.blue, `{ vms { name } }`, nil).OK(t).Into(t, "vms", &vms)
	if len(vms) != 0 {
		t.Fatalf("refused creates left VMs: %+v", vms)
	}

	const tenant = "#cloud-config\npackages: [nginx]\nruncmd:\n  - echo tenant-runcmd > /tmp/marker\n"
	var created struct{ Operation gqlOp }
	h.GraphQL(t, tn.bob, tn.blue, createVM, input("web", tenant)).OK(t).Into(t, "createVM", &created)
	id := awaitCreate(t, h, tn.bob, tn.blue, created.Operation.ID)
	px := h.Clusters[0].Proxmox(t)
	ref, err := tenancy.ParseVMID(id) // names are not unique: another test's VM may be a "web" too
	if err != nil {
		t.Fatal(err)
	}
	vmid := ref.VMID
	var data string
	if err := px.Get(vmtest.Ctx(t), fmt.Sprintf("/nodes/pve1/qemu/%d/cloudinit/dump?type=user", vmid), &data); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"user: bob", sshKey, "hostname: web", "text/cloud-config", "tenant-runcmd", "packages: [nginx]"} {
		if !strings.Contains(data, want) {
			t.Errorf("the VM's user-data lacks %q:\n%s", want, data)
		}
	}
	var cfg map[string]any
	if err := px.Get(vmtest.Ctx(t), fmt.Sprintf("/nodes/pve1/qemu/%d/config", vmid), &cfg); err != nil {
		t.Fatal(err)
	}
	if cc, _ := cfg["cicustom"].(string); cc != fmt.Sprintf("user=local:snippets/fp-%d-user.yaml", vmid) {
		t.Errorf("cicustom %q", cc)
	}
	if desc, _ := cfg["description"].(string); len(desc) > 2048 || strings.Contains(desc, "userData\"") {
		t.Errorf("the description carries the user-data: %s", desc)
	}

	var del gqlOp
	h.GraphQL(t, tn.bob, tn.blue, `mutation($id: ID!) { deleteVM(id: $id) { state kind } }`, map[string]any{"id": id}).OK(t).Into(t, "deleteVM", &del)
	if del.State != "SUCCEEDED" {
		t.Fatalf("deleteVM: %+v", del)
	}
	var vols []struct {
		VolID string `json:"volid"`
	}
	if err := px.Get(vmtest.Ctx(t), "/nodes/pve1/storage/local/content?content=snippets", &vols); err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if strings.Contains(v.VolID, fmt.Sprintf("fp-%d-", vmid)) {
			t.Errorf("the VM's snippet outlived it: %v", vols)
		}
	}
}
