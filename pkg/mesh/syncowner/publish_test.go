package syncowner_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/kubetest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/syncowner"
)

// Two replicas on a real kube-apiserver: the owner of a zone's shard
// publishes its document, which the other replica sees through its watch
// (its Changed channel closes); the other cannot publish for a zone it
// does not own, nor can anyone publish what is not JSON, and neither
// changes what was published. The owner killed, the replica taking the
// shard over publishes in its place.
func TestOwnerPublishesForTheOthers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kube, err := kubetest.Start(ctx, kubetest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Close() })
	const lease = 2 * time.Second
	start := func(id string) *syncowner.Owner {
		o, err := syncowner.Start(ctx, syncowner.Config{Kube: kube.RESTConfig(), Namespace: "default", Identity: id, LeasePrefix: "pub",
			LeaseDuration: lease, RenewDeadline: lease * 2 / 3, RetryPeriod: 250 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(o.Close)
		return o
	}
	a := start("replica-a")
	poll.True(t, 30*time.Second, "replica-a owning the shard", func() bool { return a.Owns("alpha") })
	b := start("replica-b")
	if _, ok := b.Published("alpha"); ok {
		t.Fatal("a document before any was published")
	}
	changed := b.Changed()
	if err := a.Publish(ctx, "alpha", json.RawMessage(`{"7":{"status":"offline"}}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica's Changed did not close within 10s of the publication")
	}
	poll.True(t, 10*time.Second, "b sees alpha's document", func() bool {
		d, ok := b.Published("alpha")
		return ok && string(d) == `{"7":{"status":"offline"}}`
	})
	if err := b.Publish(ctx, "alpha", json.RawMessage(`{}`)); !errors.Is(err, syncowner.ErrNotOwner) {
		t.Fatalf("publish by the replica not owning the shard: %v, want ErrNotOwner", err)
	}
	if err := a.Publish(ctx, "alpha", json.RawMessage(`{"7":`)); err == nil {
		t.Fatal("a document that is not JSON was published")
	}
	if d, _ := a.Published("alpha"); string(d) != `{"7":{"status":"offline"}}` {
		t.Fatalf("after the refused publications alpha's document is %s", d)
	}
	// A second zone of the shard keeps the first's document.
	if err := a.Publish(ctx, "beta", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 10*time.Second, "b sees both documents", func() bool {
		da, oka := b.Published("alpha")
		_, okb := b.Published("beta")
		return oka && okb && string(da) == `{"7":{"status":"offline"}}`
	})

	a.KillForTest()
	poll.True(t, 30*time.Second, "replica-b owning the shard", func() bool { return b.Owns("alpha") })
	if err := b.Publish(ctx, "alpha", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("publish by the new owner: %v", err)
	}
	poll.True(t, 10*time.Second, "b sees its own document", func() bool {
		d, _ := b.Published("alpha")
		return string(d) == `{}`
	})
}
