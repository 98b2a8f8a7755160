package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flexplane/flexplane/charts"
)

func embeddedChart() (*chart.Chart, error) { return charts.FlexKube() }

// restGetter hands Helm the Manager's client configuration, in one
// namespace.
type restGetter struct {
	cfg *rest.Config
	ns  string
}

func (g restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(g.cfg)
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(dc), nil
}

func (g restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(),
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.ns}})
}

// helm returns a Helm action configuration for namespace ns, its release
// records kept in Secrets there.
func (m *Manager) helm(ns string) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	logf := func(format string, v ...any) { m.log.Debug(fmt.Sprintf("helm: "+format, v...), "namespace", ns) }
	if err := cfg.Init(restGetter{cfg: m.cfg.REST, ns: ns}, ns, "secret", logf); err != nil {
		return nil, err
	}
	return cfg, nil
}

// values are the chart values of s: the Spec's, under Config.Values, and
// pkiRevision (the digest of the leaf certificates, in the pods'
// annotations).
func (m *Manager) values(s Spec, pkiRevision string) map[string]any {
	// The API servers serve at the endpoint's port (so the address they
	// advertise in the tenant's kubernetes Service, the endpoint, is theirs),
	// and so does their Service.
	port := endpointPort(s.Endpoint)
	vals := map[string]any{
		"cluster":     s.Cluster,
		"version":     s.Version,
		"serviceCIDR": s.ServiceCIDR,
		"podCIDR":     s.PodCIDR,
		"endpoint":    s.Endpoint,
		"apiServer": map[string]any{
			"port":    port,
			"service": map[string]any{"type": m.cfg.ServiceType, "port": port},
		},
		"egressProxy": map[string]any{"allowedCIDRs": networks(s.Networks)},
	}
	if m.cfg.Values != nil {
		if extra := maps.Clone(m.cfg.Values(s)); extra != nil {
			vals = chartutil.CoalesceTables(extra, vals)
		}
	}
	vals["pki"] = map[string]any{"revision": pkiRevision}
	return vals
}

// networks is s.Networks as chart values (a list, never null).
func networks(ns []string) []any {
	out := make([]any, 0, len(ns))
	for _, n := range ns {
		out = append(out, n)
	}
	return out
}

// maxHistory is how many revisions of a release Helm keeps.
const maxHistory = 10

// helmTimeout bounds one install or upgrade of a release (its context is
// cancelled then, and Helm marks the revision failed), so a revision
// pending for longer than Config.PendingGrace is one whose operation died.
const helmTimeout = 2 * time.Minute

// defaultPendingGrace is Config.PendingGrace's default.
const defaultPendingGrace = 5 * time.Minute

// ensureRelease installs the release of s (named after the cluster) or
// upgrades it, unless its last revision is deployed with the chart and
// the values it would get now. A last revision left pending longer than
// Config.PendingGrace is marked failed first (younger: ErrBusy); without
// any deployed revision the release is then installed anew over the
// failed one.
func (m *Manager) ensureRelease(ctx context.Context, s Spec, pkiRevision string) error {
	cfg, err := m.helm(s.Namespace)
	if err != nil {
		return err
	}
	cfg.Releases.MaxHistory = maxHistory
	vals := m.values(s, pkiRevision)
	hist, err := cfg.Releases.History(s.Cluster)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("history: %w", err)
	}
	if len(hist) > 0 {
		releaseutil.Reverse(hist, releaseutil.SortByRevision)
		last := hist[0]
		if last.Info.Status.IsPending() {
			if err := m.failPending(cfg, last); err != nil {
				return err
			}
		}
		if m.unchanged(last, vals) {
			m.log.Debug("release unchanged", "namespace", s.Namespace, "release", s.Cluster, "revision", last.Version)
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, helmTimeout)
	defer cancel()
	deployed := slices.ContainsFunc(hist, func(r *release.Release) bool { return r.Info.Status == release.StatusDeployed })
	if len(hist) == 0 || !deployed && (hist[0].Info.Status == release.StatusFailed || hist[0].Info.Status == release.StatusUninstalled) {
		// Never deployed: a first install, or one over a failed install.
		// Replace keeps the objects the failed one made (they are this
		// release's, so Helm adopts them) where an uninstall would delete
		// them, the Service of the endpoint with its address among them.
		inst := action.NewInstall(cfg)
		inst.ReleaseName, inst.Namespace, inst.Timeout = s.Cluster, s.Namespace, helmTimeout
		inst.Replace = len(hist) > 0
		if _, err := inst.RunWithContext(ctx, m.cfg.Chart, vals); err != nil {
			return fmt.Errorf("install: %w", err)
		}
		return nil
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.MaxHistory, up.Timeout = s.Namespace, maxHistory, helmTimeout
	if _, err := up.RunWithContext(ctx, s.Cluster, m.cfg.Chart, vals); err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	return nil
}

// failPending marks rel, a pending revision, failed when it has been
// pending for longer than Config.PendingGrace: the operation that wrote it
// died, and Helm refuses every other while it is pending. A younger one is
// ErrBusy, and stays as it is.
func (m *Manager) failPending(cfg *action.Configuration, rel *release.Release) error {
	since := rel.Info.LastDeployed.Time
	age := m.cfg.Now().Sub(since)
	if age < m.cfg.PendingGrace {
		return fmt.Errorf("revision %d is %s since %s: %w", rel.Version, rel.Info.Status, since.UTC().Format(time.RFC3339), ErrBusy)
	}
	was := rel.Info.Status
	rel.Info.Status = release.StatusFailed
	rel.Info.Description = fmt.Sprintf("Marked failed by flexplane: %s for %s, longer than %s", was, age.Round(time.Second), m.cfg.PendingGrace)
	if err := cfg.Releases.Update(rel); err != nil {
		return fmt.Errorf("mark revision %d failed: %w", rel.Version, err)
	}
	m.log.Warn("stuck release revision marked failed", "namespace", rel.Namespace, "release", rel.Name,
		"revision", rel.Version, "status", was, "since", since.UTC().Format(time.RFC3339))
	return nil
}

// unchanged tells whether rel is deployed with the Manager's chart (its
// name, version and digest) and vals: an upgrade to them would change
// nothing but write a revision.
func (m *Manager) unchanged(rel *release.Release, vals map[string]any) bool {
	if rel.Info == nil || rel.Info.Status != release.StatusDeployed || rel.Chart == nil || rel.Chart.Metadata == nil {
		return false
	}
	want := m.cfg.Chart.Metadata
	if want == nil || rel.Chart.Metadata.Name != want.Name || rel.Chart.Metadata.Version != want.Version {
		return false
	}
	if d, err := chartDigest(rel.Chart); err != nil || d != m.chartDigest {
		return false
	}
	// Compared as JSON, as Helm stores them: numbers read back as float64.
	got, err := json.Marshal(rel.Config)
	if err != nil {
		return false
	}
	now, err := json.Marshal(vals)
	return err == nil && bytes.Equal(got, now)
}

// chartDigest is a SHA-256 digest of what a chart renders from: its
// metadata, templates, default values, schema and other files, and its
// subcharts'. A release's chart, as Helm stores it, has the digest of the
// chart it was installed from unless that had subcharts (Helm does not
// store those), so such a chart is always upgraded to.
func chartDigest(c *chart.Chart) (string, error) {
	h := sha256.New()
	field := func(name string, data []byte) {
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	var add func(c *chart.Chart) error
	add = func(c *chart.Chart) error {
		meta, err := json.Marshal(c.Metadata)
		if err != nil {
			return err
		}
		vals, err := json.Marshal(c.Values)
		if err != nil {
			return err
		}
		field("metadata", meta)
		field("values", vals)
		field("schema", c.Schema)
		for _, f := range sortedFiles(c.Templates) {
			field("template/"+f.Name, f.Data)
		}
		for _, f := range sortedFiles(c.Files) {
			field("file/"+f.Name, f.Data)
		}
		for _, d := range c.Dependencies() {
			field("dependency", []byte(d.Name()))
			if err := add(d); err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(c); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sortedFiles(fs []*chart.File) []*chart.File {
	return slices.SortedFunc(slices.Values(fs), func(a, b *chart.File) int { return strings.Compare(a.Name, b.Name) })
}

// uninstall removes the release of cluster; a release that is not there
// is no error.
func (m *Manager) uninstall(ns, cluster string) error {
	cfg, err := m.helm(ns)
	if err != nil {
		return err
	}
	_, err = action.NewUninstall(cfg).Run(cluster)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil
	}
	return err
}
