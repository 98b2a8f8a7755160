// Package ociimage builds flexplane's container images without Docker or
// a daemon: files from the build machine (the statically linked binary,
// the built portal, a CA bundle) become one image layer on an empty base,
// written as an image tarball that `docker load`, `podman load`,
// `ctr images import` and `kind load image-archive` read. The build is
// reproducible: every timestamp is SOURCE_DATE_EPOCH's (Config.Created),
// owners and modes are fixed, entries are sorted, so the same input files
// give the same image digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OrchestratorRef is the reference `make image` tags the orchestrator's
// image with; the flexplane chart's default image is the same (a test of
// the charts checks it).
const OrchestratorRef = "ghcr.io/flexplane/orchestrator:0.1.0"

// FlexgatewayRef is the reference `make image-flexgateway` tags
// flexgateway's image with; the flexgateway chart's default image is the
// same (a test of the charts checks it).
const FlexgatewayRef = "ghcr.io/flexplane/flexgateway:0.1.0"

// NonRootUID is the user (and group) the images run as.
const NonRootUID = 65532

// File is one file or directory tree of an image.
type File struct {
	// Source is a file or directory on the build machine; a directory is
	// copied with everything under it.
	Source string
	// Target is the absolute path in the image.
	Target string
	// Mode is the file's mode (a directory's files keep their execute
	// bit, 0755 or 0644). Default 0644.
	Mode fs.FileMode
}

// Config describes an image.
type Config struct {
	// Files are the image's content besides the directories and the
	// /etc/passwd and /etc/group of the non-root user the chart runs it
	// as.
	Files []File
	// Entrypoint and Cmd are the image's; Env and ExposedPorts
	// ("8080/tcp") too; Labels are its OCI annotations and labels.
	Entrypoint, Cmd, Env []string
	ExposedPorts         []string
	Labels               map[string]string
	// Created is every timestamp of the image. Default the Unix epoch;
	// `make image` passes SOURCE_DATE_EPOCH when set.
	Created time.Time
}

// Orchestrator is the orchestrator's image (`make image`): binary
// (cmd/orchestrator, statically linked for linux) as /usr/bin/orchestrator,
// its entrypoint with serve as the default command, the built portal
// directory as /usr/share/flexplane/portal and caBundle (the CA
// certificates it trusts: the OIDC issuer's, the OTLP collector's) as
// /etc/ssl/certs/ca-certificates.crt, on the empty base, with every
// timestamp created.
func Orchestrator(binary, portal, caBundle string, created time.Time) Config {
	return Config{
		Files: []File{
			{Source: binary, Target: "/usr/bin/orchestrator", Mode: 0o755},
			{Source: portal, Target: "/usr/share/flexplane/portal"},
			{Source: caBundle, Target: "/etc/ssl/certs/ca-certificates.crt"},
		},
		Entrypoint:   []string{"/usr/bin/orchestrator"},
		Cmd:          []string{"serve"},
		Env:          []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "FLEXPLANE_DATA_DIR=/var/lib/flexplane"},
		ExposedPorts: []string{"8080/tcp", "3478/udp"},
		Labels: map[string]string{
			"org.opencontainers.image.title":  "flexplane orchestrator",
			"org.opencontainers.image.source": "https://github.com/flexplane/flexplane",
		},
		Created: created,
	}
}

// Flexgateway is flexgateway's image (`make image-flexgateway`): binary
// (cmd/flexgateway, statically linked for linux) alone on the empty base
// as /usr/bin/flexgateway, its entrypoint, with every timestamp created.
func Flexgateway(binary string, created time.Time) Config {
	return Config{
		Files:        []File{{Source: binary, Target: "/usr/bin/flexgateway", Mode: 0o755}},
		Entrypoint:   []string{"/usr/bin/flexgateway"},
		Env:          []string{"PATH=/usr/bin:/bin", "FLEXGATEWAY_DATA_DIR=/var/lib/flexgateway", "XDG_DATA_HOME=/var/lib/flexgateway", "XDG_CONFIG_HOME=/var/lib/flexgateway"},
		ExposedPorts: []string{"9443/tcp"},
		Labels: map[string]string{
			"org.opencontainers.image.title":  "flexplane flexgateway",
			"org.opencontainers.image.source": "https://github.com/flexplane/flexplane",
		},
		Created: created,
	}
}

// Build builds the image (linux/amd64 of the build machine's GOARCH).
func Build(cfg Config, arch string) (v1.Image, error) {
	layer, err := buildLayer(cfg)
	if err != nil {
		return nil, fmt.Errorf("ociimage: build: %w", err)
	}
	created := v1.Time{Time: cfg.Created.UTC()}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:     layer,
		MediaType: types.DockerLayer,
		History:   v1.History{Created: created, CreatedBy: "flexplane ociimage", Comment: "files"},
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: build: %w", err)
	}
	ports := map[string]struct{}{}
	for _, p := range cfg.ExposedPorts {
		ports[p] = struct{}{}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: build: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = arch, "linux", created
	cf.Config = v1.Config{
		Entrypoint:   cfg.Entrypoint,
		Cmd:          cfg.Cmd,
		Env:          cfg.Env,
		ExposedPorts: ports,
		Labels:       cfg.Labels,
		User:         fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		WorkingDir:   "/",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("ociimage: build: %w", err)
	}
	// Docker's media types: a Docker image tarball (what docker load, kind
	// and ctr import read) carries no manifest, and a reader rebuilds it
	// with these, so the digest it computes is the one built here.
	img = mutate.MediaType(img, types.DockerManifestSchema2)
	img = mutate.ConfigMediaType(img, types.DockerConfigJSON)
	return img, nil
}

// WriteTarball writes img tagged ref to path (atomically).
func WriteTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("ociimage: write: %w", err)
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ociimage: write: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ociimage: write: %w", err)
	}
	return nil
}

// entry is one tar entry of the layer.
type entry struct {
	target string
	mode   fs.FileMode
	dir    bool
	source string // a file to copy; "" with data
	data   []byte
}

func buildLayer(cfg Config) (v1.Layer, error) {
	entries := map[string]entry{}
	add := func(e entry) {
		for d := path.Dir(e.target); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = entry{target: d, mode: 0o755, dir: true}
			}
		}
		entries[e.target] = e
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRootUID, NonRootUID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRootUID)
	add(entry{target: "/etc/passwd", mode: 0o644, data: []byte(passwd)})
	add(entry{target: "/etc/group", mode: 0o644, data: []byte(group)})
	add(entry{target: "/tmp", mode: 0o1777 | fs.ModeSticky, dir: true})
	add(entry{target: "/home/nonroot", mode: 0o755, dir: true})
	for _, f := range cfg.Files {
		if !path.IsAbs(f.Target) || path.Clean(f.Target) != f.Target {
			return nil, fmt.Errorf("target %q is not a clean absolute path", f.Target)
		}
		st, err := os.Stat(f.Source)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			mode := f.Mode
			if mode == 0 {
				mode = 0o644
			}
			add(entry{target: f.Target, mode: mode, source: f.Source})
			continue
		}
		err = filepath.WalkDir(f.Source, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(f.Source, p)
			if err != nil {
				return err
			}
			target := path.Join(f.Target, filepath.ToSlash(rel))
			switch {
			case d.IsDir():
				add(entry{target: target, mode: 0o755, dir: true})
			case d.Type().IsRegular():
				info, err := d.Info()
				if err != nil {
					return err
				}
				mode := fs.FileMode(0o644)
				if info.Mode()&0o111 != 0 {
					mode = 0o755
				}
				add(entry{target: target, mode: mode, source: p})
			default:
				return fmt.Errorf("%s: only files and directories can go into an image", p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, entries, cfg.Created.UTC()); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.DockerLayer))
}

func writeTar(w io.Writer, entries map[string]entry, mtime time.Time) error {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		e := entries[n]
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(e.target, "/"),
			Mode:    int64(e.mode.Perm()),
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		if e.dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		data := e.data
		if e.source != "" {
			var err error
			if data, err = os.ReadFile(e.source); err != nil {
				return err
			}
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return errors.Join(errors.New("close tar"), err)
	}
	return nil
}
