package devstack

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/tcpfront"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// step is one named step of bringing the stack up inside its namespace.
// run starts what the step owns and returns its closer (nil when the
// processes it added are all it started: stopAll stops those); the stack
// runs the closers of the steps that ran, last first, when it stops.
type step struct {
	name string
	run  func(ctx context.Context) (closer func(), err error)
}

// steps are the stack's steps in their order: each uses only what the
// ones before it made.
func (u *up) steps() []step {
	return []step{
		{"loopback", u.loopback},
		{"addresses", u.addresses},
		{"images", u.images},
		{"identity provider", u.identityProvider},
		{"simulated clusters", u.clusters},
		{"orchestrator", u.orchestrator},
		{"tokens", u.tokens},
		{"agents", u.agents},
		{"hosts online", u.hostsOnline},
		{"demo data", u.demoData},
	}
}

// up is what the steps make, each from what the earlier ones made.
type up struct {
	s *stack

	idpLn, imgLn  net.Listener        // addresses; closed by the steps that hand them on
	metricsAddr   string              // addresses
	state         stackState          // addresses
	refs          map[string]imageRef // images
	imageURL      string              // images
	idp           *devidp.Server      // identity provider
	sims          map[string]*sim     // simulated clusters
	releasePub    string              // orchestrator
	orchestrators []orchestratorUnit  // orchestrator
	clients       map[string]*Client  // tokens, by user
}

// run brings the stack up step by step inside its namespace, prints the
// ready line, and serves until ctx ends or a child gives up.
func (s *stack) run(ctx context.Context) error {
	if !netns.Inside() {
		return s.runIsolated(ctx)
	}
	start := time.Now()
	built := start
	if d, err := time.ParseDuration(os.Getenv(envBuilt)); err == nil {
		start = start.Add(-d)
	}
	u := &up{s: s}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	for _, st := range u.steps() {
		closer, err := st.run(ctx)
		if closer != nil {
			closers = append(closers, closer)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	s.banner(u.idp.Issuer(), u.imageURL, built.Sub(start), time.Since(start))
	s.mux.mu.Lock()
	fmt.Fprintf(s.cfg.Stdout, "%shttp://%s\n", ReadyPrefix, s.cfg.Addr)
	s.mux.mu.Unlock()

	select {
	case <-ctx.Done():
		s.log.Info("stopping: " + context.Cause(ctx).Error())
		return nil
	case err := <-s.died:
		return err
	}
}

// loopback brings lo up and serves what the host reaches: the listeners
// runIsolated made on the host, forwarded to the same addresses here.
func (u *up) loopback(context.Context) (func(), error) {
	if err := netns.LoopbackUp(); err != nil {
		return nil, err
	}
	fwd := os.Getenv(envForward)
	if fwd == "" {
		return nil, nil
	}
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	for i, addr := range strings.Split(fwd, ",") {
		ln, err := net.FileListener(os.NewFile(uintptr(3+i), addr))
		if err != nil {
			return closeAll, fmt.Errorf("forward %s: %w", addr, err)
		}
		lns = append(lns, ln)
		tcpfront.Serve(ln, addr)
	}
	return closeAll, nil
}

// addresses takes the addresses kept across restarts (the identity
// provider's, the image server's, the orchestrator's metrics), serves the
// control socket and writes stack.json.
func (u *up) addresses(context.Context) (func(), error) {
	s := u.s
	st := s.readState()
	var err error
	if u.idpLn, err = listenPreferred(st.IDPAddr); err != nil {
		return nil, err
	}
	if u.imgLn, err = listenPreferred(st.ImageAddr); err != nil {
		u.idpLn.Close()
		return nil, err
	}
	// The orchestrator binds its metrics address itself: it is only
	// reserved here (a moment's race with another process is accepted).
	metricsLn, err := listenPreferred(st.Metrics)
	if err != nil {
		u.idpLn.Close()
		u.imgLn.Close()
		return nil, err
	}
	u.metricsAddr = metricsLn.Addr().String()
	metricsLn.Close()
	control, closeControl, err := s.serveControl()
	if err != nil {
		u.idpLn.Close()
		u.imgLn.Close()
		return nil, err
	}
	u.state = stackState{IDPAddr: u.idpLn.Addr().String(), ImageAddr: u.imgLn.Addr().String(), URL: s.url,
		Issuer: "http://" + u.idpLn.Addr().String(), Control: control, Metrics: u.metricsAddr}
	s.writeState(u.state)
	return closeControl, nil
}

// images writes the stand-in images and serves them.
func (u *up) images(context.Context) (func(), error) {
	u.refs = map[string]imageRef{}
	for _, img := range standIns() {
		sum, err := writeStandIn(u.s.path("images", img.File))
		if err != nil {
			u.idpLn.Close()
			u.imgLn.Close()
			return nil, err
		}
		u.refs[img.Name] = imageRef{url: "http://" + u.state.ImageAddr + "/" + img.File, checksum: sum}
	}
	images := startImageServer(u.imgLn, u.s.path("images"))
	u.imageURL = images.url
	return func() { images.Close() }, nil
}

// identityProvider starts the development OpenID provider with the demo
// users and the portal's client.
func (u *up) identityProvider(context.Context) (func(), error) {
	s := u.s
	u.idpLn.Close() // devidp listens itself; the address was free a moment ago
	var users []devidp.User
	for _, d := range DemoUsers() {
		users = append(users, devidp.User{Username: d.Username, Password: d.Password, Name: d.Name, Email: d.Email, Roles: d.Roles})
	}
	idp, err := devidp.New(devidp.Config{
		Addr:   u.state.IDPAddr,
		KeyDir: s.path("idp"),
		Users:  users,
		Clients: []devidp.Client{{
			ID:                     ClientID,
			RedirectURIs:           []string{s.url + "/auth/callback"},
			PostLogoutRedirectURIs: []string{s.url + "/"},
		}, {ID: CLIClientID, RedirectURIs: []string{"http://127.0.0.1/callback"}}},
		TokenLifetime:          TokenLifetime,
		RenewableTokenLifetime: SessionTokenLifetime,
		Logger:                 s.log.With("component", "devidp"),
	})
	if err != nil {
		return nil, err
	}
	if err := idp.Start(); err != nil {
		return nil, err
	}
	u.idp = idp
	return func() { idp.Close() }, nil
}

// clusters starts the simulated clusters. Their certificates (and so the
// zones' identities) and their state are kept in Dir/pve; every node has
// its own API endpoint, which its agent uses, as an agent uses its node's
// local API.
func (u *up) clusters(ctx context.Context) (func(), error) {
	s := u.s
	u.sims = map[string]*sim{}
	for _, c := range Clusters() {
		secret := make([]byte, 16)
		rand.Read(secret)
		token := "flexplane@pve!agent=" + hex.EncodeToString(secret)
		tokenFile := s.path("pve", c.Name+".token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("pve token: %w", err)
		}
		sm := &sim{cluster: c, tokenFile: tokenFile, nodes: map[string]endpoint{}, ready: make(chan struct{})}
		control := s.path("pve", c.Name+".sock")
		args := []string{"--cluster", c.Name, "--nodes", fmt.Sprint(c.Nodes),
			"--token-file", tokenFile, "--timing", cmp.Or(s.cfg.PVETiming, "realistic"), "--cert-dir", s.path("pve", c.Name+"-certs"),
			"--state-file", s.path("pve", c.Name+"-state.json"), "--control", control,
			"--file-root", s.filesDir(c.Name), "--log-level", s.cfg.LogLevel}
		if s.dataPlane {
			args = append(args, "--dataplane", DataPlanePrefix(s.cfg.Dir, c.Name), "--upstream", c.Upstream)
		}
		if _, err := s.add("pvesim "+c.Name, func() procSpec {
			return procSpec{path: s.path("bin", "pvesim"), args: append(sm.listenArgs(), args...), stdout: sm.parse}
		}); err != nil {
			return nil, err
		}
		if err := s.await(ctx, sm.ready, 30*time.Second, "pvesim "+c.Name+" to print its nodes' addresses"); err != nil {
			return nil, err
		}
		if err := enableSnippets(ctx, sm); err != nil {
			return nil, fmt.Errorf("pvesim %s: %w", c.Name, err)
		}
		u.sims[c.Name] = sm
	}
	return nil, nil
}

// orchestrator publishes a second agent build with the release key and
// starts the orchestrator: one, or with Kube the replicas behind a front.
func (u *up) orchestrator(ctx context.Context) (func(), error) {
	s := u.s
	orchDir := s.path("orchestrator")
	releasePub, releasePriv, err := s.releaseKey()
	if err != nil {
		return nil, fmt.Errorf("release key: %w", err)
	}
	u.releasePub = releasePub
	if err := s.publishNext(ctx, orchDir, releasePub, releasePriv); err != nil {
		return nil, err
	}
	common := []string{"-release-key-file", releasePub, "-release-dir", filepath.Join(orchDir, "releases"),
		"-log-level", s.cfg.LogLevel, "-oidc-issuer", u.idp.Issuer(), "-oidc-audience", ClientID, "-oidc-cli-client-id", CLIClientID,
		"-tenant-name", "flexplane dev", "-tenant-domain", "dev.flexplane.local",
		"-portal-dir", s.cfg.PortalDir}
	if s.cfg.VMRecoverAfter > 0 {
		common = append(common, "-vm-recover-after", s.cfg.VMRecoverAfter.String())
	}
	u.orchestrators = []orchestratorUnit{{name: "orchestrator", dataDir: orchDir,
		args: []string{"serve", "-listen", s.cfg.Addr, "-data-dir", orchDir, "-stun-addr", "127.0.0.1:0", "-metrics-addr", u.metricsAddr}}}
	var closer func()
	if s.cfg.Kube {
		kube, closeKube, err := s.startKube(ctx, u.metricsAddr)
		if err != nil {
			return nil, err
		}
		closer = closeKube
		u.orchestrators = kube
	}
	for _, o := range u.orchestrators {
		args := append(o.args, common...)
		if _, err := s.add(o.name, func() procSpec {
			return procSpec{path: s.path("bin", "orchestrator"), args: args}
		}); err != nil {
			return closer, err
		}
	}
	return closer, nil
}

// tokens logs the demo users in (their tokens are valid before the API
// is up) and waits for the orchestrator's API.
func (u *up) tokens(ctx context.Context) (func(), error) {
	s := u.s
	u.clients = map[string]*Client{}
	for _, d := range DemoUsers() {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tok, err := u.idp.Login(tctx, ClientID, d.Username, d.Password)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("token of %s: %w", d.Username, err)
		}
		u.clients[d.Username] = &Client{URL: s.url + "/graphql", Token: tok.AccessToken}
	}
	admin := u.clients["admin"]
	return nil, s.poll(ctx, 60*time.Second, "the orchestrator's API", func() error {
		return admin.Do(ctx, "", `{ tenant { name } }`, nil, nil)
	})
}

// agents starts one agent per simulated node, enrolled (the first time)
// with a key the orchestrator makes.
func (u *up) agents(ctx context.Context) (func(), error) {
	s := u.s
	var keyFile string
	for _, c := range Clusters() {
		for i := 1; i <= c.Nodes; i++ {
			if !meshnode.HasState(s.agentDir(fmt.Sprintf("%s-pve%d", c.Name, i))) {
				keyFile = s.agentDir("enroll.key")
			}
		}
	}
	if keyFile != "" {
		key, err := s.enrollKey(ctx, u.orchestrators)
		if err != nil {
			return nil, fmt.Errorf("enrollment key: %w", err)
		}
		if err := os.WriteFile(keyFile, []byte(strings.TrimSpace(key)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("enrollment key: %w", err)
		}
	}
	for _, c := range Clusters() {
		sm := u.sims[c.Name]
		for i := 1; i <= c.Nodes; i++ {
			node := fmt.Sprintf("pve%d", i)
			ep := sm.endpoint(node) // the same across the simulator's restarts
			name := c.Name + "-" + node
			state := s.agentDir(name)
			env := []string{
				"FLEXPLANE_CONTROL_URL=" + s.url,
				"FLEXPLANE_STATE_DIR=" + state,
				"FLEXPLANE_NODE_NAME=" + node,
				"FLEXPLANE_MESH_NAME=" + name,
				"FLEXPLANE_PVE_URL=" + ep.url,
				"FLEXPLANE_PVE_TOKEN_FILE=" + sm.tokenFile,
				"FLEXPLANE_PVE_FINGERPRINT=" + ep.fingerprint,
				// The files the agent proves its membership with, where
				// pvesim keeps them in its --cert-dir as Proxmox does
				// (pvesim.NodeFilesIn).
				"FLEXPLANE_PVE_SSL_KEY=" + s.path("pve", c.Name+"-certs", "nodes", node, "pve-ssl.key"),
				"FLEXPLANE_PVE_SSL_CERT=" + s.path("pve", c.Name+"-certs", "nodes", node, "pve-ssl.pem"),
				"FLEXPLANE_PVE_ROOT_CA=" + s.path("pve", c.Name+"-certs", "pve-root-ca.pem"),
				"FLEXPLANE_LOG_LEVEL=" + s.cfg.LogLevel,
				"FLEXPLANE_RELEASE_KEY_FILE=" + u.releasePub,
				// The node's file system, where the agent writes the
				// snippets of the VMs' user-data.
				"FLEXPLANE_FILE_ROOT=" + filepath.Join(s.filesDir(c.Name), node),
				// The data listener, on the stack namespace's loopback
				// (which the orchestrators share), a free port each
				// start: uploads of images take it rather than the mesh.
				"FLEXPLANE_DATA_LISTEN=127.0.0.1:0",
			}
			// Every start runs the agents just built (AgentVersion), not a
			// version an earlier start updated them to.
			if err := os.RemoveAll(filepath.Join(state, "update")); err != nil {
				return nil, err
			}
			if s.dataPlane {
				// The node's bridges are in its namespace of the data plane.
				nodeNS := DataPlanePrefix(s.cfg.Dir, c.Name) + "-" + node
				env = append(env, "FLEXPLANE_EDGE_BRIDGE_NETNS="+nodeNS, "FLEXPLANE_EDGE_NETNS_PREFIX="+nodeNS+"-")
			}
			if _, err := s.add(AgentPrefix+name, func() procSpec {
				// Enrolled once; a restart rejoins with the saved identity.
				if !meshnode.HasState(state) {
					return procSpec{path: s.path("bin", "agent"), env: append(env, "FLEXPLANE_ENROLL_KEY_FILE="+keyFile)}
				}
				return procSpec{path: s.path("bin", "agent"), env: env}
			}); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// hostsOnline waits until the API reports every simulated node's host
// online.
func (u *up) hostsOnline(ctx context.Context) (func(), error) {
	hosts := 0
	for _, c := range Clusters() {
		hosts += c.Nodes
	}
	admin := u.clients["admin"]
	return nil, u.s.poll(ctx, 90*time.Second, fmt.Sprintf("all %d hosts online", hosts), func() error {
		var d struct {
			Hosts []struct{ Status string }
		}
		if err := admin.Do(ctx, "", `{ hosts { status } }`, nil, &d); err != nil {
			return err
		}
		online := 0
		for _, h := range d.Hosts {
			if h.Status == "ONLINE" {
				online++
			}
		}
		if online < hosts {
			return fmt.Errorf("%d of %d hosts online", online, hosts)
		}
		return nil
	})
}

// demoData creates the demo VDCs, profiles, images and networks and
// writes the users' tokens to Dir/tokens.
func (u *up) demoData(ctx context.Context) (func(), error) {
	var zoneNames []string
	upstreams := map[string]string{}
	for _, c := range Clusters() {
		zoneNames = append(zoneNames, c.Name)
		if u.s.dataPlane {
			upstreams[c.Name] = c.Upstream
		}
	}
	sd := &seeder{log: u.s.log, clients: u.clients, images: u.refs, zones: zoneNames, upstreams: upstreams, ctx: ctx}
	if err := sd.run(ctx); err != nil {
		return nil, err
	}
	for user, c := range u.clients {
		if err := atomicfile.WriteFile(u.s.path("tokens", user+".token"), []byte(c.Token+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("token of %s: %w", user, err)
		}
	}
	return nil, nil
}
