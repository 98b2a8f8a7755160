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
// is a *ParamError keyed by the parameter name, with the message Validate gives.
func (e *Endpoint) ParseProperty(param, value string) (Params, error) {
	p := e.params.lookup(param)
	if p == nil {
		return nil, &ParamError{Errors: map[string]string{param: msgNotInSchema}}
	}
	format := p.FormatProps
	if format == nil {
		format = e.formats.props[p.Format]
	}
	if format == nil {
		return nil, fmt.Errorf("pveschema: parse property: %s %s: parameter %s is not a property string", e.Method, e.Path, param)
	}
	res, msg := e.formats.parsePropertyString(param, format, value)
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

func (fs *formatSet) checkNamed(path, name, v string) string {
	if f := fs.props[name]; f != nil {
		_, msg := fs.parsePropertyString(path, f, v)
		return msg
	}
	if verify := fs.verifiers[name]; verify != nil {
		if err := verify(v); err != nil {
			return err.Error() + "\n"
		}
		return ""
	}
	if base, ok := listBase(name); ok {
		for _, item := range splitList(v) {
			if msg := fs.checkNamed(path, base, item); msg != "" {
				return msg
			}
		}
		return ""
	}
	if base, ok := strings.CutSuffix(name, "-opt"); ok {
		if v == "" {
			return ""
		}
		return fs.checkNamed(path, base, v)
	}
	return "undefined format '" + name + "'\n"
}

func listBase(name string) (string, bool) {
	if base, ok := strings.CutSuffix(name, "-list"); ok {
		return base, true
	}
	return strings.CutSuffix(name, "-alist")
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
			for _, key := range sortedKeys(format) {
				if format[key].DefaultKey {
					defaultKey = key
					break
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
		if tv, ok := fs.checkValue(path+"."+k, d, v, errs); ok {
			out[k] = tv
		}
	}
	for _, k := range sortedKeys(format) {
		d := format[k]
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
