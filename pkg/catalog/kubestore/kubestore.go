// Package kubestore is the catalog on Kubernetes: a catalog.Store over the
// custom resources flexplane.io/v1alpha1 (package v1alpha1, CRDs in crds/)
// in one namespace, for orchestrators that run as many replicas.
//
// Writes go to the API server and are conditional there: an Update or a
// Delete carries the resourceVersion it was read at, and the server refuses
// a stale one (*catalog.ConflictError). Objects are checked by the domain's
// own validation before they are sent and by the CRDs' OpenAPI schemas on
// the server (kubectl writes meet only the latter); a server-side
// rejection comes back as a *catalog.ValidationError naming the field as
// the domain does ("quotas.vcpus", "pools[1].zone").
//
// Reads are served from a cache fed by a watch of each resource (client-go
// informers). The cache is coherent for the store's own writes: a write
// returns only once the cache holds it (or a later version), so a replica
// reads its writes; writes of others appear as the watch delivers them. A
// Get the cache misses asks the API server, so that an object another
// replica has just created is found before the watch brings it (a List
// shows it once the watch has).
// The cache can always be thrown away: every write is checked by the
// server, never against the cache.
package kubestore

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/catalog/kubestore/v1alpha1"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

// Config configures a Store.
type Config struct {
	// REST reaches the API server (rest.InClusterConfig in a pod, or a
	// kubeconfig). Required.
	REST *rest.Config
	// Namespace holds the catalog's objects. Required.
	Namespace string
	// SecretNamespace holds the catalog's Secrets (SecretStore: the load
	// balancers' certificates), apart from Namespace so that the rights to
	// them (a name prefix RBAC cannot grant, so every Secret of their
	// namespace) reach no other Secret. Default Namespace.
	SecretNamespace string
	// CacheWait bounds how long a write waits for the watch to bring it
	// into the cache before it returns anyway (the write has happened;
	// a read may then briefly see the version before it). Default 10s.
	CacheWait time.Duration
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
}

// Store is a catalog.Store over the catalog's custom resources. Close
// stops its watches.
type Store struct {
	client    dynamic.Interface
	ns        string
	secretNS  string // SecretStore's namespace
	cacheWait time.Duration
	log       *slog.Logger
	informers map[catalog.Kind]cache.SharedIndexInformer
	stop      context.CancelFunc

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every cache event, protected by mu

	notes catalog.Notifier // Watch's subscribers
}

var (
	_ catalog.Store   = (*Store)(nil)
	_ catalog.Watcher = (*Store)(nil)
)

// GVR returns the group, version and resource of a kind.
func GVR(kind catalog.Kind) schema.GroupVersionResource {
	return v1alpha1.GroupVersion.WithResource(kind.Resource())
}

// Open connects to the API server, checks that the catalog's CRDs are
// served, and starts the watches; it returns once every cache has synced.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.REST == nil || cfg.Namespace == "" {
		return nil, errors.New("kubestore: open: REST and Namespace are required")
	}
	if cfg.CacheWait == 0 {
		cfg.CacheWait = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	client, err := dynamic.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("kubestore: open: %w", err)
	}
	for _, k := range catalog.Kinds() {
		if _, err := client.Resource(GVR(k)).Namespace(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return nil, fmt.Errorf("kubestore: open: list %s (are the CRDs of charts/flexplane/crds installed?): %w", GVR(k).GroupResource(), err)
		}
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	if cfg.SecretNamespace == "" {
		cfg.SecretNamespace = cfg.Namespace
	}
	s := &Store{client: client, ns: cfg.Namespace, secretNS: cfg.SecretNamespace, cacheWait: cfg.CacheWait, log: cfg.Logger,
		informers: map[catalog.Kind]cache.SharedIndexInformer{}, stop: stop, changed: make(chan struct{})}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, cfg.Namespace, nil)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.notify() },
		UpdateFunc: func(any, any) { s.notify() },
		DeleteFunc: func(any) { s.notify() },
	}
	for _, k := range catalog.Kinds() {
		inf := factory.ForResource(GVR(k)).Informer()
		if _, err := inf.AddEventHandler(notify); err != nil {
			stop()
			return nil, fmt.Errorf("kubestore: open: %w", err)
		}
		if err := inf.SetWatchErrorHandler(s.watchBroke); err != nil {
			stop()
			return nil, fmt.Errorf("kubestore: open: %w", err)
		}
		s.informers[k] = inf
	}
	factory.Start(rctx.Done())
	for k, inf := range s.informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			stop()
			factory.Shutdown()
			return nil, fmt.Errorf("kubestore: open: %s cache did not sync: %w", k, ctx.Err())
		}
	}
	go func() {
		<-rctx.Done()
		factory.Shutdown()
	}()
	return s, nil
}

// Close stops the watches.
func (s *Store) Close() error {
	s.stop()
	return nil
}

// Ping checks that the API server answers for the catalog (readiness).
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.client.Resource(GVR(catalog.KindVDC)).Namespace(s.ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("kubestore: ping: %w", err)
	}
	return nil
}

func (s *Store) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.notes.Notify()
}

// Watch implements catalog.Watcher: a value after each event of the
// watches; the channel is closed when ctx ends or when a watch broke (the
// informer lists again and goes on, but what changed meanwhile is only
// known to a reader that reads everything again).
func (s *Store) Watch(ctx context.Context) <-chan struct{} { return s.notes.Subscribe(ctx) }

// watchBroke is the informers' watch error handler: it logs as client-go
// does and tells Watch's subscribers.
func (s *Store) watchBroke(r *cache.Reflector, err error) {
	cache.DefaultWatchErrorHandler(context.Background(), r, err)
	s.log.Info("kubestore: a watch broke; its subscribers read the catalog again", "err", err)
	s.notes.Break()
}

func (s *Store) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Store) cached(kind catalog.Kind, name string) (*unstructured.Unstructured, bool) {
	inf, ok := s.informers[kind]
	if !ok {
		return nil, false
	}
	o, ok, err := inf.GetIndexer().GetByKey(s.ns + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	u, ok := o.(*unstructured.Unstructured)
	return u, ok
}

// newer reports whether resource version a is b or later. Resource versions
// are opaque to clients in general; the API server's etcd storage makes
// them increasing integers, which is all this relies on, for the cache only.
func newer(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

// waitCache waits until the cache shows the object at rv or later, or (for
// gone) without it or at a later version than rv.
func (s *Store) waitCache(ctx context.Context, kind catalog.Kind, name, rv string, gone bool) {
	timer := time.NewTimer(s.cacheWait)
	defer timer.Stop()
	for {
		ch := s.changes()
		u, ok := s.cached(kind, name)
		switch {
		case gone && (!ok || (u.GetResourceVersion() != rv && newer(u.GetResourceVersion(), rv))):
			return
		case !gone && ok && newer(u.GetResourceVersion(), rv):
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timer.C:
			s.log.Warn("kubestore: the watch did not bring a write into the cache in time", "kind", kind, "name", name, "resourceVersion", rv)
			return
		}
	}
}

// Get implements catalog.Store.
func (s *Store) Get(ctx context.Context, kind catalog.Kind, name string) (catalog.Object, error) {
	if kind.Resource() == "" {
		return nil, fmt.Errorf("kubestore: get: unknown kind %q", kind)
	}
	u, ok := s.cached(kind, name)
	if !ok {
		if catalog.ValidateName(kind, name) != nil {
			// No such object can exist; the API server is not asked.
			return nil, fmt.Errorf("kubestore: get: %w", &catalog.NotFoundError{Kind: kind, Name: name})
		}
		// A miss may be a write of another replica the watch has not
		// brought yet (milliseconds): a request that follows a write made
		// through another replica must not be told NOT_FOUND. The API
		// server answers for it.
		live, err := s.client.Resource(GVR(kind)).Namespace(s.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("kubestore: get: %w", FromAPIError(kind, name, err))
		}
		u = live
	}
	o, err := FromUnstructured(kind, u)
	if err != nil {
		return nil, fmt.Errorf("kubestore: get: %w", err)
	}
	return o, nil
}

// List implements catalog.Store.
func (s *Store) List(ctx context.Context, kind catalog.Kind) ([]catalog.Object, error) {
	inf, ok := s.informers[kind]
	if !ok {
		return nil, fmt.Errorf("kubestore: list: unknown kind %q", kind)
	}
	var out []catalog.Object
	for _, item := range inf.GetIndexer().List() {
		u, ok := item.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		o, err := FromUnstructured(kind, u)
		if err != nil {
			return nil, fmt.Errorf("kubestore: list: %w", err)
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetObjectMeta().Name < out[j].GetObjectMeta().Name })
	return out, nil
}

// prepare validates obj as the domain does and returns a copy with its
// TypeMeta set.
func prepare(obj catalog.Object) (catalog.Object, error) {
	if obj == nil {
		return nil, errors.New("nil object")
	}
	if err := catalog.ValidateObject(obj); err != nil {
		return nil, fmt.Errorf("%s: %w", obj.ObjectKind(), err)
	}
	c := obj.DeepCopyObject()
	*c.GetTypeMeta() = catalog.TypeMeta{APIVersion: catalog.APIVersion, Kind: c.ObjectKind()}
	return c, nil
}

// Create implements catalog.Store.
func (s *Store) Create(ctx context.Context, obj catalog.Object) (catalog.Object, error) {
	o, err := prepare(obj)
	if err != nil {
		return nil, fmt.Errorf("kubestore: create: %w", err)
	}
	kind, name := o.ObjectKind(), o.GetObjectMeta().Name
	if o.GetObjectMeta().ResourceVersion != "" {
		return nil, fmt.Errorf("kubestore: create: %w", &catalog.ValidationError{Field: "resourceVersion", Message: "must be empty on create"})
	}
	u, err := s.toUnstructured(o)
	if err != nil {
		return nil, fmt.Errorf("kubestore: create: %w", err)
	}
	res, err := s.client.Resource(GVR(kind)).Namespace(s.ns).Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil {
		return nil, fmt.Errorf("kubestore: create: %w", FromAPIError(kind, name, err))
	}
	return s.written(ctx, kind, res)
}

// Update implements catalog.Store.
func (s *Store) Update(ctx context.Context, obj catalog.Object) (catalog.Object, error) {
	o, err := prepare(obj)
	if err != nil {
		return nil, fmt.Errorf("kubestore: update: %w", err)
	}
	kind, name, rv := o.ObjectKind(), o.GetObjectMeta().Name, o.GetObjectMeta().ResourceVersion
	if rv == "" {
		return nil, fmt.Errorf("kubestore: update: %w", &catalog.ValidationError{Field: "resourceVersion", Message: "is required for an update"})
	}
	u, err := s.toUnstructured(o)
	if err != nil {
		return nil, fmt.Errorf("kubestore: update: %w", err)
	}
	res, err := s.client.Resource(GVR(kind)).Namespace(s.ns).Update(ctx, u, metav1.UpdateOptions{FieldValidation: "Strict"})
	if err != nil {
		return nil, fmt.Errorf("kubestore: update: %w", s.conflict(ctx, kind, name, rv, FromAPIError(kind, name, err)))
	}
	return s.written(ctx, kind, res)
}

// Delete implements catalog.Store.
func (s *Store) Delete(ctx context.Context, kind catalog.Kind, name, resourceVersion string) error {
	if kind.Resource() == "" {
		return fmt.Errorf("kubestore: delete: unknown kind %q", kind)
	}
	opts := metav1.DeleteOptions{}
	if resourceVersion != "" {
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &resourceVersion}
	}
	before := resourceVersion
	if u, ok := s.cached(kind, name); ok && before == "" {
		before = u.GetResourceVersion()
	}
	if err := s.client.Resource(GVR(kind)).Namespace(s.ns).Delete(ctx, name, opts); err != nil {
		return fmt.Errorf("kubestore: delete: %w", s.conflict(ctx, kind, name, resourceVersion, FromAPIError(kind, name, err)))
	}
	s.waitCache(ctx, kind, name, before, true)
	return nil
}

// conflict fills in the stored resourceVersion of a *catalog.ConflictError
// (the server does not say it) and waits for the cache to hold that
// version, so that the caller's next read (a read-modify-write loop tries
// again on a conflict) is of what won, not of what lost again.
func (s *Store) conflict(ctx context.Context, kind catalog.Kind, name, expected string, err error) error {
	var ce *catalog.ConflictError
	if !errors.As(err, &ce) {
		return err
	}
	ce.Expected = expected
	if cur, gerr := s.client.Resource(GVR(kind)).Namespace(s.ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
		ce.Actual = cur.GetResourceVersion()
		s.waitCache(ctx, kind, name, ce.Actual, false)
	} else if apierrors.IsNotFound(gerr) {
		return &catalog.NotFoundError{Kind: kind, Name: name}
	}
	return err
}

// written converts the server's answer to a write and waits for the cache
// to catch up with it.
func (s *Store) written(ctx context.Context, kind catalog.Kind, res *unstructured.Unstructured) (catalog.Object, error) {
	o, err := FromUnstructured(kind, res)
	if err != nil {
		return nil, fmt.Errorf("kubestore: %w", err)
	}
	s.waitCache(ctx, kind, res.GetName(), res.GetResourceVersion(), false)
	return o, nil
}

func (s *Store) toUnstructured(o catalog.Object) (*unstructured.Unstructured, error) {
	u, err := ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u.SetNamespace(s.ns)
	return u, nil
}

// ToUnstructured converts a domain object to its custom resource. The
// domain's JSON is the resource's JSON (v1alpha1 mirrors it), so the
// conversion keeps every field, times with their nanoseconds.
func ToUnstructured(o catalog.Object) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", o.ObjectKind(), err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("convert %s: %w", o.ObjectKind(), err)
	}
	return u, nil
}

// FromUnstructured converts a custom resource to the domain object of kind:
// the metadata the domain knows (name, resourceVersion, creationTimestamp)
// and spec and status, decoded strictly (a field the domain does not know
// is an error, never dropped).
func FromUnstructured(kind catalog.Kind, u *unstructured.Unstructured) (catalog.Object, error) {
	m := map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
		"metadata": map[string]any{
			"name":              u.GetName(),
			"resourceVersion":   u.GetResourceVersion(),
			"creationTimestamp": u.GetCreationTimestamp().UTC(),
		},
	}
	for _, f := range []string{"spec", "status"} {
		if v, ok := u.Object[f]; ok {
			m[f] = v
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("convert %s %q: %w", kind, u.GetName(), err)
	}
	o, err := catalog.New(kind)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(o); err != nil {
		return nil, fmt.Errorf("convert %s %q: %w", kind, u.GetName(), err)
	}
	if tm := o.GetTypeMeta(); tm.APIVersion != catalog.APIVersion || tm.Kind != kind {
		return nil, fmt.Errorf("convert %s %q: apiVersion/kind is %s/%s", kind, u.GetName(), tm.APIVersion, tm.Kind)
	}
	return o, nil
}

// FromAPIError maps an API server error about the object kind/name to the
// catalog's typed errors: NotFound, AlreadyExists, Conflict (without the
// stored version), and Invalid as a *catalog.ValidationError on the first
// field the server names, in the domain's field syntax. Anything else is
// returned as it is.
func FromAPIError(kind catalog.Kind, name string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return &catalog.NotFoundError{Kind: kind, Name: name}
	case apierrors.IsAlreadyExists(err):
		return &catalog.AlreadyExistsError{Kind: kind, Name: name}
	case apierrors.IsConflict(err):
		return &catalog.ConflictError{Kind: kind, Name: name}
	case apierrors.IsInvalid(err):
		var st apierrors.APIStatus
		if errors.As(err, &st) && st.Status().Details != nil {
			for _, c := range st.Status().Details.Causes {
				return &catalog.ValidationError{Field: domainField(c.Field), Message: causeMessage(c)}
			}
		}
		return &catalog.ValidationError{Field: "name", Message: err.Error()}
	}
	return err
}

// domainField turns the server's field path ("spec.quotas.vcpus",
// "metadata.name", "" for rules on the whole object, which here are rules
// on its name) into the domain's ("quotas.vcpus", "name").
func domainField(f string) string {
	f = strings.TrimPrefix(f, ".")
	switch {
	case f == "" || f == "<nil>" || strings.HasPrefix(f, "metadata.name"):
		return "name"
	case strings.HasPrefix(f, "spec."):
		return strings.TrimPrefix(f, "spec.")
	case strings.HasPrefix(f, "metadata."):
		return strings.TrimPrefix(f, "metadata.")
	}
	return f
}

// causeMessage is a cause's message without the field the server repeats
// in it.
func causeMessage(c metav1.StatusCause) string {
	msg := c.Message
	if c.Field != "" {
		msg = strings.TrimPrefix(msg, c.Field+": ")
	}
	return msg
}

// CRDs returns the catalog's CustomResourceDefinitions (the files of
// charts/flexplane/crds).
func CRDs() ([]*apiextv1.CustomResourceDefinition, error) {
	crds, err := ReadCRDs(crdFiles, "crds")
	if err != nil {
		return nil, fmt.Errorf("kubestore: %w", err)
	}
	return crds, nil
}

// ReadCRDs decodes the CustomResourceDefinitions in the YAML files under
// dir of fsys (one per file).
func ReadCRDs(fsys fs.FS, dir string) ([]*apiextv1.CustomResourceDefinition, error) {
	var out []*apiextv1.CustomResourceDefinition
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		crd := &apiextv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, crd)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("crds: %w", err)
	}
	return out, nil
}

// InstallCRDs creates (or updates) the catalog's CRDs and waits until the
// server serves them. Helm installs them in a cluster; tests and the dev
// stack use this.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	if err := ApplyCRDs(ctx, cfg, crds); err != nil {
		return fmt.Errorf("kubestore: %w", err)
	}
	return nil
}

// ApplyCRDs creates (or updates) crds and waits until the server serves
// them.
func ApplyCRDs(ctx context.Context, cfg *rest.Config, crds []*apiextv1.CustomResourceDefinition) error {
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("install crds: %w", err)
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		_, err := api.Create(ctx, crd, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("install crds: %w", gerr)
			}
			crd.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install crd %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		for {
			cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("install crd %s: %w", crd.Name, err)
			}
			if established(cur) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("install crd %s: not established: %w", crd.Name, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(crd *apiextv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
			return true
		}
	}
	return false
}
