package vdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/support/fault"
)

// Who may use a VDC besides the identity provider's role claims: users
// bound to it here (members) and its service accounts. Both live on the
// VDC object; every change is written conditionally on the version read
// (retried on a conflict with another write of the VDC, such as a quota
// reservation).

// Caller is who asks for a change of a VDC's access, as the API layer
// verified it.
type Caller struct {
	// Subject names the caller in what it makes (CreatedBy).
	Subject string
	// Role is the caller's effective role in the VDC (catalog.RoleAdmin
	// for platform admins).
	Role string
}

// Tokens issues service account tokens (package auth implements it).
type Tokens interface {
	// NewID returns a new random account id ("sa-" and 20 hex digits).
	NewID() (string, error)
	// NewToken returns a new token for the account id of vdc and the hash
	// of it to store.
	NewToken(vdc, id string) (token, hash string, err error)
}

// NewServiceAccount is what createServiceAccount asks for.
type NewServiceAccount struct {
	Name string
	// Role is catalog.RoleAdmin, RoleMember or RoleViewer.
	Role string
	// ExpiresAt, when set, must be in the future.
	ExpiresAt *time.Time
}

// IssuedToken is a service account with the token just made for it: the
// only time the token is shown.
type IssuedToken struct {
	Account catalog.ServiceAccount
	Token   string
}

// maxChangeAttempts bounds the retries of an access change that conflicts
// with another write of its VDC.
const maxChangeAttempts = 5

// lastUsedEvery is how often an account's lastUsedAt is written at most.
const lastUsedEvery = time.Minute

// accessState is what the service keeps of service account use between
// requests.
type accessState struct {
	mu       sync.Mutex
	lastUsed map[string]time.Time // "<vdc>/<id>" to the last write of its lastUsedAt, protected by mu
}

func (s *Service) now() time.Time {
	if s.cfg.Now != nil {
		return s.cfg.Now()
	}
	return time.Now()
}

// changeAccess applies change to the VDC name and writes it on the
// version read, again on a conflict; change refuses with an error and
// then nothing is written.
func (s *Service) changeAccess(ctx context.Context, name string, change func(*catalog.VDC) error) (*catalog.VDC, error) {
	for attempt := 1; ; attempt++ {
		v, err := catalog.Get[*catalog.VDC](ctx, s.cfg.Store, name)
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, NotFound(name)
		}
		if err != nil {
			return nil, err
		}
		if err := change(v); err != nil {
			return nil, err
		}
		out, err := catalog.Update(ctx, s.cfg.Store, v)
		if errors.Is(err, catalog.ErrConflict) && attempt < maxChangeAttempts {
			continue
		}
		return out, err
	}
}

func checkRole(field, role string, caller Caller) error {
	if catalog.RoleRank(role) == 0 {
		return fault.Invalid(field, "must be ADMIN, MEMBER or VIEWER")
	}
	if catalog.RoleRank(role) > catalog.RoleRank(caller.Role) {
		return fault.New(fault.Forbidden, "a role above your own (%s) cannot be granted", caller.Role)
	}
	return nil
}

// ServiceAccounts returns (copies of) the service accounts of v, by name.
func ServiceAccounts(v *catalog.VDC) []*catalog.ServiceAccount {
	out := make([]*catalog.ServiceAccount, len(v.ServiceAccounts))
	for i := range v.ServiceAccounts {
		a := v.ServiceAccounts[i]
		out[i] = &a
	}
	slices.SortFunc(out, func(a, b *catalog.ServiceAccount) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// CreateServiceAccount makes a service account of the VDC vdcName and
// its first token. Its role is at most the caller's (else Forbidden); a
// taken name or a VDC with catalog.MaxServiceAccounts already is a
// conflict; nothing changes on a refusal.
func (s *Service) CreateServiceAccount(ctx context.Context, vdcName string, caller Caller, in NewServiceAccount) (IssuedToken, error) {
	if s.cfg.Tokens == nil {
		return IssuedToken{}, errors.New("vdc: create service account: no token issuer configured")
	}
	if err := catalog.ValidateLabel("name", in.Name); err != nil {
		return IssuedToken{}, fault.Invalid("name", "%s", validationMessage(err))
	}
	if err := checkRole("role", in.Role, caller); err != nil {
		return IssuedToken{}, err
	}
	now := s.now().UTC()
	if in.ExpiresAt != nil && !in.ExpiresAt.After(now) {
		return IssuedToken{}, fault.Invalid("expiresAt", "must be in the future")
	}
	id, err := s.cfg.Tokens.NewID()
	if err != nil {
		return IssuedToken{}, fmt.Errorf("vdc: create service account: %w", err)
	}
	token, hash, err := s.cfg.Tokens.NewToken(vdcName, id)
	if err != nil {
		return IssuedToken{}, fmt.Errorf("vdc: create service account: %w", err)
	}
	a := catalog.ServiceAccount{ID: id, Name: in.Name, Role: in.Role, CreatedBy: caller.Subject, CreatedAt: now, TokenHash: hash}
	if in.ExpiresAt != nil {
		t := in.ExpiresAt.UTC()
		a.ExpiresAt = &t
	}
	_, err = s.changeAccess(ctx, vdcName, func(v *catalog.VDC) error {
		if slices.ContainsFunc(v.ServiceAccounts, func(o catalog.ServiceAccount) bool { return o.Name == in.Name }) {
			return fault.New(fault.Conflict, "a service account named %q exists", in.Name)
		}
		if len(v.ServiceAccounts) >= catalog.MaxServiceAccounts {
			return fault.New(fault.Conflict, "VDC %s has %d service accounts, the most it may have; delete one first", vdcName, catalog.MaxServiceAccounts)
		}
		v.ServiceAccounts = append(v.ServiceAccounts, a)
		return nil
	})
	if err != nil {
		return IssuedToken{}, fmt.Errorf("vdc: create service account %s: %w", in.Name, err)
	}
	return IssuedToken{Account: a, Token: token}, nil
}

// RotateServiceAccountToken gives the account id a new token; the one
// before keeps working for grace (zero: not at all), a token older than
// that stops now. The account's role must be at most the caller's.
func (s *Service) RotateServiceAccountToken(ctx context.Context, vdcName string, caller Caller, id string, grace time.Duration) (IssuedToken, error) {
	if s.cfg.Tokens == nil {
		return IssuedToken{}, errors.New("vdc: rotate service account token: no token issuer configured")
	}
	if grace < 0 || grace > 7*24*time.Hour {
		return IssuedToken{}, fault.Invalid("graceSeconds", "must be 0 to 604800 (7 days)")
	}
	token, hash, err := s.cfg.Tokens.NewToken(vdcName, id)
	if err != nil {
		return IssuedToken{}, fmt.Errorf("vdc: rotate service account token: %w", err)
	}
	var a catalog.ServiceAccount
	_, err = s.changeAccess(ctx, vdcName, func(v *catalog.VDC) error {
		i := v.ServiceAccountByID(id)
		if i < 0 {
			return fault.New(fault.NotFound, "service account %q not found", id)
		}
		cur := &v.ServiceAccounts[i]
		if catalog.RoleRank(cur.Role) > catalog.RoleRank(caller.Role) {
			return fault.New(fault.Forbidden, "the service account's role is above your own (%s)", caller.Role)
		}
		cur.PreviousTokenHash, cur.PreviousUntil = "", nil
		if grace > 0 {
			until := s.now().UTC().Add(grace)
			cur.PreviousTokenHash, cur.PreviousUntil = cur.TokenHash, &until
		}
		cur.TokenHash = hash
		a = *cur
		return nil
	})
	if err != nil {
		return IssuedToken{}, fmt.Errorf("vdc: rotate service account token %s: %w", id, err)
	}
	return IssuedToken{Account: a, Token: token}, nil
}

// DeleteServiceAccount deletes the account id: its tokens stop working
// as soon as a replica's catalog shows the change. It returns the
// account's name.
func (s *Service) DeleteServiceAccount(ctx context.Context, vdcName string, caller Caller, id string) (string, error) {
	var name string
	_, err := s.changeAccess(ctx, vdcName, func(v *catalog.VDC) error {
		i := v.ServiceAccountByID(id)
		if i < 0 {
			return fault.New(fault.NotFound, "service account %q not found", id)
		}
		if catalog.RoleRank(v.ServiceAccounts[i].Role) > catalog.RoleRank(caller.Role) {
			return fault.New(fault.Forbidden, "the service account's role is above your own (%s)", caller.Role)
		}
		name = v.ServiceAccounts[i].Name
		v.ServiceAccounts = slices.Delete(v.ServiceAccounts, i, i+1)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("vdc: delete service account %s: %w", id, err)
	}
	return name, nil
}

// ServiceAccount returns the account id of the VDC vdcName as the catalog
// holds it now (a kubestore's cache, fed by its watch); NotFound when the
// VDC or the account does not exist.
func (s *Service) ServiceAccount(ctx context.Context, vdcName, id string) (catalog.ServiceAccount, error) {
	v, err := catalog.Get[*catalog.VDC](ctx, s.cfg.Store, vdcName)
	if errors.Is(err, catalog.ErrNotFound) {
		return catalog.ServiceAccount{}, fault.New(fault.NotFound, "service account %q not found", id)
	}
	if err != nil {
		return catalog.ServiceAccount{}, fmt.Errorf("vdc: service account %s: %w", id, err)
	}
	i := v.ServiceAccountByID(id)
	if i < 0 {
		return catalog.ServiceAccount{}, fault.New(fault.NotFound, "service account %q not found", id)
	}
	return v.ServiceAccounts[i], nil
}

// ServiceAccountUsed records that a token of the account id was accepted
// at now: its lastUsedAt is written at most once a minute per account (by
// this replica, and not at all while the stored one is less than a minute
// old), never once per request. A failed write is logged and left for the
// next use.
func (s *Service) ServiceAccountUsed(ctx context.Context, vdcName, id string, now time.Time) {
	key := vdcName + "/" + id
	s.access.mu.Lock()
	if last, ok := s.access.lastUsed[key]; ok && now.Sub(last) < lastUsedEvery {
		s.access.mu.Unlock()
		return
	}
	if s.access.lastUsed == nil {
		s.access.lastUsed = map[string]time.Time{}
	}
	for k, t := range s.access.lastUsed {
		if now.Sub(t) >= lastUsedEvery {
			delete(s.access.lastUsed, k)
		}
	}
	s.access.lastUsed[key] = now
	s.access.mu.Unlock()

	at := now.UTC().Truncate(time.Second)
	_, err := s.changeAccess(ctx, vdcName, func(v *catalog.VDC) error {
		i := v.ServiceAccountByID(id)
		if i < 0 {
			return fault.New(fault.NotFound, "service account %q not found", id)
		}
		if last := v.ServiceAccounts[i].LastUsedAt; last != nil && at.Sub(*last) < lastUsedEvery {
			return errUpToDate
		}
		v.ServiceAccounts[i].LastUsedAt = &at
		return nil
	})
	if err != nil && !errors.Is(err, errUpToDate) {
		s.log.Warn("vdc: record a service account's use", "vdc", vdcName, "id", id, "err", err)
	}
}

var errUpToDate = errors.New("lastUsedAt is up to date")

// Member is a user's role in a VDC as VDC.members lists it.
type Member struct {
	User string
	// Role is catalog.RoleAdmin, RoleMember or RoleViewer.
	Role string
	// Granted is true for a binding made here, false for a role of the
	// identity provider's claims.
	Granted bool
}

// Members lists the grants of v, by user; claimed, when not nil, is the
// caller's own membership by the identity provider's claims, listed in
// place of the caller's grant when it is higher, and besides when there is
// none.
func Members(v *catalog.VDC, claimed *Member) []*Member {
	out := make([]*Member, 0, len(v.Members)+1)
	for _, m := range v.Members {
		if claimed != nil && m.User == claimed.User {
			if catalog.RoleRank(claimed.Role) > catalog.RoleRank(m.Role) {
				out = append(out, claimed)
			} else {
				out = append(out, &Member{User: m.User, Role: m.Role, Granted: true})
			}
			claimed = nil
			continue
		}
		out = append(out, &Member{User: m.User, Role: m.Role, Granted: true})
	}
	if claimed != nil {
		out = append(out, claimed)
	}
	slices.SortFunc(out, func(a, b *Member) int { return strings.Compare(a.User, b.User) })
	return out
}

// AddMember binds user to role in the VDC vdcName, or changes the role
// of a binding user has; the role must be at most the caller's.
func (s *Service) AddMember(ctx context.Context, vdcName string, caller Caller, user, role string) (Member, error) {
	if user == "" || len(user) > 256 {
		return Member{}, fault.Invalid("user", "must be 1 to 256 bytes")
	}
	if err := checkRole("role", role, caller); err != nil {
		return Member{}, err
	}
	_, err := s.changeAccess(ctx, vdcName, func(v *catalog.VDC) error {
		i := slices.IndexFunc(v.Members, func(m catalog.MemberBinding) bool { return m.User == user })
		if i >= 0 {
			if catalog.RoleRank(v.Members[i].Role) > catalog.RoleRank(caller.Role) {
				return fault.New(fault.Forbidden, "%s's role is above your own (%s)", user, caller.Role)
			}
			v.Members[i].Role = role
			return nil
		}
		if len(v.Members) >= catalog.MaxMembers {
			return fault.New(fault.Conflict, "VDC %s has %d members bound, the most it may have", vdcName, catalog.MaxMembers)
		}
		v.Members = append(v.Members, catalog.MemberBinding{User: user, Role: role})
		return nil
	})
	if err != nil {
		return Member{}, fmt.Errorf("vdc: add member %s: %w", user, err)
	}
	return Member{User: user, Role: role, Granted: true}, nil
}

// RemoveMember removes the binding of user in the VDC vdcName (NotFound
// when it has none: a role of the identity provider's claims is changed
// there).
func (s *Service) RemoveMember(ctx context.Context, vdcName string, caller Caller, user string) error {
	_, err := s.changeAccess(ctx, vdcName, func(v *catalog.VDC) error {
		i := slices.IndexFunc(v.Members, func(m catalog.MemberBinding) bool { return m.User == user })
		if i < 0 {
			return fault.New(fault.NotFound, "%q has no role granted in VDC %s (roles of the identity provider's claims are changed there)", user, vdcName)
		}
		if catalog.RoleRank(v.Members[i].Role) > catalog.RoleRank(caller.Role) {
			return fault.New(fault.Forbidden, "%s's role is above your own (%s)", user, caller.Role)
		}
		v.Members = slices.Delete(v.Members, i, i+1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("vdc: remove member %s: %w", user, err)
	}
	return nil
}

// validationMessage is a catalog validation error's message without its
// field.
func validationMessage(err error) string {
	var ve *catalog.ValidationError
	if errors.As(err, &ve) {
		return ve.Message
	}
	return err.Error()
}
