package meshcontrol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/flexplane/flexplane/pkg/support/fault"
)

// KeyLister lists enrollment keys (*Client does).
type KeyLister interface {
	ListKeys(ctx context.Context) ([]Key, error)
}

// AgentKeys lists the keys of l that enroll agents: the orchestrators' own
// mesh keys are left out.
func AgentKeys(ctx context.Context, l KeyLister) ([]Key, error) {
	ks, err := l.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list enrollment keys: %w", err)
	}
	return slices.DeleteFunc(ks, func(k Key) bool { return !slices.Equal(k.Tags, []string{TagAgent}) }), nil
}

// AgentKey returns the agent key of l with id; ErrKeyNotFound when there is
// none.
func AgentKey(ctx context.Context, l KeyLister, id uint64) (Key, error) {
	ks, err := AgentKeys(ctx, l)
	if err != nil {
		return Key{}, err
	}
	if i := slices.IndexFunc(ks, func(k Key) bool { return k.ID == id }); i >= 0 {
		return ks[i], nil
	}
	return Key{}, ErrKeyNotFound
}

// AgentKeyOf is AgentKey of the key whose id is the decimal id (as the
// API names keys); a fault.NotFound error, wrapping ErrKeyNotFound, for one
// that is malformed or unknown.
func AgentKeyOf(ctx context.Context, l KeyLister, id string) (Key, error) {
	err := ErrKeyNotFound
	if n, perr := strconv.ParseUint(id, 10, 64); perr == nil {
		var k Key
		if k, err = AgentKey(ctx, l, n); err == nil || !errors.Is(err, ErrKeyNotFound) {
			return k, err
		}
	}
	return Key{}, &fault.Error{Kind: fault.NotFound, Message: fmt.Sprintf("enrollment key %q not found", id), Cause: err}
}
