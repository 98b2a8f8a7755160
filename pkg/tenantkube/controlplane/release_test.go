package controlplane

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	helmtime "helm.sh/helm/v3/pkg/time"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// forgePending leaves the release of s as an orchestrator that died in the
// middle of an operation leaves it: a copy of the last revision, one
// version up, pending since since.
func forgePending(t *testing.T, m *Manager, s Spec, status release.Status, since time.Time) {
	t.Helper()
	cfg, err := m.helm(s.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	last, err := cfg.Releases.Last(s.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	forged := *last
	info := *last.Info
	info.Status, info.LastDeployed, info.Description = status, helmtime.Time{Time: since}, "forged by the test"
	forged.Info, forged.Version = &info, last.Version+1
	if err := cfg.Releases.Create(&forged); err != nil {
		t.Fatal(err)
	}
}

// TestEnsureRecoversStuckRelease: a revision left pending longer than
// Config.PendingGrace is marked failed and the release upgraded past it;
// a younger one is ErrBusy and changes nothing, until the grace has
// passed; a pending install without a deployed revision is installed
// anew over it, keeping the objects it made.
func TestEnsureRecoversStuckRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("stale upgrade", func(t *testing.T) {
		t.Parallel()
		m, _ := newManager(t, Config{})
		s := spec("kc-stuck-upgrade", "stuck")
		if err := m.Ensure(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })
		forgePending(t, m, s, release.StatusPendingUpgrade, time.Now().Add(-time.Hour))
		if err := m.Ensure(ctx, s); err != nil {
			t.Fatalf("Ensure over a stale pending-upgrade: %v", err)
		}
		h := history(t, m, s)
		want := []release.Status{release.StatusSuperseded, release.StatusFailed, release.StatusDeployed}
		if !slices.Equal(statuses(h), want) {
			t.Fatalf("revisions %v, want %v", statuses(h), want)
		}
	})

	t.Run("busy", func(t *testing.T) {
		t.Parallel()
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		m, _ := newManager(t, Config{Now: func() time.Time { return time.Unix(0, now.Load()) }})
		s := spec("kc-stuck-busy", "busy")
		if err := m.Ensure(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })
		forgePending(t, m, s, release.StatusPendingUpgrade, time.Now().Add(-10*time.Second))
		before := history(t, m, s)
		s.Version = "v1.37.3"
		if err := m.Ensure(ctx, s); !errors.Is(err, ErrBusy) {
			t.Fatalf("Ensure during a young pending-upgrade: %v, want ErrBusy", err)
		}
		after := history(t, m, s)
		if !slices.Equal(statuses(after), statuses(before)) || len(after) != 2 {
			t.Fatalf("revisions %v after ErrBusy, want %v as before", statuses(after), statuses(before))
		}
		if after[1].Info.Description != "forged by the test" {
			t.Errorf("the pending revision was rewritten: %q", after[1].Info.Description)
		}

		now.Add(int64(defaultPendingGrace))
		if err := m.Ensure(ctx, s); err != nil {
			t.Fatalf("Ensure once the grace has passed: %v", err)
		}
		h := history(t, m, s)
		want := []release.Status{release.StatusSuperseded, release.StatusFailed, release.StatusDeployed}
		if !slices.Equal(statuses(h), want) {
			t.Fatalf("revisions %v, want %v", statuses(h), want)
		}
		if v := h[2].Config["version"]; v != "v1.37.3" {
			t.Errorf("deployed revision has version %v, want v1.37.3", v)
		}
	})

	t.Run("stale install", func(t *testing.T) {
		t.Parallel()
		m, client := newManager(t, Config{})
		s := spec("kc-stuck-install", "fresh")
		if err := m.Ensure(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })
		svc, err := client.CoreV1().Services(s.Namespace).Get(ctx, "fresh-apiserver", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The install's only revision, left pending-install by a crash.
		cfg, err := m.helm(s.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := cfg.Releases.Last(s.Cluster)
		if err != nil {
			t.Fatal(err)
		}
		rel.Info.Status, rel.Info.LastDeployed = release.StatusPendingInstall, helmtime.Time{Time: time.Now().Add(-time.Hour)}
		if err := cfg.Releases.Update(rel); err != nil {
			t.Fatal(err)
		}
		if err := m.Ensure(ctx, s); err != nil {
			t.Fatalf("Ensure over a stale pending-install: %v", err)
		}
		h := history(t, m, s)
		want := []release.Status{release.StatusFailed, release.StatusDeployed}
		if !slices.Equal(statuses(h), want) {
			t.Fatalf("revisions %v, want %v", statuses(h), want)
		}
		if d := h[1].Info.Description; d != "Install complete" {
			t.Errorf("revision 2: %q, want an install over the failed one", d)
		}
		after, err := client.CoreV1().Services(s.Namespace).Get(ctx, "fresh-apiserver", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.UID != svc.UID {
			t.Error("the API server's Service was recreated, not adopted")
		}
	})
}

// TestNewRefusesShortPendingGrace: a grace an operation of the Manager
// can outlast is ErrInvalid.
func TestNewRefusesShortPendingGrace(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{REST: kube.RESTConfig(), PendingGrace: helmTimeout}); !errors.Is(err, ErrInvalid) {
		t.Errorf("PendingGrace %s: %v, want ErrInvalid", helmTimeout, err)
	}
}
