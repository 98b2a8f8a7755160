// Package rfb holds the parts of the RFB protocol (RFC 6143, version 3.8)
// that flexplane speaks itself: the security handshake of a client with VNC
// authentication (the agent logging in to a Proxmox VNC proxy with its
// ticket), the same handshake on the server's side (the simulator), and the
// handshake of a server offering no authentication (the agent to the
// browser, once it has authenticated upstream). Everything after the
// security handshake (ClientInit onwards) is relayed unchanged.
package rfb

import (
	"bytes"
	"crypto/des" //nolint:gosec // RFB's VNC authentication is DES by definition
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version flexplane speaks, as sent on the wire.
const Version = "RFB 003.008\n"

// Security types (RFC 6143 7.1.2).
const (
	SecurityNone    = 1
	SecurityVNCAuth = 2
)

// ErrAuthFailed is returned when a VNC authentication is refused.
var ErrAuthFailed = errors.New("rfb: authentication failed")

// AuthResponse is the answer to a VNC authentication challenge with
// password: the challenge encrypted with DES under the password's first 8
// bytes, each byte's bits reversed (as every VNC implementation does).
func AuthResponse(password string, challenge [16]byte) [16]byte {
	var key [8]byte
	for i := 0; i < len(key) && i < len(password); i++ {
		c := password[i]
		var r byte
		for b := range 8 {
			if c&(1<<b) != 0 {
				r |= 0x80 >> b
			}
		}
		key[i] = r
	}
	block, err := des.NewCipher(key[:]) //nolint:gosec // see the import
	if err != nil {
		panic(err) // an 8-byte key never fails
	}
	var out [16]byte
	block.Encrypt(out[:8], challenge[:8])
	block.Encrypt(out[8:], challenge[8:])
	return out
}

// ClientLogin runs a client's side of the handshake up to the security
// result, with VNC authentication and password: it returns once the server
// accepted, ready for ClientInit.
func ClientLogin(rw io.ReadWriter, password string) error {
	var ver [12]byte
	if _, err := io.ReadFull(rw, ver[:]); err != nil {
		return fmt.Errorf("rfb: read version: %w", err)
	}
	if string(ver[:]) != Version {
		return fmt.Errorf("rfb: server speaks %q, not 3.8", bytes.TrimSpace(ver[:]))
	}
	if _, err := io.WriteString(rw, Version); err != nil {
		return fmt.Errorf("rfb: write version: %w", err)
	}
	var n [1]byte
	if _, err := io.ReadFull(rw, n[:]); err != nil {
		return fmt.Errorf("rfb: read security types: %w", err)
	}
	if n[0] == 0 {
		return fmt.Errorf("rfb: server refused: %s", readReason(rw))
	}
	types := make([]byte, n[0])
	if _, err := io.ReadFull(rw, types); err != nil {
		return fmt.Errorf("rfb: read security types: %w", err)
	}
	if !bytes.Contains(types, []byte{SecurityVNCAuth}) {
		return fmt.Errorf("rfb: server offers security types %v, not VNC authentication", types)
	}
	if _, err := rw.Write([]byte{SecurityVNCAuth}); err != nil {
		return fmt.Errorf("rfb: choose security: %w", err)
	}
	var challenge [16]byte
	if _, err := io.ReadFull(rw, challenge[:]); err != nil {
		return fmt.Errorf("rfb: read challenge: %w", err)
	}
	resp := AuthResponse(password, challenge)
	if _, err := rw.Write(resp[:]); err != nil {
		return fmt.Errorf("rfb: answer challenge: %w", err)
	}
	return readResult(rw)
}

// readResult reads a SecurityResult (and its reason when it failed).
func readResult(r io.Reader) error {
	var res [4]byte
	if _, err := io.ReadFull(r, res[:]); err != nil {
		return fmt.Errorf("rfb: read security result: %w", err)
	}
	if binary.BigEndian.Uint32(res[:]) != 0 {
		return fmt.Errorf("%w: %s", ErrAuthFailed, readReason(r))
	}
	return nil
}

// readReason reads a length-prefixed failure reason.
func readReason(r io.Reader) string {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return "(no reason)"
	}
	msg := make([]byte, min(binary.BigEndian.Uint32(l[:]), 1024))
	if _, err := io.ReadFull(r, msg); err != nil {
		return "(no reason)"
	}
	return string(msg)
}

// ServeVNCAuth runs a server's side of the handshake up to the security
// result, offering VNC authentication only and checking the client's
// answer against password. A wrong answer is told so and returns
// ErrAuthFailed.
func ServeVNCAuth(rw io.ReadWriter, password string) error {
	if err := serveVersion(rw, SecurityVNCAuth); err != nil {
		return err
	}
	var challenge [16]byte
	if _, err := rand.Read(challenge[:]); err != nil {
		return fmt.Errorf("rfb: challenge: %w", err)
	}
	if _, err := rw.Write(challenge[:]); err != nil {
		return fmt.Errorf("rfb: write challenge: %w", err)
	}
	var got [16]byte
	if _, err := io.ReadFull(rw, got[:]); err != nil {
		return fmt.Errorf("rfb: read challenge answer: %w", err)
	}
	want := AuthResponse(password, challenge)
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		_ = writeFailure(rw, "authentication failed")
		return ErrAuthFailed
	}
	return writeOK(rw)
}

// ServeNone runs a server's side of the handshake up to the security
// result, offering no authentication (the caller has authenticated the
// client some other way).
func ServeNone(rw io.ReadWriter) error {
	if err := serveVersion(rw, SecurityNone); err != nil {
		return err
	}
	return writeOK(rw)
}

// serveVersion sends the version, reads the client's (3.8 only), offers
// the one security type sec and reads the client's choice of it.
func serveVersion(rw io.ReadWriter, sec byte) error {
	if _, err := io.WriteString(rw, Version); err != nil {
		return fmt.Errorf("rfb: write version: %w", err)
	}
	var ver [12]byte
	if _, err := io.ReadFull(rw, ver[:]); err != nil {
		return fmt.Errorf("rfb: read version: %w", err)
	}
	if string(ver[:]) != Version {
		// 3.8 lets the server refuse with a reason instead of a type list.
		_, _ = rw.Write([]byte{0})
		_ = writeReason(rw, "only RFB 3.8 is supported")
		return fmt.Errorf("rfb: client speaks %q, not 3.8", bytes.TrimSpace(ver[:]))
	}
	if _, err := rw.Write([]byte{1, sec}); err != nil {
		return fmt.Errorf("rfb: write security types: %w", err)
	}
	var choice [1]byte
	if _, err := io.ReadFull(rw, choice[:]); err != nil {
		return fmt.Errorf("rfb: read security choice: %w", err)
	}
	if choice[0] != sec {
		_ = writeFailure(rw, "unsupported security type")
		return fmt.Errorf("rfb: client chose security type %d, not %d", choice[0], sec)
	}
	return nil
}

func writeOK(w io.Writer) error {
	if _, err := w.Write([]byte{0, 0, 0, 0}); err != nil {
		return fmt.Errorf("rfb: write security result: %w", err)
	}
	return nil
}

func writeFailure(w io.Writer, reason string) error {
	if _, err := w.Write([]byte{0, 0, 0, 1}); err != nil {
		return err
	}
	return writeReason(w, reason)
}

func writeReason(w io.Writer, reason string) error {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(reason)))
	_, err := w.Write(append(b, reason...))
	return err
}
