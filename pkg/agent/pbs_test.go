package agent

import (
	"strings"
	"testing"
)

// TestPBSEntryChecked: the agent forwards a new storage entry only when it
// is a pbs entry for backups on the server, datastore, user and
// fingerprint of one the operator made, in a namespace below its own, and
// carries no secret or key of its own.
func TestPBSEntryChecked(t *testing.T) {
	t.Parallel()
	fp := strings.TrimSuffix(strings.Repeat("ab:", 32), ":")
	bases := []pbsBase{
		{Storage: "local", Type: "dir"},
		{Storage: "pbs", Type: "pbs", Server: "pbs.example", Datastore: "tank", Username: "pve@pbs!fp", Fingerprint: fp, Namespace: "flexplane"},
		{Storage: "pbs2", Type: "pbs", Server: "pbs2.example", Datastore: "t2", Username: "u@pbs", Port: float64(8008)},
	}
	ok := func() map[string]string {
		return map[string]string{"storage": "pbs-v1", "type": "pbs", "server": "pbs.example", "datastore": "tank",
			"namespace": "flexplane/v1", "username": "pve@pbs!fp", "fingerprint": strings.ToUpper(fp), "content": "backup"}
	}
	if err := checkPBSEntry(ok(), bases); err != nil {
		t.Errorf("a VDC's entry below the operator's: %v", err)
	}
	root := map[string]string{"storage": "pbs2-v1", "type": "pbs", "server": "pbs2.example", "datastore": "t2", "namespace": "v1",
		"username": "u@pbs", "port": "8008"}
	if err := checkPBSEntry(root, bases); err != nil {
		t.Errorf("a VDC's entry below a datastore's root: %v", err)
	}
	for name, change := range map[string]func(map[string]string){
		"another server":         func(p map[string]string) { p["server"] = "evil.example" },
		"another datastore":      func(p map[string]string) { p["datastore"] = "other" },
		"another user":           func(p map[string]string) { p["username"] = "root@pam" },
		"another fingerprint":    func(p map[string]string) { p["fingerprint"] = strings.Repeat("00:", 31) + "00" },
		"another port":           func(p map[string]string) { p["port"] = "9000" },
		"a namespace beside":     func(p map[string]string) { p["namespace"] = "other/v1" },
		"the operator's own":     func(p map[string]string) { p["namespace"] = "flexplane" },
		"a namespace's prefix":   func(p map[string]string) { p["namespace"] = "flexplanex/v1" },
		"no namespace":           func(p map[string]string) { delete(p, "namespace") },
		"a directory storage":    func(p map[string]string) { p["type"] = "dir"; p["path"] = "/" },
		"disks":                  func(p map[string]string) { p["content"] = "images" },
		"its own password":       func(p map[string]string) { p["password"] = "x" },
		"its own encryption key": func(p map[string]string) { p["encryption-key"] = "autogen" },
	} {
		p := ok()
		change(p)
		if err := checkPBSEntry(p, bases); err == nil {
			t.Errorf("%s: allowed", name)
		}
	}
}
