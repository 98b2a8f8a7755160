// Package scalar holds the API's strict built-in scalars, bound in
// gqlgen.yml in place of gqlgen's coercing ones: an Int takes only an
// integer (not "10", not 10.5), a String only a string (not 5, not true), a
// Boolean only true or false, as the GraphQL specification's input coercion
// says. Literals in a query are checked by validation already; these check
// variables.
package scalar

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/99designs/gqlgen/graphql"

	"github.com/flexplane/flexplane/graph/server/apierr"
)

// MarshalInt renders an Int.
func MarshalInt(i int) graphql.Marshaler { return graphql.MarshalInt(i) }

// UnmarshalInt accepts an integer within 32 bits (GraphQL's Int).
func UnmarshalInt(v any) (int, error) {
	var n int64
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int32:
		n = int64(v)
	case int64:
		n = v
	case json.Number:
		i, err := v.Int64()
		if err != nil {
			return 0, badInput("Int cannot represent %s: not an integer within 32 bits", v)
		}
		n = i
	default:
		return 0, badInput("Int cannot represent a %s", kind(v))
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, badInput("Int cannot represent %d: not within 32 bits", n)
	}
	return int(n), nil
}

// MarshalString renders a String.
func MarshalString(s string) graphql.Marshaler { return graphql.MarshalString(s) }

// UnmarshalString accepts a string.
func UnmarshalString(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", badInput("String cannot represent a %s", kind(v))
	}
	return s, nil
}

// MarshalBoolean renders a Boolean.
func MarshalBoolean(b bool) graphql.Marshaler { return graphql.MarshalBoolean(b) }

// UnmarshalBoolean accepts true or false.
func UnmarshalBoolean(v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, badInput("Boolean cannot represent a %s", kind(v))
	}
	return b, nil
}

// badInput is a value a scalar refuses: BAD_USER_INPUT, at the path of the
// argument or input field gqlgen reports it with.
func badInput(format string, args ...any) error { return apierr.BadInput("", format, args...) }

// kind names the JSON kind of a variable's value.
func kind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number, float64, float32, int, int64, int32:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// MarshalUpload never renders: an Upload is input only.
func MarshalUpload(graphql.Upload) graphql.Marshaler { return graphql.Null }

// UnmarshalUpload takes the file of a multipart request (the GraphQL
// multipart request spec), and anything else as no file (File nil), which
// the field refuses itself: refused here, a value in place of a file would
// be answered before the field's access is checked.
func UnmarshalUpload(v any) (graphql.Upload, error) {
	if u, ok := v.(graphql.Upload); ok {
		return u, nil
	}
	return graphql.Upload{}, nil
}
