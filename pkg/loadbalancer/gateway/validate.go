package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// ErrInvalid is wrapped by every error of a Config the gateway refuses
// before loading it; the admin API answers it with 400.
var ErrInvalid = errors.New("invalid config")

// invalid is an ErrInvalid with its reason.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Validate checks cfg the way Apply does before loading it: names unique,
// listeners unique by address across the replica, every pool a listener
// or route names exists, addresses and ports valid, health checks sound,
// every certificate parses, matches its key and names a host, and every
// HTTPS listener serves at least one certificate (so no handshake finds
// none and answers `tlsv1 alert internal error`).
func Validate(cfg lbconfig.Config) error {
	type bound struct {
		host string
		what string
	}
	ports := map[uint16][]bound{}
	balancers := map[string]bool{}
	for _, b := range cfg.Balancers {
		if err := validateBalancer(b); err != nil {
			return err
		}
		if balancers[b.ID] {
			return invalid("balancer %q appears twice", b.ID)
		}
		balancers[b.ID] = true
		for _, l := range b.Listeners {
			host, port, err := splitAddress(l.Address)
			if err != nil {
				return invalid("balancer %q listener %q: %v", b.ID, l.Name, err)
			}
			what := fmt.Sprintf("balancer %q listener %q", b.ID, l.Name)
			for _, other := range ports[port] {
				if other.host == host || other.host == "" || host == "" {
					return invalid("%s overlaps %s on %s", what, other.what, l.Address)
				}
			}
			ports[port] = append(ports[port], bound{host, what})
		}
	}
	return nil
}

func validateBalancer(b lbconfig.Balancer) error {
	if b.ID == "" {
		return invalid("a balancer has no id")
	}
	pools := map[string]bool{}
	for _, p := range b.Pools {
		if p.Name == "" {
			return invalid("balancer %q: a pool has no name", b.ID)
		}
		if pools[p.Name] {
			return invalid("balancer %q: pool %q appears twice", b.ID, p.Name)
		}
		pools[p.Name] = true
		if err := validatePool(p); err != nil {
			return invalid("balancer %q pool %q: %v", b.ID, p.Name, err)
		}
	}
	certs := map[string]bool{}
	for _, c := range b.Certificates {
		if certs[c.Name] {
			return invalid("balancer %q: certificate %q appears twice", b.ID, c.Name)
		}
		certs[c.Name] = true
		if _, err := parseCertificate(c); err != nil {
			return invalid("balancer %q certificate %q: %v", b.ID, c.Name, err)
		}
	}
	names := map[string]bool{}
	for _, l := range b.Listeners {
		if l.Name == "" {
			return invalid("balancer %q: a listener has no name", b.ID)
		}
		if names[l.Name] {
			return invalid("balancer %q: listener %q appears twice", b.ID, l.Name)
		}
		names[l.Name] = true
		if err := validateListener(l, pools, certs); err != nil {
			return invalid("balancer %q listener %q: %v", b.ID, l.Name, err)
		}
	}
	return nil
}

func validateListener(l lbconfig.Listener, pools, certs map[string]bool) error {
	pool := func(name string) error {
		if !pools[name] {
			return fmt.Errorf("pool %q does not exist", name)
		}
		return nil
	}
	if l.Pool != "" {
		if err := pool(l.Pool); err != nil {
			return err
		}
	}
	switch l.Protocol {
	case lbconfig.ProtocolTCP:
		if l.Pool == "" {
			return errors.New("a TCP listener needs a pool")
		}
		if len(l.Routes) > 0 || len(l.SNIRoutes) > 0 || len(l.Certificates) > 0 {
			return errors.New("a TCP listener has only a pool (no routes, SNI routes or certificates)")
		}
	case lbconfig.ProtocolHTTP, lbconfig.ProtocolHTTPS:
		if len(l.SNIRoutes) > 0 {
			return fmt.Errorf("an %s listener routes by path, not by SNI", l.Protocol)
		}
		prefixes := map[string]bool{}
		for _, r := range l.Routes {
			if !strings.HasPrefix(r.PathPrefix, "/") || strings.ContainsAny(r.PathPrefix, "*?#% \t\r\n") {
				return fmt.Errorf("path prefix %q must start with / and hold no *, ?, #, %% or spaces", r.PathPrefix)
			}
			if prefixes[r.PathPrefix] {
				return fmt.Errorf("path prefix %q appears twice", r.PathPrefix)
			}
			prefixes[r.PathPrefix] = true
			if err := pool(r.Pool); err != nil {
				return fmt.Errorf("route %q: %w", r.PathPrefix, err)
			}
		}
		if l.Protocol == lbconfig.ProtocolHTTP && len(l.Certificates) > 0 {
			return errors.New("an HTTP listener serves no certificates (use HTTPS)")
		}
		if l.Protocol == lbconfig.ProtocolHTTPS {
			if len(l.Certificates) == 0 {
				return errors.New("an HTTPS listener needs at least one certificate")
			}
			for _, c := range l.Certificates {
				if !certs[c] {
					return fmt.Errorf("certificate %q does not exist", c)
				}
			}
		}
	case lbconfig.ProtocolTLSPassthrough:
		if len(l.SNIRoutes) == 0 {
			return errors.New("a TLS passthrough listener needs SNI routes")
		}
		if len(l.Routes) > 0 || len(l.Certificates) > 0 {
			return errors.New("a TLS passthrough listener has no path routes or certificates")
		}
		seen := map[string]bool{}
		for _, r := range l.SNIRoutes {
			if err := validServerName(r.ServerName); err != nil {
				return err
			}
			name := strings.ToLower(r.ServerName)
			if seen[name] {
				return fmt.Errorf("server name %q appears twice", r.ServerName)
			}
			seen[name] = true
			if err := pool(r.Pool); err != nil {
				return fmt.Errorf("SNI route %q: %w", r.ServerName, err)
			}
		}
	default:
		return fmt.Errorf("unknown protocol %q", l.Protocol)
	}
	return nil
}

func validatePool(p lbconfig.Pool) error {
	ids := map[string]bool{}
	for _, be := range p.Backends {
		if be.ID == "" {
			return errors.New("a backend has no id")
		}
		if ids[be.ID] {
			return fmt.Errorf("backend %q appears twice", be.ID)
		}
		ids[be.ID] = true
		host, _, err := splitAddress(be.Address)
		if err != nil {
			return fmt.Errorf("backend %q: %w", be.ID, err)
		}
		if host == "" {
			return fmt.Errorf("backend %q: address %q has no host", be.ID, be.Address)
		}
	}
	hc := p.HealthCheck
	if hc == nil {
		return nil
	}
	switch hc.Protocol {
	case lbconfig.HealthCheckTCP:
		if hc.Path != "" {
			return errors.New("a TCP health check has no path")
		}
	case lbconfig.HealthCheckHTTP:
		if !strings.HasPrefix(hc.Path, "/") {
			return fmt.Errorf("health check path %q must start with /", hc.Path)
		}
	default:
		return fmt.Errorf("unknown health check protocol %q", hc.Protocol)
	}
	switch {
	case hc.Interval <= 0 || hc.Timeout <= 0:
		return errors.New("health check interval and timeout must be positive")
	case hc.Timeout > hc.Interval:
		return errors.New("health check timeout must not exceed its interval")
	case hc.HealthyThreshold < 1 || hc.UnhealthyThreshold < 1:
		return errors.New("health check thresholds must be at least 1")
	}
	return nil
}

// splitAddress parses host:port with a port in 1..65535 and a host that is
// empty (every address), an IP address or a DNS name.
func splitAddress(addr string) (string, uint16, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("address %q: port must be 1..65535", addr)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsUnspecified() {
			return "", uint16(port), nil
		}
		return ip.String(), uint16(port), nil
	}
	if host != "" {
		if err := validServerName(host); err != nil {
			return "", 0, fmt.Errorf("address %q: %w", addr, err)
		}
	}
	return strings.ToLower(host), uint16(port), nil
}

// validServerName accepts a DNS name, or one with a leading "*." label.
func validServerName(name string) error {
	n := strings.TrimPrefix(name, "*.")
	if n == "" || len(n) > 253 {
		return fmt.Errorf("server name %q is not a DNS name", name)
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return fmt.Errorf("server name %q is not a DNS name", name)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("server name %q is not a DNS name", name)
			}
		}
	}
	return nil
}

// parseCertificate checks that c's chain parses, that its key matches the
// leaf and that the leaf names at least one host; it returns the leaf.
func parseCertificate(c lbconfig.Certificate) (*x509.Certificate, error) {
	if c.Name == "" {
		return nil, errors.New("no name")
	}
	if b, _ := pem.Decode([]byte(c.CertPEM)); b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("certPEM holds no PEM certificate")
	}
	pair, err := tls.X509KeyPair([]byte(c.CertPEM), []byte(c.KeyPEM))
	if err != nil {
		return nil, fmt.Errorf("certificate and key: %w", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
	}
	if len(leaf.DNSNames) == 0 && len(leaf.IPAddresses) == 0 {
		return nil, errors.New("the certificate names no DNS name or IP address (subjectAltName)")
	}
	return leaf, nil
}
