package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// The data listener. Bulk bytes (a tenant's image upload) crossing the
// mesh pay for userspace WireGuard on the orchestrator, so an agent may
// serve a second, direct path for them: an HTTPS listener on a host
// address (Config.DataListen), with a self-signed certificate made at
// start and kept in memory. It serves one thing: PUT of one file whose
// upload the orchestrator asked for over the mesh (IssueUploadTicket),
// with that call's one-time ticket as bearer credential. The ticket is
// bound to the storage, content, file name and size bounds asked for,
// expires uploadTicketTTL after it was issued unless used, and is
// consumed by the first request that presents it. The orchestrator pins
// the certificate by the fingerprint the ticket's answer carries, so the
// path needs no CA. The bytes are stored through store, as
// UploadVolume's are (into a file storage's directory, or POSTed to
// Proxmox); the Proxmox token stays in the agent.

// uploadTicketTTL is how long an upload ticket waits for its upload to
// start.
const uploadTicketTTL = 60 * time.Second

// maxUploadTickets bounds the upload tickets waiting at once.
const maxUploadTickets = 64

// uploadPathPrefix starts the data listener's upload URLs:
// /v1/upload/{storage}/{content}/{filename}.
const uploadPathPrefix = "/v1/upload/"

// uploadTicket is what an upload ticket grants: one upload of target.
// The ticket is "<grant id>.<secret>": the grant is found by its id and
// the secret compared in constant time.
type uploadTicket struct {
	target uploadTarget
	secret []byte
}

// dataListener is the agent's running data listener.
type dataListener struct {
	srv       *http.Server
	url       string // https://advertised host:port
	certSHA   string // lower-case hex SHA-256 of the certificate's DER
	served    chan struct{}
	listening net.Listener
}

// serveData serves the data listener on ln, advertised to the
// orchestrator as advertise (HOST:PORT; a port of 0 or none is ln's).
func (a *Agent) serveData(ln net.Listener, advertise string) error {
	cert, sum, err := selfSignedCert(a.cfg.NodeName)
	if err != nil {
		return fmt.Errorf("agent: data listener certificate: %w", err)
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		host, port = advertise, ""
	}
	if port == "" || port == "0" {
		_, port, _ = net.SplitHostPort(ln.Addr().String())
	}
	if host == "" {
		return fmt.Errorf("agent: data advertise address %q names no host", advertise)
	}
	s := &service{a: a}
	d := &dataListener{
		url: "https://" + net.JoinHostPort(host, port), certSHA: sum, served: make(chan struct{}), listening: ln,
		srv: &http.Server{
			Handler:           http.HandlerFunc(s.serveUpload),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       30 * time.Second,
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
			// Failed handshakes (a client pinning another certificate, a
			// scanner) are the client's to report.
			ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
		},
	}
	a.data = d
	go func() {
		defer close(d.served)
		if err := d.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("agent: serve data listener", "err", err)
		}
	}()
	a.log.Info("agent data listener serving", "addr", ln.Addr().String(), "url", d.url)
	return nil
}

// closeData stops the data listener, ending uploads in flight when ctx
// ends.
func (a *Agent) closeData(ctx context.Context) {
	if a.data == nil {
		return
	}
	if err := a.data.srv.Shutdown(ctx); err != nil {
		a.data.srv.Close()
	}
	<-a.data.served
}

// DataAddr is the data listener's local address, "" without one.
func (a *Agent) DataAddr() string {
	if a.data == nil {
		return ""
	}
	return a.data.listening.Addr().String()
}

// selfSignedCert makes the data listener's certificate: a new P-256 key,
// valid for a year, and the SHA-256 of its DER in lower-case hex.
func selfSignedCert(node string) (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "flexplane-agent-data " + node},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	sum := sha256.Sum256(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, hex.EncodeToString(sum[:]), nil
}

// IssueUploadTicket implements the agent's IssueUploadTicket RPC.
func (s *service) IssueUploadTicket(_ context.Context, req *agentv1.IssueUploadTicketRequest) (*agentv1.IssueUploadTicketResponse, error) {
	d := s.a.data
	if d == nil {
		return nil, status.Error(codes.FailedPrecondition, "agent: no data listener (use UploadVolume)")
	}
	t := uploadTarget{storage: req.GetStorage(), content: req.GetContent(), filename: req.GetFilename(), size: req.GetSize(), maxSize: req.GetMaxSize()}
	if err := t.check(); err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	id, ok := s.a.uploads.add(uploadTicket{target: t, secret: secret}, time.Now().Add(uploadTicketTTL), maxUploadTickets)
	if !ok {
		return nil, status.Errorf(codes.ResourceExhausted, "agent: %d upload tickets are waiting already", maxUploadTickets)
	}
	return &agentv1.IssueUploadTicketResponse{
		Ticket: id + "." + hex.EncodeToString(secret), Url: d.url + uploadPathPrefix + t.storage + "/" + t.content + "/" + t.filename,
		CertSha256: d.certSHA, TtlSeconds: uint32(uploadTicketTTL / time.Second),
	}, nil
}

// serveUpload is the data listener's only handler: PUT
// /v1/upload/{storage}/{content}/{filename} with "Authorization: Bearer
// <ticket>", the body the file's bytes. It answers 200 with
// UploadVolumeResponse's fields as JSON (upid, "" when the agent wrote
// the file itself; sha256, size, volume),
// else an error status and a line saying why: 401 for a ticket that is
// missing, unknown, used or expired, 403 for one of another file (it is
// used up all the same), 413 for a body past the ticket's size, 400 for
// one shorter than its size, 409 for a file that exists already.
func (s *service) serveUpload(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, uploadPathPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		http.Error(w, "agent: not found", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		http.Error(w, "agent: uploads are PUT", http.StatusMethodNotAllowed)
		return
	}
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	id, secretHex, ok2 := strings.Cut(auth, ".")
	secret, err := hex.DecodeString(secretHex)
	if !ok || !ok2 || err != nil {
		s.a.log.Warn("agent: data listener: upload without a ticket", "remote", r.RemoteAddr)
		http.Error(w, "agent: an upload ticket is required", http.StatusUnauthorized)
		return
	}
	tk, ok := s.a.uploads.take(id, func(t uploadTicket) bool { return subtle.ConstantTimeCompare(t.secret, secret) == 1 })
	if !ok {
		s.a.log.Warn("agent: data listener: refused ticket (unknown, used or expired)", "remote", r.RemoteAddr)
		http.Error(w, "agent: the upload ticket is unknown, used or expired", http.StatusUnauthorized)
		return
	}
	t := tk.target
	if parts[0] != t.storage || parts[1] != t.content || parts[2] != t.filename {
		s.a.log.Warn("agent: data listener: ticket used for another file", "remote", r.RemoteAddr, "ticket", t.volume(), "path", r.URL.Path)
		http.Error(w, "agent: the upload ticket is for another file", http.StatusForbidden)
		return
	}
	if r.ContentLength > t.limit() || (t.size > 0 && r.ContentLength >= 0 && r.ContentLength != t.size) {
		code := http.StatusRequestEntityTooLarge
		if r.ContentLength < t.limit() {
			code = http.StatusBadRequest
		}
		http.Error(w, fmt.Sprintf("agent: a body of %d bytes for an upload of size %d (bound %d)", r.ContentLength, t.size, t.limit()), code)
		return
	}
	body := &countingReader{r: r.Body}
	up, err := s.store(r.Context(), t, body, viaData)
	if err != nil {
		code := http.StatusBadGateway
		switch status.Code(err) {
		case codes.DataLoss:
			code = http.StatusBadRequest
			if body.n > t.limit() {
				code = http.StatusRequestEntityTooLarge
			}
		case codes.Aborted, codes.Canceled:
			code = http.StatusBadRequest
		case codes.FailedPrecondition, codes.AlreadyExists:
			code = http.StatusConflict
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"upid": up.upid, "sha256": up.sha256, "size": up.size, "volume": t.volume()})
}

// countingReader counts what it reads.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
