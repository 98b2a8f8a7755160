package deptest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

// backendClients are the clients of the systems behind the API that the
// API layer must not import itself: resolvers map input to one call of
// a capability's service and its answer to the schema's types, and the
// services (which may link these) speak to Proxmox and Kubernetes.
// Linking them transitively through a service is expected; importing one
// from a package under graph/ is not.
var backendClients = deptest.Bans{
	"github.com/luthermonson/go-proxmox": "Proxmox is reached by the services (pkg/estate, pkg/compute, pkg/network...), not by resolvers",
	module + "/pkg/proxmox":              "Proxmox's facts are decoded in pkg/proxmox and read through the services, not by resolvers",
	"k8s.io/client-go":                   "Kubernetes is reached by the services (pkg/tenantkube, pkg/catalog...), not by resolvers",
	"k8s.io/api":                         "Kubernetes' types belong to the services that manage them, not to resolvers",
	"k8s.io/apimachinery":                "Kubernetes' types belong to the services that manage them, not to resolvers",
	"sigs.k8s.io/controller-runtime":     "Kubernetes is reached by the services, not by resolvers",
	"sigs.k8s.io/cluster-api":            "Cluster API belongs to pkg/tenantkube, not to resolvers",
}

// TestGraphImportsNoBackendClient: no package under graph/ (the
// resolvers, the generated code, the model, the HTTP handler) imports a
// Proxmox or Kubernetes client directly.
func TestGraphImportsNoBackendClient(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/graph/...")
	cmd.Env = append(os.Environ(), deptest.Platform...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	bans := make([]deptest.Ban, 0, len(backendClients))
	for p, why := range backendClients {
		bans = append(bans, deptest.Ban{Prefix: p, Why: why})
	}
	slices.SortFunc(bans, func(a, b deptest.Ban) int { return strings.Compare(a.Prefix, b.Prefix) })
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		for _, imp := range p.Imports {
			for _, b := range bans {
				if b.Matches(imp) {
					t.Errorf("%s imports %s: %s", p.ImportPath, imp, b.Why)
				}
			}
		}
	}
	if n < 3 {
		t.Fatalf("only %d packages under graph/ listed", n)
	}
}
