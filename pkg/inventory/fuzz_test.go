package inventory

import (
	"encoding/json"
	"reflect"
	"testing"
)

// decodeLikeJSON decodes body with encoding/json's Unmarshal (as go-proxmox
// does) into the type of its second argument, so that the target names no
// type of its own.
func decodeLikeJSON[T any](body []byte, _ T) (T, error) {
	var ans struct {
		Data T `json:"data"`
	}
	err := json.Unmarshal(body, &ans)
	return ans.Data, err
}

// resultOf is the zero value of the first result of a reader, so that the
// IPAM target decodes into exactly what ZoneIPAMStatus returns.
func resultOf[A, B, C, R any](func(A, B, C) (R, error)) (r R) { return r }

// FuzzDecodeAnswer checks the decoding of the Proxmox answers the
// orchestrator reads fastest, /cluster/resources and the IPAM's mappings
// (testdata/fuzz/FuzzDecodeAnswer: real answers of the simulator and hostile
// ones). decodeData claims encoding/json's semantics: on any body it fails
// exactly when encoding/json does, and gives the same value when it does
// not. It never panics.
func FuzzDecodeAnswer(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		rs, gerr := decodeResources(body)
		want, werr := decodeLikeJSON(body, rs)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("resources %q: decodeResources error %v, encoding/json error %v", body, gerr, werr)
		}
		// No resources is no resources: a body without "data" leaves the
		// slice decodeResources sized for the ids it counted empty, not nil.
		if gerr == nil && (len(rs) > 0 || len(want) > 0) && !reflect.DeepEqual(rs, want) {
			t.Fatalf("resources %q: decodeResources\n%+v\nencoding/json\n%+v", body, rs, want)
		}
		ms, gerr := decodeData(body, resultOf((*Inventory).ZoneIPAMStatus))
		wantMs, werr := decodeLikeJSON(body, ms)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("ipam %q: decodeData error %v, encoding/json error %v", body, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(ms, wantMs) {
			t.Fatalf("ipam %q: decodeData\n%+v\nencoding/json\n%+v", body, ms, wantMs)
		}
	})
}
