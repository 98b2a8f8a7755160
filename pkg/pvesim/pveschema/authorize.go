package pveschema

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// PermissionError is a failed permission check; Proxmox answers HTTP 403 with its text.
// Path and Privilege are empty when the check failed as a whole (an "or" with no satisfied
// branch, a missing require_param, or an endpoint only root@pam may call).
type PermissionError struct {
	Path      string
	Privilege string // a single privilege, or "A|B" when any of several would do
}

func (e *PermissionError) Error() string {
	if e.Path == "" && e.Privilege == "" {
		return "Permission check failed"
	}
	return fmt.Sprintf("Permission check failed (%s, %s)", e.Path, e.Privilege)
}

// permissions is an endpoint's `permissions` object.
type permissions struct {
	user        string // "all" (any authenticated user) or "world" (anyone), "" if unset
	check       *permCheck
	description string
}

// permCheck is one node of a `check` expression.
type permCheck struct {
	op           string // "perm", "and" or "or"
	path         string
	privs        []string
	any          bool
	requireParam string
	subs         []*permCheck
}

func parsePermissions(raw json.RawMessage) (permissions, error) {
	var out permissions
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil
	}
	var obj struct {
		User        string          `json:"user"`
		Check       json.RawMessage `json:"check"`
		Description string          `json:"description"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return out, fmt.Errorf("permissions: %w", err)
	}
	switch obj.User {
	case "", "all", "world":
	default:
		return out, fmt.Errorf("permissions: unsupported user '%s'", obj.User)
	}
	out.user, out.description = obj.User, obj.Description
	if len(obj.Check) > 0 {
		c, err := parseCheck(obj.Check)
		if err != nil {
			return out, fmt.Errorf("permissions: %w", err)
		}
		out.check = c
	}
	return out, nil
}

func parseCheck(raw json.RawMessage) (*permCheck, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("empty check")
	}
	c := &permCheck{}
	if err := json.Unmarshal(items[0], &c.op); err != nil {
		return nil, err
	}
	switch c.op {
	case "and", "or":
		for _, it := range items[1:] {
			sub, err := parseCheck(it)
			if err != nil {
				return nil, err
			}
			c.subs = append(c.subs, sub)
		}
		if len(c.subs) == 0 {
			return nil, fmt.Errorf("%s without operands", c.op)
		}
	case "perm":
		if len(items) < 3 || len(items)%2 == 0 {
			return nil, fmt.Errorf("malformed perm check %s", raw)
		}
		if err := json.Unmarshal(items[1], &c.path); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(items[2], &c.privs); err != nil {
			return nil, err
		}
		if len(c.privs) == 0 {
			return nil, fmt.Errorf("perm check without privileges")
		}
		for i := 3; i+1 < len(items); i += 2 {
			var key string
			if err := json.Unmarshal(items[i], &key); err != nil {
				return nil, err
			}
			switch key {
			case "any":
				var f flag
				if err := json.Unmarshal(items[i+1], &f); err != nil {
					return nil, err
				}
				c.any = bool(f)
			case "require_param":
				if err := json.Unmarshal(items[i+1], &c.requireParam); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("unsupported perm option '%s'", key)
			}
		}
	default:
		return nil, fmt.Errorf("unsupported permission check '%s'", c.op)
	}
	return c, nil
}

// Authorize evaluates the endpoint's permission check for an authenticated caller against
// has(path, privilege), like Proxmox's check_api2_permissions: `user: all` (and `world`)
// lets every caller through; a `check` expression is evaluated with "perm" (all listed
// privileges, or any of them with "any", 1; "require_param" demands the parameter), "and"
// and "or"; {name} in paths is replaced by the parameter value ('-' when absent) and the
// path normalised. An endpoint with neither is reserved to root@pam and always fails here
// (callers that model root@pam skip Authorize). p should hold the path variables, as
// Validate's result does. Failure is a *PermissionError.
func (e *Endpoint) Authorize(p Params, has func(path, priv string) bool) error {
	if e.perms.user == "all" || e.perms.user == "world" {
		return nil
	}
	if e.perms.check == nil {
		return &PermissionError{}
	}
	return e.perms.check.eval(p, has)
}

// PermissionDescription is Proxmox's prose about the endpoint's permissions. For endpoints
// open to every user (`user: all`) it states the checks the handler itself makes, e.g. "Only
// list VMs where you have VM.Audit permissions on /vms/<vmid>."
func (e *Endpoint) PermissionDescription() string { return e.perms.description }

func (c *permCheck) eval(p Params, has func(path, priv string) bool) error {
	switch c.op {
	case "and":
		for _, s := range c.subs {
			if err := s.eval(p, has); err != nil {
				return err
			}
		}
		return nil
	case "or":
		for _, s := range c.subs {
			if s.eval(p, has) == nil {
				return nil
			}
		}
		return &PermissionError{}
	}
	if c.requireParam != "" {
		if _, ok := p[c.requireParam]; !ok {
			return &PermissionError{}
		}
	}
	path := normalizePath(templateReplace(c.path, p))
	if !aclPathRE.MatchString(path) {
		// Proxmox's normalize_path gives undef: no privileges anywhere.
		return &PermissionError{Path: "", Privilege: denied(c)}
	}
	if c.any {
		for _, priv := range c.privs {
			if has(path, priv) {
				return nil
			}
		}
		return &PermissionError{Path: path, Privilege: denied(c)}
	}
	for _, priv := range c.privs {
		if !has(path, priv) {
			return &PermissionError{Path: path, Privilege: priv}
		}
	}
	return nil
}

var (
	tmplVarRE = regexp.MustCompile(`\{([^}]+)\}`)
	aclPathRE = regexp.MustCompile(`^[[:alnum:].\-_/]+$`)
)

// denied names what a failed perm check lacks: its first privilege, or all of them for "any".
func denied(c *permCheck) string {
	if c.any {
		return strings.Join(c.privs, "|")
	}
	return c.privs[0]
}

func templateReplace(tmpl string, p Params) string {
	return tmplVarRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		v := paramText(p[m[1:len(m)-1]])
		if v == "" || v == "0" { // Perl's false values
			return "-"
		}
		return v
	})
}

func paramText(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case int64:
		return strconv.FormatInt(t, 10)
	case float64:
		return formatNum(t)
	case bool:
		if t {
			return "1"
		}
		return "0"
	}
	return fmt.Sprint(v)
}

func normalizePath(p string) string {
	return "/" + strings.Join(splitPath(p), "/")
}
