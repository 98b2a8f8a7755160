package meshleader

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"tailscale.com/net/stun"
)

// stunServer answers STUN binding requests on one UDP socket: what a
// replica serves on the control server's STUN address while no control
// server of its process holds it. STUN is stateless (the answer is the
// address the request came from), so every replica answers alike and the
// Service may send a node's request to any of them.
type stunServer struct {
	pc   *net.UDPConn
	log  *slog.Logger
	done chan struct{}
}

// listenSTUN starts a stunServer on addr.
func listenSTUN(addr string, log *slog.Logger) (*stunServer, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("stun: %w", err)
	}
	pc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("stun: %w", err)
	}
	s := &stunServer{pc: pc, log: log, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

func (s *stunServer) serve() {
	defer close(s.done)
	buf := make([]byte, 64<<10)
	for {
		n, from, err := s.pc.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			s.log.Debug("stun: read", "err", err)
			continue
		}
		txid, err := stun.ParseBindingRequest(buf[:n])
		if err != nil {
			continue // not a STUN binding request
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if _, err := s.pc.WriteToUDPAddrPort(stun.Response(txid, from), from); err != nil {
			s.log.Debug("stun: write", "to", from, "err", err)
		}
	}
}

// Close closes the socket and returns once it is released (the control
// server may bind its address next).
func (s *stunServer) Close() {
	s.pc.Close()
	<-s.done
}
