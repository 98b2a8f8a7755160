// Command podimage is the one program of the images the kube node harness
// (pkg/dev/kubenode) builds, since no registry is reachable to pull them
// from: run as `podimage pause` it is the pause image's process, which only
// holds a pod's namespaces until it is told to stop; run as
// `podimage serve` it is the test image's web server, answering every
// request on $PORT (default 8080) with "podimage <hostname>", except
// /fetch?url=U: it GETs U from inside the pod and answers with the status
// and body it got (https verified against the PEM certificates of
// $FETCH_CA when set), so a test sees what a pod reaches. Both end at
// SIGTERM or SIGINT: a container's first process gets no default action for
// them, and a pod that ignored them would hold its deletion up for its
// whole grace period.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: podimage pause|serve")
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	switch os.Args[1] {
	case "pause":
	case "serve":
		go func() {
			if err := serve(); err != nil {
				fmt.Fprintln(os.Stderr, "podimage:", err)
				os.Exit(1)
			}
		}()
	default:
		fmt.Fprintf(os.Stderr, "podimage: unknown mode %q (pause or serve)\n", os.Args[1])
		os.Exit(2)
	}
	<-sigs
}

func serve() error {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	if ca := os.Getenv("FETCH_CA"); ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return fmt.Errorf("serve: $FETCH_CA holds no PEM certificate")
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "podimage %s\n", host)
	})
	http.HandleFunc("/fetch", func(w http.ResponseWriter, r *http.Request) {
		resp, err := client.Get(r.URL.Query().Get("url"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, "%d\n%s", resp.StatusCode, body)
	})
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
