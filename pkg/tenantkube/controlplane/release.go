package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
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

// values are the chart values of s: the Spec's, under Config.Values.
func (m *Manager) values(s Spec) map[string]any {
	// The API servers serve at the endpoint's port (so the address they
	// advertise in the tenant's kubernetes Service, the endpoint, is theirs),
	// and so does their Service.
	port := 6443
	if _, ps, err := net.SplitHostPort(s.Endpoint); err == nil {
		if p, err := strconv.Atoi(ps); err == nil {
			port = p
		}
	}
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
	}
	if m.cfg.Values == nil {
		return vals
	}
	extra := maps.Clone(m.cfg.Values(s))
	if extra == nil {
		return vals
	}
	return chartutil.CoalesceTables(extra, vals)
}

// ensureRelease installs the release of s (named after the cluster) or
// upgrades it.
func (m *Manager) ensureRelease(ctx context.Context, s Spec) error {
	cfg, err := m.helm(s.Namespace)
	if err != nil {
		return err
	}
	vals := m.values(s)
	_, err = action.NewHistory(cfg).Run(s.Cluster)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		inst := action.NewInstall(cfg)
		inst.ReleaseName, inst.Namespace = s.Cluster, s.Namespace
		_, err = inst.RunWithContext(ctx, m.cfg.Chart, vals)
		return err
	}
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.MaxHistory = s.Namespace, 10
	_, err = up.RunWithContext(ctx, s.Cluster, m.cfg.Chart, vals)
	return err
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
