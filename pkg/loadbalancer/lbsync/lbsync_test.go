package lbsync_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbsync"
)

// TestSyncToReplicas: two syncers (two orchestrator replicas) over one
// catalog push a zone's balancers to both of its flexgateway replicas
// at once after a change (the API kicks its syncer; the other sees the
// replicas' revision change in their status watch), with the certificates' keys, the listeners
// on their frontend ports (the balancer has the pool's second address: the
// VDC's edge gateway the first) and the backends behind the balancer's address;
// a replica that already runs the revision is not sent it again; other
// zones' balancers are not served.
func TestSyncToReplicas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	store := storeWithZones(t, "alpha", "beta")
	pki := lbtest.NewPKI(t)
	a, b := lbtest.NewReplica(t, pki, "tok"), lbtest.NewReplica(t, pki, "tok")
	zones := map[string]lbsync.Zone{"alpha": {Zone: loadbalancer.Zone{ListenHost: "0.0.0.0", Frontend: netip.MustParseAddr("198.51.100.5")}, Replicas: []string{a.URL, b.URL}}}
	var syncers []*lbsync.Syncer
	for range 2 {
		s := lbsync.New(lbsync.Config{Store: store, Secrets: store, Zones: zones, Tokens: map[string]string{"alpha": "tok"}, HTTP: pki.HTTP(t, 5*time.Second)})
		go func() { _ = s.Run(ctx) }()
		syncers = append(syncers, s)
	}
	a.Await(t, 5*time.Second, func(c lbconfig.Config) bool { return c.Revision != "" && len(c.Balancers) == 0 })

	svc := &loadbalancer.Service{Store: store, Secrets: store}
	cert, key := lbtest.Certificate(t, "shop.example")
	for _, zone := range []string{"beta", "alpha"} {
		lb := &catalog.LoadBalancer{}
		lb.Name, lb.VDC, lb.Zone = catalog.LoadBalancerName("red", "shop-"+zone), "red", zone
		lb.Pools = []catalog.LBPool{{Name: "app", Backends: []catalog.LBBackend{{VMID: 100, Port: 80}, {VMID: 101, Port: 80}}}}
		lb.Listeners = []catalog.LBListener{{Name: "tcp", Protocol: catalog.LBProtocolTCP, Port: 65535, Pool: "app"},
			{Name: "https", Protocol: catalog.LBProtocolHTTPS, Port: 443, Pool: "app", Certificates: []string{"shop"}}}
		if _, err := svc.Create(ctx, lb, []loadbalancer.CertificatePEM{{Name: "shop", CertPEM: cert, KeyPEM: key}}); err != nil {
			t.Fatal(err)
		}
	}
	// The API kicks the syncer of the replica that made the change.
	syncers[0].Kick()
	start := time.Now()
	for _, r := range []*lbtest.Replica{a, b} {
		cfg := r.Await(t, 5*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 })
		bal := cfg.Balancers[0]
		if bal.ID != "red.shop-alpha" || bal.Listeners[0].Address != "0.0.0.0:28008" || bal.Listeners[1].Address != "0.0.0.0:28009" ||
			bal.Certificates[0].KeyPEM != key {
			t.Errorf("balancer %+v", bal)
		}
		// The listener on 65535 pushes the relay ports below it.
		if be := bal.Pools[0].Backends; be[0].Address != "203.0.113.11:65534" || be[1].Address != "203.0.113.11:65533" || be[0].ID != "100:80" {
			t.Errorf("backends %+v", be)
		}
	}
	// A kicked pass runs at once; allow for 2 busy cores.
	d := time.Since(start)
	t.Logf("both replicas had the balancer %s after the create", d.Round(time.Millisecond))
	if d > 3*time.Second {
		t.Errorf("the replicas had the balancer %s after the create", d)
	}
	// The revision in force is not sent again.
	n := len(a.Configs())
	// At most the other syncer's push of the same change (its pass saw
	// the old status at the same time) may come, then nothing.
	deadline := time.Now().Add(3 * time.Second)
	// poll:own-loop: it watches a 3 s window for pushes that must not
	// come; there is no condition to wait for.
	for time.Now().Before(deadline) {
		if len(a.Configs()) > n+1 {
			t.Fatalf("a replica running the revision was sent %d more configs", len(a.Configs())-n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStatusWatch: the syncer keeps each replica's status through one
// waiting request, so an idle replica is not asked anything while the
// status stays the same; a backend's health change reaches Statuses
// within moments, with no read at request time; a restarted replica (no
// config in force) is given the zone's config again at once, with no
// change in the catalog.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	store, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pki := lbtest.NewPKI(t)
	r := lbtest.NewReplica(t, pki, "tok")
	zones := map[string]lbsync.Zone{"alpha": {Zone: loadbalancer.Zone{ListenHost: "0.0.0.0"}, Replicas: []string{r.URL}}}
	s := lbsync.New(lbsync.Config{Store: store, Secrets: store, Zones: zones, Tokens: map[string]string{"alpha": "tok"}, HTTP: pki.HTTP(t, 5*time.Second)})
	go func() { _ = s.Run(ctx) }()
	first := r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return c.Revision != "" })

	// Idle: the watch waits (30 s by default) and nothing is pushed.
	awaitStatus(t, s, func(sts []lbconfig.Status) bool { return len(sts) == 1 && sts[0].Revision == first.Revision })
	// The watch may answer once more for the push's own change of the
	// status before it waits on the current one.
	poll.Until(t, 10*time.Second, "the syncer's watch waiting on the replica's status", func() error {
		if n := r.Waiting(); n != 1 {
			return fmt.Errorf("%d status requests waiting", n)
		}
		return nil
	})
	reads, configs := r.StatusReads(), len(r.Configs())
	time.Sleep(3 * time.Second) // the span over which nothing may happen
	if got := r.StatusReads(); got != reads {
		t.Errorf("an idle replica answered %d status requests in 3 s", got-reads)
	}
	if got := len(r.Configs()); got != configs {
		t.Errorf("an idle replica was sent %d configs in 3 s", got-configs)
	}

	// A health change is in Statuses at once.
	start := time.Now()
	r.SetBackends([]lbconfig.BackendStatus{{Balancer: "red.shop", Pool: "app", Backend: "100:80", LastError: "connection refused"}})
	awaitStatus(t, s, func(sts []lbconfig.Status) bool {
		return len(sts) == 1 && len(sts[0].Backends) == 1 && !sts[0].Backends[0].Healthy
	})
	d := time.Since(start)
	t.Logf("a health change reached Statuses in %s", d.Round(time.Millisecond))
	if d > 2*time.Second {
		t.Errorf("a health change took %s to reach Statuses", d)
	}

	// A restarted replica gets the config again.
	r.Restart()
	r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(r.Configs()) > configs && c.Revision == first.Revision })
}

// storeWithZones is a catalog with an external network in each of zones.
func storeWithZones(t *testing.T, zones ...string) *catalog.DirStore {
	t.Helper()
	store, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, zone := range zones {
		en := &catalog.ExternalNetwork{}
		en.Name, en.Bridge, en.CIDR, en.Gateway, en.PoolStart, en.PoolEnd = zone, "vmbr0", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "203.0.113.20"
		if _, err := catalog.Create(t.Context(), store, en); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// TestZoneTokens: each zone's replicas are sent their zone's token only,
// and converge on their zone's balancers, each replica accepting only its
// own zone's token; a zone without a token is sent nothing.
func TestZoneTokens(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	store := storeWithZones(t, "alpha", "beta", "gamma")
	svc := &loadbalancer.Service{Store: store, Secrets: store}
	for _, zone := range []string{"alpha", "beta", "gamma"} {
		lb := &catalog.LoadBalancer{}
		lb.Name, lb.VDC, lb.Zone = catalog.LoadBalancerName("red", "shop-"+zone), "red", zone
		lb.Pools = []catalog.LBPool{{Name: "app", Backends: []catalog.LBBackend{{VMID: 100, Port: 80}}}}
		lb.Listeners = []catalog.LBListener{{Name: "tcp", Protocol: catalog.LBProtocolTCP, Port: 5000, Pool: "app"}}
		if _, err := svc.Create(ctx, lb, nil); err != nil {
			t.Fatal(err)
		}
	}
	pki := lbtest.NewPKI(t)
	replicas := map[string]*lbtest.Replica{"alpha": lbtest.NewReplica(t, pki, "tok-alpha"), "beta": lbtest.NewReplica(t, pki, "tok-beta"),
		"gamma": lbtest.NewReplica(t, pki, "tok-gamma")}
	zones := map[string]lbsync.Zone{}
	for zone, r := range replicas {
		zones[zone] = lbsync.Zone{Zone: loadbalancer.Zone{ListenHost: "0.0.0.0"}, Replicas: []string{r.URL}}
	}
	s := lbsync.New(lbsync.Config{Store: store, Secrets: store, Zones: zones, Tokens: map[string]string{"alpha": "tok-alpha", "beta": "tok-beta"},
		HTTP: pki.HTTP(t, 5*time.Second)})
	go func() { _ = s.Run(ctx) }()
	for _, zone := range []string{"alpha", "beta"} {
		cfg := replicas[zone].Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 })
		if id := cfg.Balancers[0].ID; id != "red.shop-"+zone {
			t.Errorf("zone %s's replica runs %s", zone, id)
		}
		if err := s.LastError(replicas[zone].URL); err != nil {
			t.Errorf("zone %s: %v", zone, err)
		}
	}
	if n := len(replicas["gamma"].Configs()); n != 0 {
		t.Errorf("zone gamma, without a token, was sent %d configs", n)
	}
	// Each replica refuses the other zone's token.
	for zone, other := range map[string]string{"alpha": "tok-beta", "beta": "tok-alpha"} {
		c := &lbconfig.Client{BaseURL: replicas[zone].URL, Token: other, HTTP: replicas[zone].HTTP}
		if _, err := c.Status(ctx); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("zone %s's replica with %s: %v, want 401", zone, other, err)
		}
	}
}

// awaitStatus waits (10 s at most) until ok accepts the syncer's statuses
// of zone alpha.
func awaitStatus(t *testing.T, s *lbsync.Syncer, ok func([]lbconfig.Status) bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, "zone alpha's statuses", func() error {
		if st := s.Statuses(t.Context(), "alpha"); !ok(st) {
			return fmt.Errorf("statuses %+v", st)
		}
		return nil
	})
}

// TestCatalogChangeStartsAPass: a balancer written by another replica (its
// own store on the catalog's directory, which kicks nothing here) reaches
// the flexgateway replica through the catalog's watch, long before the
// resync; a syncer that does not own the zone pushes nothing.
func TestCatalogChangeStartsAPass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	store := storeWithZones(t, "alpha")
	other, err := catalog.OpenDir(store.Dir())
	if err != nil {
		t.Fatal(err)
	}
	r, cfg := alpha(t, store, store.Watch)
	start := func(owns bool) {
		cfg.Owns = func(string) bool { return owns }
		s := lbsync.New(cfg)
		go func() { _ = s.Run(ctx) }()
	}
	start(false)
	start(true)
	r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return c.Revision != "" && len(c.Balancers) == 0 })

	if _, err := catalog.Create(ctx, other, balancer("shop", "203.0.113.11")); err != nil {
		t.Fatal(err)
	}
	r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 })
	// Counted by what was pushed, not when: the empty config may still be
	// applied again at the start (a status the watch brought from before
	// the first apply).
	n := 0
	for _, c := range r.Configs() {
		if len(c.Balancers) == 1 {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the change was pushed %d times, want once (by the zone's owner)", n)
	}
}

// alpha is a flexgateway replica of zone alpha and the config of a syncer
// of store's zone alpha to it, on the catalog watch changes, resyncing
// only after an hour.
func alpha(t *testing.T, store *catalog.DirStore, changes func(context.Context) <-chan struct{}) (*lbtest.Replica, lbsync.Config) {
	pki := lbtest.NewPKI(t)
	r := lbtest.NewReplica(t, pki, "tok")
	zones := map[string]lbsync.Zone{"alpha": {Zone: loadbalancer.Zone{ListenHost: "0.0.0.0", Frontend: netip.MustParseAddr("198.51.100.5")}, Replicas: []string{r.URL}}}
	return r, lbsync.Config{Store: store, Secrets: store, Zones: zones, Tokens: map[string]string{"alpha": "tok"}, HTTP: pki.HTTP(t, 5*time.Second),
		Resync: time.Hour, Changes: changes}
}

// balancer is VDC red's TCP balancer name in zone alpha at address.
func balancer(name, address string) *catalog.LoadBalancer {
	lb := &catalog.LoadBalancer{}
	lb.Name, lb.VDC, lb.Zone = catalog.LoadBalancerName("red", name), "red", "alpha"
	lb.Pools = []catalog.LBPool{{Name: "app", Backends: []catalog.LBBackend{{VMID: 100, Port: 80}}}}
	lb.Listeners = []catalog.LBListener{{Name: "tcp", Protocol: catalog.LBProtocolTCP, Port: 8080, Pool: "app"}}
	lb.PublicAddress = address
	return lb
}

// A catalog watch that breaks (changes may have been missed) makes a pass
// at once that reads the whole catalog, and the syncer watches again: a
// balancer the broken watch never signalled is pushed with no Resync, and
// a change the new watch signals is pushed too.
func TestBrokenWatchResyncs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	store := storeWithZones(t, "alpha")
	watches := make(chan chan struct{}, 4)
	r, cfg := alpha(t, store, func(context.Context) <-chan struct{} {
		ch := make(chan struct{}, 1)
		watches <- ch
		return ch
	})
	go func() { _ = lbsync.New(cfg).Run(ctx) }()
	r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return c.Revision != "" && len(c.Balancers) == 0 })

	first := <-watches
	if _, err := catalog.Create(ctx, store, balancer("shop", "203.0.113.11")); err != nil {
		t.Fatal(err)
	}
	close(first) // the watch broke; the change above was never signalled
	r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 1 })

	var second chan struct{}
	poll.True(t, 10*time.Second, "a new watch taken", func() bool {
		select {
		case second = <-watches:
			return true
		default:
			return false
		}
	})
	if _, err := catalog.Create(ctx, store, balancer("cart", "203.0.113.12")); err != nil {
		t.Fatal(err)
	}
	second <- struct{}{}
	r.Await(t, 10*time.Second, func(c lbconfig.Config) bool { return len(c.Balancers) == 2 })
}
