package charts

import (
	"embed"
	"fmt"
	"io/fs"
	"path"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// flexkube is the flexkube chart's files, built into the binary so the
// orchestrator installs exactly the chart it was released with.
//
//go:embed all:flexkube
var flexkube embed.FS

// FlexKube loads the flexkube chart (one hosted tenant control plane) from
// the files embedded in the binary.
func FlexKube() (*chart.Chart, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(flexkube, "flexkube", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := flexkube.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := pathRel("flexkube", p)
		files = append(files, &loader.BufferedFile{Name: rel, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("charts: flexkube: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("charts: flexkube: %w", err)
	}
	return c, nil
}

// pathRel is p relative to dir (both slash-separated, p inside dir).
func pathRel(dir, p string) (string, bool) {
	prefix := path.Clean(dir) + "/"
	if len(p) <= len(prefix) || p[:len(prefix)] != prefix {
		return p, false
	}
	return p[len(prefix):], true
}
