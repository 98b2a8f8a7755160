package meshleader

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"tailscale.com/net/stun"
)

// TestSTUNServerAnswersAndReleasesItsPort: a binding request is answered
// with the address it came from; anything else is ignored; once closed,
// the address can be bound again at once (the control server binds it
// next).
func TestSTUNServerAnswersAndReleasesItsPort(t *testing.T) {
	s, err := listenSTUN("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr := s.pc.LocalAddr().String()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("not stun")); err != nil {
		t.Fatal(err)
	}
	txid := stun.NewTxID()
	if _, err := c.Write(stun.Request(txid)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	got, mapped, err := stun.ParseResponse(buf[:n])
	if err != nil || got != txid || mapped.String() != c.LocalAddr().String() {
		t.Fatalf("answer %v %v %v, want %v for %v", got, mapped, err, txid, c.LocalAddr())
	}
	s.Close()
	again, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("the address is still taken after Close: %v", err)
	}
	again.Close()
}
