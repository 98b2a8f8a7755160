package rfb

import (
	"context"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// Subprotocol is the websocket subprotocol of VNC over websockets
// (Proxmox's vncwebsocket, noVNC): binary messages carrying the RFB byte
// stream.
const Subprotocol = "binary"

// DialWebsocket opens a websocket carrying RFB (ws:, wss:, or http(s):
// URLs) with client (nil: http.DefaultClient) and header, and returns it
// as a byte stream that lives until it is closed (ctx bounds the dial
// only). A refused upgrade returns the server's answer with the error.
// It is the one websocket client of the console: the agent's to Proxmox
// and the tests'.
func DialWebsocket(ctx context.Context, url string, client *http.Client, header http.Header, readLimit int64) (net.Conn, *http.Response, error) {
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client, HTTPHeader: header, Subprotocols: []string{Subprotocol}})
	if err != nil {
		return nil, resp, err
	}
	if readLimit > 0 {
		ws.SetReadLimit(readLimit)
	}
	return websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary), resp, nil
}
