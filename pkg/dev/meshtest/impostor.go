package meshtest

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// Impostor is an agent that claims a node of a cluster it does not run on:
// its "local Proxmox" is a front of another cluster's API (its own, where it
// has root) that answers the victim's certificates (public: any TLS client
// of the victim's nodes sees them) and cluster name, so its Info claims the
// victim's zone and node.
type Impostor struct {
	*Agent
	// Victim is the cluster it claims to be in.
	Victim *Cluster
	// forwarded counts the requests its Proxmox got other than those of
	// the agent's own Info and Health.
	forwarded atomic.Int64
}

// Forwarded is how many requests reached the impostor's Proxmox other than
// its own Info and Health: the Proxy calls (consoles, snippets and volumes
// go to Proxmox too) it was sent.
func (i *Impostor) Forwarded() int { return int(i.forwarded.Load()) }

// StartImpostor starts, with a fresh enrollment key, an agent on a node of
// own (whose API token it holds) that claims node of victim. With
// victimCerts it presents the victim's CA and node certificate, and its own
// node's key (it has not the victim's); without, certificate files that do
// not exist. t.Cleanup stops it.
func (h *Harness) StartImpostor(t testing.TB, own, victim *Cluster, node string, victimCerts bool) *Impostor {
	t.Helper()
	vf := victim.Sim.NodeFiles(node)
	cert, err := os.ReadFile(vf.Cert)
	if err != nil {
		t.Fatalf("meshtest: impostor: %v", err)
	}
	ca := victim.Sim.CACertPEM()
	imp := &Impostor{Victim: victim}
	target, err := url.Parse(own.Sim.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // the simulator's own CA
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/api2/json")
		switch {
		case p == "/nodes/"+node+"/certificates/info":
			writeData(w, []map[string]string{
				{"filename": "/etc/pve/nodes/" + node + "/pve-ssl.pem", "pem": string(cert)},
				{"filename": "/etc/pve/pve-root-ca.pem", "pem": string(ca)},
			})
			return
		case p == "/cluster/status":
			writeData(w, []map[string]any{{"type": "cluster", "name": victim.Spec.Name}})
			return
		case p != "/version":
			imp.forwarded.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(srv.Certificate().Raw)
	fp := make([]string, len(sum))
	for i, b := range sum {
		fp[i] = fmt.Sprintf("%02X", b)
	}
	a := h.NewAgent(t, own, node, "")
	a.ProxmoxURL, a.ProxmoxFingerprint = srv.URL, strings.Join(fp, ":")
	of := own.Sim.NodeFiles(own.Sim.NodeNames()[0])
	files := pvesim.NodeFiles{Key: of.Key, Cert: vf.Cert, CA: vf.CA}
	if !victimCerts {
		dir := t.TempDir()
		files = pvesim.NodeFiles{Key: dir + "/pve-ssl.key", Cert: dir + "/pve-ssl.pem", CA: dir + "/pve-root-ca.pem"}
	}
	a.Files = &files
	h.StartAgents(t, a)
	imp.Agent = a
	return imp
}

func writeData(w http.ResponseWriter, data any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}
