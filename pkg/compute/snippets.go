package compute

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// A VM's own cloud-init user-data (CreateInput.UserData: a Cluster API
// worker's kubeadm join, for one) reaches the guest as Proxmox delivers
// custom cloud-init data: a snippet file on a storage of the guest's node
// that allows `snippets` content, named by the guest's
// cicustom=user=<storage>:snippets/<file>. Proxmox's API cannot write
// snippets, so the zone's agent on that node writes it (Config.Snippets):
// the orchestrator never holds a Proxmox credential for it. The create
// writes the snippet and sets cicustom before the first start; deleting the
// VM deletes the snippet.

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
// name, that allows `snippets` content and is active there.
func snippetStorage(ctx context.Context, z Zone, node string) (string, error) {
	var sts []struct {
		Storage string `json:"storage"`
		Active  int    `json:"active"`
	}
	if err := z.Client.Get(ctx, "/nodes/"+url.PathEscape(node)+"/storage?content=snippets&enabled=1", &sts); err != nil {
		return "", fmt.Errorf("compute: storages of %s: %w", node, err)
	}
	var ids []string
	for _, s := range sts {
		if s.Active == 1 {
			ids = append(ids, s.Storage)
		}
	}
	if len(ids) == 0 {
		return "", fmt.Errorf("compute: no storage of node %s allows snippets content (needed for cloud-init user-data)", node)
	}
	slices.Sort(ids)
	return ids[0], nil
}

// writeUserData writes guest g's user-data snippet and names it in its
// cicustom, unless that is done.
func (sn snippets) writeUserData(ctx context.Context, z Zone, g pveapi.Resource, cfg pveapi.Config, in *Intent, base string) (bool, error) {
	if in.UserData == "" || sn.w == nil {
		return false, nil
	}
	if _, ok := userDataSnippet(cfg.Str("cicustom"), g.VMID); ok {
		return false, nil
	}
	data, err := in.DecodedUserData()
	if err != nil {
		return true, err
	}
	storage, err := snippetStorage(ctx, z, g.Node)
	if err != nil {
		return true, err
	}
	ref := SnippetRef{ZoneID: z.ID, Node: g.Node, Storage: storage, Name: userDataName(g.VMID)}
	if err := sn.w.WriteSnippet(ctx, ref, data); err != nil {
		return true, fmt.Errorf("compute: writing the user-data snippet: %w", err)
	}
	_, err = pveapi.Run(ctx, z.Client, "POST", base+"/config", map[string]any{"cicustom": "user=" + ref.Volume(), "digest": cfg.Digest()})
	return true, err
}

// deleteUserData deletes the user-data snippet cicustom names for guest
// vmid on node, if it is flexplane's.
func (sn snippets) deleteUserData(ctx context.Context, z Zone, node string, vmid int, cicustom string) error {
	storage, ok := userDataSnippet(cicustom, vmid)
	if !ok || sn.w == nil {
		return nil
	}
	if err := sn.w.DeleteSnippet(ctx, SnippetRef{ZoneID: z.ID, Node: node, Storage: storage, Name: userDataName(vmid)}); err != nil {
		return fmt.Errorf("compute: deleting the user-data snippet: %w", err)
	}
	return nil
}
