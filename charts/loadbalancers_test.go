package charts

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
)

// TestLoadBalancersConfig: the -lb-config the chart renders from
// loadBalancers is what the orchestrator reads (no unknown field), finding
// the replicas from the flexgateway release's EndpointSlices in the
// release's namespace, with each zone's frontend and sources, and the
// admin API's mutual TLS files from the mounted TLS Secret; the zones'
// tokens come from the flexgateway chart's Secret, a file per zone.
func TestLoadBalancersConfig(t *testing.T) {
	t.Parallel()
	manifest, err := render(t, "flexplane", map[string]any{
		"publicURL":    "https://fp.example.com",
		"oidc":         map[string]any{"issuer": "https://id.example.com", "audience": "portal"},
		"meshPostgres": map[string]any{"url": "postgres://hs@db/headscale", "existingSecret": "hs-db"},
		"loadBalancers": map[string]any{"enabled": true, "gateway": map[string]any{"fullname": "gw", "tokenSecret": "gw-admin-tokens", "tlsSecret": "fp-lb-tls"},
			"zones": map[string]any{"fra1": map[string]any{"frontend": "10.20.0.10", "sources": []any{"10.20.0.0/24"}, "listenHost": "0.0.0.0"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	for doc := range strings.SplitSeq(manifest, "\n---\n") {
		var o corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &o); err == nil && o.Kind == "ConfigMap" && o.Name == "fp-flexplane-lb" {
			cm = &o
		}
	}
	if cm == nil {
		t.Fatalf("no ConfigMap fp-flexplane-lb in:\n%s", manifest)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(cm.Data["config.json"])))
	dec.DisallowUnknownFields()
	// orchestrator.LoadBalancersConfig's fields (the orchestrator imports
	// this package, so its type cannot be used here).
	var lc struct {
		Zones          map[string]lbsync.Zone       `json:"zones"`
		Tokens         map[string]string            `json:"tokens"`
		TLS            lbconfig.TLSFiles            `json:"tls"`
		EndpointSlices *lbsync.EndpointSlicesConfig `json:"endpointSlices"`
	}
	if err := dec.Decode(&lc); err != nil {
		t.Fatalf("the orchestrator cannot read %s: %v", cm.Data["config.json"], err)
	}
	z, ok := lc.Zones["fra1"]
	if lc.EndpointSlices == nil || lc.EndpointSlices.Fullname != "gw" || lc.EndpointSlices.Namespace != "flexplane" || !ok ||
		z.Frontend.String() != "10.20.0.10" || len(z.Sources) != 1 || z.Sources[0].String() != "10.20.0.0/24" || z.ListenHost != "0.0.0.0" ||
		len(z.Replicas) != 0 || len(lc.Tokens) != 0 ||
		lc.TLS != (lbconfig.TLSFiles{CertFile: "/etc/flexplane/lb-tls/tls.crt", KeyFile: "/etc/flexplane/lb-tls/tls.key", CAFile: "/etc/flexplane/lb-tls/ca.crt", ServerName: "flexgateway"}) {
		t.Errorf("the orchestrator reads %+v (zone %+v)", lc, z)
	}
	for _, want := range []string{"-lb-config=/etc/flexplane/lb/config.json", "-lb-token-dir=/etc/flexplane/lb-tokens", "secretName: gw-admin-tokens",
		"secretName: fp-lb-tls", "mountPath: /etc/flexplane/lb-tls"} {
		if !strings.Contains(manifest, want) {
			t.Errorf("the Deployment lacks %q", want)
		}
	}
}
