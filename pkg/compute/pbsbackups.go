package compute

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Backups on a Proxmox Backup Server. When a BACKUP profile maps a zone to
// a storage of type pbs (the operator's entry, on a datastore and
// optionally a namespace of a PBS), each VDC's backups go to an entry of
// the VDC's own on the same datastore: named "<entry>-<VDC id>", in the
// namespace "<entry's namespace>/<VDC id>" (the VDC's id alone below a
// datastore's root). The first backup of a VDC in the zone adds it (POST
// /storage, through the agent, which adds the PBS secret and refuses any
// entry that is not below one of the operator's); the VDC's listings,
// restores and deletes read only that entry, so that the archives of
// another VDC, in another namespace, are not even listed. The notes'
// tenancy line still marks each archive as the VDC's. PBS needs a
// namespace to exist before a backup is written into it
// (docs/operate/backups.md says how the operator provides them).

// pbsBase is the configuration of a pbs storage entry (GET /storage/{id})
// that a VDC's entry copies: never its secret, which Proxmox does not
// return.
type pbsBase struct {
	Server      string `json:"server"`
	Datastore   string `json:"datastore"`
	Namespace   string `json:"namespace"`
	Port        any    `json:"port"`
	Username    string `json:"username"`
	Fingerprint string `json:"fingerprint"`
}

// PBSEntry is the storage entry of vdc's backups on the pbs entry base.
func PBSEntry(base, vdc string) string { return base + "-" + vdc }

// PBSNamespace is the namespace of vdc's backups below the namespace ns of
// the operator's pbs entry ("" is the datastore's root).
func PBSNamespace(ns, vdc string) string {
	if ns == "" {
		return vdc
	}
	return ns + "/" + vdc
}

// of is the storage vdc's backups on st go to: the VDC's own entry on a
// Proxmox Backup Server, st's storage otherwise.
func (st backupStore) of(vdc string) string {
	if st.pbs == nil {
		return st.storage
	}
	return PBSEntry(st.storage, vdc)
}

// ensurePBSEntry adds vdc's entry on st's Proxmox Backup Server datastore
// in zone z unless it is there. An entry of that name that is not the
// VDC's (another type, datastore or namespace) is an error: backups are
// never written where another VDC could list them.
func ensurePBSEntry(ctx context.Context, z Zone, st backupStore, vdc string) error {
	id, ns := st.of(vdc), PBSNamespace(st.pbs.Namespace, vdc)
	check := func() (bool, error) {
		var cfg struct {
			pbsBase
			Type string `json:"type"`
		}
		if err := z.Client.Get(ctx, "/storage/"+url.PathEscape(id), &cfg); err != nil {
			if pveapi.IsNotFound(err) {
				return false, nil
			}
			return false, zoneDown(z.Name, err)
		}
		if cfg.Type != "pbs" || cfg.Server != st.pbs.Server || cfg.Datastore != st.pbs.Datastore || cfg.Namespace != ns {
			return true, internal(fmt.Sprintf("storage %s exists in zone %s and is not the VDC's namespace %s on datastore %s", id, z.Name, ns, st.pbs.Datastore), nil)
		}
		return true, nil
	}
	if ok, err := check(); ok || err != nil {
		return err
	}
	params := map[string]any{"storage": id, "type": "pbs", "server": st.pbs.Server, "datastore": st.pbs.Datastore,
		"namespace": ns, "content": "backup"}
	if st.pbs.Username != "" {
		params["username"] = st.pbs.Username
	}
	if st.pbs.Fingerprint != "" {
		params["fingerprint"] = st.pbs.Fingerprint
	}
	if p := fmt.Sprint(st.pbs.Port); st.pbs.Port != nil && p != "" && p != "8007" {
		params["port"] = st.pbs.Port
	}
	var out any
	err := z.Client.Post(ctx, "/storage", params, &out)
	if err != nil && !strings.Contains(err.Error(), "already defined") {
		return internal(fmt.Sprintf("adding the VDC's backup storage %s in zone %s failed", id, z.Name), err)
	}
	// Added now, or by another orchestrator meanwhile: it must be the VDC's.
	if ok, err := check(); err != nil || !ok {
		if err == nil {
			err = internal(fmt.Sprintf("the VDC's backup storage %s in zone %s is missing after its creation", id, z.Name), nil)
		}
		return err
	}
	return nil
}
