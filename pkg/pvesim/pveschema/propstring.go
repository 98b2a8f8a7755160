package pveschema

import (
	"fmt"
	"sort"
	"strings"
)

// ParseProperty parses a property-string parameter of this endpoint (net0, scsi0,
// ipconfig1, agent, cpu, ...) with its format, resolving aliases, default_key and keyAlias:
// "virtio=BC:24:11:00:00:01,bridge=vmbr0" gives model=virtio, macaddr=BC:24:11:00:00:01,
// bridge=vmbr0. Values are typed as in Params; defaults are not filled in. An invalid value
// is a *ParamError keyed by the parameter name, with the message Validate gives. For an
// array parameter (dhcp-range) value is one item.
func (e *Endpoint) ParseProperty(param, value string) (Params, error) {
	p := e.params.lookup(param)
	if p == nil {
		return nil, &ParamError{Errors: map[string]string{param: msgNotInSchema}}
	}
	if p.Type == "array" && p.Items != nil {
		p = p.Items // an item of an array parameter (dhcp-range)
	}
	var res Params
	var msg string
	switch {
	case p.FormatProps != nil:
		res, msg = e.formats.parsePropertyString(param, p.FormatProps, value)
	case e.formats.props[p.Format] != nil:
		res, msg = e.formats.parseNamed(param, p.Format, value)
	default:
		return nil, fmt.Errorf("pveschema: parse property: %s %s: parameter %s is not a property string", e.Method, e.Path, param)
	}
	if msg != "" {
		return nil, &ParamError{Errors: map[string]string{param: msgInvalidFmt + msg}}
	}
	return res, nil
}

// checkFormat checks v against p's format like Proxmox's check_format and returns the error
// text ("" when valid), without the "invalid format - " prefix.
func (fs *formatSet) checkFormat(path string, p *prop, v string) string {
	if p.FormatProps != nil {
		_, msg := fs.parsePropertyString(path, p.FormatProps, v)
		return msg
	}
	return fs.checkNamed(path, p.Format, v)
}

// parseNamed parses a named property-string format and runs its validator.
func (fs *formatSet) parseNamed(path, name, v string) (Params, string) {
	res, msg := fs.parsePropertyString(path, fs.props[name], v)
	if msg != "" {
		return nil, msg
	}
	if validate := fs.validators[name]; validate != nil {
		if err := validate(res); err != nil {
			return nil, err.Error() + "\n"
		}
	}
	return res, ""
}

func (fs *formatSet) checkNamed(path, name, v string) string {
	if fs.props[name] != nil {
		_, msg := fs.parseNamed(path, name, v)
		return msg
	}
	if verify := fs.verifiers[name]; verify != nil {
		if err := verify(v); err != nil {
			return err.Error() + "\n"
		}
		return ""
	}
	if !fs.known(name) {
		return "undefined format '" + name + "'\n"
	}
	if base, ok := strings.CutSuffix(name, "-list"); ok {
		for _, item := range splitList(v) {
			if msg := fs.checkNamed(path, base, item); msg != "" {
				return msg
			}
		}
		return ""
	}
	if base, ok := strings.CutSuffix(name, "-opt"); ok {
		if v == "" || v == "0" { // Perl's false values
			return ""
		}
		return fs.checkNamed(path, base, v)
	}
	return ""
}

// splitList splits a list value like Proxmox's split_list: on NUL bytes if there are any,
// otherwise on commas, semicolons and white space, dropping empty items.
func splitList(v string) []string {
	if strings.Contains(v, "\x00") {
		return strings.Split(v, "\x00")
	}
	return strings.FieldsFunc(v, func(r rune) bool {
		return r == ',' || r == ';' || r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v'
	})
}

// parsePropertyString parses "k=v,k2=v2,default" with format and checks the result like
// Proxmox's parse_property_string; path names the parameter in nested error keys. It
// returns the typed values, or the error text.
func (fs *formatSet) parsePropertyString(path string, format map[string]*prop, data string) (Params, string) {
	raw := map[string]string{}
	defaultKey := ""
	for _, part := range strings.Split(data, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, hasEq := strings.Cut(part, "=")
		switch {
		case hasEq && k != "" && v != "":
			if _, dup := raw[k]; dup {
				return nil, msgDupKey + k + "\n"
			}
			if d := format[k]; d != nil && d.Alias != "" {
				if d.KeyAlias != "" {
					if _, dup := raw[d.KeyAlias]; dup {
						return nil, "key alias '" + d.KeyAlias + "' is already defined\n"
					}
					raw[d.KeyAlias] = k
				}
				k = d.Alias
				if _, dup := raw[k]; dup {
					return nil, msgDupKey + k + "\n"
				}
			}
			if d := format[k]; d == nil || d.Alias != "" {
				return nil, msgInvalidKey + k + "\n"
			}
			raw[k] = v
		case !hasEq:
			if defaultKey != "" {
				return nil, msgDupKey + defaultKey + "\n"
			}
			for key, d := range format { // formats have one default key; take the least if not
				if d.DefaultKey && (defaultKey == "" || key < defaultKey) {
					defaultKey = key
				}
			}
			if defaultKey == "" {
				return nil, msgNoDefaultKey + "\n"
			}
			if _, dup := raw[defaultKey]; dup {
				return nil, msgDupKey + defaultKey + "\n"
			}
			raw[defaultKey] = part
		default:
			return nil, msgMissingKey + "\n"
		}
	}
	errs := map[string]string{}
	out := Params{}
	for k, v := range raw {
		d := format[k]
		if d.Type == "boolean" {
			if b, ok := parseBool(v); ok {
				v = map[bool]string{true: "1", false: "0"}[b]
			}
		}
		if tv, ok := fs.checkValue(path+"."+k, d, v, errs); ok {
			out[k] = tv
		}
	}
	for k, d := range format {
		if _, given := raw[k]; !given && !d.Optional && d.Alias == "" {
			errs[path+"."+k] = msgMissing
		}
		if _, given := raw[k]; given && d.Requires != "" {
			if _, ok := raw[d.Requires]; !ok {
				errs[path+"."+d.Requires] = "missing property - '" + path + "." + k + "' requires this property"
			}
		}
	}
	if len(errs) > 0 {
		var b strings.Builder
		b.WriteString(msgFormatError)
		for _, k := range sortedKeys(errs) {
			b.WriteString(k + ": " + strings.TrimRight(errs[k], "\n") + "\n")
		}
		return nil, b.String()
	}
	return out, ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
