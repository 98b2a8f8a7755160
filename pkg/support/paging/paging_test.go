package paging

import (
	"slices"
	"testing"

	"github.com/flexplane/flexplane/pkg/support/fault"
)

func TestCutFollowsKeysNotPositions(t *testing.T) {
	t.Parallel()
	key := func(s string) string { return s }
	items := []string{"d", "b", "a", "c", "e"}
	var got []string
	var after *string
	for {
		p, err := Cut(items, key, 2, after)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Items...)
		if p.Total != len(items) || p.Before != (after != nil) || len(p.Cursors) != len(p.Items) {
			t.Fatalf("page after %v: %+v", after, p)
		}
		if !p.More {
			break
		}
		// The item the cursor names goes away: the next page is still right.
		last := p.Items[len(p.Items)-1]
		items = slices.DeleteFunc(items, func(s string) bool { return s == last })
		after = &p.Cursors[len(p.Cursors)-1]
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
	if p, err := Cut([]string{}, key, 20, nil); err != nil || p.Items == nil || p.More || p.Before {
		t.Errorf("empty list: %+v, %v", p, err)
	}
	for _, bad := range []string{"", "x", Cursor("a")[1:]} {
		if _, err := Cut(items, key, 20, &bad); err != ErrBadCursor {
			t.Errorf("after %q: %v", bad, err)
		}
	}
}

func TestKeysOrderAsFields(t *testing.T) {
	t.Parallel()
	if !(Key("a", "z") < Key("a-b", "a") && Key("a", "b") < Key("a", "b", "c")) {
		t.Error("keys do not order as their fields")
	}
	if f := Fields(Key("x", "", "y")); !slices.Equal(f, []string{"x", "", "y"}) {
		t.Errorf("fields: %q", f)
	}
	if k, err := Decode(Cursor(Key("x", "1"))); err != nil || k != Key("x", "1") {
		t.Errorf("round trip: %q, %v", k, err)
	}
}

func TestListFollowsKeysNotPositions(t *testing.T) {
	t.Parallel()
	key := func(s string) string { return s }
	two := 2
	items := []string{"d", "b", "a", "c", "e"}
	var got []string
	var after *string
	for {
		p, err := List(items, key, &two, 20, after)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Items...)
		info := p.Info()
		if p.Total != len(items) || info.HasPreviousPage != (after != nil) || len(p.Cursors) != len(p.Items) {
			t.Fatalf("page after %v: %+v", after, p)
		}
		if !info.HasNextPage {
			break
		}
		// The item the cursor names goes away: the next page is still right.
		last := p.Items[len(p.Items)-1]
		items = slices.DeleteFunc(items, func(s string) bool { return s == last })
		after = info.EndCursor
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
	p, err := List([]string{}, key, nil, 20, nil)
	if err != nil || p.Items == nil || p.Info().EndCursor != nil || p.Info().HasNextPage {
		t.Errorf("empty list: %+v, %v", p, err)
	}
	for _, bad := range []string{"", "x", Cursor("a")[1:]} {
		if _, err := List(items, key, nil, 20, &bad); err != ErrBadAfter {
			t.Errorf("after %q: %v, want ErrBadAfter", bad, err)
		}
	}
	minus := -1
	if _, err := List(items, key, &minus, 20, nil); !fault.Is(err, fault.BadInput) {
		t.Errorf("first -1: %v, want bad input", err)
	}
}
