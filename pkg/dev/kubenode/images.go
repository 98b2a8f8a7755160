package kubenode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/flexplane/flexplane/pkg/dev/ociimage"
)

// PauseImage is the reference of the pause image the harness builds and
// the runtime's sandbox image: every pod's first container, holding its
// namespaces.
const PauseImage = "flexplane.test/kubenode/pause:1"

// TestImage is the reference of the small image the harness builds for
// tests' pods: a web server answering every request on port TestImagePort
// (or $PORT) with "podimage <hostname>". Pods use it with
// imagePullPolicy Never: no registry is reachable.
const TestImage = "flexplane.test/kubenode/podimage:1"

// TestImagePort is the port TestImage's server listens on by default.
const TestImagePort = 8080

// podimagePkg is the program both images run (as `podimage pause` and
// `podimage serve`).
const podimagePkg = "github.com/flexplane/flexplane/pkg/dev/kubenode/internal/podimage"

// BuildImages builds the pause image and the test image with the project's
// OCI image tooling (pkg/dev/ociimage) into dir and returns the paths of
// their image tarballs (pause first), ready for `ctr images import`.
func BuildImages(ctx context.Context, dir string) ([]string, error) {
	bin := filepath.Join(dir, "podimage")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, podimagePkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("kubenode: build images: go build %s: %w\n%s", podimagePkg, err, out)
	}
	images := []struct {
		ref, mode, file string
		ports           []string
	}{
		{PauseImage, "pause", "pause.tar", nil},
		{TestImage, "serve", "podimage.tar", []string{fmt.Sprintf("%d/tcp", TestImagePort)}},
	}
	var paths []string
	for _, im := range images {
		img, err := ociimage.Build(ociimage.Config{
			Files:        []ociimage.File{{Source: bin, Target: "/podimage", Mode: 0o755}},
			Entrypoint:   []string{"/podimage", im.mode},
			ExposedPorts: im.ports,
		}, runtime.GOARCH)
		if err != nil {
			return nil, fmt.Errorf("kubenode: build images: %w", err)
		}
		p := filepath.Join(dir, im.file)
		if err := ociimage.WriteTarball(p, im.ref, img); err != nil {
			return nil, fmt.Errorf("kubenode: build images: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
