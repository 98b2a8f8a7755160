package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/flexplane/flexplane/pkg/support/unixsock"
)

// ControlSocket is the name of the stack's control socket in Dir.
const ControlSocket = "control.sock"

// Usage is the devstack command's usage, the subcommands included.
const Usage = `usage: devstack [-addr ADDR] [-dir DIR] [-log-level LEVEL] [-portal-dir DIR]
       devstack [-dir DIR] COMMAND ...   (against the stack running in DIR)

commands:
  status                      every child: state (running, restarting, stopped, partitioned), pid, starts
  agent stop NAME             stop an agent (SIGTERM); it stays stopped until started
  agent start NAME            start a stopped agent
  agent kill NAME             SIGKILL an agent, as a crash; the stack restarts it
  node offline ZONE NODE      take a simulated Proxmox node offline
  node online ZONE NODE       and bring it back
  partition ZONE              cut the zone's agents off the orchestrator (SIGSTOP)
  heal ZONE                   reconnect them (SIGCONT)

NAME is ZONE-NODE (fra1-pve1 ... hel1-pve2), ZONE fra1 or hel1, NODE pve1, pve2, ...`

// UsageError is a bad command line (cmd/devstack exits 2 on it).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Command runs a devstack command (args as after the program's flags:
// "agent", "kill", "fra1-pve1") against the stack running in dir, found
// through dir/stack.json, and writes its answer to out. A bad command line
// is a *UsageError, checked before the stack is asked.
func Command(ctx context.Context, dir string, args []string, out io.Writer) error {
	path, err := controlPath(args)
	if err != nil {
		return err
	}
	method := http.MethodPost
	if path == "/status" {
		method = http.MethodGet
	}
	b, err := os.ReadFile(filepath.Join(dir, "stack.json"))
	if err != nil {
		return fmt.Errorf("no dev stack in %s (make dev starts one): %w", dir, err)
	}
	var st stackState
	if err := json.Unmarshal(b, &st); err != nil || st.Control == "" {
		return fmt.Errorf("%s names no control socket (a stack of an older devstack? restart it): %v", filepath.Join(dir, "stack.json"), err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	body, code, err := unixRequest(ctx, st.Control, method, path)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the dev stack of %s is not running (%s): %w", dir, st.Control, err)
		}
		return fmt.Errorf("devstack %s: %w", strings.Join(args, " "), err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("devstack %s: %s", strings.Join(args, " "), strings.TrimSpace(body))
	}
	_, err = io.WriteString(out, body)
	return err
}

// controlPath checks a command line and returns its control request's
// path.
func controlPath(args []string) (string, error) {
	if len(args) == 0 {
		return "", usagef("no command")
	}
	want := func(n int, form string) error {
		if len(args) != n {
			return usagef("want: devstack %s", form)
		}
		return nil
	}
	switch args[0] {
	case "status":
		if err := want(1, "status"); err != nil {
			return "", err
		}
		return "/status", nil
	case "agent":
		if err := want(3, "agent stop|start|kill NAME"); err != nil {
			return "", err
		}
		if !slices.Contains([]string{"stop", "start", "kill"}, args[1]) {
			return "", usagef("agent %q: want stop, start or kill", args[1])
		}
		if !slices.Contains(agentNames(), args[2]) {
			return "", usagef("agent %q: no such agent (have %s)", args[2], strings.Join(agentNames(), ", "))
		}
		return "/agents/" + args[2] + "/" + args[1], nil
	case "node":
		if err := want(4, "node offline|online ZONE NODE"); err != nil {
			return "", err
		}
		if args[1] != "offline" && args[1] != "online" {
			return "", usagef("node %q: want offline or online", args[1])
		}
		c, err := clusterNamed(args[2])
		if err != nil {
			return "", err
		}
		if !slices.Contains(c.nodeNames(), args[3]) {
			return "", usagef("node %q: zone %s has %s", args[3], c.Name, strings.Join(c.nodeNames(), ", "))
		}
		return "/zones/" + c.Name + "/nodes/" + args[3] + "/" + args[1], nil
	case "partition", "heal":
		if err := want(2, args[0]+" ZONE"); err != nil {
			return "", err
		}
		c, err := clusterNamed(args[1])
		if err != nil {
			return "", err
		}
		return "/zones/" + c.Name + "/" + args[0], nil
	}
	return "", usagef("unknown command %q", args[0])
}

func (c Cluster) nodeNames() []string {
	var out []string
	for i := 1; i <= c.Nodes; i++ {
		out = append(out, fmt.Sprintf("pve%d", i))
	}
	return out
}

// agentNames are the agents' names, ZONE-NODE.
func agentNames() []string {
	var out []string
	for _, c := range Clusters() {
		for _, n := range c.nodeNames() {
			out = append(out, c.Name+"-"+n)
		}
	}
	return out
}

func clusterNamed(name string) (Cluster, error) {
	var names []string
	for _, c := range Clusters() {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return Cluster{}, usagef("zone %q: no such zone (have %s)", name, strings.Join(names, ", "))
}

// unixRequest sends an HTTP request without a body to the server on the
// unix socket sock and returns the answer's body and status.
func unixRequest(ctx context.Context, sock, method, path string) (string, int, error) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://control"+path, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(b), resp.StatusCode, err
}

// serveControl serves the control socket at Dir/control.sock until the
// stack stops; the returned function closes it.
func (s *stack) serveControl() (string, func(), error) {
	path := s.path(ControlSocket)
	ln, err := unixsock.Listen(path)
	if err != nil {
		return "", nil, fmt.Errorf("control socket: %w", err)
	}
	srv := &http.Server{Handler: s.controlHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return path, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// controlHandler answers the commands of Command: 200 and a line saying
// what was done, 404 for an unknown agent, zone or node, 409 when the
// target is not in the state the command needs.
func (s *stack) controlHandler() http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, msg string, err error) {
		switch {
		case err == nil:
			fmt.Fprintln(w, msg)
		case errors.Is(err, errNoSuchChild):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, errConflict):
			http.Error(w, err.Error(), http.StatusConflict)
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, s.status())
	})
	mux.HandleFunc("POST /agents/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		name, action := AgentPrefix+r.PathValue("name"), r.PathValue("action")
		switch action {
		case "stop":
			answer(w, name+" stopped; devstack agent start brings it back", s.hold(name))
		case "start":
			answer(w, name+" starting", s.release(name))
		case "kill":
			pid, err := s.kill(name)
			answer(w, fmt.Sprintf("%s (pid %d) killed with SIGKILL; the stack restarts it", name, pid), err)
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("POST /zones/{zone}/nodes/{node}/{state}", func(w http.ResponseWriter, r *http.Request) {
		zone, node, state := r.PathValue("zone"), r.PathValue("node"), r.PathValue("state")
		if _, err := clusterNamed(zone); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		body, code, err := unixRequest(r.Context(), s.path("pve", zone+".sock"), http.MethodPost, "/nodes/"+node+"/"+state)
		switch {
		case err != nil:
			http.Error(w, fmt.Sprintf("pvesim %s: %v", zone, err), http.StatusBadGateway)
		case code != http.StatusNoContent:
			http.Error(w, fmt.Sprintf("pvesim %s: %s", zone, strings.TrimSpace(body)), code)
		default:
			s.log.Warn("simulated node set on request", "zone", zone, "node", node, "state", state)
			fmt.Fprintf(w, "node %s of %s is %s\n", node, zone, state)
		}
	})
	mux.HandleFunc("POST /zones/{zone}/{action}", func(w http.ResponseWriter, r *http.Request) {
		zone, action := r.PathValue("zone"), r.PathValue("action")
		c, err := clusterNamed(zone)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if action != "partition" && action != "heal" {
			http.NotFound(w, r)
			return
		}
		var agents []string
		for _, n := range c.nodeNames() {
			agents = append(agents, AgentPrefix+zone+"-"+n)
		}
		err = s.freeze(agents, action == "partition")
		s.log.Warn("zone "+action+" on request", "zone", zone, "err", err)
		msg := fmt.Sprintf("zone %s partitioned: its agents are stopped (SIGSTOP); devstack heal %s reconnects them", zone, zone)
		if action == "heal" {
			msg = fmt.Sprintf("zone %s healed: its agents continue (SIGCONT)", zone)
		}
		answer(w, msg, err)
	})
	return mux
}

// status describes the children, one a line.
func (s *stack) status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, u := range s.units {
		state := "running"
		switch {
		case u.held:
			state = "stopped"
		case !u.running():
			state = "restarting"
		case u.frozen:
			state = "partitioned"
		}
		pid := 0
		if u.running() {
			pid = u.cur.pid()
		}
		fmt.Fprintf(&b, "%-16s %-12s pid %-7d starts %d within %v\n", u.name, state, pid, u.recent(time.Now(), s.policy.interval), s.policy.interval)
	}
	return b.String()
}
