package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// wsQuery runs one operation over the graphql-transport-ws protocol with
// the given connection_init payload and returns the messages the server
// sent until the operation completed or the connection ended, and the
// error that ended the connection, if it did.
func wsQuery(t *testing.T, url string, initPayload map[string]any, query string) ([]wsMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	send := func(m any) {
		b, _ := json.Marshal(m)
		if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"type": "connection_init", "payload": initPayload})
	var got []wsMessage
	sent := false
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return got, err // closed by the server
		}
		var m wsMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("message %q: %v", data, err)
		}
		switch m.Type {
		case "ping":
			send(map[string]any{"type": "pong"})
			continue
		case "ka", "pong":
			continue
		}
		got = append(got, m)
		switch {
		case m.Type == "connection_ack" && !sent:
			sent = true
			send(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": query}})
		case m.Type == "complete" || m.Type == "connection_error" || m.Type == "error":
			return got, nil
		}
	}
}

func TestWebsocketTransport(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	msgs, _ := wsQuery(t, h.url, map[string]any{"Authorization": "Bearer " + h.token(t, "alice"), "FlexPlane-VDC-ID": "prod"},
		`{ me { subject } currentVDC { name } }`)
	if len(msgs) < 2 || msgs[0].Type != "connection_ack" || msgs[1].Type != "next" ||
		string(msgs[1].Payload) != `{"data":{"me":{"subject":"alice"},"currentVDC":{"name":"prod"}}}` {
		t.Fatalf("messages: %+v", msgs)
	}

	// Another VDC in the payload: NOT_FOUND, as over HTTP.
	msgs, _ = wsQuery(t, h.url, map[string]any{"Authorization": "Bearer " + h.token(t, "alice"), "FlexPlane-VDC-ID": "staging"},
		`{ me { subject } }`)
	if len(msgs) < 2 || !strings.Contains(string(msgs[1].Payload), `"code":"NOT_FOUND"`) || strings.Contains(string(msgs[1].Payload), "alice") {
		t.Fatalf("other VDC: %+v", msgs)
	}

	// No token, or a bad one: no connection_ack, no data.
	for _, payload := range []map[string]any{{}, {"Authorization": "Bearer nope"}} {
		msgs, err := wsQuery(t, h.url, payload, `{ me { subject } }`)
		var ce websocket.CloseError
		if len(msgs) != 0 || !errors.As(err, &ce) || ce.Code != 4403 || !strings.HasPrefix(ce.Reason, "UNAUTHENTICATED: ") {
			t.Fatalf("unauthenticated websocket: messages %+v, end %v", msgs, err)
		}
	}
}
