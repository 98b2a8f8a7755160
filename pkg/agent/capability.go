package agent

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// capabilities are one-use secrets the agent hands out (volume offers,
// console tickets): each stands for a value until it is taken or expires.
// The zero value is ready to use.
type capabilities[T any] struct {
	mu sync.Mutex
	m  map[string]grant[T] // secret -> grant; protected by mu
}

type grant[T any] struct {
	v       T
	expires time.Time
}

// add registers v until expires and returns its secret: 256 random bits,
// hex. With limit > 0, it refuses (false) while limit grants are waiting.
func (c *capabilities[T]) add(v T, expires time.Time, limit int) (string, bool) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	secret := hex.EncodeToString(b[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]grant[T]{}
	}
	now := time.Now()
	for k, g := range c.m {
		if now.After(g.expires) {
			delete(c.m, k)
		}
	}
	if limit > 0 && len(c.m) >= limit {
		return "", false
	}
	c.m[secret] = grant[T]{v: v, expires: expires}
	return secret, true
}

// take consumes the grant of secret if it has not expired and may (when
// not nil) accepts its value; a refused grant stays.
func (c *capabilities[T]) take(secret string, may func(T) bool) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.m[secret]
	if !ok || time.Now().After(g.expires) || (may != nil && !may(g.v)) {
		var zero T
		return zero, false
	}
	delete(c.m, secret)
	return g.v, true
}
