package pvesim

import (
	"sort"
	"strconv"
	"strings"
)

// params are a request's validated values: int64, float64, bool or string (property
// strings stay strings), as package pveschema types them.
type params map[string]any

func (p params) has(name string) bool {
	_, ok := p[name]
	return ok
}

func (p params) str(name string) (string, bool) {
	v, ok := p[name]
	if !ok {
		return "", false
	}
	return formatValue(v), true
}

func (p params) strOr(name, def string) string {
	if s, ok := p.str(name); ok {
		return s
	}
	return def
}

func (p params) int(name string) (int64, bool) {
	switch v := p[name].(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case float64:
		return int64(v), true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func (p params) bool(name string) bool {
	switch v := p[name].(type) {
	case bool:
		return v
	case int64:
		return v != 0
	case string:
		switch strings.ToLower(v) {
		case "1", "true", "yes", "on":
			return true
		}
	}
	return false
}

// formatValue renders a typed value the way Proxmox writes it into a config file.
func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case nil:
		return ""
	}
	return ""
}

// jsonValue renders a typed config value as Proxmox returns it: booleans as 0/1 numbers,
// integers and numbers as JSON numbers, everything else as strings.
func jsonValue(v any) any {
	switch v := v.(type) {
	case bool:
		if v {
			return 1
		}
		return 0
	}
	return v
}

// propValue is the value of key in a property string ("" when absent), found without
// parsing the whole string.
func propValue(s, key string) string {
	for s != "" {
		var part string
		part, s, _ = strings.Cut(s, ",")
		if k, v, ok := strings.Cut(part, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// property is a parsed property string ("virtio=BC:..,bridge=vmbr0" or
// "local-lvm:vm-100-disk-0,size=32G"): its positional first value (the default key, such
// as a volume) and its key=value pairs in order.
type property struct {
	first string
	keys  []string
	vals  map[string]string
}

func parseProperty(s string) *property {
	pr := &property{vals: map[string]string{}}
	for i, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			if i == 0 {
				pr.first = part
			}
			continue
		}
		if _, dup := pr.vals[k]; !dup {
			pr.keys = append(pr.keys, k)
		}
		pr.vals[k] = v
	}
	return pr
}

func (pr *property) get(k string) string { return pr.vals[k] }

func (pr *property) set(k, v string) {
	if _, ok := pr.vals[k]; !ok {
		pr.keys = append(pr.keys, k)
	}
	pr.vals[k] = v
}

func (pr *property) del(k string) {
	if _, ok := pr.vals[k]; !ok {
		return
	}
	delete(pr.vals, k)
	for i, key := range pr.keys {
		if key == k {
			pr.keys = append(pr.keys[:i], pr.keys[i+1:]...)
			break
		}
	}
}

// String renders the property string as Proxmox prints it: the default key's value
// first, then the other keys sorted.
func (pr *property) String() string {
	var parts []string
	if pr.first != "" {
		parts = append(parts, pr.first)
	}
	keys := append([]string(nil), pr.keys...)
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+pr.vals[k])
	}
	return strings.Join(parts, ",")
}
