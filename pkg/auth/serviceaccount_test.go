package auth_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
)

// accounts is a ServiceAccountStore in memory.
type accounts struct {
	mu   sync.Mutex
	m    map[string]auth.StoredServiceAccount // by "<vdc>/<id>", protected by mu
	used int                                  // protected by mu
}

func (a *accounts) ServiceAccount(_ context.Context, vdc, id string) (auth.StoredServiceAccount, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.m[vdc+"/"+id]
	if !ok {
		return s, auth.ErrNoServiceAccount
	}
	return s, nil
}

func (a *accounts) ServiceAccountUsed(context.Context, string, string, time.Time) {
	a.mu.Lock()
	a.used++
	a.mu.Unlock()
}

// TestServiceAccountToken: tokens carry the prefix, their VDC and id and
// 256 random bits, and only their hash is stored; the verifier accepts the
// current token (and the previous one within its grace period), gives the
// account's role in its VDC only, and refuses malformed, unknown, wrong,
// rotated-away and expired tokens with a reason each.
func TestServiceAccountToken(t *testing.T) {
	t.Parallel()
	id, err := auth.NewServiceAccountID()
	if err != nil || len(id) != 23 || !strings.HasPrefix(id, "sa-") {
		t.Fatalf("id %q, %v", id, err)
	}
	tok, hash, err := auth.NewServiceAccountToken("prod", id)
	if err != nil {
		t.Fatal(err)
	}
	vdc, gotID, secret, err := auth.ParseServiceAccountToken(tok)
	if err != nil || vdc != "prod" || gotID != id || len(secret) != 43 || auth.HashSecret(secret) != hash || strings.Contains(hash, secret) {
		t.Fatalf("token %q hash %q: %q %q %q %v", tok, hash, vdc, gotID, secret, err)
	}
	old, oldHash, _ := auth.NewServiceAccountToken("prod", id)
	if old == tok || oldHash == hash {
		t.Fatal("two tokens are the same")
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	store := &accounts{m: map[string]auth.StoredServiceAccount{
		"prod/" + id: {Name: "ci", Role: auth.RoleMember, TokenHash: hash, PreviousTokenHash: oldHash, PreviousUntil: &later},
	}}
	clock := now
	v := auth.NewServiceAccountVerifier(store, func() time.Time { return clock })
	for _, tk := range []string{tok, old} {
		p, err := v.Verify(t.Context(), tk)
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		if role, ok := p.RoleIn("prod"); !ok || role != auth.RoleMember || p.Subject != id || !p.ServiceAccount || p.PlatformAdmin {
			t.Errorf("principal %+v", p)
		}
		if _, ok := p.RoleIn("dev"); ok {
			t.Error("the account has a role in another VDC")
		}
		if role, _ := p.RoleWith("prod", func(string) string { return "admin" }); role != auth.RoleMember {
			t.Errorf("a member binding raised a service account to %s", role)
		}
	}
	if store.used != 2 {
		t.Errorf("%d uses recorded, want 2", store.used)
	}
	refused := func(tk, why string) {
		t.Helper()
		_, err := v.Verify(t.Context(), tk)
		var re *auth.RefusedError
		if !errors.As(err, &re) || !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(re.Reason, why) {
			t.Errorf("%.30q: %v, want a refusal saying %q", tk, err, why)
		}
	}
	for _, tk := range []string{"fpsa_", "fpsa_prod", "fpsa_prod_" + id, "fpsa_prod_" + id + "_short", "fpsa__" + id + "_" + secret, "fpsa_prod_x_" + secret} {
		refused(tk, "malformed")
	}
	other, _, _ := auth.NewServiceAccountToken("prod", id)
	refused(other, "rotated or is wrong")
	unknown, _, _ := auth.NewServiceAccountToken("dev", id)
	refused(unknown, "does not exist")
	clock = later
	refused(old, "grace period is over")
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Errorf("the current token after the grace period: %v", err)
	}
	a := store.m["prod/"+id]
	a.ExpiresAt = &later
	store.m["prod/"+id] = a
	refused(tok, "expired at 2030-01-01T01:00:00Z")
	clock = now
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Errorf("before its expiry: %v", err)
	}
}
