package pveschema

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestCheckReturn(t *testing.T) {
	t.Parallel()
	s := load(t)
	tests := []struct {
		name         string
		method, path string
		data         string // JSON of the "data" member
		want         []string
	}{
		{"version ok", "GET", "/version", `{"version":"9.0.3","release":"9.0","repoid":"e2a4b8c1"}`, nil},
		{"version missing field", "GET", "/version", `{"version":"9.0.3","repoid":"e2a4b8c1"}`,
			[]string{"data.release: property is missing and it is not optional"}},
		{"version null field", "GET", "/version", `{"version":"9.0.3","release":null,"repoid":"e2a4b8c1"}`,
			[]string{"data.release: property is missing and it is not optional"}},
		{"version wrong type", "GET", "/version", `{"version":9,"release":"9.0","repoid":"e2a4b8c1"}`,
			[]string{"data.version: got number, want string"}},
		{"version bad pattern", "GET", "/version", `{"version":"9.0.3","release":"9.0","repoid":"not-hex"}`,
			[]string{"data.repoid: value 'not-hex' does not match the regex pattern"}},
		{"version bad enum", "GET", "/version", `{"version":"9","release":"9.0","repoid":"e2a4b8c1","console":"vnc"}`,
			[]string{"data.console: value 'vnc' does not have a value in the enumeration 'applet, vv, html5, xtermjs'"}},
		{"status ok with 0/1 booleans", "GET", "/nodes/pve1/qemu/100/status/current",
			`{"vmid":100,"status":"running","ha":{"managed":0},"agent":1,"template":"0","uptime":"42","cpu":0.25}`, nil},
		{"status problems", "GET", "/nodes/pve1/qemu/100/status/current",
			`{"vmid":"abc","status":"paused","agent":2,"uptime":1.5,"cpu":"fast","ha":[]}`,
			[]string{
				"data.agent: got number, want boolean",
				"data.cpu: got string, want number",
				"data.ha: got array, want object",
				"data.status: value 'paused' does not have a value in the enumeration 'stopped, running'",
				"data.uptime: got number, want integer",
				"data.vmid: got string, want integer",
			}},
		{"list ok", "GET", "/nodes/pve1/qemu", `[{"vmid":100,"status":"stopped"},{"vmid":101,"status":"running","name":"web"}]`, nil},
		{"list item missing field", "GET", "/nodes/pve1/qemu", `[{"vmid":100,"status":"stopped"},{"status":"running"}]`,
			[]string{"data[1].vmid: property is missing and it is not optional"}},
		{"list not an array", "GET", "/nodes/pve1/qemu", `{"vmid":100}`, []string{"data: got object, want array"}},
		{"upid string", "POST", "/nodes/pve1/qemu/100/status/start", `"UPID:pve1:00001234:00005678:65000000:qmstart:100:root@pam:"`, nil},
		{"upid wrong type", "POST", "/nodes/pve1/qemu/100/status/start", `{"upid":"x"}`, []string{"data: got object, want string"}},
		{"nextid as string", "GET", "/cluster/nextid", `"100"`, nil},
		{"nextid not a number", "GET", "/cluster/nextid", `"next"`, []string{"data: got string, want integer"}},
		{"null for a string", "POST", "/nodes/pve1/qemu/100/status/start", `null`, []string{"data: got null, want string"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, _ := endpoint(t, s, tc.method, tc.path)
			var data any
			if err := json.Unmarshal([]byte(tc.data), &data); err != nil {
				t.Fatal(err)
			}
			got := e.CheckReturn(data)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// example builds a value that conforms to a returns schema: every non-optional field, one
// array item, the first enumeration value, the minimum of a bounded number.
func example(p *prop) any {
	switch p.Type {
	case "object":
		m := map[string]any{}
		for k, sub := range p.Properties {
			if !sub.Optional {
				m[k] = example(sub)
			}
		}
		return m
	case "array":
		if p.Items == nil {
			return []any{}
		}
		return []any{example(p.Items)}
	case "integer", "number":
		if p.Minimum != nil {
			return *p.Minimum
		}
		return float64(1)
	case "boolean":
		return true
	case "null":
		return nil
	case "string":
		if len(p.Enum) > 0 {
			return p.Enum[0]
		}
		for _, c := range []string{"x", "xy", "0123456789abcdef", strings.Repeat("AB:", 31) + "AB", "100-0"} {
			if p.re == nil || p.re.MatchString(c) {
				return c
			}
		}
	}
	return "x"
}

// TestCheckReturnEveryEndpoint checks, for every endpoint, that a value built from its
// returns schema conforms, and that dropping a required field or giving it the wrong type
// is reported.
func TestCheckReturnEveryEndpoint(t *testing.T) {
	t.Parallel()
	s := load(t)
	mutations := 0
	for _, e := range s.Endpoints() {
		if e.returns == nil {
			continue
		}
		data := example(e.returns)
		if got := e.CheckReturn(data); len(got) != 0 {
			t.Errorf("%s %s: example rejected: %q", e.Method, e.Path, got)
			continue
		}
		obj, _ := data.(map[string]any)
		schema, prefix := e.returns, "data"
		if arr, ok := data.([]any); ok && len(arr) == 1 {
			obj, _ = arr[0].(map[string]any)
			schema, prefix = e.returns.Items, "data[0]"
		}
		for k, v := range obj {
			delete(obj, k)
			want := prefix + "." + k + ": property is missing and it is not optional"
			if got := e.CheckReturn(data); !reflect.DeepEqual(got, []string{want}) {
				t.Errorf("%s %s without %s: got %q, want %q", e.Method, e.Path, k, got, want)
			}
			switch typ := schema.Properties[k].Type; typ {
			case "string", "integer", "number", "boolean", "array":
				obj[k] = map[string]any{"wrong": "type"}
				want := prefix + "." + k + ": got object, want " + typ
				if got := e.CheckReturn(data); !reflect.DeepEqual(got, []string{want}) {
					t.Errorf("%s %s with an object for %s: got %q, want %q", e.Method, e.Path, k, got, want)
				}
			}
			obj[k] = v
			mutations++
		}
	}
	if mutations < 50 {
		t.Fatalf("only %d required fields mutated; schema walk broken?", mutations)
	}
}
