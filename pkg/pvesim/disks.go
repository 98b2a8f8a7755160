package pvesim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// hQemuUnlink removes disks from the config as a config update deleting them does: each
// becomes an unusedN entry, or with force=1 its volume is removed.
func hQemuUnlink(cl *call, g *guest) (any, error) {
	ids, _ := cl.p.str("idlist")
	p := params{"delete": ids}
	if cl.p.bool("force") {
		p["force"] = true
	}
	if err := cl.c.st.checkUpdate(g, p); err != nil {
		return nil, err
	}
	sub := *cl
	sub.p = p
	if err := sub.checkConfigPerms(g.vmid); err != nil {
		return nil, err
	}
	return nil, cl.c.st.applyConfig(g, p, &sub)
}

// hQemuMoveDisk moves a disk to another storage (copying it, as a full clone does; the
// source becomes unusedN unless delete=1) or, with target-vmid, reassigns it to another
// guest on the node.
func hQemuMoveDisk(cl *call, g *guest) (any, error) {
	c := cl.c
	if err := c.st.checkUpdate(g, cl.p); err != nil {
		return nil, err
	}
	disk, _ := cl.p.str("disk")
	storageID, hasStorage := cl.p.str("storage")
	target, hasTarget := cl.p.int("target-vmid")
	switch {
	case hasStorage && hasTarget:
		return nil, paramError("storage", "either set 'storage' or 'target-vmid', but not both")
	case !hasStorage && !hasTarget:
		return nil, paramError("storage", "either set storage or target-vmid")
	}
	cur, ok := g.conf[disk].(string)
	if !ok {
		return nil, errorf(http.StatusInternalServerError, "disk '%s' does not exist", disk)
	}
	if isDiskKey(disk) && isCDROM(cur) {
		return nil, errorf(http.StatusInternalServerError, "you can't move a cdrom")
	}
	volid := parseProperty(cur).first
	if strings.HasPrefix(disk, "unused") {
		volid = cur
	}
	sv := c.st.findVolume(g.node, volid)
	if sv == nil {
		return nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", volid)
	}
	if hasTarget {
		return c.st.reassignDisk(cl, g, disk, int(target), sv)
	}
	sd := c.st.storage(storageID)
	if sd == nil {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", storageID)
	}
	if !sd.hasContent("images") {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support content-type 'images'", storageID)
	}
	if err := cl.require("/storage/"+sd.id, "Datastore.AllocateSpace"); err != nil {
		return nil, err
	}
	format := cl.p.strOr("format", "")
	if sd.typ == "lvmthin" && format != "" && format != "raw" {
		return nil, errorf(http.StatusInternalServerError, "unsupported format '%s'", format)
	}
	if sd.id == sv.storage && (format == "" || format == sv.format) {
		return nil, errorf(http.StatusInternalServerError, "you can't move to the same storage with same format")
	}
	del := cl.p.bool("delete")
	g.conf["lock"] = "disk"
	gib := float64(sv.size) / float64(1<<30)
	t := c.st.runTask(g.node, "qmmove", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, gib), func(t *task) error {
		delete(g.conf, "lock")
		now, _ := g.conf[disk].(string)
		if now != cur {
			return fmt.Errorf("disk '%s' changed during the move", disk)
		}
		n := c.st.nextDiskName(g.node, sd.id, g.vmid, nil)
		newID, fmtDefault := diskVolid(sd, g.vmid, n, "vm")
		if format != "" && sd.typ != "lvmthin" && format != fmtDefault {
			newID = strings.TrimSuffix(newID, "."+fmtDefault) + "." + format
			fmtDefault = format
		}
		c.st.addVolume(g.node, &volume{volid: newID, storage: sd.id, content: "images", format: fmtDefault, size: sv.size, vmid: g.vmid, src: sv})
		if strings.HasPrefix(disk, "unused") {
			g.conf[disk] = newID
		} else {
			pr := parseProperty(cur)
			pr.first = newID
			g.conf[disk] = pr.String()
		}
		t.log = append(t.log, fmt.Sprintf("moving disk '%s' (%s) to '%s'", volid, disk, newID))
		if del {
			c.st.removeVolume(g.node, volid)
		} else {
			unusedAdd(g.conf, volid)
		}
		return nil
	})
	return t.upid, nil
}

// reassignDisk moves a disk to another guest of the node, renaming its volume to the
// target's ("vm-101-disk-0" -> "vm-102-disk-1").
func (st *state) reassignDisk(cl *call, g *guest, disk string, target int, sv *volume) (any, error) {
	c := st.c
	tg, err := st.guestOn(g.node, target)
	if err != nil {
		return nil, err
	}
	if err := cl.require(fmt.Sprintf("/vms/%d", target), "VM.Config.Disk"); err != nil {
		return nil, err
	}
	if target == g.vmid {
		return nil, paramError("target-vmid", "can't move disk to the same VM")
	}
	if err := tg.checkLock(); err != nil {
		return nil, err
	}
	if d, ok := cl.p.str("target-digest"); ok && d != tg.digest() {
		return nil, errorf(http.StatusInternalServerError, errDigest)
	}
	targetDisk := cl.p.strOr("target-disk", disk)
	if _, used := tg.conf[targetDisk]; used {
		return nil, errorf(http.StatusInternalServerError, "target drive '%s' is already in use", targetDisk)
	}
	if !strings.Contains(sv.volid, fmt.Sprintf("vm-%d-disk-", g.vmid)) {
		return nil, errorf(http.StatusInternalServerError, "can't reassign volume '%s': not a disk of VM %d", sv.volid, g.vmid)
	}
	cur := g.conf[disk].(string)
	t := c.st.runTask(g.node, "qmmove", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), func(t *task) error {
		if now, _ := g.conf[disk].(string); now != cur {
			return fmt.Errorf("disk '%s' changed during the move", disk)
		}
		if _, used := tg.conf[targetDisk]; used {
			return fmt.Errorf("target drive '%s' is already in use", targetDisk)
		}
		sd := st.storage(sv.storage)
		newID, _ := diskVolid(sd, target, st.nextDiskName(g.node, sd.id, target, nil), "vm")
		if sd.typ != "lvmthin" && sv.format != "qcow2" {
			newID = strings.TrimSuffix(newID, ".qcow2") + "." + sv.format
		}
		old := sv.volid
		sv.volid, sv.vmid = newID, target
		st.moveVolume(g.node, old, g.node, sv)
		delete(g.conf, disk)
		value := newID
		if !strings.HasPrefix(disk, "unused") {
			pr := parseProperty(cur)
			pr.first = newID
			value = pr.String()
		}
		tg.conf[targetDisk] = value
		t.log = append(t.log, fmt.Sprintf("reassigning disk '%s' (%s) to VM %d as '%s'", old, disk, target, targetDisk))
		return nil
	})
	return t.upid, nil
}
