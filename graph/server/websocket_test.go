package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
)

// wsQuery runs one operation over the websocket (gqltest.Subscribe) with
// the given connection_init payload.
func wsQuery(t *testing.T, url string, initPayload map[string]any, query string) ([]gqltest.Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return gqltest.Subscribe(ctx, url, initPayload, query)
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

	// No token, or a malformed one: no connection_ack, no data, the
	// reason in the close frame.
	for why, payload := range map[string]map[string]any{"no bearer token": {}, "the token is malformed": {"Authorization": "Bearer nope"}} {
		msgs, err := wsQuery(t, h.url, payload, `{ me { subject } }`)
		var ce websocket.CloseError
		if len(msgs) != 0 || !errors.As(err, &ce) || ce.Code != 4403 || !strings.HasPrefix(ce.Reason, "UNAUTHENTICATED: ") || !strings.Contains(ce.Reason, why) {
			t.Fatalf("unauthenticated websocket (%s): messages %+v, end %v", why, msgs, err)
		}
	}
}
