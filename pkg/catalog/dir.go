package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// DirStore is a Store over a directory of YAML manifests, one file per
// object at <dir>/<plural kind>/<name>.yaml (for example
// vdcs/prod.yaml). Files are replaced atomically (a synced temporary file
// renamed over the old one, then the directory synced). Every write holds an
// exclusive flock on <dir>/.lock around read-check-write, and resource
// versions come from a counter in <dir>/.resourceversion, so any number of
// DirStores, in one process or several sharing the directory (two
// orchestrator replicas on one volume), see each other's writes and never
// both win a conditional update. Reads take no lock: they always see a
// complete file.
//
// Manifests may be edited by hand while nothing writes (JSON is YAML too);
// unknown fields are rejected when read.
//
// Watch (Watcher) signals this store's own writes at once, and the writes of
// other DirStores on the directory (other processes) within PollInterval: every
// write, deletes included, moves the resource version counter, whose file is
// replaced, so one stat per interval sees them. Manifests edited by hand are
// not seen until a reader reads everything again.
type DirStore struct {
	dir string
	now func() time.Time
	// PollInterval is how often a Watch looks for the writes of other
	// processes (default 1s).
	PollInterval time.Duration

	notes Notifier
}

var (
	_ Store   = (*DirStore)(nil)
	_ Watcher = (*DirStore)(nil)
)

// OpenDir returns a DirStore over dir, creating it and its layout if needed.
func OpenDir(dir string) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("catalog: open dir: empty path")
	}
	for _, k := range Kinds() {
		if err := os.MkdirAll(filepath.Join(dir, k.plural()), 0o750); err != nil {
			return nil, fmt.Errorf("catalog: open dir: %w", err)
		}
	}
	return &DirStore{dir: dir, now: time.Now}, nil
}

// Dir returns the directory the store works in.
func (s *DirStore) Dir() string { return s.dir }

func (s *DirStore) path(kind Kind, name string) string {
	return filepath.Join(s.dir, kind.plural(), name+".yaml")
}

func checkKind(kind Kind) error {
	if kind.plural() == "" {
		return fmt.Errorf("unknown kind %q", kind)
	}
	return nil
}

// Get implements Store.
func (s *DirStore) Get(ctx context.Context, kind Kind, name string) (Object, error) {
	if err := checkKind(kind); err != nil {
		return nil, fmt.Errorf("catalog: get: %w", err)
	}
	if ValidateName(kind, name) != nil {
		// A name that cannot exist (and must not reach the file system).
		return nil, &NotFoundError{Kind: kind, Name: name}
	}
	o, err := s.read(kind, name)
	if err != nil {
		return nil, fmt.Errorf("catalog: get: %w", err)
	}
	return o, nil
}

// read loads one manifest; a missing file is a *NotFoundError.
func (s *DirStore) read(kind Kind, name string) (Object, error) {
	data, err := os.ReadFile(s.path(kind, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NotFoundError{Kind: kind, Name: name}
	}
	if err != nil {
		return nil, err
	}
	o, err := decode(kind, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path(kind, name), err)
	}
	if o.GetObjectMeta().Name != name {
		return nil, fmt.Errorf("%s: metadata.name is %q", s.path(kind, name), o.GetObjectMeta().Name)
	}
	return o, nil
}

// List implements Store.
func (s *DirStore) List(ctx context.Context, kind Kind) ([]Object, error) {
	if err := checkKind(kind); err != nil {
		return nil, fmt.Errorf("catalog: list: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, kind.plural()))
	if err != nil {
		return nil, fmt.Errorf("catalog: list: %w", err)
	}
	var out []Object
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".yaml")
		if !ok || e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		o, err := s.read(kind, name)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since ReadDir
		}
		if err != nil {
			return nil, fmt.Errorf("catalog: list: %w", err)
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetObjectMeta().Name < out[j].GetObjectMeta().Name })
	return out, nil
}

func prepare(op string, obj Object) (Object, error) {
	if obj == nil {
		return nil, fmt.Errorf("catalog: %s: nil object", op)
	}
	if err := ValidateObject(obj); err != nil {
		return nil, fmt.Errorf("catalog: %s %s: %w", op, obj.ObjectKind(), err)
	}
	c := obj.DeepCopyObject()
	*c.GetTypeMeta() = TypeMeta{APIVersion: APIVersion, Kind: c.ObjectKind()}
	return c, nil
}

// Create implements Store.
func (s *DirStore) Create(ctx context.Context, obj Object) (Object, error) {
	o, err := prepare("create", obj)
	if err != nil {
		return nil, err
	}
	meta := o.GetObjectMeta()
	if meta.ResourceVersion != "" {
		return nil, fmt.Errorf("catalog: create: %w", invalid("resourceVersion", "must be empty on create"))
	}
	err = s.locked(ctx, func() error {
		_, err := s.read(o.ObjectKind(), meta.Name)
		switch {
		case err == nil:
			return &AlreadyExistsError{Kind: o.ObjectKind(), Name: meta.Name}
		case !errors.Is(err, ErrNotFound):
			return err
		}
		if meta.ResourceVersion, err = s.nextVersion(); err != nil {
			return err
		}
		meta.CreationTimestamp = s.now().UTC().Truncate(time.Second)
		return s.write(o)
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: create: %w", err)
	}
	s.notes.Notify()
	return o.DeepCopyObject(), nil
}

// Update implements Store.
func (s *DirStore) Update(ctx context.Context, obj Object) (Object, error) {
	o, err := prepare("update", obj)
	if err != nil {
		return nil, err
	}
	meta := o.GetObjectMeta()
	if meta.ResourceVersion == "" {
		return nil, fmt.Errorf("catalog: update: %w", invalid("resourceVersion", "is required for an update"))
	}
	err = s.locked(ctx, func() error {
		cur, err := s.read(o.ObjectKind(), meta.Name)
		if err != nil {
			return err
		}
		curMeta := cur.GetObjectMeta()
		if curMeta.ResourceVersion != meta.ResourceVersion {
			return &ConflictError{Kind: o.ObjectKind(), Name: meta.Name, Expected: meta.ResourceVersion, Actual: curMeta.ResourceVersion}
		}
		if meta.ResourceVersion, err = s.nextVersion(); err != nil {
			return err
		}
		meta.CreationTimestamp = curMeta.CreationTimestamp
		return s.write(o)
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: update: %w", err)
	}
	s.notes.Notify()
	return o.DeepCopyObject(), nil
}

// Delete implements Store.
func (s *DirStore) Delete(ctx context.Context, kind Kind, name, resourceVersion string) error {
	if err := checkKind(kind); err != nil {
		return fmt.Errorf("catalog: delete: %w", err)
	}
	if ValidateName(kind, name) != nil {
		return fmt.Errorf("catalog: delete: %w", &NotFoundError{Kind: kind, Name: name})
	}
	err := s.locked(ctx, func() error {
		cur, err := s.read(kind, name)
		if err != nil {
			return err
		}
		if rv := cur.GetObjectMeta().ResourceVersion; resourceVersion != "" && rv != resourceVersion {
			return &ConflictError{Kind: kind, Name: name, Expected: resourceVersion, Actual: rv}
		}
		if err := os.Remove(s.path(kind, name)); err != nil {
			return err
		}
		if err := atomicfile.SyncDir(filepath.Dir(s.path(kind, name))); err != nil {
			return err
		}
		// The counter moves on deletes too: it is what Watch polls.
		_, err = s.nextVersion()
		return err
	})
	if err != nil {
		return fmt.Errorf("catalog: delete: %w", err)
	}
	s.notes.Notify()
	return nil
}

// Watch implements Watcher: this store's writes are signalled at once,
// other processes' within PollInterval. The channel closes when ctx ends.
func (s *DirStore) Watch(ctx context.Context) <-chan struct{} {
	ch := s.notes.Subscribe(ctx)
	every := s.PollInterval
	if every <= 0 {
		every = time.Second
	}
	// The first stamp is taken before Watch returns, so a write that
	// follows Watch is never taken for the state the poll started from.
	go s.pollCounter(ctx, every, s.counterStamp())
	return ch
}

// counterStamp identifies the resource version counter's file as it is
// now: the counter itself, which every write moves on ("" while there is
// none). Its modification time would not do: two writes within one tick
// of the kernel's coarse clock leave the same.
func (s *DirStore) counterStamp() string {
	b, err := os.ReadFile(filepath.Join(s.dir, ".resourceversion"))
	if err != nil {
		return ""
	}
	return string(b)
}

// pollCounter signals the subscribers when the resource version counter's
// file was replaced (another process wrote), until ctx ends.
func (s *DirStore) pollCounter(ctx context.Context, every time.Duration, last string) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := s.counterStamp(); now != last {
			last = now
			s.notes.Notify()
		}
	}
}

// locked runs fn while holding the directory's exclusive lock. Each call
// opens its own descriptor, so goroutines of one process exclude each other
// exactly as processes do.
func (s *DirStore) locked(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := lockFile(filepath.Join(s.dir, ".lock"))
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer unlock()
	return fn()
}

// nextVersion increments the directory's resource version counter. Callers
// hold the lock. A global counter (not one per object) means a name that is
// deleted and created again never repeats an old version.
func (s *DirStore) nextVersion() (string, error) {
	p := filepath.Join(s.dir, ".resourceversion")
	var n uint64
	data, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	default:
		if n, err = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
	}
	n++
	v := strconv.FormatUint(n, 10)
	if err := atomicfile.WriteFile(p, []byte(v+"\n"), 0o640); err != nil {
		return "", err
	}
	return v, nil
}

func (s *DirStore) write(o Object) error {
	data, err := encode(o)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path(o.ObjectKind(), o.GetObjectMeta().Name), data, 0o640)
}

// encode renders an object as a block-style YAML manifest with the field
// names of its JSON encoding.
func encode(o Object) ([]byte, error) {
	j, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(j, &n); err != nil {
		return nil, err
	}
	plain(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// plain drops the flow and quoting styles JSON input gives nodes; the
// encoder still quotes strings that would otherwise read as another type.
func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}

// decode parses a YAML (or JSON) manifest of the given kind strictly.
func decode(kind Kind, data []byte) (Object, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	o, err := New(kind)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(o); err != nil {
		return nil, err
	}
	if tm := o.GetTypeMeta(); tm.APIVersion != APIVersion || tm.Kind != kind {
		return nil, fmt.Errorf("apiVersion/kind is %s/%s, want %s/%s", tm.APIVersion, tm.Kind, APIVersion, kind)
	}
	return o, nil
}
