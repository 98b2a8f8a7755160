package pvesim

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const apiPrefix = "/api2/json"

// apiError is an error answered with a status and Proxmox's message (in the status line
// and the body's "message"), plus the per-parameter errors of a 400.
type apiError struct {
	status int
	msg    string
	errors map[string]string
}

func (e *apiError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// paramError is a 400 "Parameter verification failed." with one parameter's message, as
// Proxmox's raise_param_exc answers.
func paramError(name, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", errors: map[string]string{name: msg}}
}

// failRule is one injected Fault.
type failRule struct {
	method  string
	pattern string
	status  int
	message string
	lock    bool // Fault.LockTimeout
	delay   time.Duration
	left    int // protected by Cluster.mu
}

func (f *failRule) matches(method, rel, template string) bool {
	if f.method != "" && f.method != method {
		return false
	}
	if f.pattern == template {
		return true
	}
	ok, _ := path.Match(f.pattern, rel)
	return ok
}

// call is one authenticated, validated request on its way to a handler.
type call struct {
	c      *Cluster
	ctx    context.Context
	method string
	rel    string // path relative to /api2/json
	ep     *apiEndpoint
	vars   map[string]string
	p      params
	user   string                       // authenticated token id, "USER@REALM!ID"
	has    func(path, priv string) bool // nil: full privileges
	local  string                       // the node whose endpoint the request reached
	file   *spooled                     // the file part of an upload
}

// require fails like Proxmox's handler-level permission checks unless the caller has
// priv on path.
func (cl *call) require(path, priv string) error {
	if cl.has == nil || cl.has(path, priv) {
		return nil
	}
	return errorf(http.StatusForbidden, "Permission check failed (%s, %s)", path, priv)
}

type handlerFunc func(*call) (any, error)

// upgradeFunc checks a request that upgrades the connection (a websocket)
// under the model's lock and returns what serves it after the lock is
// released.
type upgradeFunc func(*call) (http.HandlerFunc, error)

type routeEntry struct {
	handler handlerFunc
	upgrade upgradeFunc // instead of handler
}

// endpoint is one node's pveproxy: its own listener, certificate and notion of the
// local node.
type endpoint struct {
	node string
	url  string
	srv  *http.Server
}

// serveNode starts node's endpoint on ln.
func (c *Cluster) serveNode(node string, ln net.Listener) *endpoint {
	ep := &endpoint{node: node, url: "https://" + ln.Addr().String()}
	ep.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.serveAs(w, r, node) }),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
		// pveproxy speaks HTTP/1.1 only; error reasons travel in the status line.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	tlsLn := tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{c.certs.nodes[node].tls},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		if err := ep.srv.Serve(tlsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("serve", "node", node, "err", err)
		}
	}()
	return ep
}

// ServeHTTP answers API requests as the first node (pve1) does.
func (c *Cluster) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.serveAs(w, r, c.nodes[0]) }

// serveAs answers a request arriving at local's endpoint; an offline node answers
// nothing: the connection drops.
func (c *Cluster) serveAs(w http.ResponseWriter, r *http.Request, local string) {
	c.mu.Lock()
	online := c.st.nodes[local].online
	c.mu.Unlock()
	if !online {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	start := time.Now()
	if d := time.Duration(c.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	status := c.serve(w, r, local)
	c.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", status, "took", time.Since(start))
}

func (c *Cluster) serve(w http.ResponseWriter, r *http.Request, local string) int {
	rel, ok := strings.CutPrefix(r.URL.Path, apiPrefix)
	if !ok || rel == "" {
		return writeError(w, r, &apiError{status: http.StatusNotImplemented, msg: fmt.Sprintf("Method '%s %s' not implemented", r.Method, r.URL.Path)})
	}
	if len(rel) > 1 {
		rel = strings.TrimSuffix(rel, "/")
	}
	user, aerr := c.authenticate(r)
	// The realm list is public: the login box needs it before anyone is authenticated.
	if aerr != nil && !(r.Method == http.MethodGet && rel == "/access/domains") {
		return writeStatus(w, r, aerr.status, aerr.msg, nil)
	}
	// pveproxy reads the body by its content type before it looks for the handler: only
	// uploads take multipart/form-data, whatever the path.
	raw, file, aerr := readParams(r, r.Method == http.MethodPost && uploadPathRE.MatchString(rel), c.spoolDir())
	if aerr != nil {
		return writeError(w, r, aerr)
	}
	// The spooled file is the upload handler's once it keeps it as a
	// volume; whatever else ends the request deletes it.
	defer file.discard()
	ep, vars, aerr := c.api.lookup(r.Method, rel)
	if aerr != nil {
		return writeError(w, r, aerr)
	}
	if aerr := c.injectedFailure(r.Context(), r.Method, rel, ep.Path, vars); aerr != nil {
		return writeError(w, r, aerr)
	}
	// Proxmox proxies a call for another node before that node verifies it: an offline
	// node answers 595 whatever the parameters.
	if node, ok := vars["node"]; ok {
		if aerr := c.checkNodeReachable(node); aerr != nil {
			return writeError(w, r, aerr)
		}
	}
	p, aerr := ep.validate(vars, raw)
	if aerr != nil {
		return writeError(w, r, aerr)
	}
	// A token with full privileges stands for root@pam, which Proxmox never checks.
	has := c.privilegeChecker(user)
	if has != nil {
		if aerr := ep.authorize(p, has); aerr != nil {
			return writeError(w, r, aerr)
		}
	}
	rt, ok := c.routes[r.Method+" "+ep.Path]
	if !ok {
		return writeError(w, r, &apiError{status: http.StatusNotImplemented, msg: fmt.Sprintf("Method '%s %s' not implemented", r.Method, rel)})
	}
	cl := &call{c: c, ctx: r.Context(), method: r.Method, rel: rel, ep: ep, vars: vars, p: p, user: user, has: has, local: local, file: file}
	if rt.upgrade != nil {
		c.mu.Lock()
		h, err := rt.upgrade(cl)
		c.mu.Unlock()
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
			}
			return writeError(w, r, ae)
		}
		h(w, r)
		return http.StatusSwitchingProtocols
	}
	// Handlers run under the model's lock: every request sees and leaves a consistent
	// state, and check-then-claim steps (VMIDs, IP mappings) are atomic.
	c.mu.Lock()
	data, err := rt.handler(cl)
	c.mu.Unlock()
	if r.Method != http.MethodGet {
		c.markDirty()
	}
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
		}
		return writeError(w, r, ae)
	}
	body, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return writeError(w, r, errorf(http.StatusInternalServerError, "encode response: %v", err))
	}
	if c.cfg.CheckResponses {
		c.checkResponse(r.Method, rel, ep, body)
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Cache-Control", "max-age=0")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return http.StatusOK
}

// knownReturnMismatches are endpoints whose real responses differ from the schema's
// `returns` text; the simulator answers like real Proxmox there.
var knownReturnMismatches = map[string]string{
	"GET /cluster/nextid":                   "the VMID is a JSON string, as real Proxmox and go-proxmox have it",
	"GET /nodes/{node}/qemu/{vmid}/pending": "values keep their config types (numbers for integers)",
}

func (c *Cluster) checkResponse(method, rel string, ep *apiEndpoint, body []byte) {
	if _, ok := knownReturnMismatches[method+" "+ep.Path]; ok {
		return
	}
	var env struct {
		Data any `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		c.mu.Lock()
		c.probs = append(c.probs, fmt.Sprintf("%s %s: %v", method, rel, err))
		c.mu.Unlock()
		return
	}
	probs := ep.CheckReturn(env.Data)
	if len(probs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range probs {
		c.probs = append(c.probs, method+" "+rel+": "+p)
	}
}

// injectedFailure applies the first Fault matching the request: it waits
// out its delay and returns its failure (nil for a delay only).
func (c *Cluster) injectedFailure(ctx context.Context, method, rel, template string, vars map[string]string) *apiError {
	c.mu.Lock()
	var f *failRule
	for i, r := range c.fails {
		if !r.matches(method, rel, template) {
			continue
		}
		r.left--
		if r.left <= 0 {
			c.fails = append(c.fails[:i], c.fails[i+1:]...)
		}
		f = r
		break
	}
	c.mu.Unlock()
	if f == nil {
		return nil
	}
	if f.delay > 0 {
		t := time.NewTimer(f.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	switch {
	case f.lock:
		return &apiError{status: cmp.Or(f.status, http.StatusInternalServerError), msg: LockTimeoutMessage(vars["vmid"])}
	case f.status != 0:
		return &apiError{status: f.status, msg: cmp.Or(f.message, "simulated failure")}
	}
	return nil
}

// LockTimeoutMessage is what Proxmox answers (status 500) when it could not
// take the config lock of guest vmid within its timeout, as parallel clones
// of one template or config writes racing a long task make it:
// "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout".
func LockTimeoutMessage(vmid string) string {
	return fmt.Sprintf("can't lock file '/var/lock/qemu-server/lock-%s.conf' - got timeout", vmid)
}

func (c *Cluster) checkNodeReachable(node string) *apiError {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.st.nodes[node]
	if n == nil {
		return errorf(http.StatusInternalServerError, "hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", node, node)
	}
	if !n.online {
		return errorf(595, "No route to host")
	}
	return nil
}

// uploadPathRE matches the one path whose POST takes a multipart/form-data body, as
// pveproxy's auth_handler recognises uploads.
var uploadPathRE = regexp.MustCompile(`^/nodes/[^/]+/storage/[^/]+/upload$`)

// maxPost is the largest body pveproxy reads outside uploads ($limit_max_post).
const maxPost = 64 << 10

// maxUpload is the largest file an upload may carry. pveproxy spools the file part
// to a temporary file as it arrives and sets no bound of its own; the storage's free
// space bounds it (hUpload).
const maxUpload = 1 << 40

// readParams flattens the query string and the body (urlencoded form or JSON, as
// Proxmox accepts both; multipart/form-data only on the upload endpoint) into string
// values; an upload's file part is spooled to a file in spool and returned apart, its
// name as the filename parameter.
func readParams(r *http.Request, upload bool, spool string) (map[string][]string, *spooled, *apiError) {
	raw := map[string][]string{}
	for k, v := range r.URL.Query() {
		raw[k] = append(raw[k], v...)
	}
	if r.Body == nil {
		return raw, nil, nil
	}
	ctype := r.Header.Get("Content-Type")
	ct, ctParams, _ := mime.ParseMediaType(ctype)
	if upload {
		if ct != "multipart/form-data" || ctParams["boundary"] == "" {
			return nil, nil, errorf(http.StatusInternalServerError, "upload 'Content-Type '%s' not implemented", ctype)
		}
		file, err := readMultipart(multipart.NewReader(r.Body, ctParams["boundary"]), raw, spool)
		if err != nil {
			return nil, nil, errorf(http.StatusBadRequest, "%s", err.Error())
		}
		return raw, file, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPost+1))
	if err != nil {
		return nil, nil, errorf(http.StatusBadRequest, "read body: %v", err)
	}
	if len(body) > maxPost {
		return nil, nil, errorf(http.StatusNotImplemented, "for data too large")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return raw, nil, nil
	}
	switch ct {
	case "application/json":
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, nil, errorf(http.StatusBadRequest, "malformed JSON request body: %v", err)
		}
		for k, v := range m {
			raw[k] = append(raw[k], flattenJSON(v)...)
		}
		return raw, nil, nil
	case "", "application/x-www-form-urlencoded":
	default:
		// pveproxy reads only form and JSON bodies outside uploads, on any path.
		return nil, nil, errorf(506, "upload 'Content-Type '%s' not implemented", ctype)
	}
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, nil, errorf(http.StatusBadRequest, "malformed request body: %v", err)
	}
	for k, v := range vals {
		raw[k] = append(raw[k], v...)
	}
	return raw, nil, nil
}

// spooled is an upload's file part as pveproxy keeps it while the upload's worker
// runs: a temporary file (Proxmox's /var/tmp/pveupload-*), never held in memory.
type spooled struct {
	path string
	size int64
	// sha256 is the file's SHA-256 (hex), computed as it was spooled; other
	// algorithms are computed by reading the file again (spooled.sum).
	sha256 string
	kept   bool // the file became a volume's: discard leaves it
}

// sum is the file's checksum (hex) by algorithm alg, read outside the model's lock.
func (f *spooled) sum(alg string) (string, error) {
	if alg == "sha256" {
		return f.sha256, nil
	}
	h := newHash(alg)
	if h == nil {
		return "", fmt.Errorf("unknown checksum algorithm %q", alg)
	}
	in, err := os.Open(f.path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	if _, err := io.CopyBuffer(h, in, make([]byte, spoolChunk)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// discard deletes the spooled file unless a volume keeps it; nil does nothing.
func (f *spooled) discard() {
	if f != nil && !f.kept {
		_ = os.Remove(f.path)
	}
}

// spoolChunk is the buffer an upload's file part is copied through.
const spoolChunk = 1 << 20

// spoolDir is where uploads are spooled: under Config.DiskDir when it is set (beside
// the disks' bytes), else under the cluster's certificate directory (Config.CertDir,
// or the temporary one Close removes).
func (c *Cluster) spoolDir() string {
	if c.cfg.DiskDir != "" {
		return filepath.Join(c.cfg.DiskDir, "upload")
	}
	return filepath.Join(c.certDir, "upload")
}

// readMultipart adds an upload's form fields to raw and spools the content of its file
// part into a new file in dir (hashed on the way), whose file name becomes the
// filename parameter. Memory stays bounded by one buffer whatever the file's size.
func readMultipart(mr *multipart.Reader, raw map[string][]string, dir string) (_ *spooled, err error) {
	var file *spooled
	defer func() {
		if err != nil {
			file.discard()
		}
	}()
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("malformed multipart body: %w", err)
		}
		if part.FileName() == "" {
			b, err := io.ReadAll(io.LimitReader(part, maxPost+1))
			if err != nil {
				return nil, fmt.Errorf("malformed multipart body: %w", err)
			}
			if len(b) > maxPost {
				return nil, fmt.Errorf("form field %q larger than %d bytes", part.FormName(), maxPost)
			}
			raw[part.FormName()] = append(raw[part.FormName()], string(b))
			continue
		}
		if file != nil {
			return nil, errors.New("upload with more than one file")
		}
		if file, err = spool(part, dir); err != nil {
			return nil, err
		}
		raw["filename"] = append(raw["filename"], part.FileName())
	}
	if file == nil {
		return nil, errors.New("upload without a file")
	}
	return file, nil
}

// spool copies r into a new file of dir, hashing it, up to maxUpload bytes.
func spool(r io.Reader, dir string) (*spooled, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool upload: %w", err)
	}
	f, err := os.CreateTemp(dir, "pveupload-")
	if err != nil {
		return nil, fmt.Errorf("spool upload: %w", err)
	}
	out := &spooled{path: f.Name()}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), io.LimitReader(r, maxUpload+1), make([]byte, spoolChunk))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > maxUpload {
		err = fmt.Errorf("upload larger than %d bytes", int64(maxUpload))
	}
	if err != nil {
		out.discard()
		return nil, fmt.Errorf("malformed multipart body: %w", err)
	}
	out.size, out.sha256 = n, hex.EncodeToString(h.Sum(nil))
	return out, nil
}

func flattenJSON(v any) []string {
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		return []string{v}
	case json.Number:
		return []string{v.String()}
	case bool:
		if v {
			return []string{"1"}
		}
		return []string{"0"}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, flattenJSON(e)...)
		}
		return out
	default:
		b, _ := json.Marshal(v)
		return []string{string(b)}
	}
}

func writeError(w http.ResponseWriter, r *http.Request, e *apiError) int {
	body := map[string]any{"data": nil, "message": e.msg + "\n"}
	if len(e.errors) > 0 {
		body["errors"] = e.errors
	}
	b, _ := json.Marshal(body)
	return writeStatus(w, r, e.status, e.msg, b)
}

// writeStatus writes a response whose status line carries reason as Proxmox's pveproxy
// does ("HTTP/1.1 500 VM is locked (clone)"); clients such as go-proxmox surface only the
// status line. net/http cannot set a reason phrase, so the connection is taken over.
func writeStatus(w http.ResponseWriter, r *http.Request, status int, reason string, body []byte) int {
	// The connection closes after this response: read what the client sent first, or
	// closing with unread data resets the connection before the client reads the answer.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 16<<20))
	reason = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, strings.TrimSpace(reason))
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return status
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return status
	}
	defer conn.Close()
	bw := rw.Writer
	if bw == nil {
		bw = bufio.NewWriter(conn)
	}
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", status, reason)
	if len(body) > 0 {
		bw.WriteString("Content-Type: application/json;charset=UTF-8\r\n")
	}
	fmt.Fprintf(bw, "Content-Length: %d\r\nConnection: close\r\nCache-Control: max-age=0\r\n", len(body))
	fmt.Fprintf(bw, "Date: %s\r\n\r\n", time.Now().UTC().Format(http.TimeFormat))
	bw.Write(body)
	_ = bw.Flush()
	return status
}

// apiToken is one API token with its privileges.
type apiToken struct {
	id     string // USER@REALM!ID
	secret string
	acl    map[string]map[string]bool // nil = full privileges
}

func parseToken(s string) (id, secret string, err error) {
	id, secret, ok := strings.Cut(s, "=")
	if !ok || secret == "" {
		return "", "", fmt.Errorf("token %q: want USER@REALM!ID=SECRET", s)
	}
	user, tokenID, ok := strings.Cut(id, "!")
	if !ok || tokenID == "" || !strings.Contains(user, "@") || strings.HasPrefix(user, "@") || strings.HasSuffix(user, "@") {
		return "", "", fmt.Errorf("token %q: want USER@REALM!ID=SECRET", s)
	}
	return id, secret, nil
}

func (c *Cluster) addToken(s string, acl map[string][]string) error {
	id, secret, err := parseToken(s)
	if err != nil {
		return err
	}
	t := &apiToken{id: id, secret: secret}
	if acl != nil {
		t.acl = map[string]map[string]bool{}
		for p, privs := range acl {
			p = "/" + strings.Trim(p, "/")
			if t.acl[p] == nil {
				t.acl[p] = map[string]bool{}
			}
			for _, pr := range privs {
				t.acl[p][pr] = true
			}
		}
	}
	c.mu.Lock()
	c.tokens[id] = t
	c.mu.Unlock()
	return nil
}

// authenticate checks "Authorization: PVEAPIToken=USER@REALM!ID=SECRET".
func (c *Cluster) authenticate(r *http.Request) (string, *apiError) {
	h := r.Header.Get("Authorization")
	v, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		return "", &apiError{status: http.StatusUnauthorized, msg: "No ticket"}
	}
	id, secret, err := parseToken(v)
	if err != nil {
		return "", &apiError{status: http.StatusUnauthorized, msg: "invalid token value!"}
	}
	c.mu.Lock()
	t := c.tokens[id]
	c.mu.Unlock()
	if t == nil || subtle.ConstantTimeCompare([]byte(t.secret), []byte(secret)) != 1 {
		return "", &apiError{status: http.StatusUnauthorized, msg: "invalid token value!"}
	}
	return id, nil
}

// privilegeChecker answers whether the token has priv on path, with ACLs propagating
// from a path to everything below it; nil for a token with full privileges.
func (c *Cluster) privilegeChecker(id string) func(path, priv string) bool {
	c.mu.Lock()
	t := c.tokens[id]
	c.mu.Unlock()
	if t == nil || t.acl == nil {
		return nil
	}
	return func(p, priv string) bool {
		p = "/" + strings.Trim(p, "/")
		for {
			if t.acl[p][priv] {
				return true
			}
			if p == "/" {
				return false
			}
			i := strings.LastIndex(p, "/")
			if i <= 0 {
				p = "/"
			} else {
				p = p[:i]
			}
		}
	}
}
