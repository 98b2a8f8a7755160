package controlplane

import (
	"testing"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"

	"github.com/flexplane/flexplane/charts"
)

// history returns the revisions of the release of s, oldest first.
func history(t *testing.T, m *Manager, s Spec) []*release.Release {
	t.Helper()
	cfg, err := m.helm(s.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	h, err := cfg.Releases.History(s.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	releaseutil.SortByRevision(h)
	return h
}

// statuses are the revisions' statuses, oldest first.
func statuses(h []*release.Release) []release.Status {
	var out []release.Status
	for _, r := range h {
		out = append(out, r.Info.Status)
	}
	return out
}

// TestEnsureSkipsUnchangedRelease: Ensure with the Spec of the release's
// deployed revision writes no revision; a new version, other values or a
// chart whose templates changed under the same version each write one.
func TestEnsureSkipsUnchangedRelease(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, Config{})
	ctx := t.Context()
	s := spec("kc-skip", "skip")
	for range 3 {
		if err := m.Ensure(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })
	if h := history(t, m, s); len(h) != 1 {
		t.Fatalf("three Ensures of one Spec: %d revisions %v, want 1", len(h), statuses(h))
	}

	s.Version = "v1.37.3"
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	if h := history(t, m, s); len(h) != 2 || h[1].Info.Status != release.StatusDeployed {
		t.Fatalf("a new version: revisions %v, want 2, the last deployed", statuses(h))
	}
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	if h := history(t, m, s); len(h) != 2 {
		t.Fatalf("the new version again: revisions %v, want still 2", statuses(h))
	}

	// Other values from Config.Values.
	withValues, _ := newManager(t, Config{Values: func(Spec) map[string]any {
		return map[string]any{"apiServer": map[string]any{"replicas": 3}}
	}})
	for range 2 {
		if err := withValues.Ensure(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if h := history(t, m, s); len(h) != 3 {
		t.Fatalf("other values, twice: revisions %v, want 3", statuses(h))
	}

	// The same chart version with a changed template.
	c, err := charts.FlexKube()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.Templates {
		if f.Name == "templates/apiserver.yaml" {
			f.Data = append(f.Data, "\n# changed under the same chart version\n"...)
		}
	}
	edited, _ := newManager(t, Config{Chart: c, Values: withValues.cfg.Values})
	for range 2 {
		if err := edited.Ensure(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if h := history(t, m, s); len(h) != 4 || h[3].Chart.Metadata.Version != h[2].Chart.Metadata.Version {
		t.Fatalf("a changed template, twice: revisions %v, want 4 of one chart version", statuses(h))
	}
}
