package rfb

import (
	"errors"
	"image/color"
	"net"
	"testing"
)

// handshake runs server against client over a pipe.
func handshake(server, client func(net.Conn) error) (serverErr, clientErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() { err := server(a); a.Close(); done <- err }()
	clientErr = client(b)
	b.Close()
	return <-done, clientErr
}

func TestHandshakes(t *testing.T) {
	t.Parallel()
	vnc := func(pw string) func(net.Conn) error {
		return func(c net.Conn) error { return ServeVNCAuth(c, pw) }
	}
	login := func(pw string) func(net.Conn) error {
		return func(c net.Conn) error { return ClientLogin(c, pw) }
	}
	if s, c := handshake(vnc("PVEVNC:1234::sig"), login("PVEVNC:1234::sig")); s != nil || c != nil {
		t.Fatalf("right password: server %v, client %v", s, c)
	}
	if s, c := handshake(vnc("secret12"), login("secret13")); !errors.Is(s, ErrAuthFailed) || !errors.Is(c, ErrAuthFailed) {
		t.Fatalf("wrong password: server %v, client %v", s, c)
	}
	none := func(c net.Conn) error { return ServeNone(c) }
	if s, c := handshake(none, func(c net.Conn) error { return ClientNone(c) }); s != nil || c != nil {
		t.Fatalf("None: server %v, client %v", s, c)
	}
	// A client wanting VNC authentication from a None server is told no.
	if _, c := handshake(none, login("x")); c == nil {
		t.Fatal("VNC login against a None server succeeded")
	}
}

func TestPixelFormats(t *testing.T) {
	t.Parallel()
	c := color.RGBA{0xC0, 0x10, 0xFF, 255}
	for _, f := range []PixelFormat{RGB888,
		{BitsPerPixel: 32, Depth: 24, BigEndian: true, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 16, GreenShift: 8, BlueShift: 0},
	} {
		got, err := ParsePixelFormat(f.Marshal())
		if err != nil || got != f {
			t.Fatalf("round trip of %+v: %+v, %v", f, got, err)
		}
		if px := f.decode(f.Encode(nil, c)); px != c {
			t.Errorf("%+v: %v became %v", f, c, px)
		}
	}
	f16 := PixelFormat{BitsPerPixel: 16, Depth: 16, TrueColour: true, RedMax: 31, GreenMax: 63, BlueMax: 31, RedShift: 11, GreenShift: 5, BlueShift: 0}
	if px := f16.decode(f16.Encode(nil, color.RGBA{255, 0, 255, 255})); px != (color.RGBA{255, 0, 255, 255}) {
		t.Errorf("16 bits: %v", px)
	}
	if _, err := ParsePixelFormat(PixelFormat{BitsPerPixel: 8}.Marshal()); err == nil {
		t.Error("a colour-map format was accepted")
	}
}
