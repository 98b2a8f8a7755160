//go:build linux

package simnet_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/pvesim/simnet"
)

// A guest's first start runs its cloud-init user-data (a multipart one, as
// flexplane writes it): its write_files land under the guest's root, an
// absolute path such as /etc/passwd too (the host's file is untouched), its
// script part and its runcmd run inside the guest's namespace with that root
// as their working directory, so a server runcmd starts there answers another
// guest; stopping the guest kills it.
func TestCloudInitRunsAtFirstStart(t *testing.T) {
	t.Parallel()
	nettest.NeedRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("no python3 to serve from the guest: make python3 installs it (make test does)")
	}
	p, err := simnet.New(simnet.Config{Prefix: fmt.Sprintf("fpc%d", time.Now().UnixNano()%1e9)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	sim, c := pvetest.Start(t, pvesim.Config{Cluster: "lab", Nodes: 2, DataPlane: p, FileRoot: t.TempDir()}, token)
	pvetest.EnableSnippets(t, c)
	red, err := network.Create(ctx(t), c, network.Spec{VDC: "red", Name: "main", CIDR: "10.1.0.0/24", Gateway: "10.1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	userData := "Content-Type: multipart/mixed; boundary=\"b\"\nMIME-Version: 1.0\n\n" +
		"--b\r\nContent-Type: text/cloud-config\r\n\r\n#cloud-config\nhostname: web\n" +
		"write_files:\n  - path: /etc/passwd\n    content: not the host's\n" +
		"  - path: /srv/hello.txt\n    encoding: b64\n    content: " + base64.StdEncoding.EncodeToString([]byte("hello from cloud-init")) + "\n" +
		"  - path: /srv/serve.py\n    permissions: '0600'\n    content: |\n" + nettest.Indent(nettest.FileServerPy, 6) + "\n" +
		"\r\n--b\r\nContent-Type: text/x-shellscript\r\n\r\n#!/bin/sh\necho script ran > script.out\n" +
		"\r\n--b\r\nContent-Type: text/cloud-config\r\nMerge-Type: list(append)+dict(no_replace,recurse_list)+str()\r\n\r\n#cloud-config\n" +
		"runcmd:\n  - python3 srv/serve.py >/dev/null 2>&1 &\n  - echo $! > srv/server.pid\n" +
		"\r\n--b--\r\n"
	snippets := filepath.Join(sim.NodeRoot("pve1"), "var/lib/vz/snippets")
	if err := os.MkdirAll(snippets, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snippets, "web.yaml"), []byte(userData), 0o644); err != nil {
		t.Fatal(err)
	}
	task(t, c, "/nodes/pve1/qemu", map[string]any{"vmid": 101, "name": "web", "cicustom": "user=local:snippets/web.yaml",
		"net0": "virtio=BC:24:11:00:00:65,bridge=" + red.VNet, "ipconfig0": "ip=10.1.0.11/24,gw=10.1.0.1"})
	task(t, c, "/nodes/pve1/qemu/101/status/start", nil)
	vmtest.BareGuest(t, c, "pve2", 102, red.VNet, "10.1.0.12", "10.1.0.1")

	if got := nettest.WaitReach(t, p.GuestNS(102), "10.1.0.11:7100", 30*time.Second); got != "hello from cloud-init" {
		t.Fatalf("the guest's server answered %q", got)
	}
	root := sim.GuestRoot("pve1", 101)
	if b, err := os.ReadFile(filepath.Join(root, "etc/passwd")); err != nil || string(b) != "not the host's" {
		t.Errorf("the guest's /etc/passwd: %q %v", b, err)
	}
	if b, _ := os.ReadFile("/etc/passwd"); string(b) != string(hostPasswd) {
		t.Errorf("the host's /etc/passwd changed")
	}
	if fi, err := os.Stat(filepath.Join(root, "srv/serve.py")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("srv/serve.py: %v %v, want mode 0600", fi, err)
	}
	poll.True(t, 10*time.Second, "the script part's output", func() bool {
		b, _ := os.ReadFile(filepath.Join(root, "script.out"))
		return string(b) == "script ran\n"
	})
	b, err := os.ReadFile(filepath.Join(root, "srv/server.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == 0 {
		t.Fatalf("server.pid: %q %v", b, err)
	}

	// Stopping the guest kills what its runcmd started.
	power(t, c, "pve1", 101, "stop")
	poll.True(t, 10*time.Second, "the guest's server to end with it", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil
	})
	// Started again, it does not run its user-data again (once per instance).
	if err := os.Remove(filepath.Join(root, "script.out")); err != nil {
		t.Fatal(err)
	}
	power(t, c, "pve1", 101, "start")
	nettest.WaitNS(t, p.GuestNS(101), true, 10*time.Second)
	if got := nettest.Reach(p.GuestNS(102), "10.1.0.11:7100", 2*time.Second); got != "" {
		t.Errorf("a second start ran the user-data again: %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "script.out")); err == nil {
		t.Errorf("a second start ran the script again")
	}
}

// task runs a POST of c and waits for its task.
func task(t *testing.T, c *proxmox.Client, path string, body map[string]any) {
	t.Helper()
	var upid proxmox.UPID
	if err := c.Post(ctx(t), path, body, &upid); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := proxmox.NewTask(upid, c).Wait(ctx(t), 20*time.Millisecond, 30*time.Second); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
