package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/flexplane/flexplane/pkg/release"
)

// releaseFlags adds the release store's flags to fs.
func releaseFlags(fs *flag.FlagSet) (dir, keyFile *string) {
	dir = fs.String("release-dir", env("FLEXPLANE_RELEASE_DIR", ""), "agent release store, shared by the replicas; default DATA_DIR/releases (env FLEXPLANE_RELEASE_DIR)")
	keyFile = fs.String("release-key-file", env("FLEXPLANE_RELEASE_KEY_FILE", ""), "trusted minisign public keys agent releases and floors are signed with: a .pub file, or ID=BASE64KEY lines; empty offers no releases (env FLEXPLANE_RELEASE_KEY_FILE)")
	return dir, keyFile
}

func readReleaseKey(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("-release-key-file: %w", err)
	}
	return string(b), nil
}

// releases runs `orchestrator releases add|floor|list`: they work on the store
// directly (no running orchestrator is needed; every replica sees the
// result at once).
func releases(cmd string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("releases "+cmd, flag.ContinueOnError)
	dataDir := fs.String("data-dir", env("FLEXPLANE_DATA_DIR", "/var/lib/flexplane"), "state directory (env FLEXPLANE_DATA_DIR)")
	dir, keyFile := releaseFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := readReleaseKey(*keyFile)
	if err != nil {
		return err
	}
	if key == "" {
		return errors.New("releases: -release-key-file is required: releases are checked before they are published")
	}
	verifier, err := release.NewVerifier(key)
	if err != nil {
		return err
	}
	store, err := release.OpenStore(cmp.Or(*dir, filepath.Join(*dataDir, "releases")), verifier)
	if err != nil {
		return err
	}
	switch cmd {
	case "add":
		if fs.NArg() != 3 {
			return errors.New("releases add: BINARY MANIFEST SIG are required\n" + usage)
		}
		manifest, err := readSmall(fs.Arg(1))
		if err != nil {
			return err
		}
		sig, err := readSmall(fs.Arg(2))
		if err != nil {
			return err
		}
		p, err := store.Add(fs.Arg(0), manifest, sig)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "published %s %s (%d bytes) in %s\n", p.Manifest.Version, p.Manifest.Platform, p.Manifest.Size, store.Dir())
		return nil
	case "floor":
		if fs.NArg() != 2 {
			return errors.New("releases floor: FLOOR SIG are required\n" + usage)
		}
		raw, err := readSmall(fs.Arg(0))
		if err != nil {
			return err
		}
		sig, err := readSmall(fs.Arg(1))
		if err != nil {
			return err
		}
		f, err := store.AddFloor(raw, sig)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "floor in force: versions below %s are refused (%s)\n", f.Floor.MinVersion, store.Dir())
		return nil
	case "list":
		list, err := store.List()
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tPLATFORM\tSIZE\tSHA256\tNOT AFTER")
		for _, p := range list {
			m := p.Manifest
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", m.Version, m.Platform, m.Size, m.SHA256[:16], m.NotAfter.Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		f, err := store.Floor()
		if err != nil {
			return err
		}
		if f != nil {
			fmt.Fprintf(stdout, "floor: versions below %s are refused\n", f.Floor.MinVersion)
		}
		return nil
	}
	return fmt.Errorf("unknown releases command %q\n%s", cmd, usage)
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, release.MaxManifest+1))
	if err != nil {
		return nil, err
	}
	if len(b) > release.MaxManifest {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a manifest or signature", path, release.MaxManifest)
	}
	return b, nil
}
