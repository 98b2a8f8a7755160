package gateway

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// call sends method path with token through hc and returns the status
// code and body, or the error of a request that got no answer.
func call(t *testing.T, hc *http.Client, method, url, token, body string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestAdminNeedsClientCertificate tries the admin API without the
// orchestrator's client certificate: over plain HTTP, over TLS without a
// client certificate, and with a certificate of another CA (whose
// server-side trust matches, so only the client certificate differs),
// each with the right token. None gets an answer from the admin API, and
// none changes the config; /healthz stays open over TLS without a client
// certificate. A client that trusts another CA refuses the gateway.
func TestAdminNeedsClientCertificate(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	gw.apply(t, lbconfig.Config{Revision: "r1", Balancers: []lbconfig.Balancer{}})
	before := gw.status(t)

	// Trusts the gateway, presents no certificate.
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}}} //nolint:gosec // the gateway's certificate is not what is tested
	// Presents a certificate of another CA (and checks the gateway's
	// against the right one).
	other := lbtest.NewPKI(t)
	otherCA := other.Client
	otherCA.CAFile = gw.PKI.Client.CAFile
	tc, err := lbconfig.ClientTLS(otherCA)
	if err != nil {
		t.Fatal(err)
	}
	otherCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	plain := &http.Client{Timeout: 10 * time.Second}

	for name, c := range map[string]struct {
		hc  *http.Client
		url string
	}{
		"plain HTTP":                  {plain, "http://" + gw.AdminAddr},
		"no client certificate":       {noCert, gw.admin},
		"a certificate of another CA": {otherCert, gw.admin},
	} {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/status", ""}, {"GET", "/v1/config", ""}, {"PUT", "/v1/config", `{"revision":"evil","balancers":[]}`},
		} {
			code, body, err := call(t, c.hc, r.method, c.url+r.path, testToken, r.body)
			if err == nil && code != http.StatusUnauthorized && code != http.StatusBadRequest {
				t.Errorf("%s: %s %s = %d %q, want refused", name, r.method, r.path, code, body)
			}
			if strings.Contains(body, `"revision"`) {
				t.Errorf("%s: %s %s answered %q", name, r.method, r.path, body)
			}
		}
	}
	if code, _, err := call(t, noCert, "GET", gw.admin+"/healthz", "", ""); err != nil || code != 200 {
		t.Errorf("/healthz without a client certificate: %d, %v", code, err)
	}
	if code, _, err := call(t, noCert, "GET", gw.admin+"/readyz", "", ""); err != nil || code != 200 {
		t.Errorf("/readyz without a client certificate: %d, %v", code, err)
	}
	if after := gw.status(t); after.Revision != "r1" || after.Generation != before.Generation {
		t.Errorf("the refused requests changed the status: %+v, was %+v", after, before)
	}

	// The orchestrator's side refuses a gateway whose certificate is of
	// another CA than the one it trusts.
	wrongRoots := gw.PKI.Client
	wrongRoots.CAFile = other.Client.CAFile
	tc, err = lbconfig.ClientTLS(wrongRoots)
	if err != nil {
		t.Fatal(err)
	}
	c := &lbconfig.Client{BaseURL: gw.admin, Token: testToken, HTTP: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}}
	if _, err := c.Status(t.Context()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting another CA: %v, want the gateway's certificate refused", err)
	}
}

// TestKeysAreWriteOnly puts a config whose certificate carries its key in
// KeyPEM and, as a bundle pasted whole, after the chain in CertPEM too:
// GET /v1/config answers the certificate and a fingerprint of the key,
// and no PEM private key block anywhere; GET /v1/status neither.
func TestKeysAreWriteOnly(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	cert := testCert(t, "web", "web")
	bundle := cert
	bundle.Name, bundle.CertPEM = "bundle", cert.CertPEM+cert.KeyPEM
	gw.apply(t, lbconfig.Config{Revision: "r1", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners:    []lbconfig.Listener{{Name: "https", Protocol: lbconfig.ProtocolHTTPS, Address: freeAddr(t), Pool: "p", Certificates: []string{"web", "bundle"}}},
		Pools:        []lbconfig.Pool{{Name: "p", Backends: []lbconfig.Backend{{ID: "vm-1:80", Address: tcpBackend(t, "a")}}}},
		Certificates: []lbconfig.Certificate{cert, bundle},
	}}})
	hc := gw.PKI.HTTP(t, 10*time.Second)
	for _, path := range []string{"/v1/config", "/v1/status", "/v1/status?after=1&wait=1s"} {
		code, body, err := call(t, hc, "GET", gw.admin+path, testToken, "")
		if err != nil || code != 200 {
			t.Fatalf("GET %s: %d %v", path, code, err)
		}
		if strings.Contains(body, "PRIVATE KEY") || strings.Contains(body, strings.TrimSpace(strings.Split(cert.KeyPEM, "\n")[1])) {
			t.Errorf("GET %s holds a private key:\n%s", path, body)
		}
		if path != "/v1/config" {
			continue
		}
		var got lbconfig.Config
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		want := lbconfig.KeyFingerprint(cert.KeyPEM)
		for _, c := range got.Balancers[0].Certificates {
			if c.KeyPEM != "" || c.KeyFingerprint != want || !strings.Contains(c.CertPEM, "BEGIN CERTIFICATE") {
				t.Errorf("certificate %s as GET /v1/config shows it: %+v, want its chain and fingerprint %s", c.Name, c, want)
			}
		}
	}
}

// TestOtherZonesTokenRefused: a gateway deployed for zone A with A's token
// answers 401 to zone B's token (with the right client certificate), on
// every admin path, and its config and status do not change.
func TestOtherZonesTokenRefused(t *testing.T) {
	t.Parallel()
	gw := startGateway(t) // its token is zone A's: testToken
	const zoneB = "zone-b-token-0123456789"
	gw.apply(t, lbconfig.Config{Revision: "r1", Balancers: []lbconfig.Balancer{}})
	before := gw.status(t)
	hc := gw.PKI.HTTP(t, 10*time.Second)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/status", ""}, {"GET", "/v1/status?after=1&wait=1s", ""}, {"GET", "/v1/config", ""},
		{"PUT", "/v1/config", `{"revision":"zone-b","balancers":[]}`},
	} {
		code, body, err := call(t, hc, r.method, gw.admin+r.path, zoneB, r.body)
		if err != nil || code != http.StatusUnauthorized {
			t.Errorf("%s %s with zone B's token = %d %q %v, want 401", r.method, r.path, code, body, err)
		}
	}
	if after := gw.status(t); after.Revision != "r1" || after.Generation != before.Generation {
		t.Errorf("zone B's token changed the status: %+v, was %+v", after, before)
	}
}

// status is the gateway's status, read with its client.
func (p *gatewayProc) status(t *testing.T) lbconfig.Status {
	t.Helper()
	st, err := p.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
