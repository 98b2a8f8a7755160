package pveschema

import (
	"encoding/json"
	"reflect"
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
