package snippets

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/compute"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// The direct data path of uploads (the agent's data listener,
// pkg/agent's dataplane.go): the orchestrator asks the agent over the
// mesh for a one-time upload ticket, which names the listener's URL and
// its certificate's SHA-256; it connects over TLS pinning that
// fingerprint (no CA, no host name check) and only then sends the ticket
// and the file's bytes, in one HTTP PUT. The bytes cross no userspace
// WireGuard. An agent without a data listener, or one the orchestrator
// cannot connect to within directTimeout, gets the upload over the mesh,
// since no byte of the file has been read by then.

// defaultDirectTimeout bounds asking for a ticket and connecting to the
// data listener.
const defaultDirectTimeout = 5 * time.Second

// directBuffer is the size of the direct upload's write buffer.
const directBuffer = 256 << 10

// maxDirectAnswer bounds the agent's answer to a direct upload.
const maxDirectAnswer = 64 << 10

// directTicket is an upload ticket and where to use it.
type directTicket struct {
	ticket, url string
}

// PinnedTLS is the TLS configuration of a client of a data listener: it
// accepts the one certificate whose DER's SHA-256 is certSHA256
// (lower-case hex), whatever its issuer and names.
func PinnedTLS(certSHA256 string) *tls.Config {
	want, err := hex.DecodeString(certSHA256)
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // VerifyConnection pins the certificate instead
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err != nil || len(want) != sha256.Size {
				return fmt.Errorf("snippets: %q is not a SHA-256 fingerprint", certSHA256)
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("snippets: the data listener showed no certificate")
			}
			got := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if subtle.ConstantTimeCompare(got[:], want) != 1 {
				return fmt.Errorf("snippets: the data listener's certificate %x is not the pinned %s", got, certSHA256)
			}
			return nil
		},
	}
}

// dialDirect asks the agent for a ticket to upload ref and connects to
// its data listener. false leaves the upload to the mesh: the agent has
// no data listener, or (with a warning) the ticket or the connection
// failed within directTimeout.
func (u volumeUploader) dialDirect(ctx context.Context, c agentv1.AgentServiceClient, ref compute.UploadRef, size int64) (net.Conn, directTicket, bool) {
	ctx, cancel := context.WithTimeout(ctx, u.directTimeout)
	defer cancel()
	resp, err := c.IssueUploadTicket(ctx, &agentv1.IssueUploadTicketRequest{
		Storage: ref.Storage, Content: ref.Content, Filename: ref.Filename, Size: size, MaxSize: ref.MaxSize})
	if code := status.Code(err); code == codes.FailedPrecondition || code == codes.Unimplemented {
		return nil, directTicket{}, false // no data listener: the mesh it is
	}
	if err != nil {
		u.log.Warn("upload over the mesh: no upload ticket from the agent", "node", ref.Node, "file", ref.Filename, "err", err)
		return nil, directTicket{}, false
	}
	target, err := url.Parse(resp.GetUrl())
	if err != nil || target.Scheme != "https" || target.Host == "" {
		u.log.Warn("upload over the mesh: the agent's data URL is not an https URL", "node", ref.Node, "url", resp.GetUrl())
		return nil, directTicket{}, false
	}
	d := tls.Dialer{Config: PinnedTLS(resp.GetCertSha256())}
	conn, err := d.DialContext(ctx, "tcp", target.Host)
	if err != nil {
		u.log.Warn("upload over the mesh: the agent's data listener is unreachable", "node", ref.Node, "url", resp.GetUrl(), "err", err)
		return nil, directTicket{}, false
	}
	return conn, directTicket{ticket: resp.GetTicket(), url: resp.GetUrl()}, true
}

// uploadDirect sends r as the body of one PUT with tk over conn, a
// connection to the agent's data listener, and reads the agent's answer.
func (u volumeUploader) uploadDirect(ctx context.Context, conn net.Conn, tk directTicket, ref compute.UploadRef, size int64, r io.Reader) (compute.UploadResult, error) {
	var dialed sync.Once
	tr := &http.Transport{
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
			var c net.Conn
			dialed.Do(func() { c = conn })
			if c == nil {
				return nil, errors.New("snippets: the data listener's connection was used")
			}
			return c, nil
		},
		DisableKeepAlives: true, DisableCompression: true, WriteBufferSize: directBuffer,
	}
	defer tr.CloseIdleConnections()
	body := &guardedReader{r: r}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, tk.url, body)
	if err != nil {
		conn.Close()
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s: %w", ref.Filename, ref.Node, err)
	}
	req.ContentLength = size // 0: unknown, sent chunked
	req.Header.Set("Authorization", "Bearer "+tk.ticket)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := tr.RoundTrip(req)
	// The transport may go on reading the body after it answered: stop
	// it, so that r is not read after this call returns.
	rerr := body.stop()
	if resp != nil {
		defer resp.Body.Close()
	}
	if rerr != nil {
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s: read: %w", ref.Filename, rerr)
	}
	if err != nil {
		conn.Close()
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s (data listener): %w", ref.Filename, ref.Node, err)
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxDirectAnswer))
	if err != nil {
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s (data listener): reading the answer: %w", ref.Filename, ref.Node, err)
	}
	if resp.StatusCode != http.StatusOK {
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s (data listener): the agent answered %s: %s", ref.Filename, ref.Node, resp.Status, strings.TrimSpace(string(answer)))
	}
	var out struct {
		UPID   string `json:"upid"`
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
		Volume string `json:"volume"`
	}
	if err := json.Unmarshal(answer, &out); err != nil {
		return compute.UploadResult{}, fmt.Errorf("snippets: upload %s on %s (data listener): the agent's answer: %w", ref.Filename, ref.Node, err)
	}
	return compute.UploadResult{UPID: out.UPID, SHA256: out.SHA256, Size: out.Size, Volume: out.Volume}, nil
}

// errStopped is a read of a direct upload's body after its request
// ended.
var errStopped = errors.New("snippets: the upload's request has ended")

// guardedReader is a request body that can be stopped: once stop
// returns, r is not read again. It keeps the first error r returned
// other than io.EOF.
type guardedReader struct {
	mu      sync.Mutex
	r       io.Reader // protected by mu
	err     error     // protected by mu
	stopped bool      // protected by mu
}

func (g *guardedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return 0, errStopped
	}
	n, err := g.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && g.err == nil {
		g.err = err
	}
	return n, err
}

// Close is the transport's end of the body; stop is the caller's.
func (g *guardedReader) Close() error { return nil }

// stop ends reads of r and returns the error r gave, if any.
func (g *guardedReader) stop() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	return g.err
}
