// Package kubetest runs a real Kubernetes API server for tests and the dev
// stack: etcd and kube-apiserver, built from the Go modules pinned in
// tools/etcd and tools/kube by `make kube-bin`, as child processes on
// loopback ports chosen at start. There is no kubelet, no scheduler unless
// Config.Scheduler asks for one, and no controller manager unless
// Config.Controllers names controllers for it to run: what the API server itself does (storage, validation, CRDs, RBAC,
// watches, Leases, conditional writes) is real; pkg/dev/kubenode adds a real
// node whose kubelet runs pods.
//
// A package's tests usually share one server through TestMain:
//
//	var kube *kubetest.Server
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, &kube)) }
//
// Binaries that are missing are an error, never a skip: `make test` builds
// them first (make kube-bin).
package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BinEnv names the environment variable holding the directory of the
// kube-apiserver and etcd binaries. The Makefile sets it; without it the
// directory is derived from the pins exactly as the Makefile derives it.
const BinEnv = "FLEXPLANE_KUBE_BIN"

// ServiceCIDR is the range the API server gives Services their ClusterIPs
// from.
const ServiceCIDR = "10.96.0.0/16"

// KubernetesServiceIP is the ClusterIP of the `kubernetes` Service (the
// first of ServiceCIDR).
const KubernetesServiceIP = "10.96.0.1"

// AdminToken is the bearer token of the server's administrator
// (group system:masters).
const AdminToken = "kubetest-admin-token"

// pinFiles are the files whose content keys the binaries' cache directory
// (the Makefile hashes the same files in the same order).
var pinFiles = []string{"tools/kube/go.mod", "tools/kube/go.sum", "tools/kube/cmd/kube/main.go", "tools/kube/build.sh", "tools/etcd/go.mod", "tools/etcd/go.sum", "tools/coredns/go.mod", "tools/coredns/go.sum", "tools/coredns/main.go"}

// BinDir returns the directory that holds (or will hold) the binaries:
// $FLEXPLANE_KUBE_BIN, else <user cache>/flexplane/kube-<hash of the pins>.
func BinDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		return d, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("kubetest: bin dir: %w", err)
	}
	return BinDirOf(root)
}

// BinDirOf is BinDir for the flexplane repository at root instead of the
// one above the working directory.
func BinDirOf(root string) (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		return d, nil
	}
	h := sha256.New()
	for _, f := range pinFiles {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", fmt.Errorf("kubetest: bin dir: %w", err)
		}
		h.Write(data)
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("kubetest: bin dir: %w", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "flexplane", "kube-"+hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// repoRoot finds the directory of flexplane's go.mod above the working
// directory (tests run in their package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/flexplane/flexplane\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the flexplane repository")
		}
		dir = parent
	}
}

// Config configures a Server. The zero value is ready to use.
type Config struct {
	// BinDir holds kube-apiserver and etcd. Default BinDir().
	BinDir string
	// Dir is where the server keeps its data, certificates and logs; it is
	// removed by Close when the server created it. Default a new temporary
	// directory.
	Dir string
	// Tokens are extra bearer tokens: token -> user name (no groups), for
	// tests of RBAC as a non-admin user.
	Tokens map[string]string
	// PodAddress, when set, is an IPv4 address of the test's own network
	// namespace (netns.Address, of a package run by netns.Main) that the
	// API server serves on as well as 127.0.0.1, and advertises: it is the
	// endpoint of the `kubernetes` Service, so the pods of a
	// pkg/dev/kubenode node reach the API server at the Service's
	// ClusterIP (10.96.0.1) through the node's kube-proxy. The server then
	// listens on every address of the namespace, so Start refuses it
	// outside one of the test's own. Default none: loopback only, and the
	// `kubernetes` Service has no endpoints.
	PodAddress string
	// Controllers, when set, are the controllers of kube-controller-manager
	// (its --controllers names) that run beside the API server, e.g.
	// "endpointslice-controller" for the EndpointSlices of Services with a
	// selector. Default none: no controller manager runs.
	Controllers []string
	// ServiceAccounts turns the API server's ServiceAccount admission on:
	// a pod gets its service account's token (a projected volume signed
	// by the server's key) and must name a service account that exists;
	// run it with the "serviceaccount-controller" (each namespace's
	// "default") and "root-ca-certificate-publisher-controller" (the
	// kube-root-ca.crt ConfigMap the volume holds) in Controllers. Default
	// off: pods get no token and need no service account.
	ServiceAccounts bool
	// Scheduler runs kube-scheduler beside the API server (pods of
	// Deployments and StatefulSets need it to get a node). Default none:
	// a test's pods name their node.
	Scheduler bool
	// StartTimeout bounds the start of the processes. Default 90s (the
	// API server takes ~4 s on a quiet machine, much longer on a loaded one).
	StartTimeout time.Duration
}

// Server is a running etcd + kube-apiserver pair (and kube-controller-manager
// when Config.Controllers names controllers).
type Server struct {
	dir     string
	ownDir  bool
	url     string
	caPEM   []byte
	caKey   []byte // caPEM's private key (PEM)
	procs   []proc // etcd first
	logs    []string
	closeMu sync.Mutex
	closed  bool // protected by closeMu
}

// proc is a started child process; exited yields once when it has ended.
type proc struct {
	cmd    *exec.Cmd
	exited chan error
}

// Start starts etcd, then kube-apiserver (then kube-controller-manager with
// Config.Controllers), and returns once each answers its health check. The
// processes die with the calling process (Pdeathsig).
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg.PodAddress != "" {
		if ip := net.ParseIP(cfg.PodAddress); ip == nil || ip.To4() == nil || ip.IsLoopback() || ip.IsUnspecified() {
			return nil, fmt.Errorf("kubetest: PodAddress %q is not a non-loopback IPv4 address", cfg.PodAddress)
		}
		if !netns.Inside() {
			return nil, errors.New("kubetest: PodAddress: the API server would listen on every address of the network namespace: " +
				"run it in one of the test's own (netns.Main in TestMain)")
		}
	}
	for _, c := range cfg.Controllers {
		if c == "" || strings.ContainsAny(c, ", \t\n") {
			return nil, fmt.Errorf("kubetest: Controllers: %q is not the name of a controller of kube-controller-manager", c)
		}
	}
	if cfg.BinDir == "" {
		if cfg.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	bins := []string{"kube-apiserver", "etcd"}
	if len(cfg.Controllers) > 0 {
		bins = append(bins, "kube-controller-manager")
	}
	if cfg.Scheduler {
		bins = append(bins, "kube-scheduler")
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("kubetest: %s is missing in %s: run `make kube-bin` (make test does): %w", b, cfg.BinDir, err)
		}
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 90 * time.Second
	}
	s := &Server{dir: cfg.Dir}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "kubetest-"); err != nil {
			return nil, fmt.Errorf("kubetest: %w", err)
		}
		s.ownDir = true
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	etcdURL, err := s.startEtcd(ctx, cfg.BinDir)
	if err != nil {
		return nil, fmt.Errorf("kubetest: etcd: %w", err)
	}
	if err := s.startAPIServer(ctx, cfg, etcdURL); err != nil {
		return nil, fmt.Errorf("kubetest: kube-apiserver: %w", err)
	}
	if len(cfg.Controllers) > 0 {
		if err := s.startControllerManager(ctx, cfg); err != nil {
			return nil, fmt.Errorf("kubetest: kube-controller-manager: %w", err)
		}
	}
	if cfg.Scheduler {
		if err := s.startScheduler(ctx, cfg); err != nil {
			return nil, fmt.Errorf("kubetest: kube-scheduler: %w", err)
		}
	}
	return s, nil
}

// freePort returns a loopback TCP port that was free a moment ago. A
// process that then fails to bind it is started again on another (start
// retries).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs bin with args, logging to <dir>/<name>.log, and waits for ready
// to succeed; on a process that exits first it tries again with new ports
// (args is called again) up to three times.
func (s *Server) start(ctx context.Context, name, bin string, args func() ([]string, error), ready func(ctx context.Context) error) error {
	logPath := filepath.Join(s.dir, name+".log")
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		a, err := args()
		if err != nil {
			return err
		}
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, a...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return err
		}
		logf.Close()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		rctx, cancel := context.WithCancel(ctx)
		readyErr := make(chan error, 1)
		go func() { readyErr <- ready(rctx) }()
		select {
		case err := <-readyErr:
			cancel()
			if err != nil {
				_ = cmd.Process.Kill()
				<-exited
				return fmt.Errorf("not ready: %w%s", err, tail(logPath))
			}
			s.procs = append(s.procs, proc{cmd: cmd, exited: exited})
			s.logs = append(s.logs, logPath)
			return nil
		case err := <-exited:
			cancel()
			<-readyErr
			lastErr = fmt.Errorf("exited before ready: %v%s", err, tail(logPath))
		}
	}
	return lastErr
}

// tail returns the last lines of a log file for an error message.
func tail(path string) string { return LogTail(path, 15) }

// LogTail returns the last k lines of the log file at path, after a line
// naming it, for an error message (a harness's process that failed).
func LogTail(path string, k int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return "\n" + path + ":\n" + strings.Join(lines, "\n")
}

func (s *Server) startEtcd(ctx context.Context, binDir string) (string, error) {
	var clientURL string
	args := func() ([]string, error) {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		clientURL = "http://127.0.0.1:" + strconv.Itoa(cp)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(pp)
		data := filepath.Join(s.dir, "etcd")
		if err := os.RemoveAll(data); err != nil {
			return nil, err
		}
		return []string{
			"--name=kubetest", "--data-dir=" + data,
			"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=kubetest=" + peerURL,
			"--unsafe-no-fsync", "--log-level=warn",
		}, nil
	}
	ready := func(ctx context.Context) error {
		return poll.Context(ctx, func() error {
			resp, err := http.Get(clientURL + "/health")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/health: %s", resp.Status)
			}
			return nil
		})
	}
	if err := s.start(ctx, "etcd", filepath.Join(binDir, "etcd"), args, ready); err != nil {
		return "", err
	}
	return clientURL, nil
}

func (s *Server) startAPIServer(ctx context.Context, cfg Config, etcdURL string) error {
	pki := filepath.Join(s.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	cert, key, err := selfSigned(cfg.PodAddress)
	if err != nil {
		return err
	}
	s.caPEM, s.caKey = cert, key
	saKey, err := rsaKeyPEM()
	if err != nil {
		return err
	}
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n", AdminToken)
	for tok, user := range cfg.Tokens {
		tokens += fmt.Sprintf("%s,%s,%s\n", tok, user, user)
	}
	files := map[string][]byte{"tls.crt": cert, "tls.key": key, "sa.key": saKey, "tokens.csv": []byte(tokens)}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(pki, name), data, 0o600); err != nil {
			return err
		}
	}
	var admission []string
	if !cfg.ServiceAccounts {
		admission = []string{"--disable-admission-plugins=ServiceAccount"}
	}
	args := func() ([]string, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.url = "https://127.0.0.1:" + strconv.Itoa(port)
		// Without a PodAddress no pod can reach the server: the kubernetes
		// Service needs no endpoints, and loopback is refused as one anyway.
		listen := []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"}
		if cfg.PodAddress != "" {
			listen = []string{"--bind-address=0.0.0.0", "--advertise-address=" + cfg.PodAddress, "--endpoint-reconciler-type=lease"}
		}
		return append([]string{
			"--etcd-servers=" + etcdURL,
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + pki,
			"--tls-cert-file=" + filepath.Join(pki, "tls.crt"),
			"--tls-private-key-file=" + filepath.Join(pki, "tls.key"),
			"--token-auth-file=" + filepath.Join(pki, "tokens.csv"),
			// Bootstrap tokens (Secrets in kube-system) authenticate, as
			// on a kubeadm cluster: Cluster API's kubeadm bootstrap
			// provider makes them for joining workers.
			"--enable-bootstrap-token-auth",
			"--authorization-mode=RBAC",
			"--service-account-key-file=" + filepath.Join(pki, "sa.key"),
			"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--allow-privileged=true",
			"--v=0",
		}, append(listen, admission...)...), nil
	}
	ready := func(ctx context.Context) error {
		client, err := rest.HTTPClientFor(s.RESTConfig())
		if err != nil {
			return err
		}
		return poll.Context(ctx, func() error { return GetOK(client, s.url+"/readyz") })
	}
	return s.start(ctx, "kube-apiserver", filepath.Join(cfg.BinDir, "kube-apiserver"), args, ready)
}

// startControllerManager runs kube-controller-manager with only
// cfg.Controllers, as the administrator, without leader election, serving
// its health checks on loopback only, with the service accounts' signing
// key and the server's certificate as the cluster's root CA.
func (s *Server) startControllerManager(ctx context.Context, cfg Config) error {
	kubeconfig, err := s.WriteKubeconfig()
	if err != nil {
		return err
	}
	// The service accounts' token Secrets are signed with the key the API
	// server verifies them with, and carry its certificate.
	pki := filepath.Join(s.dir, "pki")
	return s.startComponent(ctx, cfg, "kube-controller-manager", "controller-manager",
		"--kubeconfig="+kubeconfig, "--controllers="+strings.Join(cfg.Controllers, ","),
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"), "--root-ca-file="+filepath.Join(pki, "tls.crt"))
}

// startScheduler runs kube-scheduler as the administrator, without leader
// election, serving its health checks on loopback only.
func (s *Server) startScheduler(ctx context.Context, cfg Config) error {
	kubeconfig, err := s.WriteKubeconfig()
	if err != nil {
		return err
	}
	return s.startComponent(ctx, cfg, "kube-scheduler", "scheduler",
		"--kubeconfig="+kubeconfig, "--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig)
}

// startComponent runs the control-plane component name (kube-controller-manager
// or kube-scheduler) with args, without leader election, serving its health
// checks on a free loopback port with a certificate it makes itself in
// dir (under the server's directory), and returns once /healthz answers.
func (s *Server) startComponent(ctx context.Context, cfg Config, name, dir string, extra ...string) error {
	var healthz string
	args := func() ([]string, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		healthz = "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
		return append(slices.Clone(extra),
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(port),
			"--cert-dir="+filepath.Join(s.dir, dir),
			"--v=0",
		), nil
	}
	ready := func(ctx context.Context) error {
		// Its serving certificate is one it made itself at start: /healthz
		// on loopback is only polled, nothing is sent but the request.
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		defer client.CloseIdleConnections()
		return poll.Context(ctx, func() error { return GetOK(client, healthz) })
	}
	return s.start(ctx, name, filepath.Join(cfg.BinDir, name), args, ready)
}

// GetOK GETs url with client and fails unless the answer is 200 OK: a
// harness's health check of a process it started.
func GetOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// selfSigned returns a serving certificate for 127.0.0.1 and localhost
// (PEM) and its key; with a podAddress, for it too and for the names and
// ClusterIP of the `kubernetes` Service, as pods reach the server.
func selfSigned(podAddress string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	if podAddress != "" {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(podAddress), net.ParseIP(KubernetesServiceIP))
		tmpl.DNSNames = append(tmpl.DNSNames, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func rsaKeyPEM() ([]byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
}

// URL is the API server's https address.
func (s *Server) URL() string { return s.url }

// CAData is the PEM certificate the API server serves with.
func (s *Server) CAData() []byte { return s.caPEM }

// CAKey is the private key (PEM) of CAData's self-signed certificate: with
// it a test can stand for a cluster whose CA Cluster API keeps (the
// <cluster>-ca Secret).
func (s *Server) CAKey() []byte { return s.caKey }

// RESTConfig returns a new client configuration of the administrator.
func (s *Server) RESTConfig() *rest.Config { return s.RESTConfigFor(AdminToken) }

// RESTConfigFor returns a new client configuration authenticating with a
// bearer token (AdminToken or one of Config.Tokens).
func (s *Server) RESTConfigFor(token string) *rest.Config {
	return &rest.Config{
		Host:            s.url,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM},
		QPS:             -1, // no client-side rate limit in tests
	}
}

// Kubeconfig returns the administrator's kubeconfig as YAML.
func (s *Server) Kubeconfig() ([]byte, error) {
	c := clientcmdapi.NewConfig()
	c.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: s.url, CertificateAuthorityData: s.caPEM}
	c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: AdminToken}
	c.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin"}
	c.CurrentContext = "kubetest"
	data, err := clientcmd.Write(*c)
	if err != nil {
		return nil, fmt.Errorf("kubetest: kubeconfig: %w", err)
	}
	return data, nil
}

// WriteKubeconfig writes the administrator's kubeconfig into the server's
// directory and returns its path.
func (s *Server) WriteKubeconfig() (string, error) {
	data, err := s.Kubeconfig()
	if err != nil {
		return "", err
	}
	p := filepath.Join(s.dir, "kubeconfig")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return "", fmt.Errorf("kubetest: kubeconfig: %w", err)
	}
	return p, nil
}

// TLSConfig returns a client TLS configuration trusting the server.
func (s *Server) TLSConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// Logs returns the paths of the processes' log files.
func (s *Server) Logs() []string { return append([]string(nil), s.logs...) }

// Close stops kube-controller-manager if it runs, kube-apiserver, then
// etcd, and removes the directory the server created. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if s.ownDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// ForTest starts a server for one test and stops it when the test ends; a
// failure to start fails the test.
func ForTest(t testing.TB) *Server {
	t.Helper()
	s, err := Start(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Main starts one server for a package's tests, runs each setup on it
// (installing CRDs, say), stores it in *srv, runs m and stops the server.
// A server that cannot start or a setup that fails fails the run (exit
// code 1) with the reason on stderr. Use it as
// os.Exit(kubetest.Main(m, &kube)) in TestMain.
func Main(m *testing.M, srv **Server, setup ...func(context.Context, *Server) error) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Start(ctx, Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, f := range setup {
		if err := f(ctx, s); err != nil {
			fmt.Fprintln(os.Stderr, "kubetest: setup:", err)
			_ = s.Close()
			return 1
		}
	}
	*srv = s
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "kubetest: close:", err)
	}
	return code
}
