package netns_test

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/netns"
)

func TestMain(m *testing.M) { netns.Main(m) }

// TestTestsRunIsolated: Main runs the tests in a namespace whose only
// interface is lo, up, with 127.0.0.1 and Address; what binds on all
// interfaces there is reachable from this machine only, and found.
func TestTestsRunIsolated(t *testing.T) {
	if !netns.Inside() {
		t.Fatal("not inside")
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp == 0 {
		t.Fatalf("interfaces %v, want lo only, up", ifs)
	}
	for _, a := range []string{"127.0.0.1:0", netns.Address + ":0"} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("listen on %s: %v", a, err)
		}
		ln.Close()
	}
	tcp, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := net.ListenPacket("udp4", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	socks, err := netns.ListeningSockets([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, s := range socks {
		if !s.LoopbackOnly() {
			t.Errorf("not loopback only: %s", s)
		}
		if p := s.Local.Port(); p == uint16(tcp.Addr().(*net.TCPAddr).Port) && s.Proto == "tcp6" ||
			p == uint16(udp.LocalAddr().(*net.UDPAddr).Port) && s.Proto == "udp" {
			found++
		}
	}
	if found != 2 {
		t.Errorf("found %d of the 2 wildcard sockets in %v", found, socks)
	}
}

// TestLoopbackOnly: only a loopback bind, or a wildcard one in a namespace
// of lo alone, is reachable from this machine only.
func TestLoopbackOnly(t *testing.T) {
	for _, c := range []struct {
		addr   string
		ifaces []string
		want   bool
	}{
		{"127.0.0.1:80", []string{"eth0", "lo"}, true},
		{"[::1]:80", []string{"eth0", "lo"}, true},
		{"[::ffff:127.0.0.1]:80", []string{"eth0", "lo"}, true},
		{"0.0.0.0:80", []string{"lo"}, true},
		{"[::]:80", []string{"lo"}, true},
		{"0.0.0.0:80", []string{"eth0", "lo"}, false},
		{"[::]:80", []string{"eth0", "lo"}, false},
		{"10.0.0.1:80", []string{"eth0", "lo"}, false},
		{"198.18.0.1:80", []string{"lo"}, false},
	} {
		s := netns.Socket{Local: netip.MustParseAddrPort(c.addr), NetnsInterfaces: c.ifaces}
		if got := s.LoopbackOnly(); got != c.want {
			t.Errorf("%s with interfaces %v: LoopbackOnly = %v, want %v", c.addr, c.ifaces, got, c.want)
		}
	}
}
