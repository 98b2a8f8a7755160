package syncowner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// What a shard's owner publishes for the other replicas (the hosts it
// found not online in the zones it samples, say) lives in one ConfigMap
// per shard, <LeasePrefix>-<shard>-published, whose data key "zones" is a
// JSON object of each zone's document. Only the shard's owner writes it,
// and only when a document changes; every replica watches the shards'
// ConfigMaps, so a document reaches the others within one watch event.

// publishedKey is the ConfigMaps' data key of the zones' documents.
const publishedKey = "zones"

// publishedLabel labels the shards' ConfigMaps with the Leases' prefix, so
// that the watch sees only this election's.
const publishedLabel = "flexplane.io/sync-shards"

// ErrNotOwner is returned (wrapped) by Publish for a zone whose shard this
// replica does not own.
var ErrNotOwner = errors.New("not the owner of the zone's shard")

// published is the watch of the shards' ConfigMaps.
type published struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	lister  corelisters.ConfigMapNamespaceLister
}

// newPublished sets up the watch of the shards' ConfigMaps; signal is
// called at every change of one.
func newPublished(cs kubernetes.Interface, namespace, prefix string, signal func()) (*published, error) {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = publishedLabel + "=" + prefix }))
	inf := f.Core().V1().ConfigMaps()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}); err != nil {
		return nil, fmt.Errorf("syncowner: watch the published documents: %w", err)
	}
	return &published{client: cs, factory: f, lister: inf.Lister().ConfigMaps(namespace)}, nil
}

// publishedName is the ConfigMap of shard.
func (o *Owner) publishedName(shard int) string {
	return fmt.Sprintf("%s-%d-published", o.cfg.LeasePrefix, shard)
}

// docs decodes a shard ConfigMap's documents; a ConfigMap that is not
// one of ours decodes to none.
func docs(cm *corev1.ConfigMap) map[string]json.RawMessage {
	var d map[string]json.RawMessage
	if cm == nil || json.Unmarshal([]byte(cm.Data[publishedKey]), &d) != nil {
		return map[string]json.RawMessage{}
	}
	return d
}

// Publish records doc (JSON) as zone's document for the other replicas.
// Only the owner of zone's shard may; it fails with ErrNotOwner on
// another replica.
func (o *Owner) Publish(ctx context.Context, zone string, doc json.RawMessage) error {
	if !json.Valid(doc) {
		return fmt.Errorf("syncowner: publish %s: the document is not JSON", zone)
	}
	shard := o.Shard(zone)
	name := o.publishedName(shard)
	o.pubMu.Lock() // one write of a shard's ConfigMap at a time
	defer o.pubMu.Unlock()
	cms := o.pub.client.CoreV1().ConfigMaps(o.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		if !o.Owns(zone) {
			return fmt.Errorf("syncowner: publish %s: %w", zone, ErrNotOwner)
		}
		cm, err := o.pub.lister.Get(name)
		if attempt > 0 || apierrors.IsNotFound(err) {
			// The watch may lag behind the last write: read the object.
			cm, err = cms.Get(ctx, name, metav1.GetOptions{})
		}
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.cfg.Namespace,
				Labels: map[string]string{publishedLabel: o.cfg.LeasePrefix}}}
		case err != nil:
			return fmt.Errorf("syncowner: publish %s: %w", zone, err)
		default:
			cm = cm.DeepCopy()
		}
		d := docs(cm)
		if string(d[zone]) == string(doc) {
			return nil
		}
		d[zone] = doc
		b, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("syncowner: publish %s: %w", zone, err)
		}
		cm.Data = map[string]string{publishedKey: string(b)}
		if cm.ResourceVersion == "" {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		} else {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		// A conflict is the previous owner's last write, or the watch's
		// lag behind ours: read again and retry.
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 3 {
			continue
		}
		if err != nil {
			return fmt.Errorf("syncowner: publish %s: %w", zone, err)
		}
		return nil
	}
}

// Published returns zone's document as its shard's owner last published
// it (as this replica's watch has it); ok is false when there is none.
func (o *Owner) Published(zone string) (json.RawMessage, bool) {
	cm, err := o.pub.lister.Get(o.publishedName(o.Shard(zone)))
	if err != nil {
		return nil, false
	}
	doc, ok := docs(cm)[zone]
	return doc, ok
}

// Changed returns a channel closed at the next change of a published
// document or of the shards this replica owns.
func (o *Owner) Changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

// signal closes the channel of Changed and replaces it.
func (o *Owner) signal() {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.changed)
	o.changed = make(chan struct{})
}
