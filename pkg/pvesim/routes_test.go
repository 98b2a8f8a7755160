package pvesim

import (
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
)

// TestRoutesAreSchemaEndpoints checks that every handler serves an endpoint of
// Proxmox's schema: a route the schema lacks would never be reached.
func TestRoutesAreSchemaEndpoints(t *testing.T) {
	t.Parallel()
	s, err := pveschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, ep := range s.Endpoints() {
		have[ep.Method+" "+ep.Path] = true
	}
	c := &Cluster{}
	for key := range c.routeTable() {
		if !have[key] {
			method, path, _ := strings.Cut(key, " ")
			t.Errorf("route %s %s is not in the schema", method, path)
		}
	}
}
