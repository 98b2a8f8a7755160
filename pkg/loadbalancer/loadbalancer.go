// Package loadbalancer is the load balancers of flexplane's VDCs: the
// catalog's LoadBalancer objects (a public address of the zone's pool,
// listeners, backend pools of the VDC's VMs, health checks, TLS
// certificates) created, changed and deleted with their certificates' keys
// kept in the store's secrets, and rendered into the lbconfig.Config the
// zone's flexgateway replicas serve.
//
// The traffic path: the balancer's public address lives on the VDC's edge
// gateway in the zone, which forwards each listener's port to the zone's
// flexgateway replicas (FrontendPort gives every listener of the zone a port
// of its own on them); the replicas reach each backend through the same
// edge gateway, at the balancer's public address and a relay port
// (RelayPorts) that the gateway forwards to the VM's address and port and
// accepts from the replicas only. A balancer thus only ever reaches VMs of
// its own VDC, whatever addresses other VDCs use.
//
// Bad input is a *catalog.ValidationError naming the field and changes
// nothing.
package loadbalancer

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// CertificatePEM is a certificate given through the API: its chain (leaf
// first) and private key in PEM. Without both, an update keeps the
// balancer's stored certificate of that name.
type CertificatePEM struct {
	Name    string
	CertPEM string
	KeyPEM  string
}

func invalid(field, format string, args ...any) error {
	return &catalog.ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ParseCertificate checks a certificate against its key and reads what is
// known of it: its subject names, expiry and fingerprint. field names the
// certificate in errors ("certificates[0]").
func ParseCertificate(field string, c CertificatePEM, now time.Time) (catalog.LBCertificate, error) {
	pair, err := tls.X509KeyPair([]byte(c.CertPEM), []byte(c.KeyPEM))
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "does not match") {
			return catalog.LBCertificate{}, invalid(field+".privateKeyPem", "the private key does not match the certificate")
		}
		if strings.Contains(msg, "private key") || strings.Contains(msg, "PRIVATE KEY") {
			return catalog.LBCertificate{}, invalid(field+".privateKeyPem", "not a PEM private key: %v", err)
		}
		return catalog.LBCertificate{}, invalid(field+".certificatePem", "not a PEM certificate with its key: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return catalog.LBCertificate{}, invalid(field+".certificatePem", "%v", err)
	}
	if now.After(leaf.NotAfter) {
		return catalog.LBCertificate{}, invalid(field+".certificatePem", "the certificate expired on %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if len(leaf.DNSNames) == 0 {
		return catalog.LBCertificate{}, invalid(field+".certificatePem", "the certificate names no DNS name (subjectAltName)")
	}
	sum := sha256.Sum256(leaf.Raw)
	names := make([]string, 0, len(leaf.DNSNames))
	for _, n := range leaf.DNSNames {
		names = append(names, strings.ToLower(n))
	}
	return catalog.LBCertificate{Name: c.Name, DNSNames: names, NotAfter: leaf.NotAfter.UTC(), Fingerprint: hex.EncodeToString(sum[:])}, nil
}

// covers reports whether a certificate's name pattern covers host
// ("*.example.com" covers one label).
func covers(pattern, host string) bool {
	if pattern == host {
		return true
	}
	rest, ok := strings.CutPrefix(pattern, "*.")
	if !ok {
		return false
	}
	_, parent, ok := strings.Cut(host, ".")
	return ok && parent == rest && !strings.HasPrefix(host, "*.")
}

// CheckCoverage refuses an HTTPS listener a server name of which none of
// its certificates covers.
func CheckCoverage(lb *catalog.LoadBalancer) error {
	for i, l := range lb.Listeners {
		for j, n := range l.ServerNames {
			ok := false
			for _, cn := range l.Certificates {
				k := slices.IndexFunc(lb.Certificates, func(c catalog.LBCertificate) bool { return c.Name == cn })
				if k >= 0 && slices.ContainsFunc(lb.Certificates[k].DNSNames, func(p string) bool { return covers(p, n) }) {
					ok = true
				}
			}
			if !ok {
				return invalid(fmt.Sprintf("listeners[%d].serverNames[%d]", i, j), "none of listener %q's certificates covers %q", l.Name, n)
			}
		}
	}
	return nil
}

// Secret keys of a certificate in its balancer's secret.
func certKey(name string) string { return name + ".crt" }
func keyKey(name string) string  { return name + ".key" }

// Service creates, changes and deletes load balancers in a catalog.
type Service struct {
	// Store holds the LoadBalancer objects and the zones' pools.
	Store catalog.Store
	// Secrets holds the certificates' PEM and keys.
	Secrets catalog.SecretStore
	// Now is the clock certificates' expiry is checked against; nil is
	// time.Now.
	Now func() time.Time
	// Fleet checks the backends of CreateBalancer and UpdateBalancer
	// (required by them).
	Fleet Fleet
	// Sync is told of every change of CreateBalancer, UpdateBalancer and
	// DeleteBalancer and reports the backends' health; nil: none (every
	// backend's health is unknown).
	Sync Sync
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// ErrNotFound is a balancer the VDC does not have.
var ErrNotFound = errors.New("load balancer not found")

// prepare checks lb (with the certificates given and those kept from old)
// and returns the secret's data; nothing is written.
func (s *Service) prepare(ctx context.Context, lb *catalog.LoadBalancer, certs []CertificatePEM, old *catalog.LoadBalancer) (map[string][]byte, error) {
	data := map[string][]byte{}
	var stored map[string][]byte
	lb.Certificates = nil
	seen := map[string]bool{}
	for i, c := range certs {
		f := fmt.Sprintf("certificates[%d]", i)
		if err := catalog.ValidateLabel(f+".name", c.Name); err != nil {
			return nil, err
		}
		if seen[c.Name] {
			return nil, invalid(f+".name", "certificate %q is given twice", c.Name)
		}
		seen[c.Name] = true
		if c.CertPEM == "" && c.KeyPEM == "" {
			k := -1
			if old != nil {
				k = slices.IndexFunc(old.Certificates, func(o catalog.LBCertificate) bool { return o.Name == c.Name })
			}
			if k < 0 {
				return nil, invalid(f+".certificatePem", "certificate %q is new: its certificatePem and privateKeyPem are required", c.Name)
			}
			if stored == nil {
				var err error
				if stored, err = s.Secrets.GetSecret(ctx, catalog.LoadBalancerSecretName(old.Name)); err != nil {
					return nil, fmt.Errorf("load balancer: read its certificates: %w", err)
				}
			}
			data[certKey(c.Name)], data[keyKey(c.Name)] = stored[certKey(c.Name)], stored[keyKey(c.Name)]
			lb.Certificates = append(lb.Certificates, old.Certificates[k])
			continue
		}
		info, err := ParseCertificate(f, c, s.now())
		if err != nil {
			return nil, err
		}
		data[certKey(c.Name)], data[keyKey(c.Name)] = []byte(c.CertPEM), []byte(c.KeyPEM)
		lb.Certificates = append(lb.Certificates, info)
	}
	if err := lb.Validate(); err != nil {
		return nil, err
	}
	if err := CheckCoverage(lb); err != nil {
		return nil, err
	}
	return data, nil
}

// placeholder stands in for the public address while a new balancer is
// checked, before one is allocated.
const placeholder = "192.0.2.1"

// Create checks lb (its VDC, zone, short name in Name, listeners, pools,
// backends) and certs, allocates it a public address of the zone's pool,
// stores its certificates' secret and creates it. A refused balancer
// changes nothing; a failed create gives its address back.
func (s *Service) Create(ctx context.Context, lb *catalog.LoadBalancer, certs []CertificatePEM) (*catalog.LoadBalancer, error) {
	lb = lb.DeepCopyObject().(*catalog.LoadBalancer)
	lb.PublicAddress = placeholder
	data, err := s.prepare(ctx, lb, certs, nil)
	if err != nil {
		return nil, err
	}
	if _, err := catalog.Get[*catalog.LoadBalancer](ctx, s.Store, lb.Name); err == nil {
		return nil, fmt.Errorf("load balancer: create: %w", &catalog.AlreadyExistsError{Kind: catalog.KindLoadBalancer, Name: lb.Name})
	}
	// The balancer's address lives on the VDC's edge gateway in the zone
	// and counts against the VDC's quota, as 1:1 addresses do.
	addr, err := quota.TakePublicAddress(ctx, s.Store, lb.VDC, lb.Zone, catalog.UseLoadBalancer, netip.Addr{}, "zone")
	if err != nil {
		return nil, fmt.Errorf("load balancer: create: %w", err)
	}
	lb.PublicAddress = addr.String()
	undo := func(err error) error {
		bg := context.WithoutCancel(ctx)
		return errors.Join(err, s.Secrets.DeleteSecret(bg, catalog.LoadBalancerSecretName(lb.Name)),
			catalog.ReleasePublicAddress(bg, s.Store, lb.Zone, lb.VDC, addr))
	}
	if err := s.Secrets.PutSecret(ctx, catalog.LoadBalancerSecretName(lb.Name), data); err != nil {
		return nil, undo(fmt.Errorf("load balancer: create: %w", err))
	}
	out, err := catalog.Create(ctx, s.Store, lb)
	if err != nil {
		return nil, undo(fmt.Errorf("load balancer: create: %w", err))
	}
	return out, nil
}

// Get returns vdc's balancer of that object name; ErrNotFound (also for
// another VDC's).
func (s *Service) Get(ctx context.Context, vdc, object string) (*catalog.LoadBalancer, error) {
	lb, err := catalog.Get[*catalog.LoadBalancer](ctx, s.Store, object)
	if errors.Is(err, catalog.ErrNotFound) || (err == nil && lb.VDC != vdc) {
		return nil, ErrNotFound
	}
	return lb, err
}

// Update replaces the listeners, pools, description and certificates of
// vdc's balancer object with want's (its VDC, zone, name and address stay),
// conditional on the version read. certs without PEM keep the stored
// certificate of their name; certificates not named are dropped.
func (s *Service) Update(ctx context.Context, vdc, object string, want *catalog.LoadBalancer, certs []CertificatePEM) (*catalog.LoadBalancer, error) {
	old, err := s.Get(ctx, vdc, object)
	if err != nil {
		return nil, err
	}
	lb := want.DeepCopyObject().(*catalog.LoadBalancer)
	lb.ObjectMeta, lb.VDC, lb.Zone, lb.PublicAddress = old.ObjectMeta, old.VDC, old.Zone, old.PublicAddress
	data, err := s.prepare(ctx, lb, certs, old)
	if err != nil {
		return nil, err
	}
	if err := s.Secrets.PutSecret(ctx, catalog.LoadBalancerSecretName(lb.Name), data); err != nil {
		return nil, fmt.Errorf("load balancer: update: %w", err)
	}
	out, err := catalog.Update(ctx, s.Store, lb)
	if err != nil {
		// The secret holds the new certificates while the object does
		// not: put the old ones back.
		if old, gerr := s.Get(context.WithoutCancel(ctx), vdc, object); gerr == nil {
			if back, perr := s.secretFor(context.WithoutCancel(ctx), old, data); perr == nil {
				err = errors.Join(err, s.Secrets.PutSecret(context.WithoutCancel(ctx), catalog.LoadBalancerSecretName(lb.Name), back))
			}
		}
		return nil, fmt.Errorf("load balancer: update: %w", err)
	}
	return out, nil
}

// secretFor keeps of data what lb's certificates need, by fingerprint.
func (s *Service) secretFor(ctx context.Context, lb *catalog.LoadBalancer, data map[string][]byte) (map[string][]byte, error) {
	cur, err := s.Secrets.GetSecret(ctx, catalog.LoadBalancerSecretName(lb.Name))
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, c := range lb.Certificates {
		for _, src := range []map[string][]byte{cur, data} {
			if fingerprint(src[certKey(c.Name)]) == c.Fingerprint {
				out[certKey(c.Name)], out[keyKey(c.Name)] = src[certKey(c.Name)], src[keyKey(c.Name)]
			}
		}
	}
	return out, nil
}

// fingerprint is the SHA-256 of the first certificate of a PEM chain.
func fingerprint(certPEM []byte) string {
	for {
		var b *pem.Block
		b, certPEM = pem.Decode(certPEM)
		if b == nil {
			return ""
		}
		if b.Type == "CERTIFICATE" {
			sum := sha256.Sum256(b.Bytes)
			return hex.EncodeToString(sum[:])
		}
	}
}

// Delete removes vdc's balancer object, its secret, and gives its address
// back to the pool.
func (s *Service) Delete(ctx context.Context, vdc, object string) (*catalog.LoadBalancer, error) {
	lb, err := s.Get(ctx, vdc, object)
	if err != nil {
		return nil, err
	}
	if err := catalog.Delete[*catalog.LoadBalancer](ctx, s.Store, lb.Name, lb.ResourceVersion); err != nil {
		return nil, fmt.Errorf("load balancer: delete: %w", err)
	}
	err = errors.Join(s.Secrets.DeleteSecret(ctx, catalog.LoadBalancerSecretName(lb.Name)),
		catalog.ReleasePublicAddress(ctx, s.Store, lb.Zone, lb.VDC, lb.PublicAddr()))
	if err != nil {
		return nil, fmt.Errorf("load balancer: delete: %w", err)
	}
	return lb, nil
}

// revision is a short digest of v's JSON.
func revision(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
