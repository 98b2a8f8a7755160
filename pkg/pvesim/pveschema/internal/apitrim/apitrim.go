// Package apitrim extracts the Proxmox VE API endpoints flexplane uses from the full
// api-viewer schema (apidata.json) into a small, deterministic document that package
// pveschema embeds. It is shared by the generator (internal/trim) and the staleness test.
package apitrim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Paths are the endpoint templates flexplane uses; every HTTP method defined on them is
// kept, unless an entry names its methods ("GET /access/users"): then only those.
var Paths = []string{
	"/version",
	"/cluster/status",
	"/cluster/resources",
	"/cluster/nextid",
	"/cluster/tasks",
	"/cluster/backup",
	"/cluster/backup/{id}",
	"/cluster/replication",
	"/cluster/replication/{id}",
	"/cluster/config/join",
	"/cluster/ha",
	"/cluster/ha/resources",
	"/cluster/ha/resources/{sid}",
	"/cluster/ha/resources/{sid}/migrate",
	"/cluster/ha/resources/{sid}/relocate",
	"/cluster/ha/rules",
	"/cluster/ha/rules/{rule}",
	"/cluster/ha/status",
	"/cluster/ha/status/current",
	"/cluster/ha/status/manager_status",
	"/cluster/sdn",
	"/cluster/sdn/zones",
	"/cluster/sdn/zones/{zone}",
	"/cluster/sdn/vnets",
	"/cluster/sdn/vnets/{vnet}",
	"/cluster/sdn/vnets/{vnet}/subnets",
	"/cluster/sdn/vnets/{vnet}/subnets/{subnet}",
	"/cluster/sdn/vnets/{vnet}/ips",
	"/cluster/sdn/ipams",
	"/cluster/sdn/ipams/{ipam}",
	"/cluster/sdn/ipams/{ipam}/status",
	"/cluster/firewall",
	"/cluster/firewall/options",
	"/cluster/firewall/groups",
	"/cluster/firewall/groups/{group}",
	"/cluster/firewall/groups/{group}/{pos}",
	"/cluster/firewall/ipset",
	"/cluster/firewall/ipset/{name}",
	"/cluster/firewall/ipset/{name}/{cidr}",
	"/nodes/{node}/qemu/{vmid}/firewall",
	"/nodes/{node}/qemu/{vmid}/firewall/options",
	"/nodes/{node}/qemu/{vmid}/firewall/rules",
	"/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
	"/nodes/{node}/qemu/{vmid}/firewall/ipset",
	"/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}",
	"/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}",
	"/pools",
	"/pools/{poolid}",
	"/nodes",
	"/nodes/{node}",
	"/nodes/{node}/status",
	"/nodes/{node}/rrddata",
	"/nodes/{node}/version",
	"/nodes/{node}/certificates/info",
	"/nodes/{node}/network",
	"/nodes/{node}/tasks",
	"/nodes/{node}/tasks/{upid}",
	"/nodes/{node}/tasks/{upid}/status",
	"/nodes/{node}/tasks/{upid}/log",
	"/nodes/{node}/storage",
	"/nodes/{node}/storage/{storage}",
	"/nodes/{node}/storage/{storage}/status",
	"/nodes/{node}/storage/{storage}/content",
	"/nodes/{node}/storage/{storage}/content/{volume}",
	"/nodes/{node}/storage/{storage}/download-url",
	"/nodes/{node}/storage/{storage}/upload",
	"/nodes/{node}/vzdump",
	"GET /nodes/{node}/vzdump/extractconfig",
	"/storage",
	"/storage/{storage}",
	"/nodes/{node}/qemu",
	"/nodes/{node}/qemu/{vmid}",
	"/nodes/{node}/qemu/{vmid}/config",
	"/nodes/{node}/qemu/{vmid}/pending",
	"/nodes/{node}/qemu/{vmid}/status",
	"/nodes/{node}/qemu/{vmid}/status/current",
	"/nodes/{node}/qemu/{vmid}/status/start",
	"/nodes/{node}/qemu/{vmid}/status/stop",
	"/nodes/{node}/qemu/{vmid}/status/shutdown",
	"/nodes/{node}/qemu/{vmid}/status/reboot",
	"/nodes/{node}/qemu/{vmid}/status/reset",
	"/nodes/{node}/qemu/{vmid}/status/suspend",
	"/nodes/{node}/qemu/{vmid}/status/resume",
	"/nodes/{node}/qemu/{vmid}/clone",
	"/nodes/{node}/qemu/{vmid}/template",
	"/nodes/{node}/qemu/{vmid}/resize",
	"/nodes/{node}/qemu/{vmid}/migrate",
	"/nodes/{node}/qemu/{vmid}/rrddata",
	"/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
	"/nodes/{node}/qemu/{vmid}/move_disk",
	"/nodes/{node}/qemu/{vmid}/unlink",
	"/nodes/{node}/qemu/{vmid}/snapshot",
	"/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
	"/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config",
	"/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback",
	"/nodes/{node}/qemu/{vmid}/vncproxy",
	"/nodes/{node}/qemu/{vmid}/vncwebsocket",
	"GET /nodes/{node}/qemu/{vmid}/cloudinit/dump",
	"GET /nodes/{node}/lxc",
	"GET /access/users",
	"GET /access/groups",
	"GET /access/domains",
}

// Document is the trimmed schema: one entry per endpoint template, sorted by path.
type Document struct {
	Source    string     `json:"source"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is one path template with the api-viewer `info` of each HTTP method, verbatim.
type Endpoint struct {
	Path string                     `json:"path"`
	Info map[string]json.RawMessage `json:"info"`
}

type node struct {
	Path     string                     `json:"path"`
	Info     map[string]json.RawMessage `json:"info"`
	Children []node                     `json:"children"`
}

// Trim parses the full api-viewer schema and returns the trimmed document as indented JSON
// ending in a newline. The output depends only on the input: keys and paths are sorted.
// It fails when a path of Paths is absent or has no methods.
func Trim(full []byte) ([]byte, error) {
	var roots []node
	if err := json.Unmarshal(full, &roots); err != nil {
		return nil, fmt.Errorf("apitrim: parse schema: %w", err)
	}
	byPath := map[string]node{}
	var walk func(n node)
	walk = func(n node) {
		byPath[n.Path] = n
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	doc := Document{Source: "Proxmox VE api-viewer apidata.json, trimmed by pkg/pvesim/pveschema/internal/trim"}
	var missing []string
	for _, entry := range Paths {
		p, methods := splitEntry(entry)
		n, ok := byPath[p]
		if !ok || len(n.Info) == 0 {
			missing = append(missing, entry)
			continue
		}
		info := map[string]json.RawMessage{}
		for m, raw := range n.Info {
			if methods != nil && !methods[m] {
				continue
			}
			canon, err := canonical(raw)
			if err != nil {
				return nil, fmt.Errorf("apitrim: %s %s: %w", m, p, err)
			}
			info[m] = canon
		}
		if len(info) == 0 {
			missing = append(missing, entry)
			continue
		}
		doc.Endpoints = append(doc.Endpoints, Endpoint{Path: p, Info: info})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("apitrim: paths not in schema: %s", strings.Join(missing, ", "))
	}
	sort.Slice(doc.Endpoints, func(i, j int) bool { return doc.Endpoints[i].Path < doc.Endpoints[j].Path })
	out, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return nil, fmt.Errorf("apitrim: encode: %w", err)
	}
	return append(out, '\n'), nil
}

// splitEntry splits a Paths entry into its path and the methods it keeps (nil: all).
func splitEntry(entry string) (string, map[string]bool) {
	ms, p, ok := strings.Cut(entry, " ")
	if !ok {
		return entry, nil
	}
	methods := map[string]bool{}
	for _, m := range strings.Split(ms, ",") {
		methods[m] = true
	}
	return p, methods
}

// canonical re-encodes raw JSON with sorted object keys, keeping numbers exactly as written.
func canonical(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}
