// Command build is `make image`'s program: it packs the orchestrator's
// binary, the built portal and the build machine's CA bundle into the
// orchestrator's image (see package ociimage) and writes it as an image
// tarball, printing its digest.
//
//	go run ./pkg/dev/ociimage/internal/build -binary bin/linux/orchestrator \
//		-portal portal/.output/public -out bin/orchestrator-image.tar
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	component := fs.String("component", "orchestrator", "the image: orchestrator or flexgateway")
	binary := fs.String("binary", "", "the component's binary, statically linked for linux (required)")
	portal := fs.String("portal", "portal/.output/public", "the built portal")
	caBundle := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA certificates the orchestrator trusts (the OIDC issuer's, the OTLP collector's)")
	out := fs.String("out", "bin/orchestrator-image.tar", "the image tarball to write")
	ref := fs.String("ref", "", "the reference the tarball tags the image with (default: the component's)")
	arch := fs.String("arch", runtime.GOARCH, "the binary's architecture")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" {
		return fmt.Errorf("-binary is required")
	}
	created := time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		created = time.Unix(n, 0)
	}
	cfg := ociimage.Orchestrator(*binary, *portal, *caBundle, created)
	switch *component {
	case "orchestrator":
		*ref = cmp.Or(*ref, ociimage.OrchestratorRef)
	case "flexgateway":
		*ref = cmp.Or(*ref, ociimage.FlexgatewayRef)
		cfg = ociimage.Flexgateway(*binary, created)
	default:
		return fmt.Errorf("-component %q: want orchestrator or flexgateway", *component)
	}
	img, err := ociimage.Build(cfg, *arch)
	if err != nil {
		return err
	}
	if err := ociimage.WriteTarball(*out, *ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", *out, *ref, digest)
	return nil
}
