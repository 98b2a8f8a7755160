package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// A VDC's backups on a Proxmox Backup Server go to a storage entry of its
// own, in a namespace of the VDC's (docs/operate/backups.md), which the
// orchestrator adds with POST /storage. That request alone of the /storage
// tree is allowed, and checked beyond its path: it adds an entry of type
// pbs for backup content on the server, port, datastore, user and
// fingerprint of a pbs entry the operator made, in a namespace below that
// entry's, so that a compromised orchestrator can point no backup at a
// server of its own, nor have the secret sent there; it carries no secret
// and no encryption key of its own: the agent adds Config.PBSPassword.

// pbsEntryKeys are the parameters the orchestrator may send with a VDC's
// pbs entry.
var pbsEntryKeys = map[string]bool{
	"storage": true, "type": true, "server": true, "datastore": true, "namespace": true,
	"port": true, "username": true, "fingerprint": true, "content": true,
}

// pbsBase is a pbs entry of /storage, as GET /storage lists it.
type pbsBase struct {
	Storage     string `json:"storage"`
	Type        string `json:"type"`
	Server      string `json:"server"`
	Port        any    `json:"port"`
	Datastore   string `json:"datastore"`
	Namespace   string `json:"namespace"`
	Username    string `json:"username"`
	Fingerprint string `json:"fingerprint"`
}

// checkPBSEntry checks the parameters of a new pbs entry against the pbs
// entries there are: nil if one of them is its base.
func checkPBSEntry(p map[string]string, bases []pbsBase) error {
	for k := range p {
		if !pbsEntryKeys[k] {
			return fmt.Errorf("a storage entry with %q is not allowed", k)
		}
	}
	if p["type"] != "pbs" {
		return errors.New("only storage entries of type pbs are allowed")
	}
	if c := p["content"]; c != "" && c != "backup" {
		return errors.New("a pbs entry holds backup content only")
	}
	ns := p["namespace"]
	if ns == "" {
		return errors.New("a pbs entry needs a namespace")
	}
	port := func(v any) string {
		if s := fmt.Sprint(v); v != nil && s != "" {
			return s
		}
		return "8007"
	}
	for _, b := range bases {
		if b.Type != "pbs" || b.Server != p["server"] || b.Datastore != p["datastore"] || port(b.Port) != port(p["port"]) ||
			b.Username != p["username"] || !strings.EqualFold(b.Fingerprint, p["fingerprint"]) {
			continue
		}
		if b.Namespace == "" || strings.HasPrefix(ns, b.Namespace+"/") {
			return nil
		}
	}
	return fmt.Errorf("no pbs entry of server %q, datastore %q and user %q holds namespace %q", p["server"], p["datastore"], p["username"], ns)
}

// pbsEntry checks the POST /storage req and returns it with the secret
// the agent adds.
func (a *Agent) pbsEntry(ctx context.Context, req *agentv1.ProxyRequest) (*agentv1.ProxyRequest, error) {
	if req.GetQuery() != "" {
		return nil, errors.New("a storage entry's parameters go in the body")
	}
	ct, _, _ := mime.ParseMediaType(req.GetContentType())
	p := map[string]string{}
	switch ct {
	case "application/json":
		var m map[string]any
		if err := json.Unmarshal(req.GetBody(), &m); err != nil {
			return nil, fmt.Errorf("storage entry: %w", err)
		}
		for k, v := range m {
			switch v := v.(type) {
			case string:
				p[k] = v
			case float64:
				p[k] = strconv.FormatFloat(v, 'f', -1, 64)
			default:
				return nil, fmt.Errorf("storage entry: %q is neither a string nor a number", k)
			}
		}
	case "application/x-www-form-urlencoded":
		q, err := url.ParseQuery(string(req.GetBody()))
		if err != nil {
			return nil, fmt.Errorf("storage entry: %w", err)
		}
		for k, v := range q {
			if len(v) != 1 {
				return nil, fmt.Errorf("storage entry: %q given %d times", k, len(v))
			}
			p[k] = v[0]
		}
	default:
		return nil, fmt.Errorf("storage entry: content type %q", req.GetContentType())
	}
	var bases []pbsBase
	if err := a.pveGet(ctx, "/storage", &bases); err != nil {
		return nil, err
	}
	if err := checkPBSEntry(p, bases); err != nil {
		return nil, err
	}
	p["content"] = "backup"
	if a.cfg.PBSPassword != "" {
		p["password"] = a.cfg.PBSPassword
	}
	out := proto.Clone(req).(*agentv1.ProxyRequest)
	if ct == "application/json" {
		m := map[string]any{}
		for k, v := range p {
			m[k] = v
		}
		if n, err := strconv.Atoi(p["port"]); err == nil {
			m["port"] = n
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		out.Body = b
		return out, nil
	}
	q := url.Values{}
	for k, v := range p {
		q.Set(k, v)
	}
	out.Body = []byte(q.Encode())
	return out, nil
}
