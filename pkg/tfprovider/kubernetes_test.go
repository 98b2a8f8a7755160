package tfprovider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

// TestClusterReadyWaitsForProvisioned: a cluster is created (or upgraded)
// only once its control plane is ready at the asked version and Cluster
// API calls it PROVISIONED, so that the state an apply records is what
// the next read finds.
func TestClusterReadyWaitsForProvisioned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ready          bool
		running, phase string
		want           bool
	}{
		{true, "v1.37.2", "PROVISIONED", true},
		{true, "v1.37.2", "PENDING", false},
		{true, "v1.37.2", "PROVISIONING", false},
		{true, "v1.36.0", "PROVISIONED", false},
		{false, "v1.37.2", "PROVISIONED", false},
	} {
		m := kubernetesClusterModel{ControlPlaneReady: types.BoolValue(c.ready), Version: types.StringValue("v1.37.2"),
			RunningVersion: types.StringValue(c.running), Phase: types.StringValue(c.phase)}
		if got := clusterReady(&m); got != c.want {
			t.Errorf("ready %v, running %s, phase %s: clusterReady %v, want %v", c.ready, c.running, c.phase, got, c.want)
		}
	}
}
