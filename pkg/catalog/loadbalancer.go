package catalog

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
)

// UseLoadBalancer is a public address held by one of a VDC's load
// balancers (it lives on the VDC's edge gateway, which forwards the
// balancer's listeners to the zone's flexgateway replicas).
const UseLoadBalancer = "loadBalancer"

// Listener protocols of a load balancer.
const (
	LBProtocolTCP            = "TCP"
	LBProtocolHTTP           = "HTTP"
	LBProtocolHTTPS          = "HTTPS"
	LBProtocolTLSPassthrough = "TLS_PASSTHROUGH"
)

// Health check protocols of a load balancer's pool.
const (
	LBHealthTCP  = "TCP"
	LBHealthHTTP = "HTTP"
)

// Limits of a load balancer.
const (
	// MaxLBListeners bounds a balancer's listeners (the zone's flexgateway
	// replicas give each listener of each pool address a port of their own).
	MaxLBListeners = 8
	// MaxLBPools bounds a balancer's pools.
	MaxLBPools = 16
	// MaxLBBackends bounds a pool's backends.
	MaxLBBackends = 64
	// MaxLBRoutes bounds a listener's routes (path or SNI).
	MaxLBRoutes = 64
	// MaxLBCertificates bounds a balancer's certificates.
	MaxLBCertificates = 16
)

// LoadBalancer is a load balancer of a VDC in a zone: a public address of
// the zone's pool, listeners, backend pools of the VDC's VMs and TLS
// certificates. Its name is LoadBalancerName(vdc, name). The certificates'
// private keys are not part of it: they are kept in the store's secrets
// (SecretStore) under LoadBalancerSecretName(name).
type LoadBalancer struct {
	TypeMeta
	ObjectMeta       `json:"metadata"`
	LoadBalancerSpec `json:"spec"`
}

// LoadBalancerSpec is what a VDC wants of a load balancer.
type LoadBalancerSpec struct {
	// VDC is the VDC the balancer belongs to.
	VDC string `json:"vdc"`
	// Zone is the zone's name; the backends are VMs of the VDC there.
	Zone string `json:"zone"`
	// Description is free text for humans (at most 1024 bytes).
	Description string `json:"description,omitempty"`
	// PublicAddress is the balancer's address, allocated from the zone's
	// external network's pool with use UseLoadBalancer.
	PublicAddress string `json:"publicAddress"`
	// Listeners accept connections on the public address (1 to
	// MaxLBListeners, no two on one port).
	Listeners []LBListener `json:"listeners"`
	// Pools are the backend pools listeners refer to by name.
	Pools []LBPool `json:"pools"`
	// Certificates are the TLS certificates HTTPS listeners serve (what is
	// known of them; the PEM is in the balancer's secret).
	Certificates []LBCertificate `json:"certificates,omitempty"`
}

// LBListener is one listener of a load balancer.
type LBListener struct {
	// Name names the listener in its balancer (a DNS label).
	Name string `json:"name"`
	// Protocol is LBProtocolTCP, LBProtocolHTTP, LBProtocolHTTPS or
	// LBProtocolTLSPassthrough.
	Protocol string `json:"protocol"`
	// Port is the public port (1 to 65535).
	Port int `json:"port"`
	// Pool is a TCP listener's pool, or an HTTP(S) listener's default pool
	// (for requests no route matches; none answers 404).
	Pool string `json:"pool,omitempty"`
	// Routes send HTTP(S) requests to pools by path prefix.
	Routes []LBRoute `json:"routes,omitempty"`
	// SNIRoutes send TLS passthrough connections to pools by server name.
	SNIRoutes []LBSNIRoute `json:"sniRoutes,omitempty"`
	// Certificates name the balancer's certificates an HTTPS listener
	// serves.
	Certificates []string `json:"certificates,omitempty"`
	// ServerNames are the names clients reach an HTTPS listener by: each
	// must be covered by one of its certificates.
	ServerNames []string `json:"serverNames,omitempty"`
}

// LBRoute sends HTTP requests whose path starts with PathPrefix to Pool.
type LBRoute struct {
	PathPrefix string `json:"pathPrefix"`
	Pool       string `json:"pool"`
}

// LBSNIRoute sends TLS connections for ServerName to Pool.
type LBSNIRoute struct {
	ServerName string `json:"serverName"`
	Pool       string `json:"pool"`
}

// LBPool is a backend pool of a load balancer.
type LBPool struct {
	// Name names the pool in its balancer (a DNS label).
	Name string `json:"name"`
	// Backends are VMs of the VDC in the balancer's zone and their ports.
	Backends []LBBackend `json:"backends,omitempty"`
	// HealthCheck, when set, takes failing backends out until they heal.
	HealthCheck *LBHealthCheck `json:"healthCheck,omitempty"`
}

// LBBackend is a VM's port.
type LBBackend struct {
	// VMID is the VM's Proxmox VMID in the balancer's zone.
	VMID int `json:"vmid"`
	// Port is 1 to 65535.
	Port int `json:"port"`
}

// LBHealthCheck is an active health check of a pool's backends.
type LBHealthCheck struct {
	// Protocol is LBHealthTCP or LBHealthHTTP.
	Protocol string `json:"protocol"`
	// Path is the HTTP check's path (starting with "/").
	Path string `json:"path,omitempty"`
	// IntervalSeconds is the time between checks (1 to 300).
	IntervalSeconds int `json:"intervalSeconds"`
	// TimeoutSeconds bounds one check (1 to IntervalSeconds).
	TimeoutSeconds int `json:"timeoutSeconds"`
	// HealthyThreshold and UnhealthyThreshold are the checks in a row
	// (1 to 10) that bring a backend back and take it out.
	HealthyThreshold   int `json:"healthyThreshold"`
	UnhealthyThreshold int `json:"unhealthyThreshold"`
}

// LBCertificate is what is known of a certificate of a load balancer; its
// PEM (chain and key) is in the balancer's secret.
type LBCertificate struct {
	// Name names the certificate in its balancer (a DNS label).
	Name string `json:"name"`
	// DNSNames are the leaf's subject names.
	DNSNames []string `json:"dnsNames,omitempty"`
	// NotAfter is the leaf's expiry.
	NotAfter time.Time `json:"notAfter"`
	// Fingerprint is the SHA-256 of the leaf's DER, lower-case hex.
	Fingerprint string `json:"fingerprint"`
}

// LoadBalancerName is the object name of vdc's balancer name.
func LoadBalancerName(vdc, name string) string { return vdc + "." + name }

// LoadBalancerSecretName is the name of the secret holding the
// certificates of the balancer object named object.
func LoadBalancerSecretName(object string) string { return "lb." + object }

// ShortName is the balancer's name in its VDC.
func (b *LoadBalancer) ShortName() string {
	_, n, _ := strings.Cut(b.Name, ".")
	return n
}

// ObjectKind implements Object.
func (*LoadBalancer) ObjectKind() Kind { return KindLoadBalancer }

// DeepCopyObject implements Object.
func (b *LoadBalancer) DeepCopyObject() Object {
	c := *b
	c.Listeners = make([]LBListener, len(b.Listeners))
	for i, l := range b.Listeners {
		l.Routes, l.SNIRoutes = slices.Clone(l.Routes), slices.Clone(l.SNIRoutes)
		l.Certificates, l.ServerNames = slices.Clone(l.Certificates), slices.Clone(l.ServerNames)
		c.Listeners[i] = l
	}
	if b.Listeners == nil {
		c.Listeners = nil
	}
	c.Pools = make([]LBPool, len(b.Pools))
	for i, p := range b.Pools {
		p.Backends = slices.Clone(p.Backends)
		if p.HealthCheck != nil {
			hc := *p.HealthCheck
			p.HealthCheck = &hc
		}
		c.Pools[i] = p
	}
	if b.Pools == nil {
		c.Pools = nil
	}
	c.Certificates = make([]LBCertificate, len(b.Certificates))
	for i, cert := range b.Certificates {
		cert.DNSNames = slices.Clone(cert.DNSNames)
		c.Certificates[i] = cert
	}
	if b.Certificates == nil {
		c.Certificates = nil
	}
	return &c
}

var (
	// A DNS name a client asks for, or a wildcard of one label.
	serverNameRE = regexp.MustCompile(`^(\*\.)?([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// A path prefix of an HTTP route.
	pathPrefixRE  = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$`)
	fingerprintRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateServerName checks a DNS name (or "*.name") for field.
func ValidateServerName(field, s string) error {
	if len(s) > 253 || !serverNameRE.MatchString(s) {
		return invalid(field, "%q is not a lower-case DNS name (or *.name)", s)
	}
	return nil
}

// Validate implements Object.
func (b *LoadBalancer) Validate() error {
	if err := firstError(ValidateLabel("vdc", b.VDC), ValidateLabel("zone", b.Zone), validateDescription(b.Description)); err != nil {
		return err
	}
	if err := ValidateName(KindLoadBalancer, b.Name); err != nil {
		return err
	}
	if vdc, _, _ := strings.Cut(b.Name, "."); vdc != b.VDC {
		return invalid("name", "%q must start with its VDC %q", b.Name, b.VDC)
	}
	if _, err := ParseIPv4("publicAddress", b.PublicAddress); err != nil {
		return err
	}
	switch {
	case len(b.Listeners) == 0:
		return invalid("listeners", "a load balancer needs a listener")
	case len(b.Listeners) > MaxLBListeners:
		return invalid("listeners", "at most %d listeners", MaxLBListeners)
	case len(b.Pools) > MaxLBPools:
		return invalid("pools", "at most %d pools", MaxLBPools)
	case len(b.Certificates) > MaxLBCertificates:
		return invalid("certificates", "at most %d certificates", MaxLBCertificates)
	}
	pools := map[string]bool{}
	for i, p := range b.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		if err := ValidateLabel(f+".name", p.Name); err != nil {
			return err
		}
		if pools[p.Name] {
			return invalid(f+".name", "pool %q is defined twice", p.Name)
		}
		pools[p.Name] = true
		if err := p.validate(f); err != nil {
			return err
		}
	}
	certs := map[string]bool{}
	for i, c := range b.Certificates {
		f := fmt.Sprintf("certificates[%d]", i)
		if err := ValidateLabel(f+".name", c.Name); err != nil {
			return err
		}
		if certs[c.Name] {
			return invalid(f+".name", "certificate %q is defined twice", c.Name)
		}
		certs[c.Name] = true
		if !fingerprintRE.MatchString(c.Fingerprint) {
			return invalid(f+".fingerprint", "%q is not a SHA-256 in lower-case hex", c.Fingerprint)
		}
	}
	names := map[string]bool{}
	ports := map[int]string{}
	for i, l := range b.Listeners {
		f := fmt.Sprintf("listeners[%d]", i)
		if err := ValidateLabel(f+".name", l.Name); err != nil {
			return err
		}
		if names[l.Name] {
			return invalid(f+".name", "listener %q is defined twice", l.Name)
		}
		names[l.Name] = true
		if err := validatePort(f+".port", l.Port); err != nil {
			return err
		}
		if other, ok := ports[l.Port]; ok {
			return invalid(f+".port", "port %d of %s is listener %q's already", l.Port, b.PublicAddress, other)
		}
		ports[l.Port] = l.Name
		if err := l.validate(f, pools, certs); err != nil {
			return err
		}
	}
	return nil
}

// validate checks a pool's backends and health check.
func (p LBPool) validate(f string) error {
	if len(p.Backends) > MaxLBBackends {
		return invalid(f+".backends", "at most %d backends", MaxLBBackends)
	}
	seen := map[LBBackend]bool{}
	for j, be := range p.Backends {
		bf := fmt.Sprintf("%s.backends[%d]", f, j)
		if err := firstError(validateVMID(bf+".vmid", be.VMID), validatePort(bf+".port", be.Port)); err != nil {
			return err
		}
		if seen[be] {
			return invalid(bf, "VM %d port %d is a backend of the pool already", be.VMID, be.Port)
		}
		seen[be] = true
	}
	hc := p.HealthCheck
	if hc == nil {
		return nil
	}
	hf := f + ".healthCheck"
	switch {
	case hc.Protocol != LBHealthTCP && hc.Protocol != LBHealthHTTP:
		return invalid(hf+".protocol", "%q is not %s or %s", hc.Protocol, LBHealthTCP, LBHealthHTTP)
	case hc.Protocol == LBHealthHTTP && !pathPrefixRE.MatchString(hc.Path):
		return invalid(hf+".path", "%q is not a path starting with /", hc.Path)
	case hc.Protocol == LBHealthTCP && hc.Path != "":
		return invalid(hf+".path", "a TCP check has no path")
	}
	return firstError(validateRange(hf+".intervalSeconds", hc.IntervalSeconds, 1, 300),
		validateRange(hf+".timeoutSeconds", hc.TimeoutSeconds, 1, max(1, hc.IntervalSeconds)),
		validateRange(hf+".healthyThreshold", hc.HealthyThreshold, 1, 10),
		validateRange(hf+".unhealthyThreshold", hc.UnhealthyThreshold, 1, 10))
}

// validate checks a listener's protocol, pools, routes and certificates.
func (l LBListener) validate(f string, pools, certs map[string]bool) error {
	pool := func(field, name string) error {
		if !pools[name] {
			return invalid(field, "pool %q is not a pool of the load balancer", name)
		}
		return nil
	}
	http := l.Protocol == LBProtocolHTTP || l.Protocol == LBProtocolHTTPS
	switch {
	case l.Protocol != LBProtocolTCP && !http && l.Protocol != LBProtocolTLSPassthrough:
		return invalid(f+".protocol", "%q is not TCP, HTTP, HTTPS or TLS_PASSTHROUGH", l.Protocol)
	case l.Protocol == LBProtocolTCP && l.Pool == "":
		return invalid(f+".pool", "a TCP listener needs a pool")
	case l.Protocol == LBProtocolTLSPassthrough && l.Pool != "":
		return invalid(f+".pool", "a TLS passthrough listener routes by SNI only (sniRoutes)")
	case !http && len(l.Routes) > 0:
		return invalid(f+".routes", "path routes need protocol HTTP or HTTPS")
	case l.Protocol != LBProtocolTLSPassthrough && len(l.SNIRoutes) > 0:
		return invalid(f+".sniRoutes", "SNI routes need protocol TLS_PASSTHROUGH")
	case l.Protocol == LBProtocolTLSPassthrough && len(l.SNIRoutes) == 0:
		return invalid(f+".sniRoutes", "a TLS passthrough listener needs an SNI route")
	case l.Protocol != LBProtocolHTTPS && len(l.Certificates) > 0:
		return invalid(f+".certificates", "certificates need protocol HTTPS")
	case l.Protocol != LBProtocolHTTPS && len(l.ServerNames) > 0:
		return invalid(f+".serverNames", "server names need protocol HTTPS")
	case l.Protocol == LBProtocolHTTPS && len(l.Certificates) == 0:
		return invalid(f+".certificates", "an HTTPS listener needs a certificate")
	case len(l.Routes) > MaxLBRoutes || len(l.SNIRoutes) > MaxLBRoutes || len(l.ServerNames) > MaxLBRoutes:
		return invalid(f, "at most %d routes and server names", MaxLBRoutes)
	}
	if l.Pool != "" {
		if err := pool(f+".pool", l.Pool); err != nil {
			return err
		}
	}
	prefixes := map[string]bool{}
	for j, r := range l.Routes {
		rf := fmt.Sprintf("%s.routes[%d]", f, j)
		if !pathPrefixRE.MatchString(r.PathPrefix) || len(r.PathPrefix) > 1024 {
			return invalid(rf+".pathPrefix", "%q is not a path starting with /", r.PathPrefix)
		}
		if prefixes[r.PathPrefix] {
			return invalid(rf+".pathPrefix", "%q is routed already", r.PathPrefix)
		}
		prefixes[r.PathPrefix] = true
		if err := pool(rf+".pool", r.Pool); err != nil {
			return err
		}
	}
	snis := map[string]bool{}
	for j, r := range l.SNIRoutes {
		rf := fmt.Sprintf("%s.sniRoutes[%d]", f, j)
		if err := ValidateServerName(rf+".serverName", r.ServerName); err != nil {
			return err
		}
		if snis[r.ServerName] {
			return invalid(rf+".serverName", "%q is routed already", r.ServerName)
		}
		snis[r.ServerName] = true
		if err := pool(rf+".pool", r.Pool); err != nil {
			return err
		}
	}
	for j, c := range l.Certificates {
		if !certs[c] {
			return invalid(fmt.Sprintf("%s.certificates[%d]", f, j), "certificate %q is not a certificate of the load balancer", c)
		}
	}
	for j, n := range l.ServerNames {
		if err := ValidateServerName(fmt.Sprintf("%s.serverNames[%d]", f, j), n); err != nil {
			return err
		}
	}
	return nil
}

// LoadBalancersOf returns the balancers of vdc among bs.
func LoadBalancersOf(bs []*LoadBalancer, vdc string) []*LoadBalancer {
	return slices.DeleteFunc(slices.Clone(bs), func(b *LoadBalancer) bool { return b.VDC != vdc })
}

// PublicAddr is the balancer's public address (valid once Validate passed).
func (b *LoadBalancer) PublicAddr() netip.Addr {
	a, _ := netip.ParseAddr(b.PublicAddress)
	return a
}
