// Command flexrelease makes the signing key of agent releases and signs
// releases with it (`make release` runs it). The private key stays where
// releases are built; agents and the orchestrator get the public key only.
//
//	flexrelease keygen -key FILE -pub FILE
//	flexrelease sign -key FILE [-key FILE] -version V [-platform OS/ARCH] [-min-version V] [-valid DURATION] BINARY
//	flexrelease floor -key FILE [-key FILE] -min-version V [-reason TEXT] -out FILE
//
// sign writes BINARY.manifest.json and BINARY.manifest.json.minisig, the
// two files `orchestrator releases add BINARY MANIFEST SIG` publishes;
// floor writes FILE and FILE.minisig, which `orchestrator releases floor`
// publishes. With -key given twice (while keys rotate) the signature file
// holds a signature by each key. A key encrypted with a password
// (minisign -G) is decrypted with $FLEXPLANE_RELEASE_KEY_PASSWORD.
package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"aead.dev/minisign"

	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

const usage = `usage:
  flexrelease keygen -key FILE -pub FILE
  flexrelease sign -key FILE [-key FILE] -version V [-platform OS/ARCH] [-min-version V] [-valid DURATION] BINARY
  flexrelease floor -key FILE [-key FILE] -min-version V [-reason TEXT] -out FILE`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "keygen":
		return keygen(args[1:], stdout)
	case "sign":
		return sign(args[1:], stdout)
	case "floor":
		return floor(args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func keygen(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	keyPath := fs.String("key", "", "private key file to create")
	pubPath := fs.String("pub", "", "public key file to create")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keyPath == "" || *pubPath == "" {
		return errors.New("keygen: -key and -pub are required\n" + usage)
	}
	if _, err := os.Stat(*keyPath); err == nil {
		return fmt.Errorf("keygen: %s exists; not replacing a signing key", *keyPath)
	}
	pub, priv, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	privText, err := priv.MarshalText()
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	pubText, err := pub.MarshalText()
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if err := atomicfile.WriteFile(*keyPath, append(privText, '\n'), 0o600); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if err := atomicfile.WriteFile(*pubPath, append(pubText, '\n'), 0o644); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s (keep it offline) and %s, key id %s (configure it on the orchestrator and the agents)\n", *keyPath, *pubPath, release.KeyID(pub.ID()))
	return nil
}

func sign(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sign", flag.ContinueOnError)
	keyPaths := keyFlag(fs)
	version := fs.String("version", "", "the binary's version, v1.2.3 (it must print it for -version)")
	platform := fs.String("platform", release.Platform(), "the binary's GOOS/GOARCH")
	minVersion := fs.String("min-version", "", "the oldest running version it may replace (default any)")
	valid := fs.Duration("valid", release.DefaultValidity, "how long agents accept (stage and start) the release")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(*keyPaths) == 0 || fs.NArg() != 1 {
		return errors.New("sign: -key and one BINARY are required\n" + usage)
	}
	keys, err := readKeys(*keyPaths)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	bin := fs.Arg(0)
	size, sum, err := hashFile(bin)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	m := release.Manifest{Version: *version, Platform: *platform, Size: size, SHA256: sum, MinVersion: *minVersion,
		NotAfter: time.Now().Add(*valid).UTC().Truncate(time.Second)}
	raw, err := m.Encode()
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	if err := atomicfile.WriteFile(bin+".manifest.json", raw, 0o644); err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	if err := atomicfile.WriteFile(bin+".manifest.json.minisig", release.SignAll(keys, raw), 0o644); err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	fmt.Fprintf(stdout, "signed %s %s (%d bytes, sha256 %s, valid until %s): %s.manifest.json and .minisig\n",
		m.Version, m.Platform, m.Size, m.SHA256, m.NotAfter.Format(time.RFC3339), bin)
	return nil
}

// keyFlag adds the repeatable -key flag to fs.
func keyFlag(fs *flag.FlagSet) *[]string {
	var paths []string
	fs.Func("key", "private key file; repeat it to sign with several keys", func(v string) error {
		paths = append(paths, v)
		return nil
	})
	return &paths
}

func readKeys(paths []string) ([]minisign.PrivateKey, error) {
	var keys []minisign.PrivateKey
	for _, p := range paths {
		k, err := readKey(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// floor signs a floor: versions below -min-version are refused.
func floor(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	keyPaths := keyFlag(fs)
	minVersion := fs.String("min-version", "", "the lowest version agents may stage or start")
	reason := fs.String("reason", "", "why the versions below are revoked (for the record)")
	out := fs.String("out", "", "floor file to write (and FILE.minisig)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(*keyPaths) == 0 || *out == "" || fs.NArg() != 0 {
		return errors.New("floor: -key, -min-version and -out are required\n" + usage)
	}
	keys, err := readKeys(*keyPaths)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	f := release.Floor{Kind: release.FloorKind, MinVersion: *minVersion, IssuedAt: time.Now().UTC().Truncate(time.Second), Reason: *reason}
	raw, err := f.Encode()
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	if err := atomicfile.WriteFile(*out, raw, 0o644); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	if err := atomicfile.WriteFile(*out+".minisig", release.SignFloor(keys, raw), 0o644); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	fmt.Fprintf(stdout, "signed a floor: versions below %s are refused: %s and .minisig\n", f.MinVersion, *out)
	return nil
}

func readKey(path string) (minisign.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return minisign.PrivateKey{}, err
	}
	if minisign.IsEncrypted(b) {
		return minisign.DecryptKey(os.Getenv("FLEXPLANE_RELEASE_KEY_PASSWORD"), b)
	}
	var key minisign.PrivateKey
	if err := key.UnmarshalText(b); err != nil {
		return minisign.PrivateKey{}, err
	}
	return key, nil
}

func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
