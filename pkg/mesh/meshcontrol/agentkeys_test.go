package meshcontrol

import (
	"context"
	"errors"
	"testing"
)

type keyList []Key

func (l keyList) ListKeys(context.Context) ([]Key, error) { return append([]Key{}, l...), nil }

func TestAgentKeys(t *testing.T) {
	t.Parallel()
	l := keyList{{ID: 1, Tags: []string{TagAgent}}, {ID: 2, Tags: []string{TagOrchestrator}}, {ID: 3, Tags: []string{TagAgent}}}
	ks, err := AgentKeys(t.Context(), l)
	if err != nil || len(ks) != 2 || ks[0].ID != 1 || ks[1].ID != 3 {
		t.Fatalf("agent keys: %+v, %v", ks, err)
	}
	if k, err := AgentKey(t.Context(), l, 3); err != nil || k.ID != 3 {
		t.Errorf("key 3: %+v, %v", k, err)
	}
	for _, id := range []uint64{2, 4} {
		if _, err := AgentKey(t.Context(), l, id); !errors.Is(err, ErrKeyNotFound) {
			t.Errorf("key %d: %v", id, err)
		}
	}
}
