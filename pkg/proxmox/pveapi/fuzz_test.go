package pveapi

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// FuzzUPID checks the reading of task ids (UPIDs), which come from
// Proxmox's answers and from clients' operation ids
// (testdata/fuzz/FuzzUPID): the node a UPID names is a non-empty field
// without a colon, so the status path built from it stays on that node,
// and a UPID naming a type names a node too; ParseUPID agrees with
// NodeOfUPID and TypeOfUPID.
func FuzzUPID(f *testing.F) {
	f.Fuzz(func(t *testing.T, upid string) {
		node, err := NodeOfUPID(upid)
		if err == nil && (node == "" || strings.Contains(node, ":") || !strings.HasPrefix(upid, "UPID:"+node+":")) {
			t.Fatalf("NodeOfUPID(%q) = %q", upid, node)
		}
		if err != nil && node != "" {
			t.Fatalf("NodeOfUPID(%q) = %q with error %v", upid, node, err)
		}
		if u, err := ParseUPID(upid); err == nil {
			if n, nerr := NodeOfUPID(upid); nerr != nil || n != u.Node || TypeOfUPID(upid) != u.Type || u.Type == "" ||
				strings.Contains(u.Type+u.ID, ":") {
				t.Fatalf("ParseUPID(%q) = %+v, NodeOfUPID %q (%v), TypeOfUPID %q", upid, u, n, nerr, TypeOfUPID(upid))
			}
		} else if TypeOfUPID(upid) != "" {
			t.Fatalf("ParseUPID(%q) fails (%v), but TypeOfUPID = %q", upid, err, TypeOfUPID(upid))
		}
		if typ := TypeOfUPID(upid); typ != "" {
			if strings.Contains(typ, ":") || !strings.HasPrefix(upid, "UPID:") {
				t.Fatalf("TypeOfUPID(%q) = %q", upid, typ)
			}
			if _, err := NodeOfUPID(upid); err != nil && strings.Split(upid, ":")[1] != "" {
				t.Fatalf("TypeOfUPID(%q) = %q, but NodeOfUPID fails: %v", upid, typ, err)
			}
		}
	})
}

// FuzzConfig checks the reading of a guest's configuration, a JSON answer
// of GET .../qemu/{vmid}/config whose values Proxmox sends as strings or
// numbers (testdata/fuzz/FuzzConfig): Str gives a string value as it is and
// a number in a form that parses back to exactly that number, and Int
// reads what Str gives as a whole number, or 0.
func FuzzConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		var cfg Config
		if json.Unmarshal(body, &cfg) != nil {
			return
		}
		for k, v := range cfg {
			s := cfg.Str(k)
			switch v := v.(type) {
			case string:
				if s != v {
					t.Fatalf("Str(%q) = %q, want %q", k, s, v)
				}
			case float64:
				if back, err := strconv.ParseFloat(s, 64); err != nil || back != v {
					t.Fatalf("Str(%q) of %v = %q, which reads back as %v (%v)", k, v, s, back, err)
				}
			case nil:
				if s != "" {
					t.Fatalf("Str(%q) of null = %q", k, s)
				}
			}
			if n, err := strconv.Atoi(s); err == nil && cfg.Int(k) != n || err != nil && cfg.Int(k) != 0 {
				t.Fatalf("Int(%q) = %d, Str %q", k, cfg.Int(k), s)
			}
		}
		if cfg.Str("no such key") != "" || cfg.Int("no such key") != 0 {
			t.Fatal("an absent key reads as something")
		}
	})
}
