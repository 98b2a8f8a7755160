package pveschema

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Proxmox's parameter-verification messages.
const (
	msgMissing      = "property is missing and it is not optional"
	msgNotInSchema  = "property is not defined in schema and the schema does not allow additional properties"
	msgNoPattern    = "value does not match the regex pattern"
	msgInvalidFmt   = "invalid format - "
	msgFormatError  = "format error\n"
	msgDupKey       = "duplicate key in comma-separated list property: "
	msgNoDefaultKey = "value without key, but schema does not define a default key"
	msgMissingKey   = "missing key in comma-separated list property"
	msgInvalidKey   = "invalid key in comma-separated list property: "
)

// ParamError is a failed parameter verification: Proxmox answers HTTP 400
// "Parameter verification failed." with {"errors": Errors}.
type ParamError struct {
	Errors map[string]string // parameter name -> Proxmox-style message
}

func (e *ParamError) Error() string {
	keys := make([]string, 0, len(e.Errors))
	for k := range e.Errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("Parameter verification failed.")
	for _, k := range keys {
		fmt.Fprintf(&b, "\n%s: %s", k, strings.TrimRight(e.Errors[k], "\n"))
	}
	return b.String()
}

// Params are validated, typed parameter values: int64 for integers, float64 for numbers,
// bool for booleans, string for strings (property strings stay strings), []string for arrays
// of strings and []any for other arrays. Like Proxmox, top-level boolean parameters accept
// only "0" and "1" (a JSON true/false body value flattens to "1"/"0", see FlattenJSON);
// "true", "yes" and "on" are accepted inside property strings only.
type Params map[string]any

// String returns a string parameter.
func (p Params) String(name string) (string, bool) {
	v, ok := p[name].(string)
	return v, ok
}

// Int returns an integer parameter.
func (p Params) Int(name string) (int64, bool) {
	v, ok := p[name].(int64)
	return v, ok
}

// Bool returns a boolean parameter.
func (p Params) Bool(name string) (bool, bool) {
	v, ok := p[name].(bool)
	return v, ok
}

// Float returns a number parameter; integer parameters are converted.
func (p Params) Float(name string) (float64, bool) {
	switch v := p[name].(type) {
	case float64:
		return v, true
	case int64:
		return float64(v), true
	}
	return 0, false
}

// Strings returns an array parameter of strings.
func (p Params) Strings(name string) ([]string, bool) {
	v, ok := p[name].([]string)
	return v, ok
}

// Validate checks request parameters against the endpoint: raw holds the query (GET,
// DELETE) or the urlencoded or JSON body (POST, PUT) flattened to strings, plus the path
// variables (see ValidateRequest). It checks what Proxmox's JSONSchema verification
// checks, in the same order: unknown parameters, missing non-optional ones, types,
// formats (named and property strings), patterns, lengths, bounds, enumerations and
// `requires`. On failure it returns a *ParamError with every offending parameter and no
// Params.
func (e *Endpoint) Validate(raw map[string][]string) (Params, error) {
	errs := map[string]string{}
	out := Params{}
	params := e.params
	for name, vals := range raw {
		p := params.lookup(name)
		if p == nil {
			if params.AdditionalProperties == nil || !*params.AdditionalProperties {
				errs[name] = msgNotInSchema
				continue
			}
			if len(vals) == 1 {
				out[name] = vals[0]
			} else {
				out[name] = vals
			}
			continue
		}
		if v, ok := e.formats.checkRaw(name, p, vals, errs); ok {
			out[name] = v
		}
	}
	for name, p := range params.Properties {
		if strings.HasSuffix(name, "[n]") {
			continue
		}
		if _, given := raw[name]; !given && !p.Optional && p.Alias == "" {
			errs[name] = msgMissing
		}
	}
	for name := range raw {
		p := params.lookup(name)
		if p == nil || p.Requires == "" {
			continue
		}
		if _, ok := raw[p.Requires]; !ok {
			errs[p.Requires] = "missing property - '" + name + "' requires this property"
		}
	}
	if len(errs) > 0 {
		return nil, &ParamError{Errors: errs}
	}
	return out, nil
}

// ValidateRequest is Validate with the path variables from Lookup merged into raw; a path
// variable replaces a parameter of the same name, as in Proxmox.
func (e *Endpoint) ValidateRequest(vars map[string]string, raw map[string][]string) (Params, error) {
	merged := make(map[string][]string, len(raw)+len(vars))
	for k, v := range raw {
		merged[k] = v
	}
	for k, v := range vars {
		merged[k] = []string{v}
	}
	return e.Validate(merged)
}

// lookup finds the definition of a parameter, including "[n]" families: net7 is net[n]
// when 7 is below the family's count. Indexes are plain decimals without leading zeros.
func (p *prop) lookup(name string) *prop {
	if d := p.Properties[name]; d != nil && !strings.HasSuffix(name, "[n]") {
		return d
	}
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) || i == 0 {
		return nil
	}
	fam, ok := p.indexed[name[:i]]
	if !ok {
		return nil
	}
	digits := name[i:]
	if len(digits) > 1 && digits[0] == '0' || len(digits) > 4 {
		return nil
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n >= fam.count {
		return nil
	}
	return fam.prop
}

// checkRaw checks the raw values of one parameter; arrays take every value, other types
// exactly one.
func (fs *formatSet) checkRaw(path string, p *prop, vals []string, errs map[string]string) (any, bool) {
	if p.Type == "array" {
		item := p.Items
		if item == nil {
			item = &prop{Type: "string"}
		}
		var strs []string
		var anys []any
		ok := true
		for i, v := range vals {
			tv, good := fs.checkValue(fmt.Sprintf("%s[%d]", path, i), item, v, errs)
			if !good {
				ok = false
				continue
			}
			if s, isStr := tv.(string); isStr {
				strs = append(strs, s)
			}
			anys = append(anys, tv)
		}
		if !ok {
			return nil, false
		}
		if len(strs) == len(anys) {
			if strs == nil {
				strs = []string{}
			}
			return strs, true
		}
		return anys, true
	}
	if len(vals) > 1 && (p.Type == "string" || p.Type == "") && strings.HasSuffix(p.Format, "-list") {
		// Proxmox joins repeated values of a list-format string (legacy form handling).
		vals = []string{strings.Join(vals, ",")}
	}
	if len(vals) != 1 {
		if len(vals) == 0 {
			errs[path] = msgMissing
			return nil, false
		}
		errs[path] = fmt.Sprintf("type check ('%s') failed - got ARRAY", typeName(p))
		return nil, false
	}
	return fs.checkValue(path, p, vals[0], errs)
}

func typeName(p *prop) string {
	if p.Type == "" {
		return "string"
	}
	return p.Type
}

var (
	integerRE = regexp.MustCompile(`^[+-]?\d+$`)
	numberRE  = regexp.MustCompile(`^[+-]?(?:\d+\.\d+|\d+\.|\.\d+|\d+)(?:[eE][+-]?\d+)?$`)
)

// parseBool converts the boolean spellings Proxmox accepts inside property strings
// (parse_boolean); top-level boolean parameters take only 0 and 1.
func parseBool(v string) (bool, bool) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

// checkValue checks one scalar value like Proxmox's check_prop and returns it typed; a
// failure is recorded in errs under path.
func (fs *formatSet) checkValue(path string, p *prop, v string, errs map[string]string) (any, bool) {
	var typed any = v
	switch p.Type {
	case "integer":
		if !integerRE.MatchString(v) {
			errs[path] = fmt.Sprintf("type check ('integer') failed - got '%s'", v)
			return nil, false
		}
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errs[path] = fmt.Sprintf("type check ('integer') failed - got '%s'", v)
			return nil, false
		}
		typed = i
	case "number":
		if !numberRE.MatchString(v) {
			errs[path] = fmt.Sprintf("type check ('number') failed - got '%s'", v)
			return nil, false
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			errs[path] = fmt.Sprintf("type check ('number') failed - got '%s'", v)
			return nil, false
		}
		typed = f
	case "boolean":
		if v != "0" && v != "1" {
			errs[path] = fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
			return nil, false
		}
		typed = v == "1"
	case "object", "array":
		errs[path] = fmt.Sprintf("type check ('%s') failed", p.Type)
		return nil, false
	}
	if p.Format != "" || p.FormatProps != nil {
		if msg := fs.checkFormat(path, p, v); msg != "" {
			errs[path] = msgInvalidFmt + msg
			return nil, false
		}
	}
	if p.re != nil && !p.re.MatchString(v) {
		errs[path] = msgNoPattern
		return nil, false
	}
	if p.MaxLength != nil && utf8.RuneCountInString(v) > *p.MaxLength {
		errs[path] = fmt.Sprintf("value may only be %d characters long", *p.MaxLength)
		return nil, false
	}
	if p.MinLength != nil && utf8.RuneCountInString(v) < *p.MinLength {
		errs[path] = fmt.Sprintf("value must be at least %d characters long", *p.MinLength)
		return nil, false
	}
	if numberRE.MatchString(v) {
		f, err := strconv.ParseFloat(v, 64)
		if err == nil && p.Maximum != nil && f > *p.Maximum {
			errs[path] = "value must have a maximum value of " + formatNum(*p.Maximum)
			return nil, false
		}
		if err == nil && p.Minimum != nil && f < *p.Minimum {
			errs[path] = "value must have a minimum value of " + formatNum(*p.Minimum)
			return nil, false
		}
	}
	if len(p.Enum) > 0 {
		found := false
		for _, ev := range p.Enum {
			if ev == v {
				found = true
				break
			}
		}
		if !found {
			errs[path] = fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", v, strings.Join(p.Enum, ", "))
			return nil, false
		}
	}
	return typed, true
}

func formatNum(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}
