package inventory

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// stdDecode is how answers were decoded before decodeData: encoding/json.
func stdDecode[T any](body []byte) (T, error) {
	var ans struct {
		Data T `json:"data"`
	}
	err := json.NewDecoder(bytes.NewReader(body)).Decode(&ans)
	return ans.Data, err
}

func sameDecoding[T any](t *testing.T, name string, body []byte) {
	t.Helper()
	want, werr := stdDecode[T](body)
	var got T
	var gerr error
	switch g := any(&got).(type) {
	case *[]pveapi.Resource:
		*g, gerr = decodeResources(body)
	default:
		got, gerr = decodeData(body, got)
	}
	if (werr == nil) != (gerr == nil) {
		t.Errorf("%s: encoding/json error %v, decodeData error %v", name, werr, gerr)
		return
	}
	if werr != nil {
		return // callers drop the value of a failed decode
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: decodeData\n%+v\nencoding/json\n%+v", name, got, want)
	}
}

// TestDecodeDataMatchesEncodingJSON decodes what a simulated cluster
// answers, and odd answers, both ways: the results must be identical.
func TestDecodeDataMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	const token = "flexplane@pve!test=0123456789abcdef"
	sim, c := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: 2}, token)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, g := range []map[string]any{
		{"vmid": 130, "name": "web", "cores": 3, "memory": 3072, "tags": tenancy.GuestTags("red"), "start": 1},
		{"vmid": 131, "name": "db", "cores": 1, "memory": 1024, "tags": "other;x"},
		{"vmid": 132, "name": "tpl", "cores": 1, "memory": 512, "template": 1},
	} {
		var upid proxmox.UPID
		if err := c.Post(ctx, fmt.Sprintf("/nodes/pve%d/qemu", i%2+1), g, &upid); err != nil {
			t.Fatal(err)
		}
		if err := proxmox.NewTask(upid, c).Wait(ctx, 10*time.Millisecond, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	AddRedWebAddress(ctx, t, c)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sim.CACertPEM())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(path string) []byte {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, sim.URL()+"/api2/json"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "PVEAPIToken="+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return b
	}
	for _, typ := range []string{"", "vm", "node", "storage"} {
		body := get(pveapi.ResourcesPath(typ))
		sameDecoding[[]pveapi.Resource](t, "resources "+typ, body)
		if rs, err := decodeResources(body); err != nil || len(rs) == 0 {
			t.Errorf("resources %q: %d, %v", typ, len(rs), err)
		}
	}
	ipam := get(pveapi.IPAMStatusPath)
	sameDecoding[[]pveapi.IPMapping](t, "ipam", ipam)
	if ms, err := decodeData[[]pveapi.IPMapping](ipam, nil); err != nil || len(ms) == 0 {
		t.Errorf("ipam: %+v, %v", ms, err)
	}

	// Answers Proxmox could give, or a broken one.
	for _, body := range []string{
		`{"data":null}`,
		`{"data":[]}`,
		`{}`,
		`{"data":[{"id":"qemu/1","VMID":1,"Name":"upper","cpu":0.5,"maxmem":1e3,"extra":{"a":[1,2]}}]}`,
		`{"data":[{"vmid":"1"}]}`,
		`{"data":[{"vmid":1.5}]}`,
		`{"data":[{"name":"a\u00e9\ud83d\ude00","tags":"x;y","lock":null}]}`,
		`{"data":[{"id":"a"}],"data":[{"id":"b"}]}`,
		`{"data":[{"id":"a"}]`,
		`not json`,
		``,
	} {
		sameDecoding[[]pveapi.Resource](t, body, []byte(body))
	}
	for _, body := range []string{
		`{"data":[{"ip":"10.0.0.2","vmid":130},{"ip":"10.0.0.3","vmid":"131"},{"ip":"10.0.0.4"}]}`,
		`{"data":[{"vmid":true}]}`,
	} {
		sameDecoding[[]pveapi.IPMapping](t, body, []byte(body))
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resourcesBody is a /cluster/resources answer of n running guests shaped
// like pvesim's.
func resourcesBody(n int) []byte {
	rs := make([]map[string]any, n)
	for i := range rs {
		rs[i] = map[string]any{"id": fmt.Sprintf("qemu/%d", 1000+i), "type": "qemu", "vmid": 1000 + i,
			"name": fmt.Sprintf("z01-vm-%d", i), "node": fmt.Sprintf("pve%d", i%4+1), "status": "running",
			"maxcpu": 2, "maxmem": 2 << 30, "maxdisk": 16 << 30, "template": 0, "tags": tenancy.GuestTags("bench"),
			"cpu": 0.0123 * float64(i%50), "mem": 123456789 + i, "disk": 0, "netin": 1234567, "netout": 7654321,
			"diskread": 9876543, "diskwrite": 3456789, "uptime": 12345 + i}
	}
	b, err := json.Marshal(map[string]any{"data": rs})
	if err != nil {
		panic(err)
	}
	return b
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeResources decodes a 1,000-guest /cluster/resources answer
// with decodeResources and, as the same-run baseline, with encoding/json as
// before. cpu-ns/op is the process's CPU time (GC included) per decode,
// less sensitive to a loaded machine than ns/op.
func BenchmarkDecodeResources(b *testing.B) {
	body := resourcesBody(1000)
	for _, v := range []struct {
		name   string
		decode func([]byte) ([]pveapi.Resource, error)
	}{
		{"encoding-json", stdDecode[[]pveapi.Resource]},
		{"decodeResources", decodeResources},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				if rs, err := v.decode(body); err != nil || len(rs) != 1000 {
					b.Fatal(len(rs), err)
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// AddRedWebAddress makes VDC red's network web (10.5.0.0/24) in c's SDN
// and maps 10.5.0.7 in its IPAM to a NIC of guest 130; it returns the
// network's VNet. Exported for this package's external tests too.
func AddRedWebAddress(ctx context.Context, t *testing.T, c *proxmox.Client) (vnet string) {
	t.Helper()
	zone, vnet := tenancy.SDNZoneID("red"), tenancy.VNetID("red", "web")
	for _, step := range []struct {
		method, path string
		body         map[string]any
	}{
		{"POST", "/cluster/sdn/zones", map[string]any{"zone": zone, "type": "simple"}},
		{"POST", "/cluster/sdn/vnets", map[string]any{"vnet": vnet, "zone": zone}},
		{"POST", "/cluster/sdn/vnets/" + vnet + "/subnets", map[string]any{"subnet": "10.5.0.0/24", "type": "subnet", "gateway": "10.5.0.1"}},
		{"POST", "/cluster/sdn/vnets/" + vnet + "/ips", map[string]any{"zone": zone, "ip": "10.5.0.7", "mac": "BC:24:11:00:00:07"}},
		{"PUT", "/cluster/sdn/vnets/" + vnet + "/ips", map[string]any{"zone": zone, "ip": "10.5.0.7", "vmid": 130}},
	} {
		if err := c.Req(ctx, step.method, step.path, mustJSON(t, step.body), nil); err != nil {
			t.Fatalf("%s %s: %v", step.method, step.path, err)
		}
	}
	return vnet
}
