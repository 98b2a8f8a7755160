package charts

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/flexplane/flexplane/pkg/dev/kubenode"
	"github.com/flexplane/flexplane/pkg/dev/kubetest"
)

// What the tests of package charts_test (those importing packages that
// import this one, as pkg/tenantkube/controlplane) use of these.

// Cluster is a real API server with Helm's and client-go's clients.
type Cluster struct{ c *cluster }

func NewCluster(t *testing.T) *Cluster { return &Cluster{newCluster(t)} }

func (c *Cluster) Install(name, ns, chartName string, vals map[string]any) {
	c.c.install(name, ns, chartName, vals)
}

func (c *Cluster) Upgrade(name, ns, chartName string, vals map[string]any) {
	c.c.upgrade(name, ns, chartName, vals)
}

func (c *Cluster) Kube() *kubetest.Server       { return c.c.kube }
func (c *Cluster) Client() kubernetes.Interface { return c.c.client }

func ReadValues(t *testing.T, file string) map[string]any { return readValues(t, file) }

// RunningCluster is runningCluster: an API server with a scheduler and
// controllers, and a real node with images built by the builders.
func RunningCluster(t *testing.T, images ...func(ctx context.Context, dir string) ([]string, error)) (*Cluster, *kubenode.Node) {
	c, n := runningCluster(t, images...)
	return &Cluster{c}, n
}

func (c *Cluster) PodsReady(ns, selector string, want int, timeout time.Duration) []corev1.Pod {
	return c.c.podsReady(ns, selector, want, timeout)
}

// For is c for test t (its failures and Helm's logs go to t).
func (c *Cluster) For(t *testing.T) *Cluster { return &Cluster{clusterOn(t, c.c.kube)} }

// FlexgatewayImage builds flexgateway's image (buildFlexgatewayImage).
func FlexgatewayImage(ctx context.Context, dir string) ([]string, error) {
	return buildFlexgatewayImage(ctx, dir)
}

// RunFlexgateway is runFlexgateway: flexgateway's install, helm test,
// rolling upgrade and uninstall on c's node.
func RunFlexgateway(t *testing.T, c *Cluster, nodeName string) { runFlexgateway(t, c.c.kube, nodeName) }

func (c *Cluster) HelmTest(name, ns string) []corev1.Pod { return c.c.helmTest(name, ns) }
