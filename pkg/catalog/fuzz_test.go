package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"testing"
)

// FuzzDecodeManifest checks the decoding of catalog manifests, the YAML or
// JSON files an operator puts in the catalog directory
// (testdata/fuzz/FuzzDecodeManifest; kind selects one of Kinds()). It never
// panics; what decodes is of the kind asked for, encodes, and decodes back
// to the same object, which validates as the original did; validation is
// deterministic and what it accepts has well-formed names.
func FuzzDecodeManifest(f *testing.F) {
	kinds := Kinds()
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		k := kinds[int(kind)%len(kinds)]
		o, err := decode(k, data)
		if err != nil {
			return
		}
		if o.ObjectKind() != k || o.GetTypeMeta().Kind != k || o.GetTypeMeta().APIVersion != APIVersion {
			t.Fatalf("decode(%s) gave a %s (%+v)", k, o.ObjectKind(), *o.GetTypeMeta())
		}
		verr := ValidateObject(o)
		if again := ValidateObject(o); (verr == nil) != (again == nil) || verr != nil && verr.Error() != again.Error() {
			t.Fatalf("ValidateObject is not deterministic: %v, then %v", verr, again)
		}
		if verr != nil {
			if ve := (*ValidationError)(nil); !errors.As(verr, &ve) {
				t.Fatalf("ValidateObject = %v (%T), not a *ValidationError", verr, verr)
			}
		} else if name := o.GetObjectMeta().Name; len(name) > maxNameLen || !nameOf(k).MatchString(name) {
			t.Fatalf("ValidateObject accepted the %s name %q", k, name)
		}
		enc, err := encode(o)
		if err != nil {
			t.Fatalf("encode(%+v): %v", o, err)
		}
		back, err := decode(k, enc)
		if err != nil {
			t.Fatalf("decode(encode(o)): %v\n%s", err, enc)
		}
		if a, b := mustJSON(t, o), mustJSON(t, back); !bytes.Equal(a, b) {
			t.Fatalf("round trip through\n%s\nchanged\n%s\ninto\n%s", enc, a, b)
		}
		if c := mustJSON(t, o.DeepCopyObject()); !bytes.Equal(c, mustJSON(t, o)) {
			t.Fatalf("DeepCopyObject changed %s into %s", mustJSON(t, o), c)
		}
		if berr := ValidateObject(back); (berr == nil) != (verr == nil) {
			t.Fatalf("ValidateObject: %v, after the round trip %v", verr, berr)
		}
	})
}

func nameOf(k Kind) *regexp.Regexp {
	if k == KindVDC {
		return labelRE
	}
	return subdomainRE
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
