// Package inventory reads the Proxmox estate at request time: zones and
// hosts from the zone registry, and their figures, guests and IPAM
// addresses from Proxmox through each zone's go-proxmox client over the
// agents' Proxy. Nothing is cached beyond one Session (one API request):
// every answer is built from what Proxmox says now.
//
// Requests that span zones ask all zones concurrently, each bounded by
// Config.Timeout; a zone that fails or is too slow is reported as a
// ZoneError and the others' answers are kept.
//
// It is the fan-out over the fleet: it sits above the zone registry
// (pkg/mesh/fleet), and beside the capabilities that read through it, so
// that pkg/proxmox knows Proxmox only and no fleet.
package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// DefaultTimeout bounds one zone's part of a request when Config.Timeout
// is zero.
const DefaultTimeout = 5 * time.Second

// Config configures an Inventory.
type Config struct {
	// Zones is the registry of zones and hosts. Required.
	Zones *fleet.Registry
	// Timeout bounds each zone's part of a request. Default DefaultTimeout.
	Timeout time.Duration
}

// Inventory reads zones, hosts and guests. One Inventory serves a whole
// process (it is safe for concurrent use): its bound on the answers decoded
// at a time holds across all requests only if they share it.
type Inventory struct {
	cfg      Config
	decoding chan struct{} // one token per answer being decoded, GOMAXPROCS at most
	// now and peak count the answers being decoded, and the most at once.
	now, peak atomic.Int64
}

// New returns an inventory over cfg.Zones.
func New(cfg Config) (*Inventory, error) {
	if cfg.Zones == nil {
		return nil, errors.New("inventory: Zones is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Inventory{cfg: cfg, decoding: make(chan struct{}, runtime.GOMAXPROCS(0))}, nil
}

// Client returns the go-proxmox client of a zone.
func (inv *Inventory) Client(zoneID string) *proxmox.Client { return inv.cfg.Zones.Client(zoneID) }

// ZoneError is a zone that could not answer.
type ZoneError struct {
	Zone fleet.Zone
	Err  error
}

func (e *ZoneError) Error() string { return fmt.Sprintf("zone %s: %v", e.Zone.Name, e.Err) }

func (e *ZoneError) Unwrap() error { return e.Err }

// Each runs fn for every zone in zs concurrently, each call bounded by the
// per-zone timeout, and returns the zones whose call failed, in the order
// of zs. fn must be safe to call concurrently.
func (inv *Inventory) Each(ctx context.Context, zs []fleet.Zone, fn func(ctx context.Context, z fleet.Zone, c *proxmox.Client) error) []*ZoneError {
	errs := make([]error, len(zs))
	var wg sync.WaitGroup
	for i, z := range zs {
		wg.Go(func() { errs[i] = inv.One(ctx, z, fn) })
	}
	wg.Wait()
	var out []*ZoneError
	for i, err := range errs {
		if err != nil {
			out = append(out, &ZoneError{Zone: zs[i], Err: err})
		}
	}
	return out
}

// One runs fn for one zone, bounded by the per-zone timeout. A call that
// outlives the timeout is abandoned (its context is cancelled) and reported
// as context.DeadlineExceeded even if fn does not return at once.
func (inv *Inventory) One(ctx context.Context, z fleet.Zone, fn func(ctx context.Context, z fleet.Zone, c *proxmox.Client) error) error {
	return inv.bounded(ctx, z, func(ctx context.Context) error { return fn(ctx, z, inv.Client(z.ID)) })
}

// bounded runs fn for zone z under the per-zone timeout, as One describes,
// without building a go-proxmox client for callers that do not use one.
func (inv *Inventory) bounded(ctx context.Context, z fleet.Zone, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, inv.cfg.Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("inventory: zone %s: %w", z.Name, ctx.Err())
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("inventory: zone %s: %w", z.Name, ctx.Err())
	}
}

// ZoneResources reads /cluster/resources of type typ of a zone of the
// registry (typ "" for all types, else "vm", "node", "storage" or "sdn"):
// one call for the whole zone, read through the zone's HTTP transport and decoded in one pass (go-proxmox decodes every
// answer twice and copies it once more for its debug log).
func (inv *Inventory) ZoneResources(ctx context.Context, zoneID, typ string) ([]pveapi.Resource, error) {
	return zoneRead(ctx, inv, zoneID, pveapi.ResourcesPath(typ), "resources", decodeResources)
}

// zoneRead GETs path of a zone and decodes the answer with decode, holding
// a decoding slot meanwhile; errors say they concern what.
func zoneRead[T any](ctx context.Context, inv *Inventory, zoneID, path, what string, decode func([]byte) (T, error)) (T, error) {
	var zero T
	body, err := inv.get(ctx, zoneID, path)
	if err != nil {
		return zero, fmt.Errorf("inventory: read %s: %w", what, err)
	}
	if err := inv.acquireDecode(ctx); err != nil {
		return zero, fmt.Errorf("inventory: read %s: %w", what, err)
	}
	defer inv.releaseDecode()
	v, err := decode(body)
	if err != nil {
		return zero, fmt.Errorf("inventory: read %s: %w", what, err)
	}
	return v, nil
}

// acquireDecode waits for one of the GOMAXPROCS decoding slots: when many
// zones answer at once, some finish decoding early instead of all of them
// sharing the CPUs until the end (and holding their half-built results).
func (inv *Inventory) acquireDecode(ctx context.Context) error {
	select {
	case inv.decoding <- struct{}{}:
		n := inv.now.Add(1)
		for p := inv.peak.Load(); n > p && !inv.peak.CompareAndSwap(p, n); p = inv.peak.Load() {
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (inv *Inventory) releaseDecode() {
	inv.now.Add(-1)
	<-inv.decoding
}

// DecodedAtOnceForTest returns the most answers this inventory decoded at
// once, and how many it may (GOMAXPROCS at its creation).
func (inv *Inventory) DecodedAtOnceForTest() (peak, limit int) {
	return int(inv.peak.Load()), cap(inv.decoding)
}

// get GETs path (below /api2/json) of a zone and returns the body of a
// successful answer: the agent's answer as it arrived, without a copy.
// Errors are those of go-proxmox's Client.Get: proxmox.ErrNotAuthorized
// for 401 and 403, the status line (which carries Proxmox's error text)
// for 500 and 501, and "bad request: ..." with the answer's errors for 400.
func (inv *Inventory) get(ctx context.Context, zoneID, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fleet.BaseURL(zoneID)+path, nil)
	if err != nil {
		return nil, err
	}
	res, err := inv.cfg.Zones.HTTPClient(zoneID).Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body []byte
	if b, ok := res.Body.(*fleet.Body); ok {
		body = b.Bytes()
	} else if body, err = io.ReadAll(res.Body); err != nil {
		return nil, err
	}
	switch res.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, proxmox.ErrNotAuthorized
	case http.StatusInternalServerError, http.StatusNotImplemented:
		return nil, errors.New(res.Status)
	case http.StatusBadRequest:
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(body, &keys); err != nil {
			return nil, err
		}
		if errs, ok := keys["errors"]; ok {
			body = errs
		}
		return nil, fmt.Errorf("bad request: %s - %s", res.Status, body)
	}
	return body, nil
}

// decodeData decodes the data member of a Proxmox answer into data (which
// may be a slice with room for the expected entries). It has
// encoding/json's semantics, with go-json-experiment's implementation of
// them: one pass over the body, about half the CPU time and garbage of
// encoding/json (BenchmarkDecodeResources).
func decodeData[T any](body []byte, data T) (T, error) {
	ans := struct {
		Data T `json:"data"`
	}{Data: data}
	err := jsonv1.Unmarshal(body, &ans)
	return ans.Data, err
}

// idKey starts every entry of /cluster/resources.
var idKey = []byte(`"id":`)

// decodeResources decodes a /cluster/resources answer into a slice sized
// once from a count of its entries: growing it while decoding allocated
// about twice its final size, the largest share of the orchestrator's
// garbage under load.
func decodeResources(body []byte) ([]pveapi.Resource, error) {
	var rs []pveapi.Resource
	if n := bytes.Count(body, idKey); n > 0 {
		rs = make([]pveapi.Resource, 0, n)
	}
	return decodeData(body, rs)
}

// ZoneIPAMStatus reads every mapping of the PVE IPAM of a zone of the
// registry (one call), read like ZoneResources.
func (inv *Inventory) ZoneIPAMStatus(ctx context.Context, zoneID string) ([]pveapi.IPMapping, error) {
	return zoneRead(ctx, inv, zoneID, pveapi.IPAMStatusPath, "IPAM", func(b []byte) ([]pveapi.IPMapping, error) {
		return decodeData[[]pveapi.IPMapping](b, nil)
	})
}

// ZonePoolGuests reads the QEMU guests of pool poolid of a zone of the
// registry (pveapi.PoolGuestsPath: one call whose cost follows the pool's
// members, not the zone's guests), read like ZoneResources. A pool that
// does not exist has no guests.
func (inv *Inventory) ZonePoolGuests(ctx context.Context, zoneID, poolid string) ([]pveapi.Resource, error) {
	gs, err := zoneRead(ctx, inv, zoneID, pveapi.PoolGuestsPath(poolid), "pool "+poolid, func(b []byte) ([]pveapi.Resource, error) {
		ps, err := decodeData[[]pveapi.Pool](b, nil)
		return pveapi.GuestsOfPools(ps), err
	})
	if pveapi.IsNotFound(err) {
		return nil, nil
	}
	return gs, err
}

// Session memoizes the zone-wide reads of one API request, so that every
// field of one answer sees the same Proxmox state and each zone is asked
// once per kind of read. A session lives as long as its request: it is
// not a cache across requests.
type Session struct {
	inv   *Inventory
	mu    sync.Mutex
	calls map[string]*call // by zone ID and read, protected by mu
}

type call struct {
	once sync.Once
	val  any
	err  error
}

// NewSession starts a session (one per API request).
func (inv *Inventory) NewSession() *Session {
	return &Session{inv: inv, calls: map[string]*call{}}
}

func (s *Session) memo(ctx context.Context, z fleet.Zone, key string, read func(ctx context.Context) (any, error)) (any, error) {
	s.mu.Lock()
	c := s.calls[z.ID+"\x00"+key]
	if c == nil {
		c = &call{}
		s.calls[z.ID+"\x00"+key] = c
	}
	s.mu.Unlock()
	c.once.Do(func() {
		var v any // written by fn; read only when fn returned in time
		c.err = s.inv.bounded(ctx, z, func(ctx context.Context) (err error) {
			v, err = read(ctx)
			return err
		})
		if c.err == nil {
			c.val = v
		}
	})
	return c.val, c.err
}

// memoRead is memo for a read that returns a T.
func memoRead[T any](ctx context.Context, s *Session, z fleet.Zone, key string, read func(ctx context.Context) (T, error)) (T, error) {
	v, err := s.memo(ctx, z, key, func(ctx context.Context) (any, error) { return read(ctx) })
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

// Resources reads the zone's /cluster/resources of type typ once per
// session.
func (s *Session) Resources(ctx context.Context, z fleet.Zone, typ string) ([]pveapi.Resource, error) {
	return memoRead(ctx, s, z, "resources/"+typ, func(ctx context.Context) ([]pveapi.Resource, error) {
		return s.inv.ZoneResources(ctx, z.ID, typ)
	})
}

// PoolGuests reads the QEMU guests of the zone's pool poolid once per
// session (ZonePoolGuests).
func (s *Session) PoolGuests(ctx context.Context, z fleet.Zone, poolid string) ([]pveapi.Resource, error) {
	return memoRead(ctx, s, z, "pool/"+poolid, func(ctx context.Context) ([]pveapi.Resource, error) {
		return s.inv.ZonePoolGuests(ctx, z.ID, poolid)
	})
}

// IPAM reads the zone's IPAM mappings once per session.
func (s *Session) IPAM(ctx context.Context, z fleet.Zone) ([]pveapi.IPMapping, error) {
	return memoRead(ctx, s, z, "ipam", func(ctx context.Context) ([]pveapi.IPMapping, error) {
		return s.inv.ZoneIPAMStatus(ctx, z.ID)
	})
}
