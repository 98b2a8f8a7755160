// Package httpsprobe is the images' own health check, for pods that
// check a service from inside the cluster (the charts' `helm test`
// hooks): GET an https URL, the server's certificate verified against a
// CA file for a name, and succeed on 200 only (or the status asked for,
// and over plain HTTP for a Service that serves no TLS inside the cluster
// when asked to). The images have no shell
// or curl, so their binaries carry it as a subcommand (`flexgateway
// probe`, `orchestrator probe`).
package httpsprobe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Main parses args as
//
//	[-ca-file FILE] [-server-name NAME] [-timeout 5s] [-status 200] [-plain-http] URL
//
// and GETs URL (https only) over TLS verified against -ca-file (default
// the system's roots) for -server-name (default the URL's host); with
// -plain-http the URL is http (a Service inside the cluster that serves
// no TLS, as the orchestrator's behind its Ingress) and no TLS flag may be
// given. It returns nil when the answer's status was -status, an error
// naming the reason otherwise; name prefixes its messages and names its
// flag set.
func Main(ctx context.Context, name string, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	caFile := fs.String("ca-file", "", "PEM file of the CA the server's certificate must chain to (default the system's roots)")
	serverName := fs.String("server-name", "", "the name the server's certificate must carry (default the URL's host)")
	timeout := fs.Duration("timeout", 5*time.Second, "the probe's deadline")
	status := fs.Int("status", http.StatusOK, "the status the answer must have")
	plain := fs.Bool("plain-http", false, "the URL is http:// (a Service that serves no TLS); no TLS flag applies")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%s: want one URL", name)
	}
	if *status < 100 || *status > 599 {
		return fmt.Errorf("%s: -status %d is no HTTP status", name, *status)
	}
	scheme := "https"
	if *plain {
		scheme = "http"
		if *caFile != "" || *serverName != "" {
			return fmt.Errorf("%s: -ca-file and -server-name are for https, not -plain-http", name)
		}
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Scheme != scheme || u.Host == "" {
		return fmt.Errorf("%s: %q is not an %s URL", name, fs.Arg(0), scheme)
	}
	tlsCfg := &tls.Config{ServerName: *serverName, MinVersion: tls.VersionTLS12}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		tlsCfg.RootCAs = x509.NewCertPool()
		if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificate in %s", name, *caFile)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != *status {
		return fmt.Errorf("%s: %s answered %s: %s", name, u, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stderr, "%s: %s %s\n", u, resp.Status, strings.TrimSpace(string(body)))
	return nil
}
