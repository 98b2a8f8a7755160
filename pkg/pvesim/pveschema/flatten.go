package pveschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// FlattenJSON turns a JSON request body (an object) into the flattened form Validate takes,
// seeing JSON values the way Proxmox does: true and false become "1" and "0", integers keep
// their digits and other numbers are rendered like Perl does (1.0 is "1", 1e3 is "1000"),
// strings stay, null members are dropped (they count as absent), and an array becomes
// repeated values of an array parameter or, for a list-format string parameter, one
// comma-joined value. Values Proxmox's type check refuses (an object anywhere, an array for
// any other parameter, a boolean for a non-boolean parameter) give a *ParamError with
// Proxmox's message. An empty body is an empty parameter set.
func (e *Endpoint) FlattenJSON(body []byte) (map[string][]string, error) {
	out := map[string][]string{}
	if len(bytes.TrimSpace(body)) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, &ParamError{Errors: map[string]string{"_root": "an object is required"}}
	}
	errs := map[string]string{}
	for name, v := range obj {
		p := e.params.lookup(name)
		typ := "string"
		if p != nil && p.Type != "" {
			typ = p.Type
		}
		switch t := v.(type) {
		case nil:
			continue
		case map[string]any:
			errs[name] = fmt.Sprintf("type check ('%s') failed - got HASH", typ)
		case []any:
			var items []string
			for _, it := range t {
				s, msg := jsonScalar(it, "string")
				if msg != "" {
					errs[name] = fmt.Sprintf("type check ('%s') failed - got %s", typ, msg)
					break
				}
				items = append(items, s)
			}
			if _, failed := errs[name]; failed {
				continue
			}
			switch {
			case p == nil || typ == "array":
				out[name] = items
			case typ == "string" && strings.HasSuffix(p.Format, "-list"):
				out[name] = []string{strings.Join(items, ",")}
			default:
				errs[name] = fmt.Sprintf("type check ('%s') failed - got ARRAY", typ)
			}
		default:
			s, msg := jsonScalar(t, typ)
			if msg != "" {
				errs[name] = fmt.Sprintf("type check ('%s') failed - got %s", typ, msg)
				continue
			}
			out[name] = []string{s}
		}
	}
	if len(errs) > 0 {
		return nil, &ParamError{Errors: errs}
	}
	return out, nil
}

// jsonScalar renders a decoded JSON scalar as Perl would stringify it; msg names the Perl
// reference type when Proxmox's type check for typ refuses the value.
func jsonScalar(v any, typ string) (s, msg string) {
	switch t := v.(type) {
	case string:
		return t, ""
	case bool:
		if typ != "boolean" {
			return "", "JSON::PP::Boolean"
		}
		if t {
			return "1", ""
		}
		return "0", ""
	case json.Number:
		text := t.String()
		if !strings.ContainsAny(text, ".eE") {
			return text, ""
		}
		f, err := t.Float64()
		if err != nil {
			return text, ""
		}
		return strconv.FormatFloat(f, 'g', 15, 64), ""
	case map[string]any:
		return "", "HASH"
	case []any:
		return "", "ARRAY"
	}
	return fmt.Sprint(v), ""
}
