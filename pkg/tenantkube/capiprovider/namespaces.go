package capiprovider

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/flexplane/flexplane/pkg/tenantkube/controlplane"
)

// managedSelector selects the clusters' namespaces.
const managedSelector = controlplane.LabelManaged + "=" + controlplane.ManagedBy

// restartAfter is how long a namespace's controllers that stopped with an
// error wait before they start again.
const restartAfter = 5 * time.Second

// newInformerFunc is the type of cache.Options.NewInformer.
type newInformerFunc = func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// namespaceRun is one namespace's running controllers.
type namespaceRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when they have stopped
}

// runScoped runs the controllers of each of the clusters' namespaces (Run)
// until ctx ends, starting those of a namespace when it appears and
// stopping them when it is being deleted.
func runScoped(ctx context.Context, cfg Config) error {
	kube, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return fmt.Errorf("capiprovider: %w", err)
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	httpClient, err := rest.HTTPClientFor(cfg.REST)
	if err != nil {
		return fmt.Errorf("capiprovider: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg.REST, httpClient)
	if err != nil {
		return fmt.Errorf("capiprovider: %w", err)
	}
	wc, err := client.NewWithWatch(cfg.REST, client.Options{HTTPClient: httpClient, Scheme: scheme, Mapper: mapper})
	if err != nil {
		return fmt.Errorf("capiprovider: %w", err)
	}
	lw := namespacedListWatch{c: wc, scheme: scheme, mapper: mapper}

	// The namespaces alone (not their contents), read with a watch.
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managedSelector }))
	inf := factory.Core().V1().Namespaces()
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return fmt.Errorf("capiprovider: namespaces: %w", err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		factory.Shutdown()
	}()
	factory.Start(wctx.Done())
	if !toolscache.WaitForCacheSync(wctx.Done(), inf.Informer().HasSynced) {
		return nil // ctx ended
	}
	current := func() ([]string, error) {
		nss, err := inf.Lister().List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("capiprovider: namespaces: %w", err)
		}
		names := make([]string, 0, len(nss))
		for _, ns := range nss {
			// A namespace being deleted holds nothing of Cluster API's
			// (tenantkube deletes it once Cluster API is done with the
			// cluster) and may have lost its RoleBinding already.
			if ns.Status.Phase == corev1.NamespaceTerminating || ns.DeletionTimestamp != nil {
				continue
			}
			names = append(names, ns.Name)
		}
		slices.Sort(names)
		return names, nil
	}

	// Started once the controllers of the namespaces there were at the
	// start are synced (or those namespaces are gone).
	first, err := current()
	if err != nil {
		return err
	}
	var initial sync.WaitGroup
	initial.Add(len(first))
	initialSynced := map[string]func(){}
	for _, ns := range first {
		initialSynced[ns] = sync.OnceFunc(initial.Done)
	}
	if cfg.Started != nil {
		go func() {
			initial.Wait()
			cfg.Started()
		}()
	}

	running := map[string]*namespaceRun{}
	var stopping []*namespaceRun
	defer func() {
		for _, r := range running {
			r.cancel()
			stopping = append(stopping, r)
		}
		for _, r := range stopping {
			<-r.done
		}
	}()
	for {
		want, err := current()
		if err != nil {
			return err
		}
		for ns, synced := range initialSynced {
			if !slices.Contains(want, ns) {
				synced()
				delete(initialSynced, ns)
			}
		}
		for ns, r := range running {
			if !slices.Contains(want, ns) {
				cfg.Logger.Info("stopping the controllers of a namespace being deleted or gone", "namespace", ns)
				r.cancel()
				stopping = append(stopping, r)
				delete(running, ns)
			}
		}
		for _, ns := range want {
			if running[ns] != nil {
				continue
			}
			synced := initialSynced[ns]
			if synced == nil {
				synced = func() {}
			}
			rctx, cancel := context.WithCancel(ctx)
			r := &namespaceRun{cancel: cancel, done: make(chan struct{})}
			running[ns] = r
			go func() {
				defer close(r.done)
				runNamespace(rctx, cfg, ns, lw, synced)
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// runNamespace runs the controllers of namespace ns until ctx ends,
// starting them again after an error.
func runNamespace(ctx context.Context, cfg Config, ns string, lw namespacedListWatch, synced func()) {
	log := cfg.Logger.With("namespace", ns)
	for {
		log.Info("starting the controllers of a cluster's namespace")
		err := runManager(ctx, cfg, lw.scheme, ns, lw.newInformer(ns), synced)
		if ctx.Err() != nil {
			return
		}
		log.Error("the controllers of a cluster's namespace stopped; starting them again", "err", err, "after", restartAfter)
		select {
		case <-ctx.Done():
			return
		case <-time.After(restartAfter):
		}
	}
}

// namespacedListWatch lists and watches namespaced objects in one
// namespace (a request of that namespace, which the orchestrator's rights
// there allow), where controller-runtime's cache would list and watch
// them across the cluster.
type namespacedListWatch struct {
	c      client.WithWatch
	scheme *runtime.Scheme
	mapper meta.RESTMapper
}

// newInformer is a cache.Options.NewInformer making the informers of
// namespaced objects list and watch only namespace ns (cluster-scoped ones
// as given). The informers stay client-go's SharedIndexInformers, which
// Cluster API's controllers read the stores of. It replaces the
// ListerWatcher controller-runtime made, with it the selectors of
// cache.Options, which runManager sets none of.
func (n namespacedListWatch) newInformer(ns string) newInformerFunc {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		if scoped, err := n.listWatch(ns, obj); err == nil && scoped != nil {
			lw = scoped
		} else if err != nil {
			// An object the scheme or the API server cannot place: its
			// informer fails to list rather than reach across namespaces.
			lw = failing{err: err}
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	}
}

// listWatch is the list and watch of obj's kind in ns; nil for a
// cluster-scoped kind.
func (n namespacedListWatch) listWatch(ns string, obj runtime.Object) (toolscache.ListerWatcher, error) {
	namespaced, err := apiutil.IsObjectNamespaced(obj, n.scheme, n.mapper)
	if err != nil {
		return nil, fmt.Errorf("capiprovider: informer of %T: %w", obj, err)
	}
	if !namespaced {
		return nil, nil
	}
	newList, err := n.newList(obj)
	if err != nil {
		return nil, err
	}
	opts := func(o metav1.ListOptions) *client.ListOptions {
		return &client.ListOptions{Namespace: ns, Limit: o.Limit, Continue: o.Continue, Raw: &o}
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := newList()
			if err := n.c.List(ctx, list, opts(o)); err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return n.c.Watch(ctx, newList(), opts(o))
		},
	}, nil
}

// newList returns a function making an empty list of obj's kind.
func (n namespacedListWatch) newList(obj runtime.Object) (func() client.ObjectList, error) {
	gvk, err := apiutil.GVKForObject(obj, n.scheme)
	if err != nil {
		return nil, fmt.Errorf("capiprovider: informer of %T: %w", obj, err)
	}
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	switch obj.(type) {
	case *unstructured.Unstructured:
		return func() client.ObjectList {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listGVK)
			return l
		}, nil
	case *metav1.PartialObjectMetadata:
		return func() client.ObjectList {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(listGVK)
			return l
		}, nil
	}
	if _, err := n.scheme.New(listGVK); err != nil {
		return nil, fmt.Errorf("capiprovider: informer of %s: %w", gvk, err)
	}
	return func() client.ObjectList {
		o, _ := n.scheme.New(listGVK)
		l, _ := o.(client.ObjectList)
		return l
	}, nil
}

// failing is a ListerWatcher that only fails.
type failing struct{ err error }

func (f failing) List(metav1.ListOptions) (runtime.Object, error)   { return nil, f.err }
func (f failing) Watch(metav1.ListOptions) (watch.Interface, error) { return nil, f.err }
