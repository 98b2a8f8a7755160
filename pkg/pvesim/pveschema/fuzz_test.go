package pveschema

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzValidate checks the validation of any parameter of the VM config
// endpoint (testdata/fuzz/FuzzValidate): a refusal is a *ParamError with
// messages, an accepted parameter is kept, and a property string that
// validates parses.
func FuzzValidate(f *testing.F) {
	s, err := loadShared()
	if err != nil {
		f.Fatal(err)
	}
	e, vars, err := s.Lookup("POST", "/nodes/pve1/qemu/100/config")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, param, value string) {
		p, err := e.ValidateRequest(vars, map[string][]string{param: {value}})
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || len(pe.Errors) == 0 || p != nil {
				t.Fatalf("Validate(%q=%q) = %v, %v", param, value, p, err)
			}
		} else if _, ok := p[param]; !ok && param != "node" && param != "vmid" {
			t.Fatalf("Validate(%q=%q) accepted but dropped the parameter", param, value)
		}
		pp, err := e.ParseProperty(param, value)
		if err == nil && pp == nil {
			t.Fatalf("ParseProperty(%q, %q) returned nothing", param, value)
		}
	})
}

// FuzzLookup checks the routing of any method and path to the schema's
// endpoints (testdata/fuzz/FuzzLookup): a path either names an endpoint of
// that method, with its path variables, or is ErrNotImplemented.
func FuzzLookup(f *testing.F) {
	s, err := loadShared()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		e, vars, err := s.Lookup(method, path)
		if err != nil {
			if !errors.Is(err, ErrNotImplemented) {
				t.Fatalf("Lookup(%q, %q): %v", method, path, err)
			}
			return
		}
		if e == nil || vars == nil || e.Method != method {
			t.Fatalf("Lookup(%q, %q) = %v, %v", method, path, e, vars)
		}
	})
}

// FuzzPropertyString checks the parsing of property strings (net0, scsi0,
// ipconfig0, cpu, ...; testdata/fuzz/FuzzPropertyString) beyond
// FuzzValidate: it is deterministic, and a value that parses re-serialises
// (every key written out as key=value) to a string that parses to the same
// map.
func FuzzPropertyString(f *testing.F) {
	s, err := loadShared()
	if err != nil {
		f.Fatal(err)
	}
	e, _, err := s.Lookup("POST", "/nodes/pve1/qemu/100/config")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, param, value string) {
		p, err := e.ParseProperty(param, value)
		again, err2 := e.ParseProperty(param, value)
		if !reflect.DeepEqual(p, again) || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("ParseProperty(%q, %q) is not deterministic: %v, %v; then %v, %v", param, value, p, err, again, err2)
		}
		if err != nil {
			return
		}
		printed := printProperty(p)
		back, err := e.ParseProperty(param, printed)
		if err != nil || !reflect.DeepEqual(back, p) {
			t.Fatalf("ParseProperty(%q, %q) = %v, printed %q, which parses to %v, %v", param, value, p, printed, back, err)
		}
	})
}

// printProperty writes a parsed property string out as key=value pairs.
func printProperty(p Params) string {
	var parts []string
	for _, k := range sortedKeys(p) {
		var v string
		switch x := p[k].(type) {
		case int64:
			v = strconv.FormatInt(x, 10)
		case float64:
			v = strconv.FormatFloat(x, 'g', -1, 64)
		case bool:
			v = map[bool]string{true: "1", false: "0"}[x]
		default:
			v = fmt.Sprint(x)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

// FuzzFormat checks every named format of the schema (pve-vmid, ipv4,
// pve-tag-list, pve-qm-ipconfig, ...) on any value
// (testdata/fuzz/FuzzFormat): checks are deterministic and an error text is
// one Proxmox would die with (ending in a newline); an unknown format is
// refused as undefined; a list is accepted exactly when each of its items
// is, an optional format takes Perl's false values; and a named property
// string that is accepted re-serialises to one that parses to the same map.
func FuzzFormat(f *testing.F) {
	s, err := loadShared()
	if err != nil {
		f.Fatal(err)
	}
	fs := s.formats
	f.Fuzz(func(t *testing.T, name, v string) {
		msg := fs.checkNamed("p", name, v)
		if again := fs.checkNamed("p", name, v); again != msg {
			t.Fatalf("format %q of %q: %q, then %q", name, v, msg, again)
		}
		if msg != "" && !strings.HasSuffix(msg, "\n") {
			t.Fatalf("format %q of %q: %q does not end in a newline", name, v, msg)
		}
		if !fs.known(name) {
			if msg != "undefined format '"+name+"'\n" {
				t.Fatalf("unknown format %q of %q: %q", name, v, msg)
			}
			return
		}
		if base, ok := strings.CutSuffix(name, "-list"); ok && fs.verifiers[name] == nil {
			each := true
			for _, item := range splitList(v) {
				each = each && fs.checkNamed("p", base, item) == ""
			}
			if each != (msg == "") {
				t.Fatalf("list format %q of %q: %q, but its items pass: %v", name, v, msg, each)
			}
		}
		if _, ok := strings.CutSuffix(name, "-opt"); ok && fs.verifiers[name] == nil && (v == "" || v == "0") && msg != "" {
			t.Fatalf("optional format %q refuses %q: %q", name, v, msg)
		}
		if fs.props[name] != nil && msg == "" {
			p, msg := fs.parseNamed("p", name, v)
			if msg != "" {
				t.Fatalf("format %q accepts %q, which does not parse: %q", name, v, msg)
			}
			printed := printProperty(p)
			if back, msg := fs.parseNamed("p", name, printed); msg != "" || !reflect.DeepEqual(back, p) {
				t.Fatalf("format %q: %q parses to %v, printed %q, which parses to %v, %q", name, v, p, printed, back, msg)
			}
		}
	})
}
