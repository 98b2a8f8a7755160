package pveschema

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

//go:embed apidata.json
var apidata []byte

//go:embed namedformats.json
var namedFormatsJSON []byte

// ErrNotImplemented is wrapped by Lookup's error when no endpoint serves a path and method;
// Proxmox answers such requests with HTTP 501.
var ErrNotImplemented = errors.New("not implemented")

// NotImplementedError is the error Lookup returns for an unknown path or method. Its text is
// Proxmox's: "Method 'GET /foo' not implemented".
type NotImplementedError struct {
	Method, Path string
}

func (e *NotImplementedError) Error() string {
	return fmt.Sprintf("Method '%s %s' not implemented", e.Method, e.Path)
}

// Unwrap makes errors.Is(err, ErrNotImplemented) hold.
func (e *NotImplementedError) Unwrap() error { return ErrNotImplemented }

// Schema is the loaded, immutable API schema. It is safe for concurrent use.
type Schema struct {
	root    *routeNode
	formats *formatSet
	count   int
}

// routeNode is one path segment of the endpoint tree.
type routeNode struct {
	literal  map[string]*routeNode
	varName  string     // name of the variable child, "" if none
	variable *routeNode // the {name} child
	methods  map[string]*Endpoint
	template string
}

// Endpoint is one HTTP method on one path template.
type Endpoint struct {
	Path       string // template, e.g. "/nodes/{node}/qemu/{vmid}/config"
	Method     string // GET, POST, PUT or DELETE
	Name       string // Proxmox handler name, e.g. "update_vm_async"
	Protected  bool
	AllowToken bool // Proxmox's default when the schema omits it is true
	// ProxyTo names the parameter holding the node the call is proxied to ("node"), if any.
	ProxyTo string
	// Description is Proxmox's description of the method.
	Description string

	params  *prop
	returns *prop
	perms   permissions
	formats *formatSet
}

// Load parses the embedded trimmed Proxmox VE schema. Call it once and share the result.
func Load() (*Schema, error) {
	return parse(apidata)
}

// Endpoints lists every endpoint of the schema, sorted by path then method.
func (s *Schema) Endpoints() []*Endpoint {
	var out []*Endpoint
	var walk func(n *routeNode)
	walk = func(n *routeNode) {
		for _, e := range n.methods {
			out = append(out, e)
		}
		for _, c := range n.literal {
			walk(c)
		}
		if n.variable != nil {
			walk(n.variable)
		}
	}
	walk(s.root)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Method < out[j].Method
	})
	return out
}

type document struct {
	Endpoints []struct {
		Path string                     `json:"path"`
		Info map[string]json.RawMessage `json:"info"`
	} `json:"endpoints"`
}

type methodInfo struct {
	Name        string          `json:"name"`
	Method      string          `json:"method"`
	Description string          `json:"description"`
	Protected   flag            `json:"protected"`
	AllowToken  *flag           `json:"allowtoken"`
	ProxyTo     string          `json:"proxyto"`
	Parameters  *prop           `json:"parameters"`
	Returns     *prop           `json:"returns"`
	Permissions json.RawMessage `json:"permissions"`
}

func parse(data []byte) (*Schema, error) {
	fs, err := newFormatSet(namedFormatsJSON)
	if err != nil {
		return nil, fmt.Errorf("pveschema: load: %w", err)
	}
	var doc document
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("pveschema: load: %w", err)
	}
	s := &Schema{root: &routeNode{}, formats: fs}
	for _, ep := range doc.Endpoints {
		for method, raw := range ep.Info {
			var mi methodInfo
			if err := json.Unmarshal(raw, &mi); err != nil {
				return nil, fmt.Errorf("pveschema: load %s %s: %w", method, ep.Path, err)
			}
			e := &Endpoint{
				Path: ep.Path, Method: method, Name: mi.Name, Description: mi.Description,
				Protected: bool(mi.Protected), AllowToken: mi.AllowToken == nil || bool(*mi.AllowToken), ProxyTo: mi.ProxyTo,
				params: mi.Parameters, returns: mi.Returns, formats: fs,
			}
			if e.params == nil {
				e.params = &prop{Type: "object"}
			}
			if e.perms, err = parsePermissions(mi.Permissions); err != nil {
				return nil, fmt.Errorf("pveschema: load %s %s: %w", method, ep.Path, err)
			}
			if err := e.prepare(); err != nil {
				return nil, fmt.Errorf("pveschema: load %s %s: %w", method, ep.Path, err)
			}
			if err := s.add(e); err != nil {
				return nil, fmt.Errorf("pveschema: load: %w", err)
			}
		}
	}
	if s.count == 0 {
		return nil, errors.New("pveschema: load: schema has no endpoints")
	}
	return s, nil
}

func (s *Schema) add(e *Endpoint) error {
	n := s.root
	for _, seg := range splitPath(e.Path) {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			name := seg[1 : len(seg)-1]
			if n.variable == nil {
				n.variable, n.varName = &routeNode{}, name
			} else if n.varName != name {
				return fmt.Errorf("%s: variable {%s} conflicts with {%s}", e.Path, name, n.varName)
			}
			n = n.variable
			continue
		}
		if n.literal == nil {
			n.literal = map[string]*routeNode{}
		}
		c := n.literal[seg]
		if c == nil {
			c = &routeNode{}
			n.literal[seg] = c
		}
		n = c
	}
	if n.methods == nil {
		n.methods = map[string]*Endpoint{}
	}
	if _, dup := n.methods[e.Method]; dup {
		return fmt.Errorf("%s %s defined twice", e.Method, e.Path)
	}
	n.methods[e.Method], n.template = e, e.Path
	s.count++
	return nil
}

func splitPath(p string) []string {
	var out []string
	for _, seg := range strings.Split(p, "/") {
		if seg != "" {
			out = append(out, seg)
		}
	}
	return out
}

// Lookup resolves a request path relative to /api2/json (e.g. "/nodes/pve1/qemu/100/config",
// already percent-decoded) and an HTTP method to its endpoint and the path variables
// ({"node":"pve1","vmid":"100"}). Segments are matched one by one, literal segments before
// variables; a {volume} variable in the last position also takes the rest of the path, since
// volume IDs may contain '/'. An unknown path or a method not defined on it gives a
// *NotImplementedError, which wraps ErrNotImplemented.
func (s *Schema) Lookup(method, path string) (*Endpoint, map[string]string, error) {
	vars := map[string]string{}
	n := s.match(s.root, splitPath(path), vars)
	if n == nil || n.methods[method] == nil {
		return nil, nil, &NotImplementedError{Method: method, Path: path}
	}
	return n.methods[method], vars, nil
}

func (s *Schema) match(n *routeNode, segs []string, vars map[string]string) *routeNode {
	if len(segs) == 0 {
		if n.methods == nil {
			return nil
		}
		return n
	}
	if c := n.literal[segs[0]]; c != nil {
		if r := s.match(c, segs[1:], vars); r != nil {
			return r
		}
	}
	if n.variable == nil {
		return nil
	}
	// A volume ID or an ipset's CIDR, the last variable, may hold slashes ("%2F" arrives
	// decoded).
	if (n.varName == "volume" || n.varName == "cidr") && n.variable.literal == nil && n.variable.variable == nil && n.variable.methods != nil {
		if strings.ContainsAny(strings.Join(segs, ""), " \t\n\r\f\v") {
			return nil
		}
		vars[n.varName] = strings.Join(segs, "/")
		return n.variable
	}
	if strings.ContainsAny(segs[0], " \t\n\r\f\v") {
		return nil // Proxmox matches path variables with \S+
	}
	if r := s.match(n.variable, segs[1:], vars); r != nil {
		vars[n.varName] = segs[0]
		return r
	}
	return nil
}

// flag decodes Proxmox's 0/1 (or true/false, "0"/"1") markers.
type flag bool

func (f *flag) UnmarshalJSON(b []byte) error {
	switch strings.Trim(string(b), `"`) {
	case "1", "true":
		*f = true
	case "0", "false", "", "null":
		*f = false
	default:
		return fmt.Errorf("unexpected flag value %s", b)
	}
	return nil
}

// prop is one JSON-schema-like property definition of the api-viewer schema.
type prop struct {
	Type        string
	Description string
	Typetext    string
	Optional    bool
	// Format is a named format ("pve-vmid"); FormatProps a property-string format.
	Format      string
	FormatProps map[string]*prop
	Enum        []string
	HasEnum     bool
	Pattern     string
	Minimum     *float64
	Maximum     *float64
	MinLength   *int
	MaxLength   *int
	DefaultKey  bool
	Alias       string
	KeyAlias    string
	Requires    string
	Properties  map[string]*prop
	Items       *prop
	// AdditionalProperties is nil when unset, else whether extra keys are allowed.
	AdditionalProperties *bool

	re *regexp.Regexp // anchored Pattern, compiled by prepare
	// indexed maps the base name of "[n]" properties (net) to their count and definition.
	indexed map[string]indexedProp
}

type indexedProp struct {
	count int
	prop  *prop
}

func (p *prop) UnmarshalJSON(b []byte) error {
	var raw struct {
		Type                 json.RawMessage  `json:"type"`
		Description          string           `json:"description"`
		Typetext             string           `json:"typetext"`
		Optional             flag             `json:"optional"`
		Format               json.RawMessage  `json:"format"`
		Enum                 []any            `json:"enum"`
		Pattern              string           `json:"pattern"`
		Minimum              json.RawMessage  `json:"minimum"`
		Maximum              json.RawMessage  `json:"maximum"`
		MinLength            json.RawMessage  `json:"minLength"`
		MaxLength            json.RawMessage  `json:"maxLength"`
		DefaultKey           flag             `json:"default_key"`
		Alias                string           `json:"alias"`
		KeyAlias             string           `json:"keyAlias"`
		Requires             json.RawMessage  `json:"requires"`
		Properties           map[string]*prop `json:"properties"`
		Items                json.RawMessage  `json:"items"`
		AdditionalProperties json.RawMessage  `json:"additionalProperties"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*p = prop{
		Description: raw.Description, Typetext: raw.Typetext, Optional: bool(raw.Optional),
		Pattern: raw.Pattern, DefaultKey: bool(raw.DefaultKey), Alias: raw.Alias,
		KeyAlias: raw.KeyAlias, Properties: raw.Properties,
	}
	if len(raw.Type) > 0 && raw.Type[0] == '"' {
		if err := json.Unmarshal(raw.Type, &p.Type); err != nil {
			return err
		}
	}
	if len(raw.Format) > 0 {
		switch raw.Format[0] {
		case '"':
			if err := json.Unmarshal(raw.Format, &p.Format); err != nil {
				return err
			}
		case '{':
			if err := json.Unmarshal(raw.Format, &p.FormatProps); err != nil {
				return err
			}
		}
	}
	if raw.Enum != nil {
		p.HasEnum = true
		for _, v := range raw.Enum {
			p.Enum = append(p.Enum, fmt.Sprint(v))
		}
	}
	var err error
	if p.Minimum, err = number(raw.Minimum); err != nil {
		return fmt.Errorf("minimum: %w", err)
	}
	if p.Maximum, err = number(raw.Maximum); err != nil {
		return fmt.Errorf("maximum: %w", err)
	}
	if p.MinLength, err = integer(raw.MinLength); err != nil {
		return fmt.Errorf("minLength: %w", err)
	}
	if p.MaxLength, err = integer(raw.MaxLength); err != nil {
		return fmt.Errorf("maxLength: %w", err)
	}
	if len(raw.Requires) > 0 && raw.Requires[0] == '"' {
		if err := json.Unmarshal(raw.Requires, &p.Requires); err != nil {
			return err
		}
	}
	if len(raw.Items) > 0 && raw.Items[0] == '{' {
		if err := json.Unmarshal(raw.Items, &p.Items); err != nil {
			return err
		}
	}
	if len(raw.AdditionalProperties) > 0 {
		var f flag
		if raw.AdditionalProperties[0] == '{' {
			f = true
		} else if err := json.Unmarshal(raw.AdditionalProperties, &f); err != nil {
			return err
		}
		b := bool(f)
		p.AdditionalProperties = &b
	}
	return nil
}

func number(raw json.RawMessage) (*float64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	s := strings.Trim(string(raw), `"`)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

func integer(raw json.RawMessage) (*int, error) {
	f, err := number(raw)
	if err != nil || f == nil {
		return nil, err
	}
	i := int(*f)
	return &i, nil
}
