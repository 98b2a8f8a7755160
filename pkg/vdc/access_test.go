package vdc_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// tokens issues predictable tokens (package auth's real ones are tested
// there).
type tokens struct{ n int }

func (k *tokens) NewID() (string, error) {
	k.n++
	return fmt.Sprintf("sa-%020x", k.n), nil
}

func (k *tokens) NewToken(v, id string) (string, string, error) {
	k.n++
	sum := sha256.Sum256(fmt.Appendf(nil, "%d", k.n))
	return fmt.Sprintf("fpsa_%s_%s_%d", v, id, k.n), "sha256:" + hex.EncodeToString(sum[:]), nil
}

// accessService is a VDC service over a new catalog directory with the
// VDC prod.
func accessService(t *testing.T) (*vdc.Service, catalog.Store) {
	t.Helper()
	store, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	v := &catalog.VDC{}
	v.Name = "prod"
	if _, err := catalog.Create(t.Context(), store, v); err != nil {
		t.Fatal(err)
	}
	svc, err := vdc.New(vdc.Config{Store: store, Tokens: &tokens{}})
	if err != nil {
		t.Fatal(err)
	}
	return svc, store
}

// TestAccessRoleBound: nobody grants or makes an account above its own
// role, nor changes one above it; a refusal changes nothing.
func TestAccessRoleBound(t *testing.T) {
	t.Parallel()
	svc, store := accessService(t)
	admin := vdc.Caller{Subject: "pam", Role: catalog.RoleAdmin}
	member := vdc.Caller{Subject: "alice", Role: catalog.RoleMember}
	top, err := svc.CreateServiceAccount(t.Context(), "prod", admin, vdc.NewServiceAccount{Name: "top", Role: catalog.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := catalog.Get[*catalog.VDC](t.Context(), store, "prod")
	for name, err := range map[string]error{
		"an admin account": func() error {
			_, err := svc.CreateServiceAccount(t.Context(), "prod", member, vdc.NewServiceAccount{Name: "x", Role: catalog.RoleAdmin})
			return err
		}(),
		"an admin grant": func() error {
			_, err := svc.AddMember(t.Context(), "prod", member, "bob", catalog.RoleAdmin)
			return err
		}(),
		"rotate an admin's": func() error {
			_, err := svc.RotateServiceAccountToken(t.Context(), "prod", member, top.Account.ID, 0)
			return err
		}(),
		"delete an admin's": func() error {
			_, err := svc.DeleteServiceAccount(t.Context(), "prod", member, top.Account.ID)
			return err
		}(),
	} {
		if !fault.Is(err, fault.Forbidden) {
			t.Errorf("a member makes %s: %v, want Forbidden", name, err)
		}
	}
	after, _ := catalog.Get[*catalog.VDC](t.Context(), store, "prod")
	if after.ResourceVersion != before.ResourceVersion {
		t.Error("refusals changed the VDC")
	}
	if _, err := svc.CreateServiceAccount(t.Context(), "prod", member, vdc.NewServiceAccount{Name: "ci", Role: catalog.RoleMember}); err != nil {
		t.Errorf("a member makes a member account: %v", err)
	}
}

// TestLastUsedAtOnceAMinute: uses of an account write its lastUsedAt at
// most once a minute, whatever the number of requests.
func TestLastUsedAtOnceAMinute(t *testing.T) {
	t.Parallel()
	svc, store := accessService(t)
	a, err := svc.CreateServiceAccount(t.Context(), "prod", vdc.Caller{Role: catalog.RoleAdmin}, vdc.NewServiceAccount{Name: "ci", Role: catalog.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	version := func() string {
		v, _ := catalog.Get[*catalog.VDC](t.Context(), store, "prod")
		return v.ResourceVersion
	}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	svc.ServiceAccountUsed(t.Context(), "prod", a.Account.ID, start)
	first := version()
	for i := range 100 {
		svc.ServiceAccountUsed(t.Context(), "prod", a.Account.ID, start.Add(time.Duration(i)*500*time.Millisecond))
	}
	if version() != first {
		t.Error("uses within a minute wrote the VDC again")
	}
	svc.ServiceAccountUsed(t.Context(), "prod", a.Account.ID, start.Add(time.Minute))
	got, err := svc.ServiceAccount(t.Context(), "prod", a.Account.ID)
	if err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(start.Add(time.Minute)) {
		t.Errorf("after a minute: %+v, %v", got.LastUsedAt, err)
	}
}
