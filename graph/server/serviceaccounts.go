package server

import (
	"context"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// serviceAccountStore is the VDCs' service accounts as package auth's
// verifier reads them: from the catalog as this replica sees it now, on
// every request.
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
