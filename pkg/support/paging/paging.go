// Package paging cuts pages of lists sorted by a string key, with opaque
// cursors. A key joins a list's sort fields with NUL (which no name or id
// holds), so that the order of keys is the order of the fields. A cursor
// is the opaque encoding of its item's key, and a page after a cursor
// takes the items whose key is greater: a page stays right when items
// before the cursor come and go.
package paging

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/pkg/support/fault"
)

const cursorPrefix = "cursor/"

// ErrBadCursor is a cursor that no list of this package made.
var ErrBadCursor = errors.New("paging: not a cursor")

// Key joins sort fields into a list's key.
func Key(fields ...string) string { return strings.Join(fields, "\x00") }

// Fields splits a key back into its fields.
func Fields(key string) []string { return strings.Split(key, "\x00") }

// Cursor is the cursor of the item of key.
func Cursor(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + key))
}

// Decode returns the key of a cursor, or ErrBadCursor.
func Decode(cursor string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !strings.HasPrefix(string(raw), cursorPrefix) {
		return "", ErrBadCursor
	}
	return strings.TrimPrefix(string(raw), cursorPrefix), nil
}

// Page is one page of a list.
type Page[T any] struct {
	// Items are the page's items in key order (never nil), and Cursors
	// their cursors.
	Items   []T
	Cursors []string
	// Total is the length of the whole list.
	Total int
	// Before and More say whether items lie before and after the page.
	Before, More bool
}

// Cut sorts items by key (stably) and cuts the page of at most n items
// after the cursor after (nil: from the first); ErrBadCursor for an after
// that is not a cursor.
func Cut[T any](items []T, key func(T) string, n int, after *string) (Page[T], error) {
	keys := make([]string, len(items))
	idx := make([]int, len(items))
	for i, it := range items {
		idx[i] = i
		keys[i] = key(it)
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	start := 0
	if after != nil {
		k, err := Decode(*after)
		if err != nil {
			return Page[T]{}, err
		}
		start, _ = slices.BinarySearchFunc(idx, k, func(i int, k string) int {
			if keys[i] <= k {
				return -1
			}
			return 1
		})
	}
	end := min(start+max(n, 0), len(idx))
	p := Page[T]{Items: make([]T, 0, end-start), Cursors: make([]string, 0, end-start), Total: len(items),
		Before: start > 0, More: end < len(idx)}
	for _, i := range idx[start:end] {
		p.Items = append(p.Items, items[i])
		p.Cursors = append(p.Cursors, Cursor(keys[i]))
	}
	return p, nil
}

// Info is where a page sits in its list: the schema's PageInfo.
type Info struct {
	HasNextPage, HasPreviousPage bool
	// StartCursor and EndCursor are the cursors of the page's first and
	// last items (nil for an empty page).
	StartCursor, EndCursor *string
}

// Info says where p sits in its list.
func (p Page[T]) Info() *Info { return NewInfo(p.Cursors, p.Before, p.More) }

// NewInfo is the Info of a page of items with cursors, with items before
// it (before) and after it (more).
func NewInfo(cursors []string, before, more bool) *Info {
	info := &Info{HasNextPage: more, HasPreviousPage: before}
	if len(cursors) > 0 {
		info.StartCursor, info.EndCursor = &cursors[0], &cursors[len(cursors)-1]
	}
	return info
}

// MaxFirst bounds the size of every page.
const MaxFirst = 1000

// Limit is the size of page a list's first argument asks for: def when
// it is nil; bad input (field "first") outside 0 to MaxFirst.
func Limit(first *int, def int) (int, error) {
	if first == nil {
		return def, nil
	}
	if *first < 0 || *first > MaxFirst {
		return 0, fault.Invalid("first", "must be between 0 and %d", MaxFirst)
	}
	return *first, nil
}

// ErrBadAfter is the one answer for an after argument that is not a
// cursor of its list.
var ErrBadAfter = fault.Invalid("after", "not a cursor of this list")

// List cuts the page a list's arguments ask for: at most first (def when
// nil, Limit) items in key order after the cursor after; bad input on
// "first" or "after" (ErrBadAfter).
func List[T any](items []T, key func(T) string, first *int, def int, after *string) (Page[T], error) {
	n, err := Limit(first, def)
	if err != nil {
		return Page[T]{}, err
	}
	p, err := Cut(items, key, n, after)
	if err != nil {
		return Page[T]{}, ErrBadAfter
	}
	return p, nil
}

// Edges pairs a page's items with their cursors, as edge makes each.
func Edges[T, E any](p Page[T], edge func(cursor string, node T) E) []E {
	out := make([]E, len(p.Items))
	for i, it := range p.Items {
		out[i] = edge(p.Cursors[i], it)
	}
	return out
}
