package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// backendState is the health of one backend with a health check.
type backendState struct {
	address   string
	check     lbconfig.HealthCheck
	healthy   bool
	passes    int // checks passed in a row
	fails     int // checks failed in a row
	lastError string
	checked   time.Time
}

// carryHealth returns the health states for next: a backend with the same
// balancer, pool, id, address and check as in the old config keeps its
// state, any other starts healthy.
func carryHealth(old map[backendKey]*backendState, next lbconfig.Config) map[backendKey]*backendState {
	out := map[backendKey]*backendState{}
	for _, b := range next.Balancers {
		for _, p := range b.Pools {
			if p.HealthCheck == nil {
				continue
			}
			for _, be := range p.Backends {
				k := backendKey{b.ID, p.Name, be.ID}
				if s := old[k]; s != nil && s.address == be.Address && s.check == *p.HealthCheck {
					cp := *s
					out[k] = &cp
					continue
				}
				out[k] = &backendState{address: be.Address, check: *p.HealthCheck, healthy: true}
			}
		}
	}
	return out
}

// downSet lists the backends of health that are down; the caller holds
// the lock guarding health.
func downSet(health map[backendKey]*backendState) map[backendKey]bool {
	down := map[backendKey]bool{}
	for k, s := range health {
		if !s.healthy {
			down[k] = true
		}
	}
	return down
}

// startChecks starts one checker per backend with a health check of cfg;
// they run until ctx ends.
func (g *Gateway) startChecks(ctx context.Context, cfg lbconfig.Config) {
	for _, b := range cfg.Balancers {
		for _, p := range b.Pools {
			if p.HealthCheck == nil {
				continue
			}
			for _, be := range p.Backends {
				go g.checkLoop(ctx, backendKey{b.ID, p.Name, be.ID}, be.Address, *p.HealthCheck)
			}
		}
	}
}

// checkLoop checks one backend every Interval, at once first.
func (g *Gateway) checkLoop(ctx context.Context, k backendKey, addr string, hc lbconfig.HealthCheck) {
	client := &http.Client{
		Timeout:       time.Duration(hc.Timeout),
		Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	t := time.NewTicker(time.Duration(hc.Interval))
	defer t.Stop()
	for {
		err := check(ctx, client, addr, hc)
		if ctx.Err() != nil {
			return
		}
		g.record(ctx, k, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check makes one health check of addr.
func check(ctx context.Context, client *http.Client, addr string, hc lbconfig.HealthCheck) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(hc.Timeout))
	defer cancel()
	if hc.Protocol == lbconfig.HealthCheckTCP {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+hc.Path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "flexgateway-health-check")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", hc.Path, resp.Status)
	}
	return nil
}

// record counts one check's result and asks for a reload when the
// backend's health changes. A result of a checker whose config was
// replaced (ctx ended) is dropped.
func (g *Gateway) record(ctx context.Context, k backendKey, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.health[k]
	if s == nil || ctx.Err() != nil {
		return
	}
	s.checked = time.Now()
	changed := false
	if err == nil {
		s.passes, s.fails, s.lastError = s.passes+1, 0, ""
		if !s.healthy && s.passes >= s.check.HealthyThreshold {
			s.healthy, changed = true, true
		}
	} else {
		s.passes, s.fails, s.lastError = 0, s.fails+1, err.Error()
		if s.healthy && s.fails >= s.check.UnhealthyThreshold {
			s.healthy, changed = false, true
		}
	}
	if changed {
		g.bump()
		g.log.Info("backend health changed", "balancer", k.Balancer, "pool", k.Pool, "backend", k.Backend, "healthy", s.healthy, "err", s.lastError)
		select {
		case g.reload <- struct{}{}:
		default: // a reload is already due
		}
	}
}
