package meshcontrol

import (
	"context"
	"fmt"
	"slices"
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
