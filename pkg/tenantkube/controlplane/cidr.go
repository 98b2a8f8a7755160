package controlplane

import (
	"fmt"
	"net/netip"
)

// The bounds of a tenant cluster's ranges, as its control plane uses them:
// the API server takes Service addresses from the Service range (it
// refuses one of more than 2^20 addresses, a prefix shorter than /12),
// and the controller manager hands each node a /24 of the Pod range (so
// the range must hold several: at most /20, room for 16 nodes; at least
// /8, as the controller manager refuses more than 2^16 node ranges).
const (
	// MinServicePrefix and MaxServicePrefix bound the Service range's
	// prefix length.
	MinServicePrefix, MaxServicePrefix = 12, 24
	// MinPodPrefix and MaxPodPrefix bound the Pod range's prefix length.
	MinPodPrefix, MaxPodPrefix = 8, 20
)

// CIDRError is a Service or Pod range that ValidateCIDRs refuses. It
// matches ErrInvalid with errors.Is.
type CIDRError struct {
	// Pod is true when the Pod range is at fault, false for the Service
	// range.
	Pod bool
	// Message says what is wrong, naming the range.
	Message string
}

func (e *CIDRError) Error() string { return e.Message }

// Unwrap makes the error match ErrInvalid.
func (e *CIDRError) Unwrap() error { return ErrInvalid }

// ValidateCIDRs checks a tenant cluster's Service and Pod ranges: each an
// IPv4 network prefix (no host bits set) within the bounds above, the two
// apart, and neither overlapping any of avoid (the networks the cluster's
// nodes are on). Its error is a *CIDRError. The API checks a cluster's
// ranges with it before anything is made, and Ensure again.
func ValidateCIDRs(service, pod string, avoid ...netip.Prefix) (svc, pods netip.Prefix, err error) {
	if svc, err = parseRange(false, service, MinServicePrefix, MaxServicePrefix); err != nil {
		return svc, pods, err
	}
	if pods, err = parseRange(true, pod, MinPodPrefix, MaxPodPrefix); err != nil {
		return svc, pods, err
	}
	if svc.Overlaps(pods) {
		return svc, pods, &CIDRError{Pod: true, Message: fmt.Sprintf("pod CIDR %s overlaps the service CIDR %s", pods, svc)}
	}
	for _, a := range avoid {
		if !a.IsValid() {
			continue
		}
		if svc.Overlaps(a) {
			return svc, pods, &CIDRError{Message: fmt.Sprintf("service CIDR %s overlaps the nodes' network %s", svc, a.Masked())}
		}
		if pods.Overlaps(a) {
			return svc, pods, &CIDRError{Pod: true, Message: fmt.Sprintf("pod CIDR %s overlaps the nodes' network %s", pods, a.Masked())}
		}
	}
	return svc, pods, nil
}

// parseRange parses one range of ValidateCIDRs.
func parseRange(isPod bool, s string, minBits, maxBits int) (netip.Prefix, error) {
	name, example := "service CIDR", "10.96.0.0/12"
	if isPod {
		name, example = "pod CIDR", "10.244.0.0/16"
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p != p.Masked() {
		return p, &CIDRError{Pod: isPod, Message: fmt.Sprintf("%s %q: want an IPv4 network prefix such as %s", name, s, example)}
	}
	if p.Bits() < minBits || p.Bits() > maxBits {
		return p, &CIDRError{Pod: isPod, Message: fmt.Sprintf("%s %s: the prefix length must be /%d to /%d", name, s, minBits, maxBits)}
	}
	return p, nil
}
