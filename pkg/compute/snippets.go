package compute

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// A VM's own cloud-init user-data (CreateInput.UserData: a tenant's, or a
// Cluster API worker's kubeadm join) reaches the guest as Proxmox delivers
// custom cloud-init data: a snippet file on a storage of the guest's node
// that allows `snippets` content, named by the guest's
// cicustom=user=<storage>:snippets/<file>. Proxmox's API cannot write
// snippets, so the zone's agent on that node writes it (Config.Snippets):
// the orchestrator never holds a Proxmox credential for it. The create
// writes the snippet (userdata.go merges it with flexplane's own settings)
// and sets cicustom before the first start; the guest's intent records
// only the snippet's checksum, so a create another process finishes
// (Recover) finishes from the snippet. A move to another node or zone
// copies the snippet to the target (a copy on every move: snippet
// storages are often a node's own); deleting the VM deletes it on every
// node of its zone.

// SnippetRef names a snippet file on a node of a zone.
type SnippetRef struct {
	ZoneID, Node string
	// Storage is the Proxmox storage; Name the file's name in its
	// snippets directory.
	Storage, Name string
}

// Volume is the snippet's Proxmox volume id.
func (r SnippetRef) Volume() string { return r.Storage + ":snippets/" + r.Name }

// SnippetWriter writes and deletes snippet files on the nodes of zones
// (the agent of the node does).
type SnippetWriter interface {
	WriteSnippet(ctx context.Context, ref SnippetRef, data []byte) error
	// DeleteSnippet deletes a snippet; one that is not there is no error.
	DeleteSnippet(ctx context.Context, ref SnippetRef) error
}

// snippets writes and deletes the snippets of VMs' user-data through
// its writer (Config.Snippets; nil keeps user-data in the intent only).
type snippets struct{ w SnippetWriter }

// userDataName is the snippet file of guest vmid's user-data.
func userDataName(vmid int) string { return "fp-" + strconv.Itoa(vmid) + "-user.yaml" }

// userDataSnippet returns the snippet cicustom names as guest vmid's
// user-data if it is flexplane's (ok false otherwise).
func userDataSnippet(cicustom string, vmid int) (storage string, ok bool) {
	for part := range strings.SplitSeq(cicustom, ",") {
		if v, found := strings.CutPrefix(part, "user="); found {
			st, name, _ := strings.Cut(v, ":")
			return st, name == "snippets/"+userDataName(vmid)
		}
	}
	return "", false
}

// snippetStorage picks the storage of node for snippets: the first, by
// name, that allows `snippets` content and is active there; with
// preferShared a shared one first if there is one (an HA VM's snippet must
// be where any host that recovers it finds it, ha.go).
func snippetStorage(ctx context.Context, z Zone, node string, preferShared bool) (string, error) {
	var sts []struct {
		Storage string `json:"storage"`
		Active  int    `json:"active"`
		Shared  int    `json:"shared"`
	}
	if err := z.Client.Get(ctx, "/nodes/"+url.PathEscape(node)+"/storage?content=snippets&enabled=1", &sts); err != nil {
		return "", fmt.Errorf("compute: storages of %s: %w", node, err)
	}
	var ids, shared []string
	for _, s := range sts {
		if s.Active == 1 {
			ids = append(ids, s.Storage)
			if s.Shared == 1 {
				shared = append(shared, s.Storage)
			}
		}
	}
	if preferShared && len(shared) > 0 {
		ids = shared
	}
	if len(ids) == 0 {
		return "", fmt.Errorf("compute: no storage of node %s allows snippets content (needed for cloud-init user-data)", node)
	}
	slices.Sort(ids)
	return ids[0], nil
}

// writeUserData writes guest g's user-data snippet (data; nil when this
// process does not have it: the snippet written before must be there) and
// names it in its cicustom, unless that is done.
func (sn snippets) writeUserData(ctx context.Context, z Zone, g pveapi.Resource, cfg pveapi.Config, in *Intent, data []byte, base string) (bool, error) {
	if sn.w == nil {
		return false, nil
	}
	if data == nil && in.UserData != "" {
		legacy, err := in.DecodedUserData()
		if err != nil {
			return true, err
		}
		data = legacy
	}
	if data == nil && in.UserDataSum == "" {
		return false, nil
	}
	if _, ok := userDataSnippet(cfg.Str("cicustom"), g.VMID); ok {
		return false, nil
	}
	storage, err := snippetStorage(ctx, z, g.Node, !in.NoHA)
	if err != nil {
		return true, err
	}
	ref := SnippetRef{ZoneID: z.ID, Node: g.Node, Storage: storage, Name: userDataName(g.VMID)}
	if data != nil {
		if err := sn.w.WriteSnippet(ctx, ref, data); err != nil {
			return true, fmt.Errorf("compute: writing the user-data snippet: %w", err)
		}
	} else if ok, err := snippetExists(ctx, z, ref); err != nil {
		return true, err
	} else if !ok {
		return true, fmt.Errorf("compute: the user-data snippet %s is missing: the create was interrupted before it was written", ref.Volume())
	}
	_, err = pveapi.Run(ctx, z.Client, "POST", base+"/config", map[string]any{"cicustom": "user=" + ref.Volume(), "digest": cfg.Digest()})
	return true, err
}

// snippetExists reports whether the snippet ref is on its node's storage.
func snippetExists(ctx context.Context, z Zone, ref SnippetRef) (bool, error) {
	var vols []struct {
		VolID string `json:"volid"`
	}
	path := "/nodes/" + url.PathEscape(ref.Node) + "/storage/" + url.PathEscape(ref.Storage) + "/content?content=snippets"
	if err := z.Client.Get(ctx, path, &vols); err != nil {
		return false, fmt.Errorf("compute: snippets of %s: %w", ref.Node, err)
	}
	return slices.ContainsFunc(vols, func(v struct {
		VolID string `json:"volid"`
	}) bool {
		return v.VolID == ref.Volume()
	}), nil
}

// readUserData reads the user-data of guest vmid on node of zone z (the
// snippet its cicustom names) as Proxmox gives it to the guest.
func readUserData(ctx context.Context, z Zone, node string, vmid int) ([]byte, error) {
	var s string
	path := "/nodes/" + url.PathEscape(node) + "/qemu/" + strconv.Itoa(vmid) + "/cloudinit/dump?type=user"
	if err := z.Client.Get(ctx, path, &s); err != nil {
		return nil, fmt.Errorf("compute: reading the user-data of %d: %w", vmid, err)
	}
	return []byte(s), nil
}

// copyUserData copies the user-data snippet that cicustom of guest vmid
// on node of zone from names, if it is flexplane's, to node to of zone dst
// as the snippet of guest toVMID there (on a storage of to that takes
// snippets), and returns the cicustom value that names the copy ("" when
// there is nothing to copy).
func (sn snippets) copyUserData(ctx context.Context, from Zone, node string, vmid int, cicustom string, dst Zone, to string, toVMID int) (string, error) {
	if _, ok := userDataSnippet(cicustom, vmid); !ok || sn.w == nil {
		return "", nil
	}
	data, err := readUserData(ctx, from, node, vmid)
	if err != nil {
		return "", err
	}
	// A snippet on shared storage stays on shared storage (it is an HA
	// VM's, which any host may have to start).
	storage, err := snippetStorage(ctx, dst, to, sharedSnippet(ctx, from, node, cicustom, vmid))
	if err != nil {
		return "", err
	}
	ref := SnippetRef{ZoneID: dst.ID, Node: to, Storage: storage, Name: userDataName(toVMID)}
	if err := sn.w.WriteSnippet(ctx, ref, data); err != nil {
		return "", fmt.Errorf("compute: copying the user-data snippet to %s: %w", to, err)
	}
	return "user=" + ref.Volume(), nil
}

// deleteUserData deletes the user-data snippet cicustom names for guest
// vmid of zone z, if it is flexplane's: on its node, and on every other
// online node of the zone (a move within the zone left a copy on each node
// the VM ran on; one not deleted there is only warned of).
func (sn snippets) deleteUserData(ctx context.Context, z Zone, node string, vmid int, cicustom string, log *slog.Logger) error {
	storage, ok := userDataSnippet(cicustom, vmid)
	if !ok || sn.w == nil {
		return nil
	}
	if err := sn.w.DeleteSnippet(ctx, SnippetRef{ZoneID: z.ID, Node: node, Storage: storage, Name: userDataName(vmid)}); err != nil {
		return fmt.Errorf("compute: deleting the user-data snippet: %w", err)
	}
	var nodes []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	if err := z.Client.Get(ctx, "/nodes", &nodes); err != nil {
		log.Warn("deleting the user-data snippet's copies: listing the nodes", "vmid", vmid, "err", err)
		return nil
	}
	for _, n := range nodes {
		if n.Status != "online" || n.Node == node {
			continue
		}
		ref := SnippetRef{ZoneID: z.ID, Node: n.Node, Storage: storage, Name: userDataName(vmid)}
		if err := sn.w.DeleteSnippet(ctx, ref); err != nil {
			log.Warn("deleting a copy of the user-data snippet", "vmid", vmid, "node", n.Node, "err", err)
		}
	}
	return nil
}

// sharedSnippet reports whether guest vmid's snippet that cicustom names
// is on a storage shared in zone z.
func sharedSnippet(ctx context.Context, z Zone, node, cicustom string, vmid int) bool {
	storage, ok := userDataSnippet(cicustom, vmid)
	if !ok {
		return false
	}
	shared, err := sharedStorage(ctx, z, node, storage)
	return err == nil && shared
}
