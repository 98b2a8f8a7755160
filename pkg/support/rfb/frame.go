package rfb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
)

// Client message types (RFC 6143 7.5).
const (
	MsgSetPixelFormat           = 0
	MsgSetEncodings             = 2
	MsgFramebufferUpdateRequest = 3
	MsgKeyEvent                 = 4
	MsgPointerEvent             = 5
	MsgClientCutText            = 6
)

// EncodingRaw is the raw encoding, the one every client supports.
const EncodingRaw = 0

// PixelFormat is how a pixel is laid out on the wire (RFC 6143 7.4).
type PixelFormat struct {
	BitsPerPixel, Depth             uint8
	BigEndian, TrueColour           bool
	RedMax, GreenMax, BlueMax       uint16
	RedShift, GreenShift, BlueShift uint8
}

// RGB888 is 32 bits per pixel, 8 bits per channel, little-endian
// (red lowest): what servers usually announce.
var RGB888 = PixelFormat{BitsPerPixel: 32, Depth: 24, TrueColour: true,
	RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 0, GreenShift: 8, BlueShift: 16}

// Marshal is the 16 bytes of the format on the wire.
func (f PixelFormat) Marshal() []byte {
	b := make([]byte, 16)
	b[0], b[1] = f.BitsPerPixel, f.Depth
	b[2], b[3] = boolByte(f.BigEndian), boolByte(f.TrueColour)
	binary.BigEndian.PutUint16(b[4:], f.RedMax)
	binary.BigEndian.PutUint16(b[6:], f.GreenMax)
	binary.BigEndian.PutUint16(b[8:], f.BlueMax)
	b[10], b[11], b[12] = f.RedShift, f.GreenShift, f.BlueShift
	return b
}

// ParsePixelFormat reads a format from its 16 bytes, refusing one flexplane
// cannot draw (colour maps, or not 8, 16 or 32 bits per pixel).
func ParsePixelFormat(b []byte) (PixelFormat, error) {
	if len(b) < 16 {
		return PixelFormat{}, errors.New("rfb: short pixel format")
	}
	f := PixelFormat{BitsPerPixel: b[0], Depth: b[1], BigEndian: b[2] != 0, TrueColour: b[3] != 0,
		RedMax: binary.BigEndian.Uint16(b[4:]), GreenMax: binary.BigEndian.Uint16(b[6:]), BlueMax: binary.BigEndian.Uint16(b[8:]),
		RedShift: b[10], GreenShift: b[11], BlueShift: b[12]}
	if !f.TrueColour || (f.BitsPerPixel != 8 && f.BitsPerPixel != 16 && f.BitsPerPixel != 32) {
		return PixelFormat{}, fmt.Errorf("rfb: pixel format of %d bits (true colour %v) is not supported", f.BitsPerPixel, f.TrueColour)
	}
	return f, nil
}

// Encode appends the pixel c in format f.
func (f PixelFormat) Encode(dst []byte, c color.RGBA) []byte {
	v := uint32(c.R)*uint32(f.RedMax)/255<<f.RedShift |
		uint32(c.G)*uint32(f.GreenMax)/255<<f.GreenShift |
		uint32(c.B)*uint32(f.BlueMax)/255<<f.BlueShift
	switch f.BitsPerPixel {
	case 8:
		return append(dst, byte(v))
	case 16:
		if f.BigEndian {
			return binary.BigEndian.AppendUint16(dst, uint16(v))
		}
		return binary.LittleEndian.AppendUint16(dst, uint16(v))
	default:
		if f.BigEndian {
			return binary.BigEndian.AppendUint32(dst, v)
		}
		return binary.LittleEndian.AppendUint32(dst, v)
	}
}

// decode reads one pixel of format f from b.
func (f PixelFormat) decode(b []byte) color.RGBA {
	var v uint32
	switch f.BitsPerPixel {
	case 8:
		v = uint32(b[0])
	case 16:
		if f.BigEndian {
			v = uint32(binary.BigEndian.Uint16(b))
		} else {
			v = uint32(binary.LittleEndian.Uint16(b))
		}
	default:
		if f.BigEndian {
			v = binary.BigEndian.Uint32(b)
		} else {
			v = binary.LittleEndian.Uint32(b)
		}
	}
	ch := func(shift uint8, maxV uint16) uint8 {
		if maxV == 0 {
			return 0
		}
		return uint8((v >> shift & uint32(maxV)) * 255 / uint32(maxV))
	}
	return color.RGBA{ch(f.RedShift, f.RedMax), ch(f.GreenShift, f.GreenMax), ch(f.BlueShift, f.BlueMax), 255}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// ServerInit is the server's description of its desktop (RFC 6143 7.3.2).
type ServerInit struct {
	Width, Height int
	Format        PixelFormat
	// Name is the desktop's name.
	Name string
}

// Marshal is the ServerInit message.
func (s ServerInit) Marshal() []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(s.Width))
	b = binary.BigEndian.AppendUint16(b, uint16(s.Height))
	b = append(b, s.Format.Marshal()...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Name)))
	return append(b, s.Name...)
}

// ClientInit sends a shared ClientInit and reads the ServerInit: the
// client's side of the initialisation after ClientLogin (or a None
// handshake).
func ClientInit(rw io.ReadWriter) (ServerInit, error) {
	if _, err := rw.Write([]byte{1}); err != nil {
		return ServerInit{}, fmt.Errorf("rfb: write client init: %w", err)
	}
	var hdr [24]byte
	if _, err := io.ReadFull(rw, hdr[:]); err != nil {
		return ServerInit{}, fmt.Errorf("rfb: read server init: %w", err)
	}
	f, err := ParsePixelFormat(hdr[4:20])
	if err != nil {
		return ServerInit{}, err
	}
	name := make([]byte, min(binary.BigEndian.Uint32(hdr[20:]), 4096))
	if _, err := io.ReadFull(rw, name); err != nil {
		return ServerInit{}, fmt.Errorf("rfb: read desktop name: %w", err)
	}
	return ServerInit{Width: int(binary.BigEndian.Uint16(hdr[0:])), Height: int(binary.BigEndian.Uint16(hdr[2:])), Format: f, Name: string(name)}, nil
}

// ClientNone is the client's side of a handshake with no authentication
// (what a browser does with the agent's relay).
func ClientNone(rw io.ReadWriter) error {
	var ver [12]byte
	if _, err := io.ReadFull(rw, ver[:]); err != nil {
		return fmt.Errorf("rfb: read version: %w", err)
	}
	if _, err := io.WriteString(rw, Version); err != nil {
		return fmt.Errorf("rfb: write version: %w", err)
	}
	var types [2]byte
	if _, err := io.ReadFull(rw, types[:1]); err != nil {
		return fmt.Errorf("rfb: read security types: %w", err)
	}
	if types[0] != 1 {
		return fmt.Errorf("rfb: server offers %d security types, not None alone", types[0])
	}
	if _, err := io.ReadFull(rw, types[1:]); err != nil || types[1] != SecurityNone {
		return fmt.Errorf("rfb: server does not offer None (%d, %v)", types[1], err)
	}
	if _, err := rw.Write([]byte{SecurityNone}); err != nil {
		return fmt.Errorf("rfb: choose security: %w", err)
	}
	return readResult(rw)
}

// ReadFrame asks for the whole framebuffer of si in raw encoding and reads
// it: a client's first update.
func ReadFrame(rw io.ReadWriter, si ServerInit) (*image.RGBA, error) {
	req := []byte{MsgSetEncodings, 0, 0, 1}
	req = binary.BigEndian.AppendUint32(req, EncodingRaw)
	req = append(req, MsgFramebufferUpdateRequest, 0, 0, 0, 0, 0)
	req = binary.BigEndian.AppendUint16(req, uint16(si.Width))
	req = binary.BigEndian.AppendUint16(req, uint16(si.Height))
	if _, err := rw.Write(req); err != nil {
		return nil, fmt.Errorf("rfb: request frame: %w", err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(rw, hdr[:]); err != nil {
		return nil, fmt.Errorf("rfb: read update: %w", err)
	}
	if hdr[0] != 0 {
		return nil, fmt.Errorf("rfb: server message %d, not a framebuffer update", hdr[0])
	}
	img := image.NewRGBA(image.Rect(0, 0, si.Width, si.Height))
	bpp := int(si.Format.BitsPerPixel) / 8
	for range binary.BigEndian.Uint16(hdr[2:]) {
		var r [12]byte
		if _, err := io.ReadFull(rw, r[:]); err != nil {
			return nil, fmt.Errorf("rfb: read rectangle: %w", err)
		}
		x, y := int(binary.BigEndian.Uint16(r[0:])), int(binary.BigEndian.Uint16(r[2:]))
		w, h := int(binary.BigEndian.Uint16(r[4:])), int(binary.BigEndian.Uint16(r[6:]))
		if enc := int32(binary.BigEndian.Uint32(r[8:])); enc != EncodingRaw {
			return nil, fmt.Errorf("rfb: rectangle in encoding %d, not raw", enc)
		}
		px := make([]byte, w*h*bpp)
		if _, err := io.ReadFull(rw, px); err != nil {
			return nil, fmt.Errorf("rfb: read pixels: %w", err)
		}
		for i := range w * h {
			img.SetRGBA(x+i%w, y+i/w, si.Format.decode(px[i*bpp:]))
		}
	}
	return img, nil
}
