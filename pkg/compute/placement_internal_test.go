package compute

import (
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

const gib = int64(1) << 30

// host is a 64 GiB, 16-CPU online host with 1 TiB free on local-lvm.
func host(name string, usedGiB, committedGiB int64, vcpus int) hostLoad {
	return hostLoad{Node: name, Online: true, MaxMem: 64 * gib, MaxCPU: 16,
		UsedMem: usedGiB * gib, CommittedMem: committedGiB * gib, VCPUs: vcpus,
		Storages: map[string]storeLoad{"local-lvm": {Available: true, Free: 1024 * gib}}}
}

var (
	oneToOne = ratios{Memory: 1, CPU: 1}
	small    = demand{MemBytes: 2 * gib, VCPUs: 2, DiskBytes: 10 * gib, Storage: "local-lvm"}
)

func TestFitRefusesWhatCannotHold(t *testing.T) {
	t.Parallel()
	offline := host("a", 0, 0, 0)
	offline.Online = false
	noStorage := host("a", 0, 0, 0)
	noStorage.Storages = map[string]storeLoad{"local-lvm": {Available: false, Free: 1024 * gib}}
	full := host("a", 0, 0, 0)
	full.Storages = map[string]storeLoad{"local-lvm": {Available: true, Free: 9 * gib}}
	for _, c := range []struct {
		name  string
		h     hostLoad
		maint bool
		r     ratios
		why   string
	}{
		{"offline", offline, false, oneToOne, "offline"},
		{"maintenance", host("a", 0, 0, 0), true, oneToOne, "in maintenance"},
		{"no storage", noStorage, false, oneToOne, "storage local-lvm is not available"},
		{"storage of another name", host("a", 0, 0, 0), false, oneToOne, ""},
		{"disk full", full, false, oneToOne, "not enough free space on storage local-lvm"},
		{"memory", host("a", 63, 63, 0), false, oneToOne, "not enough free memory"},
		// The running guests' memory in use counts, not their configured memory.
		{"memory in use", host("a", 10, 63, 0), false, oneToOne, ""},
		{"memory overcommitted", host("a", 63, 63, 0), false, ratios{Memory: 1.5, CPU: 1}, ""},
		{"vcpus", host("a", 0, 0, 15), false, oneToOne, "not enough free vCPUs"},
		{"vcpus overcommitted", host("a", 0, 0, 15), false, ratios{Memory: 1, CPU: 4}, ""},
	} {
		d := small
		if c.name == "storage of another name" {
			d.Storage = "shared"
			c.why = "storage shared is not available"
		}
		_, why, _ := fit(c.h, d, c.r, c.maint)
		if (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
			t.Errorf("%s: fit says %q, want %q", c.name, why, c.why)
		}
	}
}

func TestFitScoreIsTheFullerResourceAfterPlacing(t *testing.T) {
	t.Parallel()
	// 30 of 64 GiB committed + 2 = 0.5; 6 of 16 vCPUs + 2 = 0.5 at 1:1, 0.125 at 4:1.
	if s, why, _ := fit(host("a", 0, 30, 6), small, oneToOne, false); why != "" || s != 0.5 {
		t.Errorf("score %v (%q), want 0.5", s, why)
	}
	if s, _, _ := fit(host("a", 0, 14, 6), small, ratios{Memory: 1, CPU: 4}, false); s != 0.25 {
		t.Errorf("score %v, want 0.25 (memory)", s)
	}
	if s, _, _ := fit(host("a", 0, 0, 14), small, oneToOne, false); s != 1 {
		t.Errorf("score %v, want 1 (vCPUs)", s)
	}
}

func TestChooseLeastLoadedThenByName(t *testing.T) {
	t.Parallel()
	off := host("a", 0, 0, 0)
	off.Online = false
	hosts := []hostLoad{host("d", 0, 20, 0), off, host("c", 0, 10, 0), host("b", 0, 10, 0), host("e", 63, 63, 0)}
	vs, ok := choose(hosts, small, oneToOne, map[string]bool{"c": true})
	if !ok {
		t.Fatal("no candidate")
	}
	var order []string
	for _, v := range vs {
		order = append(order, v.Node+":"+v.Why)
	}
	want := "b: d: a:offline c:in maintenance e:not enough free memory"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("verdicts %q, want %q", got, want)
	}
	if _, ok := choose([]hostLoad{off}, small, oneToOne, nil); ok {
		t.Error("an offline host was chosen")
	}
	if _, ok := choose(nil, small, oneToOne, nil); ok {
		t.Error("a zone without hosts had a candidate")
	}
}

func TestLoadsCountsProxmoxFigures(t *testing.T) {
	t.Parallel()
	rs := []pveapi.Resource{
		{Type: "node", Node: "pve1", Status: "online", MaxMem: 64 * gib, MaxCPU: 16},
		{Type: "node", Node: "pve2", Status: "offline", MaxMem: 64 * gib, MaxCPU: 16},
		{Type: "qemu", Node: "pve1", VMID: 100, Status: "running", Mem: 1 * gib, MaxMem: 4 * gib, MaxCPU: 2},
		{Type: "qemu", Node: "pve1", VMID: 101, Status: "stopped", MaxMem: 2 * gib, MaxCPU: 1},
		{Type: "qemu", Node: "pve1", VMID: 102, Template: 1, MaxMem: 8 * gib, MaxCPU: 8},
		{Type: "qemu", Node: "pve1", VMID: 103, Status: "stopped", MaxMem: 16 * gib, MaxCPU: 8}, // held
		{Type: "storage", Node: "pve1", Storage: "local-lvm", Status: "available", MaxDisk: 100 * gib, Disk: 40 * gib},
		{Type: "storage", Node: "pve1", Storage: "shared", Status: "available", Shared: 1, MaxDisk: 10 * gib, Disk: 1 * gib},
		{Type: "storage", Node: "pve2", Storage: "local-lvm", Status: "unknown"},
	}
	hs := loads(rs, map[int]bool{103: true})
	h := hs["pve1"]
	if !h.Online || h.UsedMem != 3*gib || h.CommittedMem != 6*gib || h.VCPUs != 3 || h.Guests != 2 {
		t.Errorf("pve1 %+v: want online, 3 GiB used, 6 committed, 3 vCPUs, 2 guests", h)
	}
	if st := h.Storages["local-lvm"]; !st.Available || st.Shared || st.Free != 60*gib {
		t.Errorf("pve1 local-lvm %+v", st)
	}
	if st := h.Storages["shared"]; !st.Shared || st.Free != 9*gib {
		t.Errorf("pve1 shared %+v", st)
	}
	if h := hs["pve2"]; h.Online || h.Storages["local-lvm"].Available {
		t.Errorf("pve2 %+v: want offline, its storage unavailable", h)
	}
}

// TestCapacityMessageNamesNoHost: a tenant learns why, not which hosts.
func TestCapacityMessageNamesNoHost(t *testing.T) {
	t.Parallel()
	msg := capacityMessage("fra1", []verdict{{Node: "pve1", Why: "offline"}, {Node: "pve2", Why: "not enough free memory", Detail: "1 MiB free"},
		{Node: "pve3", Why: "not enough free memory"}})
	want := "no host of zone fra1 can take the VM (2 hosts: not enough free memory; 1 host: offline)"
	if msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
}
