package catalog

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// The access a VDC grants besides the identity provider's role claims:
// members bound to it here and its service accounts. Both are part of the
// VDC object, so that a replica reads them with the VDC it resolves for a
// request (kubestore: from its watch-fed cache; DirStore: from the file)
// and every write of them is conditional on the VDC's resourceVersion.

// VDC roles as the catalog records them, from most to least privileged
// (the values of the identity provider's role keys, "vdc:<vdc>:<role>").
const (
	RoleAdmin  = "admin"
	RoleMember = "member"
	RoleViewer = "viewer"
)

// RoleRank orders roles: 3 for admin, 2 for member, 1 for viewer, 0 for
// anything else.
func RoleRank(role string) int {
	switch role {
	case RoleAdmin:
		return 3
	case RoleMember:
		return 2
	case RoleViewer:
		return 1
	}
	return 0
}

// MaxServiceAccounts is how many service accounts a VDC may have.
const MaxServiceAccounts = 50

// MaxMembers is how many member bindings a VDC may have.
const MaxMembers = 500

// MemberBinding grants a user a role in a VDC.
type MemberBinding struct {
	// User is the login name the identity provider asserts (the token's
	// preferred_username).
	User string `json:"user"`
	// Role is admin, member or viewer.
	Role string `json:"role"`
}

// ServiceAccount is a VDC's non-human caller. Its token is shown once
// when made; only the SHA-256 of the token's secret is kept.
type ServiceAccount struct {
	// ID is unique in the catalog ("sa-" and 20 hex digits).
	ID string `json:"id"`
	// Name is unique in the VDC (a DNS label).
	Name string `json:"name"`
	// Role is admin, member or viewer.
	Role string `json:"role"`
	// CreatedBy is the subject of the caller who made it.
	CreatedBy string `json:"createdBy,omitempty"`
	// CreatedAt is when it was made.
	CreatedAt time.Time `json:"createdAt"`
	// ExpiresAt is when its tokens stop working; nil: never.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// LastUsedAt is when a token of it was last accepted, to the minute;
	// nil: never.
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
	// TokenHash is "sha256:" and the hex SHA-256 of the current token's
	// secret.
	TokenHash string `json:"tokenHash"`
	// PreviousTokenHash is the token before the last rotation, accepted
	// until PreviousUntil.
	PreviousTokenHash string `json:"previousTokenHash,omitempty"`
	// PreviousUntil ends the grace period of the previous token.
	PreviousUntil *time.Time `json:"previousUntil,omitempty"`
}

// ServiceAccountByID returns the index of the account id in v's service
// accounts, or -1.
func (v *VDC) ServiceAccountByID(id string) int {
	return slices.IndexFunc(v.ServiceAccounts, func(a ServiceAccount) bool { return a.ID == id })
}

// MemberRole returns the role bound to user in v, or "".
func (v *VDC) MemberRole(user string) string {
	for _, m := range v.Members {
		if m.User == user {
			return m.Role
		}
	}
	return ""
}

var (
	serviceAccountID = regexp.MustCompile(`^sa-[0-9a-f]{20}$`)
	tokenHash        = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// validateAccess checks the members and service accounts of a VDC.
func validateAccess(v *VDC) error {
	if len(v.Members) > MaxMembers {
		return invalid("members", "at most %d members", MaxMembers)
	}
	users := map[string]bool{}
	for i, m := range v.Members {
		f := fmt.Sprintf("members[%d]", i)
		if m.User == "" || len(m.User) > 256 {
			return invalid(f+".user", "must be 1 to 256 bytes")
		}
		if users[m.User] {
			return invalid(f+".user", "%q is bound twice", m.User)
		}
		users[m.User] = true
		if RoleRank(m.Role) == 0 {
			return invalid(f+".role", "must be admin, member or viewer")
		}
	}
	if len(v.ServiceAccounts) > MaxServiceAccounts {
		return invalid("serviceAccounts", "at most %d service accounts", MaxServiceAccounts)
	}
	names, ids := map[string]bool{}, map[string]bool{}
	for i, a := range v.ServiceAccounts {
		f := fmt.Sprintf("serviceAccounts[%d]", i)
		if !serviceAccountID.MatchString(a.ID) || ids[a.ID] {
			return invalid(f+".id", "must be unique and look like sa-0123456789abcdef0123")
		}
		ids[a.ID] = true
		if err := ValidateLabel(f+".name", a.Name); err != nil {
			return err
		}
		if names[a.Name] {
			return invalid(f+".name", "%q is taken", a.Name)
		}
		names[a.Name] = true
		if RoleRank(a.Role) == 0 {
			return invalid(f+".role", "must be admin, member or viewer")
		}
		if !tokenHash.MatchString(a.TokenHash) {
			return invalid(f+".tokenHash", "must be sha256: and 64 lower-case hex digits")
		}
		if a.PreviousTokenHash != "" && !tokenHash.MatchString(a.PreviousTokenHash) {
			return invalid(f+".previousTokenHash", "must be sha256: and 64 lower-case hex digits")
		}
	}
	return nil
}

func cloneAccess(c *VDC) {
	c.Members = slices.Clone(c.Members)
	c.ServiceAccounts = slices.Clone(c.ServiceAccounts)
	for i := range c.ServiceAccounts {
		a := &c.ServiceAccounts[i]
		a.ExpiresAt, a.LastUsedAt, a.PreviousUntil = cloneTime(a.ExpiresAt), cloneTime(a.LastUsedAt), cloneTime(a.PreviousUntil)
	}
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}
