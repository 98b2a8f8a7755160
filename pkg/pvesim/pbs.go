package pvesim

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// Proxmox Backup Server storage. POST /storage adds an entry of type `pbs`
// naming a datastore of a PBS server (server, port, datastore) and a
// namespace in it ("" is the datastore's root); DELETE /storage/{storage}
// removes an entry (not its archives, which stay on the server). A `pbs`
// storage holds `backup` content only and every node sees it. The
// simulator keeps the archives of each (server, port, datastore,
// namespace) once, whatever entry wrote them: two entries on one namespace
// list the same archives, entries on two namespaces of one datastore never
// each other's, and the datastore's capacity (Config.StorageSize) is
// shared by its namespaces. A namespace exists once an archive is written
// into it (a real PBS needs it created first). Archives are named as PBS
// names snapshots: "<storage>:backup/vm/<vmid>/<time, RFC 3339 UTC>",
// format "pbs-vm".

// pbsTarget is where a `pbs` storage entry points.
type pbsTarget struct {
	server, datastore, namespace string
	port                         int
	username, fingerprint        string
}

// datastoreKey names the datastore; key the namespace in it: the store key
// of the archives (state.volumes).
func (p *pbsTarget) datastoreKey() string {
	return fmt.Sprintf("pbs|%s|%d|%s|", p.server, p.port, p.datastore)
}

func (p *pbsTarget) key() string { return p.datastoreKey() + p.namespace }

// pbsOptions are the options POST /storage takes for type `pbs`.
var pbsOptions = map[string]bool{
	"storage": true, "type": true, "server": true, "datastore": true, "namespace": true, "port": true,
	"username": true, "password": true, "fingerprint": true, "content": true, "nodes": true, "disable": true,
	"encryption-key": true, "master-pubkey": true, "max-protected-backups": true, "prune-backups": true,
}

// hStorageCreate is POST /storage. The simulator adds entries of type
// `pbs`; the others are fixed at start.
func hStorageCreate(cl *call) (any, error) {
	c := cl.c
	id, _ := cl.p.str("storage")
	typ, _ := cl.p.str("type")
	if typ != "pbs" {
		return nil, errorf(http.StatusNotImplemented, "the simulator adds storages of type 'pbs' only")
	}
	for k := range cl.p {
		if !pbsOptions[k] {
			return nil, paramError(k, "unexpected property")
		}
	}
	for _, k := range []string{"server", "datastore"} {
		if !cl.p.has(k) {
			return nil, paramError(k, "property is missing and it is not optional")
		}
	}
	if c.st.storage(id) != nil {
		return nil, errorf(http.StatusInternalServerError, "create storage failed: storage ID '%s' already defined", id)
	}
	content := []string{"backup"}
	if list, ok := cl.p.str("content"); ok {
		for _, ct := range splitList(list) {
			if ct != "backup" {
				return nil, paramError("content", fmt.Sprintf("storage type 'pbs' does not support content type '%s'", ct))
			}
		}
	}
	p := &pbsTarget{port: 8007}
	p.server, _ = cl.p.str("server")
	p.datastore, _ = cl.p.str("datastore")
	p.namespace, _ = cl.p.str("namespace")
	p.username, _ = cl.p.str("username")
	p.fingerprint, _ = cl.p.str("fingerprint")
	if port, ok := cl.p.int("port"); ok {
		p.port = int(port)
	}
	if ns := p.namespace; ns != "" && (strings.Count(ns, "/") > 7 || slices.Contains(strings.Split(ns, "/"), "")) {
		return nil, paramError("namespace", "invalid namespace '"+ns+"'")
	}
	c.st.storages = append(c.st.storages, &storageDef{id: id, typ: "pbs", content: content, shared: true, pbs: p})
	c.markDirty()
	return map[string]any{"storage": id, "type": "pbs"}, nil
}

// hStorageDelete is DELETE /storage/{storage}: an entry of type `pbs` is
// removed; its archives stay on the server.
func hStorageDelete(cl *call) (any, error) {
	c := cl.c
	id := cl.vars["storage"]
	s := c.st.storage(id)
	if s == nil {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", id)
	}
	if s.pbs == nil {
		return nil, errorf(http.StatusNotImplemented, "the simulator removes storages of type 'pbs' only")
	}
	c.st.storages = slices.DeleteFunc(c.st.storages, func(d *storageDef) bool { return d == s })
	c.markDirty()
	return nil, nil
}

// pbsArchiveName is the name of an archive of guest vmid taken at t on
// storage s (PBS's snapshot path).
func pbsArchiveName(s *storageDef, vmid int, t time.Time) string {
	return fmt.Sprintf("%s:backup/vm/%d/%s", s.id, vmid, t.UTC().Format("2006-01-02T15:04:05Z"))
}

// pbsView is the archives of the namespace of entry s, keyed by their
// volume ids through s: the volumes are the namespace's own (each
// volume's volid and storage name s until another entry views it).
func (st *state) pbsView(s *storageDef) map[string]*volume {
	m := map[string]*volume{}
	for name, v := range st.volumes[s.pbs.key()] {
		v.volid, v.storage = s.id+":"+name, s.id
		m[v.volid] = v
	}
	return m
}

// pbsNamespace is the namespace map of entry s, made on first write.
func (st *state) pbsNamespace(s *storageDef) map[string]*volume {
	k := s.pbs.key()
	if st.volumes[k] == nil {
		st.volumes[k] = map[string]*volume{}
	}
	return st.volumes[k]
}

// pbsUsed is the bytes the archives of s's datastore take, over all its
// namespaces.
func (st *state) pbsUsed(s *storageDef) int64 {
	var n int64
	prefix := s.pbs.datastoreKey()
	for k, m := range st.volumes {
		if strings.HasPrefix(k, prefix) {
			for _, v := range m {
				n += v.size
			}
		}
	}
	return n
}

// pbsConfig adds a `pbs` entry's options to its configuration (never its
// password).
func (p *pbsTarget) config(e map[string]any) {
	e["server"], e["datastore"] = p.server, p.datastore
	if p.namespace != "" {
		e["namespace"] = p.namespace
	}
	if p.port != 8007 {
		e["port"] = p.port
	}
	if p.username != "" {
		e["username"] = p.username
	}
	if p.fingerprint != "" {
		e["fingerprint"] = p.fingerprint
	}
}

// storageRecord is an added storage entry in the state file.
type storageRecord struct {
	ID          string   `json:"id"`
	Type        string   `json:"type"`
	Content     []string `json:"content"`
	Server      string   `json:"server"`
	Port        int      `json:"port"`
	Datastore   string   `json:"datastore"`
	Namespace   string   `json:"namespace,omitempty"`
	Username    string   `json:"username,omitempty"`
	Fingerprint string   `json:"fingerprint,omitempty"`
}

// addedStorages are the entries POST /storage added, by id.
func (st *state) addedStorages() []storageRecord {
	var out []storageRecord
	for _, s := range st.storages {
		if p := s.pbs; p != nil {
			out = append(out, storageRecord{ID: s.id, Type: s.typ, Content: slices.Clone(s.content), Server: p.server, Port: p.port,
				Datastore: p.datastore, Namespace: p.namespace, Username: p.username, Fingerprint: p.fingerprint})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// addStorages adds the entries of a state file.
func (st *state) addStorages(rs []storageRecord) error {
	for _, r := range rs {
		if r.Type != "pbs" || st.storage(r.ID) != nil {
			return fmt.Errorf("storage %q: of type %q, or defined twice", r.ID, r.Type)
		}
		st.storages = append(st.storages, &storageDef{id: r.ID, typ: r.Type, content: slices.Clone(r.Content), shared: true,
			pbs: &pbsTarget{server: r.Server, port: r.Port, datastore: r.Datastore, namespace: r.Namespace, username: r.Username, fingerprint: r.Fingerprint}})
	}
	return nil
}
