package catalog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Export writes every object of s as a stream of YAML manifests (documents
// separated by "---"), kind by kind in the order of Kinds(), by name within
// a kind. The stream is what Import reads, and what kubectl apply takes for
// the Kubernetes backend. It returns the number of objects written.
func Export(ctx context.Context, s Store, w io.Writer) (int, error) {
	n := 0
	for _, k := range Kinds() {
		objs, err := s.List(ctx, k)
		if err != nil {
			return n, fmt.Errorf("catalog: export: %w", err)
		}
		for _, o := range objs {
			data, err := encode(o)
			if err != nil {
				return n, fmt.Errorf("catalog: export %s %q: %w", k, o.GetObjectMeta().Name, err)
			}
			if _, err := fmt.Fprintf(w, "---\n%s", data); err != nil {
				return n, fmt.Errorf("catalog: export: %w", err)
			}
			n++
		}
	}
	return n, nil
}

// ImportOptions tunes Import.
type ImportOptions struct {
	// Replace overwrites an object that exists in the target under the
	// same name; without it such an object is an error (nothing after it
	// is imported) unless it already holds the same spec and status.
	Replace bool
}

// ImportResult counts what Import did.
type ImportResult struct {
	Created, Replaced, Unchanged int
}

// Import reads a stream of manifests (Export's output) and creates each
// object in s. Objects keep their names, specs and status; the target
// assigns resourceVersion and creationTimestamp. Every manifest is decoded
// and validated before anything is written, so a bad stream changes
// nothing.
func Import(ctx context.Context, s Store, r io.Reader, opts ImportOptions) (ImportResult, error) {
	var res ImportResult
	objs, err := readManifests(r)
	if err != nil {
		return res, fmt.Errorf("catalog: import: %w", err)
	}
	for _, o := range objs {
		kind, name := o.ObjectKind(), o.GetObjectMeta().Name
		_, err := s.Create(ctx, o)
		if err == nil {
			res.Created++
			continue
		}
		if !errors.Is(err, ErrAlreadyExists) {
			return res, fmt.Errorf("catalog: import: %w", err)
		}
		cur, err := s.Get(ctx, kind, name)
		if err != nil {
			return res, fmt.Errorf("catalog: import: %w", err)
		}
		if sameContent(cur, o) {
			res.Unchanged++
			continue
		}
		if !opts.Replace {
			return res, fmt.Errorf("catalog: import: %w (differs from the import; replace to overwrite)", &AlreadyExistsError{Kind: kind, Name: name})
		}
		o.GetObjectMeta().ResourceVersion = cur.GetObjectMeta().ResourceVersion
		if _, err := s.Update(ctx, o); err != nil {
			return res, fmt.Errorf("catalog: import: %w", err)
		}
		res.Replaced++
	}
	return res, nil
}

// sameContent reports whether two objects differ in nothing but the
// metadata a store assigns.
func sameContent(a, b Object) bool {
	strip := func(o Object) []byte {
		c := o.DeepCopyObject()
		m := c.GetObjectMeta()
		m.ResourceVersion, m.CreationTimestamp = "", time.Time{}
		data, err := encode(c)
		if err != nil {
			return nil
		}
		return data
	}
	x, y := strip(a), strip(b)
	return x != nil && bytes.Equal(x, y)
}

// readManifests splits a YAML stream into documents and decodes each
// strictly by its kind, clearing resourceVersions (they belong to the
// store the stream came from).
func readManifests(r io.Reader) ([]Object, error) {
	var docs []string
	var cur strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimRight(line, " ") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	docs = append(docs, cur.String())
	var out []Object
	for i, d := range docs {
		if strings.TrimSpace(d) == "" {
			continue
		}
		var tm TypeMeta
		if err := yaml.Unmarshal([]byte(d), &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if tm.Kind.Resource() == "" {
			return nil, fmt.Errorf("document %d: unknown kind %q", i, tm.Kind)
		}
		o, err := decode(tm.Kind, []byte(d))
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		o.GetObjectMeta().ResourceVersion = ""
		if err := ValidateObject(o); err != nil {
			return nil, fmt.Errorf("document %d (%s %q): %w", i, tm.Kind, o.GetObjectMeta().Name, err)
		}
		out = append(out, o)
	}
	return out, nil
}
