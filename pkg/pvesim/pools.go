package pvesim

import (
	"fmt"
	"net/http"
	"sort"
	"time"
)

// poolMembers lists the guests of pool id as Proxmox does (PVE::API2::Pool
// with PVE::API2Tools::extract_vm_stats): the fields of /cluster/resources
// less tags, lock and pool, which that list adds from the guests' configs.
// typ "" lists every member, "qemu" the QEMU guests, "lxc" and "storage"
// none (the simulator has neither containers nor storage members).
func (st *state) poolMembers(id, typ string, now time.Time) []*vmResource {
	out := []*vmResource{}
	if typ != "" && typ != "qemu" {
		return out
	}
	ids := []int{}
	for vmid, g := range st.guests {
		if g.pool == id {
			ids = append(ids, vmid)
		}
	}
	sort.Ints(ids)
	for _, vmid := range ids {
		e := st.guestResource(st.guests[vmid], now)
		e.Tags, e.Lock, e.Pool = "", "", ""
		out = append(out, e)
	}
	return out
}

func poolEntry(p *pool) map[string]any {
	e := map[string]any{"poolid": p.id}
	if p.comment != "" {
		e["comment"] = p.comment
	}
	return e
}

func hPools(cl *call) (any, error) {
	c := cl.c
	only, _ := cl.p.str("poolid")
	typ, _ := cl.p.str("type")
	out := []map[string]any{}
	now := time.Now()
	for _, id := range sortedKeys(c.st.pools) {
		if only != "" && id != only {
			continue
		}
		e := poolEntry(c.st.pools[id])
		if only != "" {
			e["members"] = c.st.poolMembers(id, typ, now)
		}
		out = append(out, e)
	}
	if only != "" && len(out) == 0 {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", only)
	}
	return out, nil
}

func hPoolGet(cl *call) (any, error) {
	c := cl.c
	id := cl.vars["poolid"]
	p := c.st.pools[id]
	if p == nil {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", id)
	}
	e := poolEntry(p)
	delete(e, "poolid")
	typ, _ := cl.p.str("type")
	e["members"] = c.st.poolMembers(id, typ, time.Now())
	return e, nil
}

func hPoolCreate(cl *call) (any, error) {
	c := cl.c
	id, _ := cl.p.str("poolid")
	if c.st.pools[id] != nil {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' already exists", id)
	}
	c.st.pools[id] = &pool{id: id, comment: cl.p.strOr("comment", "")}
	return nil, nil
}

// hPoolUpdate adds or removes guests (vms=...) and sets the comment.
func hPoolUpdate(cl *call) (any, error) {
	c := cl.c
	id, ok := cl.vars["poolid"]
	if !ok {
		id, _ = cl.p.str("poolid")
	}
	p := c.st.pools[id]
	if p == nil {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", id)
	}
	remove := cl.p.bool("delete")
	allowMove := cl.p.bool("allow-move")
	var guests []*guest
	if vms, ok := cl.p.str("vms"); ok {
		for _, s := range splitList(vms) {
			var vmid int
			if _, err := fmt.Sscanf(s, "%d", &vmid); err != nil {
				return nil, paramError("vms", fmt.Sprintf("invalid format - value '%s' does not look like a valid VM ID", s))
			}
			g := c.st.guests[vmid]
			if g == nil {
				return nil, errorf(http.StatusInternalServerError, "no such VM ID '%d'", vmid)
			}
			if remove {
				if g.pool != id {
					return nil, errorf(http.StatusInternalServerError, "VM %d is not a pool member", vmid)
				}
			} else if g.pool != "" && g.pool != id && !allowMove {
				return nil, errorf(http.StatusInternalServerError, "VM %d belongs already to pool '%s' and 'allow-move' is not set", vmid, g.pool)
			}
			guests = append(guests, g)
		}
	}
	if _, ok := cl.p.str("storage"); ok {
		return nil, errorf(http.StatusNotImplemented, "storage pool membership is not simulated")
	}
	for _, g := range guests {
		if remove {
			g.pool = ""
		} else {
			g.pool = id
		}
	}
	if cm, ok := cl.p.str("comment"); ok {
		p.comment = cm
	}
	return nil, nil
}

func hPoolDelete(cl *call) (any, error) {
	c := cl.c
	id, ok := cl.vars["poolid"]
	if !ok {
		id, _ = cl.p.str("poolid")
	}
	if c.st.pools[id] == nil {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", id)
	}
	for _, g := range c.st.guests {
		if g.pool == id {
			return nil, errorf(http.StatusInternalServerError, "pool '%s' is not empty", id)
		}
	}
	delete(c.st.pools, id)
	return nil, nil
}
