package graph_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestOpenConsoleRateLimited: one member floods openConsole (400 calls,
// 16 at a time) on a running VM of its VDC. The API's default console
// limit (5 per second per caller) serves a few and refuses the rest with
// RATE_LIMITED, HTTP 429 and a retryAfter of whole seconds; meanwhile
// another VDC's member opens its own VM's console. Once the flood stops,
// the member is served again within the seconds it was told.
func TestOpenConsoleRateLimited(t *testing.T) {
	t.Parallel()
	h, tn := sharedTenant(t, "ratelimit")
	red := createNetworks(t, h, tn.alice, tn.red, "alpha")["alpha"]
	vms := map[string]string{}
	for _, o := range []struct{ user, vdc, net string }{{tn.alice, tn.red, red}, {tn.bob, tn.blue, tn.net}} {
		var created struct{ Operation gqlOp }
		h.GraphQL(t, o.user, o.vdc, createVM, map[string]any{"in": map[string]any{"name": "flood", "zone": "alpha", "image": "tiny",
			"computeProfile": "small", "storageProfile": "ssd", "diskGiB": 4, "nics": []any{map[string]any{"network": o.net}},
			"sshKeys": []string{sshKey}, "user": "flood"}}).OK(t).Into(t, "createVM", &created)
		vms[o.user] = created.Operation.ID
	}
	for _, o := range []struct{ user, vdc string }{{tn.alice, tn.red}, {tn.bob, tn.blue}} {
		vms[o.user] = awaitCreate(t, h, o.user, o.vdc, vms[o.user])
	}

	const open = `mutation($id: ID!) { openConsole(id: $id) { path } }`
	tokens := map[string]string{tn.alice: h.Token(t, tn.alice), tn.bob: h.Token(t, tn.bob)}
	post := func(user, vdc string) (*gqltest.Response, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return gqltest.Post(ctx, nil, h.GraphQLURL(), gqltest.Request{Query: open, Variables: map[string]any{"id": vms[user]},
			Authorization: "Bearer " + tokens[user], VDC: vdc})
	}
	const calls, workers = 400, 16
	var (
		served, refused atomic.Int64
		next            atomic.Int64
		firstRefusal    = make(chan struct{})
		once            sync.Once
		other           *gqltest.Response
		otherErr        error
		bob, wg         sync.WaitGroup
	)
	began := time.Now()
	bob.Go(func() {
		// bob, of the other VDC, while alice is being refused.
		<-firstRefusal
		other, otherErr = post(tn.bob, tn.blue)
	})
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= calls {
				r, err := post(tn.alice, tn.red)
				switch {
				case err != nil:
					t.Errorf("openConsole: %v", err)
					return
				case len(r.Errors) == 0 && r.Status == http.StatusOK:
					served.Add(1)
				case len(r.Errors) == 1 && r.Errors[0].Code() == "RATE_LIMITED" && r.Status == http.StatusTooManyRequests && r.Data == nil:
					if s, ok := r.Errors[0].Extensions["retryAfter"].(float64); !ok || s < 1 || s != float64(int(s)) {
						t.Errorf("refused without whole seconds to wait: %s", r.Raw)
					}
					refused.Add(1)
					once.Do(func() { close(firstRefusal) })
				default:
					t.Errorf("openConsole: status %d: %s", r.Status, r.Raw)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	once.Do(func() { close(firstRefusal) }) // none refused: bob asks now
	bob.Wait()
	t.Logf("%d served, %d refused in %s", served.Load(), refused.Load(), took)
	// The burst of 5, then 5 per second.
	if most := int64(5 + 5*took.Seconds() + 1); served.Load() < 5 || served.Load() > most || refused.Load() == 0 {
		t.Errorf("%d served (want 5 to %d), %d refused", served.Load(), most, refused.Load())
	}
	if otherErr != nil || other == nil || len(other.Errors) > 0 || other.Status != http.StatusOK {
		t.Errorf("the other VDC's member during the flood: %v %+v", otherErr, other)
	}
	// Refused calls took no token: alice is served again once her bucket
	// has refilled, within the seconds she was told.
	poll.True(t, 10*time.Second, "alice's openConsole served again", func() bool {
		r, err := post(tn.alice, tn.red)
		return err == nil && len(r.Errors) == 0 && r.Status == http.StatusOK
	})
}
