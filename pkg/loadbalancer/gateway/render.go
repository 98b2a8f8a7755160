package gateway

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// The Caddy JSON config flexgateway renders, as typed structs of its own:
// only the fields it sets, named as Caddy v2.11 and caddy-l4 v0.1.2 spell
// them. The golden files of render_test.go pin the output, so a change of
// either schema shows up as a golden diff.

type caddyConfig struct {
	Admin   caddyAdmin   `json:"admin"`
	Storage caddyStorage `json:"storage"`
	Logging caddyLogging `json:"logging"`
	Apps    caddyApps    `json:"apps"`
}

// caddyAdmin disables Caddy's own admin endpoint and its config autosave.
type caddyAdmin struct {
	Disabled bool             `json:"disabled"`
	Config   caddyAdminConfig `json:"config"`
}

type caddyAdminConfig struct {
	Persist bool `json:"persist"`
}

type caddyStorage struct {
	Module string `json:"module"`
	Root   string `json:"root"`
}

type caddyLogging struct {
	Logs map[string]caddyLog `json:"logs"`
}

type caddyLog struct {
	Level string `json:"level"`
}

type caddyApps struct {
	Layer4 *l4App   `json:"layer4,omitempty"`
	HTTP   *httpApp `json:"http,omitempty"`
	TLS    *tlsApp  `json:"tls,omitempty"`
}

type l4App struct {
	Servers map[string]l4Server `json:"servers"`
}

type l4Server struct {
	Listen []string  `json:"listen"`
	Routes []l4Route `json:"routes"`
}

type l4Route struct {
	Match  []l4Match   `json:"match,omitempty"`
	Handle []l4Handler `json:"handle"`
}

type l4Match struct {
	TLS *l4MatchTLS `json:"tls,omitempty"`
}

type l4MatchTLS struct {
	SNI []string `json:"sni"`
}

type l4Handler struct {
	Handler       string       `json:"handler"`
	Upstreams     []l4Upstream `json:"upstreams,omitempty"`
	LoadBalancing *l4Balancing `json:"load_balancing,omitempty"`
}

type l4Upstream struct {
	Dial []string `json:"dial"`
}

type l4Balancing struct {
	Selection selectionPolicy `json:"selection"`
}

type selectionPolicy struct {
	Policy string `json:"policy"`
}

type httpApp struct {
	Servers map[string]httpServer `json:"servers"`
}

type httpServer struct {
	Listen                []string        `json:"listen"`
	Routes                []httpRoute     `json:"routes"`
	AutomaticHTTPS        autoHTTPS       `json:"automatic_https"`
	TLSConnectionPolicies []tlsConnPolicy `json:"tls_connection_policies,omitempty"`
	Protocols             []string        `json:"protocols"`
}

type autoHTTPS struct {
	Disable bool `json:"disable"`
}

type httpRoute struct {
	Match    []httpMatch   `json:"match,omitempty"`
	Handle   []httpHandler `json:"handle"`
	Terminal bool          `json:"terminal"`
}

type httpMatch struct {
	Path []string `json:"path"`
}

type httpHandler struct {
	Handler       string         `json:"handler"`
	Upstreams     []httpUpstream `json:"upstreams,omitempty"`
	LoadBalancing *httpBalancing `json:"load_balancing,omitempty"`
	StatusCode    int            `json:"status_code,omitempty"`
	Body          string         `json:"body,omitempty"`
}

type httpUpstream struct {
	Dial string `json:"dial"`
}

type httpBalancing struct {
	SelectionPolicy selectionPolicy `json:"selection_policy"`
}

type tlsConnPolicy struct {
	Match                *tlsMatch     `json:"match,omitempty"`
	CertificateSelection certSelection `json:"certificate_selection"`
	ALPN                 []string      `json:"alpn"`
}

// tlsMatch matches a ClientHello by its server name (a wildcard matches
// one label) or by the local address it came to.
type tlsMatch struct {
	SNI     []string    `json:"sni,omitempty"`
	LocalIP *tlsMatchIP `json:"local_ip,omitempty"`
}

type tlsMatchIP struct {
	Ranges []string `json:"ranges"`
}

type certSelection struct {
	AnyTag []string `json:"any_tag"`
}

type tlsApp struct {
	Certificates        tlsCertificates `json:"certificates"`
	DisableOCSPStapling bool            `json:"disable_ocsp_stapling"`
}

type tlsCertificates struct {
	LoadPEM []pemCertificate `json:"load_pem"`
}

type pemCertificate struct {
	Certificate string   `json:"certificate"`
	Key         string   `json:"key"`
	Tags        []string `json:"tags"`
}

// backendKey names a backend across the replica.
type backendKey struct {
	Balancer, Pool, Backend string
}

// renderOptions are what a rendering depends on besides the Config.
type renderOptions struct {
	// StorageDir is Caddy's storage root (certificate locks, session data).
	StorageDir string
	// LogLevel is Caddy's log level (DEBUG, INFO, WARN, ERROR).
	LogLevel string
	// Down reports the backends taken out by their health check; nil is
	// none.
	Down func(backendKey) bool
	// Listen is the Caddy listen address of a listener of the protocol at
	// address (a network of the gateway's for a socket it holds); nil is
	// "tcp/" + address.
	Listen func(p lbconfig.Protocol, address string) string
}

// render turns a validated cfg into Caddy's JSON config: a layer4 server
// per TCP and TLS passthrough listener, an HTTP server per HTTP(S)
// listener, the certificates of HTTPS listeners in the tls app, tagged by
// balancer and name. Backends that are down are left out; a pool with
// none left closes TCP connections and answers HTTP 503.
func render(cfg lbconfig.Config, opt renderOptions) ([]byte, error) {
	out := caddyConfig{
		Admin:   caddyAdmin{Disabled: true, Config: caddyAdminConfig{Persist: false}},
		Storage: caddyStorage{Module: "file_system", Root: opt.StorageDir},
		Logging: caddyLogging{Logs: map[string]caddyLog{"default": {Level: cmp.Or(opt.LogLevel, "WARN")}}},
	}
	down := opt.Down
	if down == nil {
		down = func(backendKey) bool { return false }
	}
	listenAddr := opt.Listen
	if listenAddr == nil {
		listenAddr = func(_ lbconfig.Protocol, a string) string { return "tcp/" + a }
	}
	for _, b := range cfg.Balancers {
		pools := map[string]lbconfig.Pool{}
		for _, p := range b.Pools {
			pools[p.Name] = p
		}
		// up lists the dial addresses of a pool's backends that take traffic.
		up := func(pool string) []string {
			var addrs []string
			for _, be := range pools[pool].Backends {
				if !down(backendKey{b.ID, pool, be.ID}) {
					addrs = append(addrs, be.Address)
				}
			}
			return addrs
		}
		for _, l := range b.Listeners {
			name := serverName(b.ID, l.Name)
			listen := []string{listenAddr(l.Protocol, l.Address)}
			switch l.Protocol {
			case lbconfig.ProtocolTCP:
				out.layer4().Servers[name] = l4Server{Listen: listen, Routes: []l4Route{{Handle: []l4Handler{l4Proxy(up(l.Pool))}}}}
			case lbconfig.ProtocolTLSPassthrough:
				var routes []l4Route
				for _, r := range l.SNIRoutes {
					routes = append(routes, l4Route{
						Match:  []l4Match{{TLS: &l4MatchTLS{SNI: []string{r.ServerName}}}},
						Handle: []l4Handler{l4Proxy(up(r.Pool))},
					})
				}
				fallback := l4Handler{Handler: "close"}
				if l.Pool != "" {
					fallback = l4Proxy(up(l.Pool))
				}
				routes = append(routes, l4Route{Handle: []l4Handler{fallback}})
				out.layer4().Servers[name] = l4Server{Listen: listen, Routes: routes}
			case lbconfig.ProtocolHTTP, lbconfig.ProtocolHTTPS:
				srv := httpServer{Listen: listen, AutomaticHTTPS: autoHTTPS{Disable: true}, Protocols: []string{"h1"}}
				routes := slices.Clone(l.Routes)
				slices.SortStableFunc(routes, func(a, b lbconfig.Route) int { return cmp.Compare(len(b.PathPrefix), len(a.PathPrefix)) })
				for _, r := range routes {
					srv.Routes = append(srv.Routes, httpRoute{
						Match:    []httpMatch{{Path: []string{r.PathPrefix + "*"}}},
						Handle:   []httpHandler{httpProxy(up(r.Pool))},
						Terminal: true,
					})
				}
				fallback := httpHandler{Handler: "static_response", StatusCode: 404, Body: "no route\n"}
				if l.Pool != "" {
					fallback = httpProxy(up(l.Pool))
				}
				srv.Routes = append(srv.Routes, httpRoute{Handle: []httpHandler{fallback}, Terminal: true})
				if l.Protocol == lbconfig.ProtocolHTTPS {
					srv.Protocols = []string{"h1", "h2"}
					policies, err := out.certificates(b, l)
					if err != nil {
						return nil, err
					}
					srv.TLSConnectionPolicies = policies
				}
				out.http().Servers[name] = srv
			}
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return b, nil
}

// serverName names a listener's Caddy server.
func serverName(balancer, listener string) string {
	return "lb-" + balancer + "-" + listener
}

func (c *caddyConfig) layer4() *l4App {
	if c.Apps.Layer4 == nil {
		c.Apps.Layer4 = &l4App{Servers: map[string]l4Server{}}
	}
	return c.Apps.Layer4
}

func (c *caddyConfig) http() *httpApp {
	if c.Apps.HTTP == nil {
		c.Apps.HTTP = &httpApp{Servers: map[string]httpServer{}}
	}
	return c.Apps.HTTP
}

// certificates loads the certificates HTTPS listener l serves into the
// tls app (once per balancer and name) and returns the listener's
// connection policies, the first that matches a ClientHello deciding:
// each allows one certificate alone, because caddy, when a policy's tags
// allow several, picks any of them for a name none of them holds (and for
// a wildcard name, or none). So a name a certificate holds exactly gets
// it (the listener's first such), then one its wildcard holds, then a
// connection to an address it holds; every other ClientHello (no name, or
// a name no certificate holds) gets the listener's first certificate.
func (c *caddyConfig) certificates(b lbconfig.Balancer, l lbconfig.Listener) ([]tlsConnPolicy, error) {
	if c.Apps.TLS == nil {
		c.Apps.TLS = &tlsApp{DisableOCSPStapling: true}
	}
	one := func(tag string, m *tlsMatch) tlsConnPolicy {
		return tlsConnPolicy{Match: m, CertificateSelection: certSelection{AnyTag: []string{tag}}, ALPN: []string{"h2", "http/1.1"}}
	}
	var exact, wildcard, byAddr []tlsConnPolicy
	for _, name := range l.Certificates {
		tag := b.ID + "/" + name
		i := slices.IndexFunc(b.Certificates, func(cert lbconfig.Certificate) bool { return cert.Name == name })
		if i < 0 {
			return nil, invalid("balancer %q listener %q: certificate %q does not exist", b.ID, l.Name, name)
		}
		cert := b.Certificates[i]
		leaf, err := parseCertificate(cert)
		if err != nil {
			return nil, invalid("balancer %q certificate %q: %v", b.ID, name, err)
		}
		var names, wildcards, addrs []string
		for _, n := range leaf.DNSNames {
			if strings.HasPrefix(n, "*.") {
				wildcards = append(wildcards, n)
			} else {
				names = append(names, n)
			}
		}
		for _, ip := range leaf.IPAddresses {
			addrs = append(addrs, ip.String())
		}
		if len(names) > 0 {
			exact = append(exact, one(tag, &tlsMatch{SNI: names}))
		}
		if len(wildcards) > 0 {
			wildcard = append(wildcard, one(tag, &tlsMatch{SNI: wildcards}))
		}
		if len(addrs) > 0 {
			byAddr = append(byAddr, one(tag, &tlsMatch{LocalIP: &tlsMatchIP{Ranges: addrs}}))
		}
		loaded := slices.ContainsFunc(c.Apps.TLS.Certificates.LoadPEM, func(p pemCertificate) bool { return slices.Contains(p.Tags, tag) })
		if !loaded {
			c.Apps.TLS.Certificates.LoadPEM = append(c.Apps.TLS.Certificates.LoadPEM,
				pemCertificate{Certificate: cert.CertPEM, Key: cert.KeyPEM, Tags: []string{tag}})
		}
	}
	if len(l.Certificates) == 0 {
		return nil, invalid("balancer %q listener %q: HTTPS with no certificate", b.ID, l.Name)
	}
	policies := slices.Concat(exact, wildcard, byAddr)
	return append(policies, one(b.ID+"/"+l.Certificates[0], nil)), nil
}

// l4Proxy proxies to addrs round robin, or closes the connection when
// there are none.
func l4Proxy(addrs []string) l4Handler {
	if len(addrs) == 0 {
		return l4Handler{Handler: "close"}
	}
	h := l4Handler{Handler: "proxy", LoadBalancing: &l4Balancing{Selection: selectionPolicy{Policy: roundRobinPolicy}}}
	for _, a := range addrs {
		h.Upstreams = append(h.Upstreams, l4Upstream{Dial: []string{"tcp/" + a}})
	}
	return h
}

// httpProxy reverse-proxies to addrs round robin, or answers 503 when
// there are none.
func httpProxy(addrs []string) httpHandler {
	if len(addrs) == 0 {
		return httpHandler{Handler: "static_response", StatusCode: 503, Body: "no healthy backend\n"}
	}
	h := httpHandler{Handler: "reverse_proxy", LoadBalancing: &httpBalancing{SelectionPolicy: selectionPolicy{Policy: "round_robin"}}}
	for _, a := range addrs {
		h.Upstreams = append(h.Upstreams, httpUpstream{Dial: a})
	}
	return h
}
