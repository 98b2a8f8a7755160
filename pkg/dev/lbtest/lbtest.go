// Package lbtest helps tests of load balancers: self-signed certificates
// with their keys, the admin API's mutual TLS (PKI), and Replica, an
// HTTPS server implementing flexgateway's admin API (package lbconfig)
// that records the configs pushed to it and answers a Status the test
// sets (to watchers too), for tests that need a replica's control side
// without its data plane.
package lbtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// Certificate returns a self-signed certificate for names, valid for a day,
// and its private key, in PEM.
func Certificate(t testing.TB, names ...string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
}

// Replica is an admin API of one flexgateway replica, over the mutual TLS
// of a PKI and with a token, as flexgateway's: PUT /v1/config
// records the config, GET /v1/status answers the status set with
// SetBackends and the revision last applied, and with ?after= waits for
// the status's generation to change, as flexgateway's does.
type Replica struct {
	// URL is the admin URL (https); Token the bearer token it requires.
	URL, Token string
	// HTTP is a client of the replica: it presents the PKI's client
	// certificate.
	HTTP *http.Client

	mu       sync.Mutex
	configs  []lbconfig.Config        // protected by mu
	backends []lbconfig.BackendStatus // protected by mu
	revision string                   // the revision in force, protected by mu
	gen      uint64                   // the status's generation, protected by mu
	reads    int                      // status requests answered, protected by mu
	waiting  int                      // status requests waiting for a change, protected by mu
	applied  chan struct{}            // closed and replaced on every apply, protected by mu
	changed  chan struct{}            // closed and replaced when gen changes, protected by mu
}

// NewReplica starts a replica's admin API with pki's server certificate,
// stopped when the test ends.
func NewReplica(t testing.TB, pki *PKI, token string) *Replica {
	t.Helper()
	r := &Replica{Token: token, HTTP: pki.HTTP(t, 5*time.Second), gen: 1, applied: make(chan struct{}), changed: make(chan struct{})}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	cfg, err := lbconfig.ServerTLS(pki.Server)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Replica) serve(w http.ResponseWriter, req *http.Request) {
	if !lbconfig.ClientVerified(req.TLS) || req.Header.Get("Authorization") != "Bearer "+r.Token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch {
	case req.Method == http.MethodPut && req.URL.Path == "/v1/config":
		var cfg lbconfig.Config
		if err := json.NewDecoder(req.Body).Decode(&cfg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.configs, r.revision = append(r.configs, cfg), cfg.Revision
		close(r.applied)
		r.applied = make(chan struct{})
		r.bump()
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case req.Method == http.MethodGet && req.URL.Path == "/v1/status":
		r.status(w, req)
	default:
		http.NotFound(w, req)
	}
}

// status answers GET /v1/status, waiting as lbconfig says with ?after=.
func (r *Replica) status(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
	wait, _ := time.ParseDuration(q.Get("wait"))
	timeout := time.After(wait)
	for {
		r.mu.Lock()
		st := lbconfig.Status{Generation: r.gen, Revision: r.revision, Backends: r.backends}
		changed := r.changed
		r.mu.Unlock()
		if !q.Has("after") || st.Generation != after {
			r.answer(w, st)
			return
		}
		r.mu.Lock()
		r.waiting++
		r.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			r.stopWaiting()
			r.answer(w, st)
			return
		case <-req.Context().Done():
			r.stopWaiting()
			return
		}
		r.stopWaiting()
	}
}

// stopWaiting counts a status request that waited no longer waiting.
func (r *Replica) stopWaiting() {
	r.mu.Lock()
	r.waiting--
	r.mu.Unlock()
}

// Waiting is how many status requests wait for the status to change
// from the one the replica has now: a watcher that is up to date.
func (r *Replica) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting
}

// answer writes st and counts it.
func (r *Replica) answer(w http.ResponseWriter, st lbconfig.Status) {
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
	_ = json.NewEncoder(w).Encode(st)
}

// bump changes the status's generation; r.mu is held.
func (r *Replica) bump() {
	r.gen++
	close(r.changed)
	r.changed = make(chan struct{})
}

// SetBackends sets the backends' health the replica reports.
func (r *Replica) SetBackends(bs []lbconfig.BackendStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.backends = bs
	r.bump()
}

// Restart makes the replica look restarted: no config in force, and a
// status generation its watchers have not seen.
func (r *Replica) Restart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revision, r.backends = "", nil
	r.gen += 1000
	r.bump()
}

// StatusReads is how many status requests the replica answered (a watch
// counts when it answers, not while it waits).
func (r *Replica) StatusReads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// Configs returns every config applied, in order.
func (r *Replica) Configs() []lbconfig.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lbconfig.Config(nil), r.configs...)
}

// Await waits up to timeout for a config ok accepts to be the last one
// applied, and returns it.
func (r *Replica) Await(t testing.TB, timeout time.Duration, ok func(lbconfig.Config) bool) lbconfig.Config {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		ch, n := r.applied, len(r.configs)
		var last lbconfig.Config
		if n > 0 {
			last = r.configs[n-1]
		}
		r.mu.Unlock()
		if n > 0 && ok(last) {
			return last
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no config as wanted within %s; last: %+v", timeout, last)
		}
	}
}
