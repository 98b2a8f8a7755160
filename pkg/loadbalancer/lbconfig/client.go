package lbconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrInvalid is returned by Client.Apply when the replica refused the config as invalid.
var ErrInvalid = errors.New("config refused")

// Client talks to one replica's admin API.
type Client struct {
	// BaseURL is the replica's admin URL, e.g. "https://10.0.0.5:9443".
	BaseURL string
	// Token is the admin bearer token of the replica's zone.
	Token string
	// HTTP is the client used; nil is http.DefaultClient. Its transport
	// must present the client certificate (ClientTLS).
	HTTP *http.Client
}

// Apply pushes cfg; an invalid config is an error wrapping ErrInvalid with the reason.
func (c *Client) Apply(ctx context.Context, cfg Config) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("lbconfig apply: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPut, "/v1/config", body)
	if err != nil {
		return fmt.Errorf("lbconfig apply: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("lbconfig apply: %w: %s", ErrInvalid, strings.TrimSpace(string(msg)))
	default:
		return fmt.Errorf("lbconfig apply: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
}

// Status reads the replica's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	return c.status(ctx, "/v1/status")
}

// WatchStatus reads the replica's status once its generation is other
// than after, or wait has passed (then it may be the same). The request
// lasts up to wait: c.HTTP must not time out before.
func (c *Client) WatchStatus(ctx context.Context, after uint64, wait time.Duration) (Status, error) {
	return c.status(ctx, fmt.Sprintf("/v1/status?after=%d&wait=%s", after, wait))
}

func (c *Client) status(ctx context.Context, path string) (Status, error) {
	var st Status
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return st, fmt.Errorf("lbconfig status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return st, fmt.Errorf("lbconfig status: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("lbconfig status: %w", err)
	}
	return st, nil
}

func (c *Client) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}
