package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pvecert"
)

// maxResponse bounds a Proxmox answer the agent relays.
const maxResponse = 16 << 20

// errTooLarge is returned for Proxmox answers over maxResponse.
var errTooLarge = errors.New("proxmox answer too large")

// pve is the agent's client of the local Proxmox API. It is the only place
// the token is used: it goes into the Authorization header and nowhere else.
type pve struct {
	base  *url.URL // https://host:port/api2/json
	token string   // USER@REALM!TOKENID=SECRET
	http  *http.Client
}

func newPVE(rawURL, token, fingerprint string) (*pve, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("proxmox URL %q is not an https URL", rawURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/api2/json") {
		u.Path += "/api2/json"
	}
	if err := checkToken(token); err != nil {
		return nil, err
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if fingerprint != "" {
		want, err := parseFingerprint(fingerprint)
		if err != nil {
			return nil, err
		}
		// The certificate of a Proxmox node is self-signed or signed by the
		// cluster's own CA: it is pinned by fingerprint instead of verified
		// against a CA.
		tlsCfg.InsecureSkipVerify = true
		tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("proxmox presented no certificate")
			}
			got := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if subtle.ConstantTimeCompare(got[:], want) != 1 {
				return fmt.Errorf("proxmox certificate fingerprint %s does not match the pinned one", formatFingerprint(got[:]))
			}
			return nil
		}
	}
	tr := &http.Transport{
		TLSClientConfig:     tlsCfg,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
		// An upload's body goes out in TLS records of up to 16 KiB, not
		// of the 4 KiB default buffer: a quarter of the writes.
		WriteBufferSize: 64 << 10,
	}
	return &pve{base: u, token: token, http: &http.Client{Transport: tr}}, nil
}

// checkToken validates the shape of a Proxmox API token without ever putting
// it into an error.
func checkToken(token string) error {
	user, secret, ok := strings.Cut(token, "=")
	if !ok || secret == "" || !strings.Contains(user, "!") || !strings.Contains(user, "@") ||
		strings.ContainsAny(token, " \t\r\n") {
		return errors.New("proxmox token must look like USER@REALM!TOKENID=SECRET")
	}
	return nil
}

func parseFingerprint(fp string) ([]byte, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(fp), ":", ""))
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("proxmox fingerprint %q is not a SHA-256 fingerprint (AB:CD:...)", fp)
	}
	return b, nil
}

func formatFingerprint(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02X", c)
	}
	return strings.Join(parts, ":")
}

// pveResponse is a relayed Proxmox answer.
type pveResponse struct {
	status      int
	reason      string // the status line's reason phrase (Proxmox's error message)
	body        []byte
	contentType string
}

// do sends one request; path is below /api2/json.
func (p *pve) do(ctx context.Context, method, path, query string, body []byte, contentType string) (pveResponse, error) {
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	return p.send(ctx, method, path, query, rd, contentType)
}

// send sends one request whose body is read from rd as it is sent (nil:
// none); path is below /api2/json.
func (p *pve) send(ctx context.Context, method, path, query string, rd io.Reader, contentType string) (pveResponse, error) {
	u := *p.base
	u.Path += path
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return pveResponse{}, fmt.Errorf("build request: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+p.token)
	resp, err := p.http.Do(req)
	if err != nil {
		return pveResponse{}, scrub(err, p.token)
	}
	defer resp.Body.Close()
	data, err := readBody(resp.Body, resp.ContentLength)
	if err != nil {
		return pveResponse{}, scrub(err, p.token)
	}
	if len(data) > maxResponse {
		return pveResponse{}, errTooLarge
	}
	_, reason, _ := strings.Cut(resp.Status, " ")
	return pveResponse{status: resp.StatusCode, reason: reason, body: data, contentType: resp.Header.Get("Content-Type")}, nil
}

// readBody reads an answer of up to maxResponse (+1, to tell a larger one)
// bytes. When its length is known it is read into one buffer of that size:
// io.ReadAll grows its buffer step by step, copying it each time (about
// twice the body's size in garbage for a 300 KB answer).
func readBody(r io.Reader, length int64) ([]byte, error) {
	if length < 0 || length > maxResponse {
		return io.ReadAll(io.LimitReader(r, maxResponse+1))
	}
	// bytes.Buffer.ReadFrom wants bytes.MinRead free bytes before it reads
	// on: with them, reaching the end does not grow the buffer.
	buf := bytes.NewBuffer(make([]byte, 0, length+bytes.MinRead))
	_, err := buf.ReadFrom(io.LimitReader(r, maxResponse+1))
	return buf.Bytes(), err
}

// get fetches path and decodes the "data" member of the answer into v.
func (p *pve) get(ctx context.Context, path string, v any) error {
	resp, err := p.do(ctx, http.MethodGet, path, "", nil, "")
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.status != http.StatusOK {
		return fmt.Errorf("GET %s: proxmox answered %d", path, resp.status)
	}
	if err := decodeData(resp.body, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// decodeData decodes the "data" member of a Proxmox answer into v.
func decodeData(body []byte, v any) error {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return err
	}
	return json.Unmarshal(env.Data, v)
}

// scrub makes sure an error never carries the token (a transport error
// could quote a request).
func scrub(err error, token string) error {
	if token != "" && strings.Contains(err.Error(), token) {
		return errors.New(strings.ReplaceAll(err.Error(), token, "[token]"))
	}
	return err
}

// clusterFacts are what Info reports about Proxmox.
type clusterFacts struct {
	version     string
	clusterName string
	clusterID   string
}

func (p *pve) facts(ctx context.Context, node string) (clusterFacts, error) {
	var f clusterFacts
	var ver struct {
		Version string `json:"version"`
	}
	if err := p.get(ctx, "/version", &ver); err != nil {
		return f, err
	}
	f.version = ver.Version
	var status []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := p.get(ctx, "/cluster/status", &status); err != nil {
		return f, err
	}
	for _, s := range status {
		if s.Type == "cluster" {
			f.clusterName = s.Name
		}
	}
	var certs []struct {
		Filename string `json:"filename"`
		PEM      string `json:"pem"`
	}
	if err := p.get(ctx, "/nodes/"+url.PathEscape(node)+"/certificates/info", &certs); err != nil {
		return f, err
	}
	// Proxmox names the files with or without their directory
	// (/etc/pve/nodes/NODE/pve-ssl.pem, /etc/pve/pve-root-ca.pem).
	for _, c := range certs {
		var id string
		var err error
		switch path.Base(c.Filename) {
		case "pve-ssl.pem":
			id, err = pvecert.ClusterIdentityOfNode([]byte(c.PEM))
		case "pve-root-ca.pem":
			id, err = pvecert.ClusterIdentity([]byte(c.PEM))
		default:
			continue
		}
		if err != nil {
			return f, fmt.Errorf("certificate %s of node %s: %w", c.Filename, node, err)
		}
		if f.clusterID != "" && f.clusterID != id {
			return f, fmt.Errorf("node %s: pve-ssl.pem is not issued by pve-root-ca.pem", node)
		}
		f.clusterID = id
	}
	if f.clusterID == "" {
		return f, fmt.Errorf("node %s has neither pve-ssl.pem nor pve-root-ca.pem", node)
	}
	return f, nil
}
