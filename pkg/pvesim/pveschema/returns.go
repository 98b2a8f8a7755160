package pveschema

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// CheckReturn reports every place where data (the value under "data" in the response,
// after a JSON round-trip: map[string]any, []any, float64 or json.Number, string, bool,
// nil) disagrees with the endpoint's `returns` schema: missing non-optional fields, values
// of the wrong JSON type, enumeration, pattern and bound violations. Proxmox does not coerce
// its Perl scalars to the declared types, so booleans may be true/false, 0/1 or "0"/"1", and
// integers and numbers may be JSON numbers or numeric strings (/cluster/nextid answers
// "100"); a null field counts as absent. Fields the schema does not list are allowed. Each report is "path: problem", with path starting at "data".
// An empty result means the response conforms.
func (e *Endpoint) CheckReturn(data any) []string {
	if e.returns == nil {
		return nil
	}
	var out []string
	checkReturn("data", e.returns, data, &out)
	return out
}

func checkReturn(path string, p *prop, v any, out *[]string) {
	if v == nil {
		switch p.Type {
		case "", "null", "any":
		default:
			if !p.Optional {
				*out = append(*out, fmt.Sprintf("%s: got null, want %s", path, p.Type))
			}
		}
		return
	}
	bad := func(want string) {
		*out = append(*out, fmt.Sprintf("%s: got %s, want %s", path, jsonKind(v), want))
	}
	switch p.Type {
	case "", "any":
		return
	case "null":
		bad("null")
		return
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("object")
			return
		}
		names := make([]string, 0, len(p.Properties))
		for k := range p.Properties {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			sub := p.Properties[k]
			fv, present := m[k]
			if !present || fv == nil {
				if !sub.Optional && sub.Type != "null" {
					*out = append(*out, fmt.Sprintf("%s.%s: property is missing and it is not optional", path, k))
				}
				continue
			}
			checkReturn(path+"."+k, sub, fv, out)
		}
		return
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("array")
			return
		}
		if p.Items != nil {
			for i, it := range a {
				checkReturn(fmt.Sprintf("%s[%d]", path, i), p.Items, it, out)
			}
		}
		return
	case "boolean":
		switch t := v.(type) {
		case bool:
			return
		case float64, json.Number, string:
			if f, ok := num(t); ok && (f == 0 || f == 1) {
				return
			}
		}
		bad("boolean")
		return
	case "integer":
		f, ok := num(v)
		if !ok || f != math.Trunc(f) {
			bad("integer")
			return
		}
		if s, isStr := v.(string); isStr && !integerRE.MatchString(s) {
			bad("integer")
			return
		}
		checkBounds(path, p, f, out)
		return
	case "number":
		f, ok := num(v)
		if !ok {
			bad("number")
			return
		}
		checkBounds(path, p, f, out)
		return
	case "string":
		s, ok := v.(string)
		if !ok {
			bad("string")
			return
		}
		if len(p.Enum) > 0 && !contains(p.Enum, s) {
			*out = append(*out, fmt.Sprintf("%s: value '%s' does not have a value in the enumeration '%s'", path, s, strings.Join(p.Enum, ", ")))
		}
		if p.re != nil && !p.re.MatchString(s) {
			*out = append(*out, fmt.Sprintf("%s: value '%s' does not match the regex pattern", path, s))
		}
		return
	}
}

func checkBounds(path string, p *prop, f float64, out *[]string) {
	if p.Minimum != nil && f < *p.Minimum {
		*out = append(*out, fmt.Sprintf("%s: value must have a minimum value of %s", path, formatNum(*p.Minimum)))
	}
	if p.Maximum != nil && f > *p.Maximum {
		*out = append(*out, fmt.Sprintf("%s: value must have a maximum value of %s", path, formatNum(*p.Maximum)))
	}
	if len(p.Enum) > 0 && !contains(p.Enum, formatNum(f)) {
		*out = append(*out, fmt.Sprintf("%s: value '%s' does not have a value in the enumeration '%s'", path, formatNum(f), strings.Join(p.Enum, ", ")))
	}
}

func num(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case json.Number:
		f, err := t.Float64()
		return f, err == nil
	case int:
		return float64(t), true
	case int64:
		return float64(t), true
	case string:
		// Perl scalars reach the wire as strings as often as numbers (/cluster/nextid).
		if !numberRE.MatchString(t) {
			return 0, false
		}
		f, err := strconv.ParseFloat(t, 64)
		return f, err == nil
	}
	return 0, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64, json.Number, int, int64:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}
