package devstack

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// SnippetStorage is the storage of every simulated node that takes
// `snippets` content: the directory of the cloud-init user-data the agents
// write, <Dir>/pve/<cluster>-files/<node>/var/lib/vz/snippets.
const SnippetStorage = "local"

// filesDir is the directory of cluster's nodes' file systems (pvesim's
// --file-root): node N's is filesDir/N, which is its agent's -file-root.
func (s *stack) filesDir(cluster string) string { return s.path("pve", cluster+"-files") }

// enableSnippets lets SnippetStorage of cluster sm take `snippets` content,
// as an operator enables it on a Proxmox cluster for cloud-init user-data
// (`pvesm set local --content ...,snippets`), through the API of its
// first node. The simulator's state file keeps it, so a restart finds it
// done.
func enableSnippets(ctx context.Context, sm *sim) error {
	b, err := os.ReadFile(sm.tokenFile)
	if err != nil {
		return fmt.Errorf("enable snippets: %w", err)
	}
	ep := sm.endpoint("pve1")
	pve := pveClient{base: ep.url + "/api2/json", token: strings.TrimSpace(string(b)), hc: pinnedClient(ep.fingerprint)}
	var st struct {
		Content string `json:"content"`
	}
	if err := pve.do(ctx, http.MethodGet, "/storage/"+SnippetStorage, nil, &st); err != nil {
		return fmt.Errorf("enable snippets: %w", err)
	}
	content := strings.Split(st.Content, ",")
	if slices.Contains(content, "snippets") {
		return nil
	}
	content = append(content, "snippets")
	form := url.Values{"content": {strings.Join(content, ",")}}
	if err := pve.do(ctx, http.MethodPut, "/storage/"+SnippetStorage, form, nil); err != nil {
		return fmt.Errorf("enable snippets: %w", err)
	}
	return nil
}

// pveClient calls a simulated node's API with the cluster's token.
type pveClient struct {
	base, token string
	hc          *http.Client
}

// do sends form (nil: none) to path and decodes the answer's data into v
// (nil: ignored).
func (c pveClient) do(ctx context.Context, method, path string, form url.Values, v any) error {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "PVEAPIToken="+c.token)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(raw, &struct{ Data any }{Data: v})
}

// pinnedClient trusts exactly the certificate with the SHA-256
// fingerprint fp ("AB:CD:..."), as the simulator prints it.
func pinnedClient(fp string) *http.Client {
	want := strings.ToUpper(strings.ReplaceAll(fp, ":", ""))
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // the pin below replaces the chain's check
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("no certificate")
			}
			if got := fmt.Sprintf("%X", sha256.Sum256(raw[0])); got != want {
				return fmt.Errorf("certificate fingerprint %s, want %s", got, want)
			}
			return nil
		},
	}}}
}
