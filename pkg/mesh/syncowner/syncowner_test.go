package syncowner_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/syncowner"
)

// Two replicas on a real kube-apiserver: every shard has one owner; the
// owner killed (its Leases neither renewed nor released), the other replica
// owns every shard within the Lease's expiry plus a retry, as the mesh
// control leader's failover; a replica that stops gives its shards up at once.
func TestShardOwnerDiesHandsOver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kube, err := kubetest.Start(ctx, kubetest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Close() })
	const (
		shards = 4
		lease  = 2 * time.Second
		retry  = 250 * time.Millisecond
	)
	start := func(id string) *syncowner.Owner {
		o, err := syncowner.Start(ctx, syncowner.Config{Kube: kube.RESTConfig(), Namespace: "default", Identity: id, Shards: shards,
			LeaseDuration: lease, RenewDeadline: lease * 2 / 3, RetryPeriod: retry})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(o.Close)
		return o
	}
	a := start("replica-a")
	poll.True(t, 30*time.Second, "replica-a owning every shard", func() bool { return ownsAll(a, shards) })
	b := start("replica-b")
	// Every zone has exactly one owner.
	for i := range 50 {
		zone := fmt.Sprintf("zone-%d", i)
		if a.Owns(zone) == b.Owns(zone) {
			t.Fatalf("%s: owned by a %v and by b %v", zone, a.Owns(zone), b.Owns(zone))
		}
	}
	poll.True(t, 10*time.Second, "b sees a hold every shard", func() bool {
		for _, h := range b.Holders() {
			if h != "replica-a" {
				return false
			}
		}
		return true
	})

	a.KillForTest()
	killed := time.Now()
	poll.True(t, 30*time.Second, "replica-b owning every shard", func() bool { return ownsAll(b, shards) })
	took := time.Since(killed)
	t.Logf("handed over %s after the owner died (lease %s, retry %s)", took.Round(time.Millisecond), lease, retry)
	if took > lease+2*retry+2*time.Second {
		t.Errorf("handed over after %s, want within the lease (%s) and a retry", took, lease)
	}

	// A replica that stops releases its Leases: the next one takes over at once.
	c := start("replica-c")
	b.Close()
	stopped := time.Now()
	poll.True(t, 30*time.Second, "replica-c owning every shard", func() bool { return ownsAll(c, shards) })
	if took := time.Since(stopped); took > lease {
		t.Errorf("a released shard taken over after %s, want under the lease (%s)", took, lease)
	}
}

func ownsAll(o *syncowner.Owner, shards int) bool {
	owned := map[int]bool{}
	for i := 0; len(owned) < shards && i < 1000; i++ {
		k := fmt.Sprint("zone-", i)
		if !o.Owns(k) {
			return false
		}
		owned[o.Shard(k)] = true
	}
	return len(owned) == shards
}
