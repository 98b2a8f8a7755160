package compute

import (
	"encoding/json"
	"math"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
)

// proxmoxConfig is what Proxmox's own schema says of a VM config value
// flexplane writes (POST /nodes/{node}/qemu/{vmid}/config): nil if it
// accepts it.
func proxmoxConfig(tb testing.TB) func(param, value string) error {
	s, err := pveschema.Load()
	if err != nil {
		tb.Fatal(err)
	}
	e, vars, err := s.Lookup("POST", "/nodes/pve1/qemu/100/config")
	if err != nil {
		tb.Fatal(err)
	}
	return func(param, value string) error {
		_, err := e.ValidateRequest(vars, map[string][]string{param: {value}})
		return err
	}
}

// FuzzCreateInput checks createVM's checks of the strings a client sends
// for a VM (testdata/fuzz/FuzzCreateInput): the name, the cloud-init user
// and an SSH key. The checks are deterministic, and whatever they accept,
// Proxmox accepts in the config flexplane writes from it (its schema,
// pkg/pvesim/pveschema, is the oracle): a client's input is refused with a
// clear error by flexplane, never later by Proxmox. An accepted key also
// reaches cloud-init unchanged: sshkeys decodes to exactly the keys given,
// one per line.
func FuzzCreateInput(f *testing.F) {
	pve := proxmoxConfig(f)
	f.Fuzz(func(t *testing.T, name, user, key string) {
		if ok := validDNSName(name); ok != validDNSName(name) {
			t.Fatalf("validDNSName(%q) is not deterministic", name)
		} else if ok {
			if len(name) > 253 {
				t.Fatalf("validDNSName accepted %d bytes", len(name))
			}
			if err := pve("name", name); err != nil {
				t.Fatalf("name %q is accepted, but Proxmox refuses it: %v", name, err)
			}
		}
		if userRE.MatchString(user) {
			if err := pve("ciuser", user); err != nil {
				t.Fatalf("user %q is accepted, but Proxmox refuses it: %v", user, err)
			}
		}
		if info, err := catalog.ParseSSHKey("key", key); err == nil {
			k := info.Line
			if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.ContainsAny(k, "\r\n") {
				t.Fatalf("key %q is accepted as %q, which is not one key on one line (%v)", key, k, err)
			}
			keys := []string{k, k}
			enc := encodeKeys(keys)
			if err := pve("sshkeys", enc); err != nil {
				t.Fatalf("key %q is accepted, but Proxmox refuses sshkeys %q: %v", key, enc, err)
			}
			dec, err := url.PathUnescape(enc)
			if err != nil || !reflect.DeepEqual(strings.Split(dec, "\n"), keys) {
				t.Fatalf("key %q reaches cloud-init as %q (%v)", key, dec, err)
			}
		}
	})
}

// FuzzParseIntent checks the reading of the create intent recorded in a
// guest's description, which anyone who can edit the guest in Proxmox can
// change (testdata/fuzz/FuzzParseIntent). It never panics; an intent it
// finds names its operation and VDC, and the description flexplane writes
// for it reads back as the same intent.
func FuzzParseIntent(f *testing.F) {
	f.Fuzz(func(t *testing.T, desc string) {
		in, ok := ParseIntent(desc)
		if ok != (in != nil) {
			t.Fatalf("ParseIntent(%q) = %v, %v", desc, in, ok)
		}
		if !ok {
			return
		}
		if in.Op == "" || in.VDC == "" {
			t.Fatalf("ParseIntent(%q) = %+v without operation or VDC", desc, in)
		}
		back, ok := ParseIntent(in.Description())
		if !ok {
			t.Fatalf("the description of %+v does not parse: %q", in, in.Description())
		}
		if a, b := mustJSON(t, in), mustJSON(t, back); a != b {
			t.Fatalf("intent %s reads back as %s", a, b)
		}
	})
}

// FuzzParseHardware checks the reading of a guest's NICs and disks off its
// Proxmox configuration, a JSON answer of GET .../qemu/{vmid}/config
// (testdata/fuzz/FuzzParseHardware). It never panics and is deterministic
// (the config is a map, read in random order); NICs and disks come in slot
// order, CD-ROMs are no disks, and sizes and limits are never negative.
func FuzzParseHardware(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		var cfg pveapi.Config
		if json.Unmarshal(body, &cfg) != nil {
			return
		}
		hw := ParseHardware(cfg)
		for range 4 {
			if again := ParseHardware(cfg); !reflect.DeepEqual(again, hw) {
				t.Fatalf("ParseHardware(%s) is not deterministic:\n%+v\n%+v", body, hw, again)
			}
		}
		for i, n := range hw.NICs {
			if i > 0 && hw.NICs[i-1].Index > n.Index {
				t.Fatalf("NICs out of order: %+v", hw.NICs)
			}
		}
		for i, d := range hw.Disks {
			if i > 0 && pveapi.SlotOrder(hw.Disks[i-1].Slot, d.Slot) > 0 {
				t.Fatalf("disks out of order: %+v", hw.Disks)
			}
			if propOf(cfg.Str(d.Slot), "media") == "cdrom" {
				t.Fatalf("CD-ROM %s listed as a disk", d.Slot)
			}
			if d.SizeBytes < 0 || d.ReadMBps < 0 || d.WriteMBps < 0 || d.ReadIops < 0 || d.WriteIops < 0 {
				t.Fatalf("disk %s = %q read as %+v", d.Slot, cfg.Str(d.Slot), d)
			}
		}
	})
}

// FuzzParseSize checks the reading of Proxmox disk sizes ("32G", "512M",
// "4096"; testdata/fuzz/FuzzParseSize): what it reads is a byte count that
// is not negative, and a whole number of bytes in a unit reads as that.
func FuzzParseSize(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("parseSize(%q) = %d with error %v", s, n, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("parseSize(%q) = %d", s, n)
		}
		for unit, shift := range map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40} {
			if v, ok := strings.CutSuffix(s, unit); ok && v != "" && strings.Trim(v, "0123456789") == "" && len(v) < 10 {
				whole, _ := strconv.Atoi(v)
				want := float64(whole) * math.Exp2(float64(shift))
				if float64(n) != want {
					t.Fatalf("parseSize(%q) = %d, want %.0f", s, n, want)
				}
			}
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzParseOpID checks the reading of the operation ids clients pass to
// operation and watchOperation (testdata/fuzz/FuzzParseOpID): an id reads
// only if it is exactly the id of the operation it reads as, so that one
// operation has one id.
func FuzzParseOpID(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string) {
		ref, ok := parseOpID(id)
		if !ok {
			return
		}
		again := taskOpID(ref.zoneID, ref.vmid, ref.kind, ref.upid)
		if ref.create {
			again = createOpID(ref.zoneID, ref.vmid, ref.op)
		}
		if again != id {
			t.Fatalf("parseOpID(%q) = %+v, whose id is %q", id, ref, again)
		}
	})
}
