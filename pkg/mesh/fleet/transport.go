package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/luthermonson/go-proxmox"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/proxmox/pvetask"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// apiPrefix is the path prefix of the Proxmox API in URLs go-proxmox builds.
const apiPrefix = "/api2/json"

// ErrNoAgent is returned (wrapped) when a zone has no online agent.
var ErrNoAgent = errors.New("no online agent in zone")

// Client returns a go-proxmox client for a zone. Its requests travel as Proxy
// RPCs to the zone's agents over the mesh: a request about one node
// (/nodes/{node}/...) goes to that node's agent when it is online, every
// other request to one online agent of the zone; when an agent fails at the
// transport level, reads (GET) fail over to the next agent of the zone.
// Writes are not retried on another agent (they may have been applied).
func (r *Registry) Client(zoneID string) *proxmox.Client {
	return proxmox.NewClient(BaseURL(zoneID), proxmox.WithHTTPClient(r.HTTPClient(zoneID)))
}

// HTTPClient returns the HTTP client under Client: requests to URLs below
// BaseURL(zoneID) travel as Proxy RPCs to the zone's agents, with the same
// routing and failover. Answers carry Proxmox's status line (its error text
// as the reason) and body unchanged.
func (r *Registry) HTTPClient(zoneID string) *http.Client {
	return &http.Client{Transport: &Transport{registry: r, zoneID: zoneID}}
}

// BaseURL is the URL of a zone's Proxmox API (its /api2/json) for requests
// through HTTPClient.
func BaseURL(zoneID string) string {
	return "https://" + zoneID + ".zone.flexplane.invalid" + apiPrefix
}

// Body is the body of an answer of Transport: the agent's whole answer,
// already in memory.
type Body struct {
	*bytes.Reader
	b []byte
}

// Bytes is the whole body, without a copy, whatever has been read of it.
// It must not be modified.
func (b *Body) Bytes() []byte { return b.b }

// Close does nothing: the body is in memory.
func (b *Body) Close() error { return nil }

// Transport is the http.RoundTripper of the clients of Client.
type Transport struct {
	registry *Registry
	zoneID   string
}

// RoundTrip sends req as a Proxy RPC.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("zones: read request body: %w", err)
		}
	}
	path, ok := strings.CutPrefix(req.URL.Path, apiPrefix)
	if !ok {
		return nil, fmt.Errorf("zones: %s is not a Proxmox API path", req.URL.Path)
	}
	preq := &agentv1.ProxyRequest{
		Method:      req.Method,
		Path:        path,
		Query:       req.URL.RawQuery,
		Body:        body,
		ContentType: req.Header.Get("Content-Type"),
	}
	var node string
	if rest, ok := strings.CutPrefix(path, "/nodes/"); ok {
		node, _, _ = strings.Cut(rest, "/")
	}
	targets := t.registry.targets(t.zoneID, node)
	if len(targets) == 0 {
		t.registry.request(t.zoneID, req.Method, 0, 0)
		return nil, fmt.Errorf("zones: zone %s: %w", t.zoneID, ErrNoAgent)
	}
	var errs []error
	start := time.Now()
	for _, tg := range targets {
		resp, err := tg.client.Proxy(req.Context(), preq)
		if err == nil {
			t.registry.request(t.zoneID, req.Method, int(resp.GetStatusCode()), time.Since(start))
			if req.Method != http.MethodGet {
				audit.NoteTask(req.Context(), pvetask.UPIDOfAnswer(resp.GetBody()))
			}
			reason := resp.GetStatusText()
			if reason == "" {
				reason = http.StatusText(int(resp.GetStatusCode()))
			}
			return &http.Response{
				Status:        strconv.Itoa(int(resp.GetStatusCode())) + " " + reason,
				StatusCode:    int(resp.GetStatusCode()),
				Proto:         "HTTP/1.1",
				ProtoMajor:    1,
				ProtoMinor:    1,
				Header:        http.Header{"Content-Type": []string{resp.GetContentType()}},
				Body:          &Body{Reader: bytes.NewReader(resp.GetBody()), b: resp.GetBody()},
				ContentLength: int64(len(resp.GetBody())),
				Request:       req,
			}, nil
		}
		errs = append(errs, fmt.Errorf("agent %s: %w", tg.node, err))
		if status.Code(err) != codes.Unavailable || req.Context().Err() != nil {
			break
		}
		t.registry.markFailed(tg.meshID, err)
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			break
		}
	}
	t.registry.request(t.zoneID, req.Method, 0, time.Since(start))
	return nil, fmt.Errorf("zones: zone %s: %s %s: %w", t.zoneID, req.Method, path, errors.Join(errs...))
}
