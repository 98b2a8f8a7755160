// Package lbconfig is the contract between flexplane's orchestrator and flexgateway, the
// load balancers' data plane: the typed desired state of every load balancer a
// flexgateway replica serves (Config), what the replica reports back (Status), and the
// replica's admin API that carries both (Client).
//
// The orchestrator renders a Config per zone from the catalog and pushes the whole of it
// to every replica of the zone; a replica applies it atomically (all or nothing) and
// without dropping established connections. Nothing else configures a replica.
//
// The admin API, served by each replica on its admin listener over TLS (ServerTLS), needs
// both a client certificate that chains to the replica's client CA and the bearer token of
// the replica's zone (each zone has a token of its own); the orchestrator presents its
// certificate and checks the replica's (ClientTLS). Private keys are write-only: no answer
// carries one.
//
//	PUT /v1/config   body: Config (JSON). 204 when applied; 400 with a plain-text reason
//	                 when the config is invalid (nothing changes); 401 without the token.
//	GET /v1/config   the Config in force (certificate keys redacted).
//	GET /v1/status   Status (JSON). With ?after=<generation>, the answer waits until
//	                 the status's Generation is another one, or ?wait= (a Go duration,
//	                 default 30s, at most 5m) has passed: a watch of the replica.
//	GET /healthz     200 while the process serves.
//	GET /readyz      200 once a Config has been applied.
//	GET /metrics     Prometheus metrics.
//
// /healthz, /readyz and /metrics are on the same listener over TLS too, but need no client
// certificate and no token, for probes and scrapers.
package lbconfig

import (
	"time"
)

// Protocol is a listener's protocol.
type Protocol string

// Listener protocols.
const (
	// ProtocolTCP proxies TCP connections to a pool.
	ProtocolTCP Protocol = "TCP"
	// ProtocolHTTP routes HTTP requests to pools by path prefix.
	ProtocolHTTP Protocol = "HTTP"
	// ProtocolHTTPS terminates TLS with the listener's certificates, then routes as HTTP.
	ProtocolHTTPS Protocol = "HTTPS"
	// ProtocolTLSPassthrough routes TLS connections to pools by SNI without
	// terminating them.
	ProtocolTLSPassthrough Protocol = "TLS_PASSTHROUGH"
)

// Config is the whole desired state of one replica.
type Config struct {
	// Revision identifies this config; it changes whenever anything in it changes, and
	// Status reports the revision in force.
	Revision string `json:"revision"`
	// Balancers are the load balancers the replica serves.
	Balancers []Balancer `json:"balancers"`
}

// Balancer is one load balancer.
type Balancer struct {
	// ID is the load balancer's id.
	ID string `json:"id"`
	// VDC is the VDC the balancer belongs to (for logs and metrics).
	VDC string `json:"vdc"`
	// Listeners are the balancer's listeners; no two listeners of a replica share an
	// address.
	Listeners []Listener `json:"listeners"`
	// Pools are the balancer's backend pools, referred to by name from listeners.
	Pools []Pool `json:"pools"`
	// Certificates are the balancer's TLS certificates, referred to by name from
	// HTTPS listeners.
	Certificates []Certificate `json:"certificates,omitempty"`
}

// Listener accepts connections on one address.
type Listener struct {
	// Name names the listener in its balancer.
	Name string `json:"name"`
	// Protocol is the listener's protocol.
	Protocol Protocol `json:"protocol"`
	// Address is the host:port the replica listens on.
	Address string `json:"address"`
	// Pool is the pool of a TCP listener, and the default pool of an HTTP(S) listener
	// (requests no route matches); empty on an HTTP(S) listener answers 404 then.
	Pool string `json:"pool,omitempty"`
	// Routes send HTTP(S) requests to pools by path prefix, the longest prefix first.
	Routes []Route `json:"routes,omitempty"`
	// SNIRoutes send TLS passthrough connections to pools by server name.
	SNIRoutes []SNIRoute `json:"sniRoutes,omitempty"`
	// Certificates names the balancer's certificates an HTTPS listener serves, chosen
	// by SNI.
	Certificates []string `json:"certificates,omitempty"`
}

// Route sends HTTP requests whose path starts with PathPrefix to Pool.
type Route struct {
	// PathPrefix starts with "/".
	PathPrefix string `json:"pathPrefix"`
	// Pool names the balancer's pool.
	Pool string `json:"pool"`
}

// SNIRoute sends TLS connections for ServerName to Pool.
type SNIRoute struct {
	// ServerName is a DNS name; "*.example.com" matches one label.
	ServerName string `json:"serverName"`
	// Pool names the balancer's pool.
	Pool string `json:"pool"`
}

// Pool is a set of backends traffic is spread over.
type Pool struct {
	// Name names the pool in its balancer.
	Name string `json:"name"`
	// Backends are the pool's backends.
	Backends []Backend `json:"backends"`
	// HealthCheck, when set, takes failing backends out of the pool until they heal.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
}

// Backend is one backend of a pool.
type Backend struct {
	// ID names the backend in its pool (the orchestrator uses "<vm id>:<port>").
	ID string `json:"id"`
	// Address is the host:port the replica dials.
	Address string `json:"address"`
}

// HealthCheckProtocol is how a backend's health is checked.
type HealthCheckProtocol string

// Health check protocols.
const (
	// HealthCheckTCP connects to the backend.
	HealthCheckTCP HealthCheckProtocol = "TCP"
	// HealthCheckHTTP sends GET Path and expects a 2xx or 3xx answer.
	HealthCheckHTTP HealthCheckProtocol = "HTTP"
)

// HealthCheck is an active health check of a pool's backends.
type HealthCheck struct {
	// Protocol is how the check is made.
	Protocol HealthCheckProtocol `json:"protocol"`
	// Path is the HTTP check's path.
	Path string `json:"path,omitempty"`
	// Interval is the time between checks of a backend.
	Interval Duration `json:"interval"`
	// Timeout bounds one check.
	Timeout Duration `json:"timeout"`
	// HealthyThreshold is how many checks in a row must pass to bring a backend back.
	HealthyThreshold int `json:"healthyThreshold"`
	// UnhealthyThreshold is how many checks in a row must fail to take it out.
	UnhealthyThreshold int `json:"unhealthyThreshold"`
}

// Certificate is a TLS certificate with its private key.
type Certificate struct {
	// Name names the certificate in its balancer.
	Name string `json:"name"`
	// CertPEM is the certificate chain, leaf first.
	CertPEM string `json:"certPEM"`
	// KeyPEM is the private key; write-only: GET /v1/config returns it
	// empty (and CertPEM with its CERTIFICATE blocks only).
	KeyPEM string `json:"keyPEM,omitempty"`
	// KeyFingerprint is set only by GET /v1/config: KeyFingerprint of the
	// key in force, so that a reader can tell which key is set without
	// reading it. A PUT ignores it.
	KeyFingerprint string `json:"keyFingerprint,omitempty"`
}

// Status is what a replica reports.
type Status struct {
	// Generation changes whenever the revision or a backend's health does
	// (GET /v1/status?after= waits for that); a restarted replica starts
	// at another one.
	Generation uint64 `json:"generation"`
	// Revision is the revision of the Config in force ("" before the first).
	Revision string `json:"revision"`
	// Applied is when that Config was applied.
	Applied time.Time `json:"applied"`
	// Backends are the health of every backend of every pool with a health check.
	Backends []BackendStatus `json:"backends"`
}

// BackendStatus is the health of one backend as this replica sees it.
type BackendStatus struct {
	// Balancer, Pool and Backend name the backend.
	Balancer string `json:"balancer"`
	Pool     string `json:"pool"`
	Backend  string `json:"backend"`
	// Healthy is whether the backend receives traffic.
	Healthy bool `json:"healthy"`
	// LastError is the last failed check's error, if the last check failed.
	LastError string `json:"lastError,omitempty"`
	// Checked is when the backend was last checked.
	Checked time.Time `json:"checked"`
}

// Duration is a time.Duration written in JSON as Go's duration string ("5s").
type Duration time.Duration

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
