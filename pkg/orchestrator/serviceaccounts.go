package orchestrator

import (
	"context"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// ServiceAccountTokens issues service account tokens for the VDC
// lifecycle (vdc.Config.Tokens) with package auth's format.
type ServiceAccountTokens struct{}

// NewID implements vdc.Tokens.
func (ServiceAccountTokens) NewID() (string, error) { return auth.NewServiceAccountID() }

// NewToken implements vdc.Tokens.
func (ServiceAccountTokens) NewToken(vdcName, id string) (token, hash string, err error) {
	return auth.NewServiceAccountToken(vdcName, id)
}

// NewServiceAccountVerifier returns the verifier of service account
// tokens over the VDCs of svc: each token is checked against the catalog
// as the replica reads it now.
func NewServiceAccountVerifier(svc *vdc.Service) *auth.ServiceAccountVerifier {
	return auth.NewServiceAccountVerifier(serviceAccountStore{svc}, nil)
}

// serviceAccountStore is the VDC lifecycle's service accounts as package
// auth reads them.
type serviceAccountStore struct{ svc *vdc.Service }

// ServiceAccount implements auth.ServiceAccountStore.
func (s serviceAccountStore) ServiceAccount(ctx context.Context, vdcName, id string) (auth.StoredServiceAccount, error) {
	a, err := s.svc.ServiceAccount(ctx, vdcName, id)
	if fault.Is(err, fault.NotFound) {
		return auth.StoredServiceAccount{}, auth.ErrNoServiceAccount
	}
	if err != nil {
		return auth.StoredServiceAccount{}, err
	}
	return auth.StoredServiceAccount{Name: a.Name, Role: auth.Role(a.Role), ExpiresAt: a.ExpiresAt,
		TokenHash: a.TokenHash, PreviousTokenHash: a.PreviousTokenHash, PreviousUntil: a.PreviousUntil}, nil
}

// ServiceAccountUsed implements auth.ServiceAccountStore.
func (s serviceAccountStore) ServiceAccountUsed(ctx context.Context, vdcName, id string, now time.Time) {
	s.svc.ServiceAccountUsed(ctx, vdcName, id, now)
}
