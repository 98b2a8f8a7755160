package pvesim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/flexplane/flexplane/pkg/support/rfb"
)

// A VNC console as Proxmox serves one: POST .../vncproxy starts a
// vncproxy task listening on a port of 5900-5999 and answers a ticket;
// GET .../vncwebsocket?port=&vncticket= (with the same credentials) is a
// websocket to it, accepted once, within vncConnectTimeout. The VNC server
// behind it authenticates with VNC authentication, the ticket being the
// password (as Proxmox sets a VM's VNC password to the ticket), and shows
// a test picture: colour bars over a band with the VM's name, which is
// also the desktop's name.

// vncConnectTimeout is how long a vncproxy waits for its connection
// (Proxmox's proxy gives up after 10 s).
const vncConnectTimeout = 10 * time.Second

// vncPorts are the ports a vncproxy may listen on (vncwebsocket's port).
const vncFirstPort, vncLastPort = 5900, 5999

// vncSession is one vncproxy waiting for (or serving) its connection.
type vncSession struct {
	node      string
	port      int
	vmid      int
	user      string
	ticket    string
	task      *task
	connected bool
}

// vncKey names a session by node and port.
func vncKey(node string, port int) string { return node + "/" + strconv.Itoa(port) }

// Console colours: the bars left to right, the name band.
var (
	consoleBars = []color.RGBA{
		{0xC0, 0xC0, 0xC0, 255}, {0xC0, 0xC0, 0x00, 255}, {0x00, 0xC0, 0xC0, 255}, {0x00, 0xC0, 0x00, 255},
		{0xC0, 0x00, 0xC0, 255}, {0xC0, 0x00, 0x00, 255}, {0x00, 0x00, 0xC0, 255}, {0x10, 0x10, 0x10, 255},
	}
	consoleBand = color.RGBA{0x00, 0x20, 0x60, 255}
	consoleText = color.RGBA{0xFF, 0xFF, 0xFF, 255}
)

// Console frame size.
const consoleWidth, consoleHeight = 640, 400

// ConsoleFrame is the picture the simulated console of a VM named name
// shows: eight colour bars (ConsoleBar) over a dark blue band with the
// name in white. Exported for tests that check what a client received.
func ConsoleFrame(name string) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, consoleWidth, consoleHeight))
	barH := consoleHeight * 2 / 3
	for i, c := range consoleBars {
		r := image.Rect(i*consoleWidth/len(consoleBars), 0, (i+1)*consoleWidth/len(consoleBars), barH)
		draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
	}
	draw.Draw(img, image.Rect(0, barH, consoleWidth, consoleHeight), &image.Uniform{consoleBand}, image.Point{}, draw.Src)
	// The name at 3x the 7x13 font, drawn small and scaled up.
	face := basicfont.Face7x13
	small := image.NewRGBA(image.Rect(0, 0, consoleWidth/3, 16))
	d := font.Drawer{Dst: small, Src: &image.Uniform{consoleText}, Face: face, Dot: fixed.P(4, 12)}
	d.DrawString(name)
	y0 := barH + (consoleHeight-barH-48)/2
	for y := range 16 {
		for x := range consoleWidth / 3 {
			if small.RGBAAt(x, y).A == 0 {
				continue
			}
			draw.Draw(img, image.Rect(x*3, y0+y*3, x*3+3, y0+y*3+3), &image.Uniform{consoleText}, image.Point{}, draw.Src)
		}
	}
	return img
}

// ConsoleBar is the colour of bar i (0-7, left to right) of ConsoleFrame;
// bar i spans x from i*80 to i*80+79 and y from 0 to 265.
func ConsoleBar(i int) color.RGBA { return consoleBars[i] }

// hVNCProxy is POST /nodes/{node}/qemu/{vmid}/vncproxy.
func hVNCProxy(cl *call, g *guest) (any, error) {
	if !g.running {
		return nil, errorf(http.StatusInternalServerError, "VM %d not running", g.vmid)
	}
	c := cl.c
	port := 0
	for p := vncFirstPort; p <= vncLastPort; p++ {
		if c.vnc[vncKey(g.node, p)] == nil {
			port = p
			break
		}
	}
	if port == 0 {
		return nil, errorf(http.StatusInternalServerError, "unable to find free port (%d-%d)", vncFirstPort, vncLastPort)
	}
	sig := make([]byte, 48)
	if _, err := rand.Read(sig); err != nil {
		return nil, err
	}
	ticket := fmt.Sprintf("PVEVNC:%08X::%s", time.Now().Unix(), base64.StdEncoding.EncodeToString(sig))
	s := &vncSession{node: g.node, port: port, vmid: g.vmid, user: cl.user, ticket: ticket,
		task: c.st.newTask(g.node, "vncproxy", strconv.Itoa(g.vmid), cl.user)}
	s.task.log = append(s.task.log, fmt.Sprintf("listening on port %d", port))
	c.vnc[vncKey(g.node, port)] = s
	c.st.after(vncConnectTimeout, func() {
		if !s.connected && c.vnc[vncKey(s.node, s.port)] == s {
			delete(c.vnc, vncKey(s.node, s.port))
			s.task.finish(errors.New("connection timed out"))
		}
	})
	return map[string]any{
		"port":   port,
		"ticket": ticket,
		"user":   cl.user,
		"cert":   c.certs.nodes[g.node].pem,
		"upid":   s.task.upid,
	}, nil
}

// uVNCWebsocket is GET /nodes/{node}/qemu/{vmid}/vncwebsocket: it checks
// the ticket against the waiting vncproxy of the port (same VM, same
// user, not connected yet) under the model's lock and then serves the
// websocket.
func uVNCWebsocket(cl *call) (http.HandlerFunc, error) {
	c := cl.c
	g, err := c.st.guestOn(cl.vars["node"], cl.vmid())
	if err != nil {
		return nil, err
	}
	port, _ := cl.p.int("port")
	ticket, _ := cl.p.str("vncticket")
	s := c.vnc[vncKey(g.node, int(port))]
	if s == nil || s.connected || s.vmid != g.vmid || s.user != cl.user ||
		subtle.ConstantTimeCompare([]byte(s.ticket), []byte(ticket)) != 1 {
		return nil, errorf(http.StatusUnauthorized, "permission denied - invalid vnc ticket")
	}
	s.connected = true
	name := g.name()
	return func(w http.ResponseWriter, r *http.Request) {
		err := c.serveConsole(w, r, s, name)
		c.mu.Lock()
		delete(c.vnc, vncKey(s.node, s.port))
		s.task.finish(err)
		c.markDirty()
		c.mu.Unlock()
	}, nil
}

// serveConsole upgrades to the websocket and serves the VNC session on it
// until either side closes or the cluster does.
func (c *Cluster) serveConsole(w http.ResponseWriter, r *http.Request, s *vncSession, name string) error {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return fmt.Errorf("websocket upgrade: %w", err)
	}
	c.work.Add(1)
	defer c.work.Done()
	ws.SetReadLimit(1 << 20)
	conn := websocket.NetConn(c.ctx, ws, websocket.MessageBinary)
	defer conn.Close()
	err = serveRFB(conn, s.ticket, name)
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || websocket.CloseStatus(err) != -1 || c.ctx.Err() != nil {
		return nil // the client (or the simulator) ended the session
	}
	return err
}

// serveRFB is the VNC server of a console: the handshake with VNC
// authentication, then frames on request; input is read and ignored.
func serveRFB(conn io.ReadWriter, password, name string) error {
	if err := rfb.ServeVNCAuth(conn, password); err != nil {
		return err
	}
	var shared [1]byte
	if _, err := io.ReadFull(conn, shared[:]); err != nil {
		return fmt.Errorf("rfb: read client init: %w", err)
	}
	frame := ConsoleFrame(name)
	format := rfb.RGB888
	if _, err := conn.Write(rfb.ServerInit{Width: consoleWidth, Height: consoleHeight, Format: format, Name: name}.Marshal()); err != nil {
		return fmt.Errorf("rfb: write server init: %w", err)
	}
	var typ [1]byte
	for {
		if _, err := io.ReadFull(conn, typ[:]); err != nil {
			return err
		}
		var err error
		switch typ[0] {
		case rfb.MsgSetPixelFormat:
			var b [19]byte
			if _, err = io.ReadFull(conn, b[:]); err == nil {
				format, err = rfb.ParsePixelFormat(b[3:])
			}
		case rfb.MsgSetEncodings:
			var b [3]byte
			if _, err = io.ReadFull(conn, b[:]); err == nil {
				_, err = io.CopyN(io.Discard, conn, 4*int64(binary.BigEndian.Uint16(b[1:])))
			}
		case rfb.MsgFramebufferUpdateRequest:
			var b [9]byte
			if _, err = io.ReadFull(conn, b[:]); err == nil && b[0] == 0 {
				// The picture never changes: only a full request is
				// answered (incremental ones wait for a change that
				// does not come).
				err = writeFrame(conn, frame, format)
			}
		case rfb.MsgKeyEvent:
			_, err = io.CopyN(io.Discard, conn, 7)
		case rfb.MsgPointerEvent:
			_, err = io.CopyN(io.Discard, conn, 5)
		case rfb.MsgClientCutText:
			var b [7]byte
			if _, err = io.ReadFull(conn, b[:]); err == nil {
				_, err = io.CopyN(io.Discard, conn, int64(min(binary.BigEndian.Uint32(b[3:]), 1<<20)))
			}
		default:
			return fmt.Errorf("rfb: unknown client message %d", typ[0])
		}
		if err != nil {
			return err
		}
	}
}

// writeFrame sends the whole frame as one raw rectangle in format f.
func writeFrame(w io.Writer, img *image.RGBA, f rfb.PixelFormat) error {
	b := img.Bounds()
	msg := make([]byte, 0, 16+b.Dx()*b.Dy()*int(f.BitsPerPixel)/8)
	msg = append(msg, 0, 0, 0, 1, 0, 0, 0, 0)
	msg = binary.BigEndian.AppendUint16(msg, uint16(b.Dx()))
	msg = binary.BigEndian.AppendUint16(msg, uint16(b.Dy()))
	msg = binary.BigEndian.AppendUint32(msg, rfb.EncodingRaw)
	for y := range b.Dy() {
		for x := range b.Dx() {
			msg = f.Encode(msg, img.RGBAAt(x, y))
		}
	}
	_, err := w.Write(msg)
	return err
}
