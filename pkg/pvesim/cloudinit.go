package pvesim

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Cloud-init at a guest's first start. With a data plane that can run
// processes in a guest (GuestExec, simnet's Plane) and Config.FileRoot,
// the simulator does at a guest's first start (the first start for its
// cloud-init instance-id) what cloud-init would do with the user-data the
// guest gets (cloudinit/dump: the cicustom snippet, else the generated
// data): its write_files are written under the guest's root directory
// (GuestRoot, never the host's own paths), then its scripts (a "#!"
// user-data, or a multipart user-data's text/x-shellscript parts) and
// its runcmd (one script, as cloud-init writes it) run, one after
// another, inside the guest's network namespace with the guest's root
// as their working directory and their output appended to
// var/log/cloud-init-output.log there. A command that keeps running (a
// server started in the background) runs until the guest's namespace
// goes: the data plane kills the process group of every command it
// started in a guest when the guest stops, is deleted or moves to
// another node (a real guest's processes end with it too); a guest
// started again does not run its user-data again, as cloud-init runs it
// once per instance (Config.StateFile keeps that it ran it; what it
// started does not outlive the simulator's process).

// GuestExec is a DataPlane that can run processes inside a running
// guest's network namespace (simnet's Plane): with one, a guest's first
// start runs its cloud-init user-data.
type GuestExec interface {
	// StartInGuest starts cmd inside the network namespace of the running
	// guest vmid, in a process group of its own. The data plane kills
	// that group when the guest's namespace goes; the caller waits for
	// cmd.
	StartInGuest(vmid int, cmd *exec.Cmd) error
}

// GuestRoot is the directory the simulator keeps as guest vmid's root file
// system, first started on node (Config.FileRoot/<node>/guests/<vmid>/rootfs;
// "" without FileRoot): what its cloud-init writes goes there.
func (c *Cluster) GuestRoot(node string, vmid int) string {
	if c.cfg.FileRoot == "" {
		return ""
	}
	return filepath.Join(c.NodeRoot(node), "guests", strconv.Itoa(vmid), "rootfs")
}

// firstBoot is the cloud-init a guest's start left to run.
type firstBoot struct {
	vmid     int
	node     string
	userData string
}

// noteFirstBoot records, at guest g's start, the cloud-init it has to run
// if this is its first start for its instance-id and the cluster can run
// it. The caller holds mu.
func (st *state) noteFirstBoot(g *guest) {
	c := st.c
	if _, ok := c.cfg.DataPlane.(GuestExec); !ok || c.cfg.FileRoot == "" {
		return
	}
	id, err := st.cloudInitData(g, "meta")
	if err != nil || id == g.ciInstance {
		return
	}
	data, err := st.cloudInitData(g, "user")
	if err != nil {
		c.log.Warn("cloud-init: no user-data", "vmid", g.vmid, "err", err)
		return
	}
	g.ciInstance = id
	st.firstBoots = append(st.firstBoots, firstBoot{vmid: g.vmid, node: g.node, userData: data})
}

// runFirstBoots runs the cloud-init of fbs, each in a goroutine of its
// own, once the data plane has applied a topology in which they run
// (their namespaces exist).
func (c *Cluster) runFirstBoots(fbs []firstBoot) {
	ex, ok := c.cfg.DataPlane.(GuestExec)
	if !ok {
		return
	}
	for _, fb := range fbs {
		c.work.Add(1) // the caller, the data plane loop, is counted in work too
		go func() {
			defer c.work.Done()
			c.runFirstBoot(ex, fb)
		}()
	}
}

// runFirstBoot does what cloud-init does with fb's user-data.
func (c *Cluster) runFirstBoot(ex GuestExec, fb firstBoot) {
	log := c.log.With("vmid", fb.vmid, "node", fb.node)
	var ci cloudInit
	if err := ci.parse([]byte(fb.userData)); err != nil {
		log.Warn("cloud-init: user-data not understood", "err", err)
		return
	}
	rootDir := c.GuestRoot(fb.node, fb.vmid)
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		log.Warn("cloud-init: guest root", "err", err)
		return
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		log.Warn("cloud-init: guest root", "err", err)
		return
	}
	defer root.Close()
	for _, f := range ci.files {
		if err := f.write(root); err != nil {
			log.Warn("cloud-init: write_files", "path", f.Path, "err", err)
		}
	}
	const scripts = "var/lib/cloud/instance/scripts"
	var run []string
	for i, s := range ci.scripts {
		run = append(run, fmt.Sprintf("%s/part-%03d", scripts, i+1))
		if err := writeIn(root, run[i], s, 0o755); err != nil {
			log.Warn("cloud-init: script", "err", err)
			return
		}
	}
	if len(ci.runcmd) > 0 {
		run = append(run, scripts+"/runcmd")
		if err := writeIn(root, scripts+"/runcmd", []byte("#!/bin/sh\n"+strings.Join(ci.runcmd, "\n")+"\n"), 0o755); err != nil {
			log.Warn("cloud-init: runcmd", "err", err)
			return
		}
	}
	if len(run) == 0 {
		return
	}
	if err := root.MkdirAll("var/log", 0o755); err != nil {
		log.Warn("cloud-init: output log", "err", err)
		return
	}
	out, err := root.OpenFile("var/log/cloud-init-output.log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		log.Warn("cloud-init: output log", "err", err)
		return
	}
	defer out.Close()
	for _, name := range run {
		path := filepath.Join(rootDir, name)
		cmd := exec.Command("/bin/sh", path)
		if !strings.HasSuffix(name, "/runcmd") {
			cmd = exec.Command(path) // its own interpreter, from its "#!"
		}
		cmd.Dir, cmd.Stdout, cmd.Stderr = rootDir, out, out
		cmd.Env = append(os.Environ(), "PVESIM_GUEST_ROOT="+rootDir)
		if err := ex.StartInGuest(fb.vmid, cmd); err != nil {
			log.Warn("cloud-init: start", "script", name, "err", err)
			return
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			log.Info("cloud-init: ran", "script", name, "err", err)
		case <-c.ctx.Done():
			// The cluster closes: the script ends now (what it left running
			// in the background ends with the guest's namespace).
			_ = cmd.Process.Kill()
			<-waited
			return
		}
	}
}

// cloudInit is what the simulator does of a user-data: the files to
// write, the scripts and the runcmd lines, in order.
type cloudInit struct {
	files   []writeFile
	scripts [][]byte
	runcmd  []string
}

// cloudConfig is the part of a #cloud-config document the simulator runs.
type cloudConfig struct {
	WriteFiles []writeFile `yaml:"write_files"`
	RunCmd     []any       `yaml:"runcmd"`
}

// writeFile is an entry of write_files.
type writeFile struct {
	Path        string `yaml:"path"`
	Content     string `yaml:"content"`
	Encoding    string `yaml:"encoding"`
	Permissions string `yaml:"permissions"`
	Append      bool   `yaml:"append"`
}

// parse adds what user-data data asks for to ci: a #cloud-config
// document, a "#!" script, or a multipart MIME document of such parts
// (text/cloud-config, text/x-shellscript; the lists of every cloud-config
// part are appended, as the Merge-Type flexplane gives its parts says).
func (ci *cloudInit) parse(data []byte) error {
	switch {
	case bytes.HasPrefix(data, []byte("#cloud-config")):
		return ci.parseConfig(data)
	case bytes.HasPrefix(data, []byte("#!")):
		ci.scripts = append(ci.scripts, data)
		return nil
	}
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		return errors.New("neither #cloud-config, a script nor MIME")
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		return fmt.Errorf("MIME of content type %q", msg.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		body, err := io.ReadAll(io.LimitReader(p, 1<<20))
		if err != nil {
			return err
		}
		if strings.EqualFold(p.Header.Get("Content-Transfer-Encoding"), "base64") {
			if body, err = base64.StdEncoding.DecodeString(string(bytes.Join(bytes.Fields(body), nil))); err != nil {
				return err
			}
		}
		pt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		switch pt {
		case "text/cloud-config":
			err = ci.parseConfig(body)
		case "text/x-shellscript":
			ci.scripts = append(ci.scripts, body)
		default:
			err = ci.parse(body)
		}
		if err != nil {
			return err
		}
	}
}

// parseConfig adds a cloud-config document's write_files and runcmd.
func (ci *cloudInit) parseConfig(data []byte) error {
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return err
	}
	ci.files = append(ci.files, cc.WriteFiles...)
	for _, c := range cc.RunCmd {
		switch c := c.(type) {
		case string:
			ci.runcmd = append(ci.runcmd, c)
		case []any:
			var words []string
			for _, w := range c {
				words = append(words, shellQuote(fmt.Sprint(w)))
			}
			ci.runcmd = append(ci.runcmd, strings.Join(words, " "))
		}
	}
	return nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// write writes f inside root: its path is taken relative to the guest's
// root, whatever it says (an absolute path, "..", a link out of it).
func (f writeFile) write(root *os.Root) error {
	rel := strings.TrimPrefix(filepath.Clean("/"+f.Path), "/")
	if rel == "" {
		return errors.New("no path")
	}
	data := []byte(f.Content)
	var err error
	switch strings.ToLower(f.Encoding) {
	case "", "text/plain":
	case "b64", "base64":
		data, err = base64.StdEncoding.DecodeString(f.Content)
	case "gz", "gzip":
		data, err = gunzip(data)
	case "gz+b64", "gz+base64", "gzip+b64", "gzip+base64":
		if data, err = base64.StdEncoding.DecodeString(f.Content); err == nil {
			data, err = gunzip(data)
		}
	default:
		err = fmt.Errorf("unknown encoding %q", f.Encoding)
	}
	if err != nil {
		return err
	}
	perm := os.FileMode(0o644)
	if f.Permissions != "" {
		p, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			return fmt.Errorf("permissions %q: %w", f.Permissions, err)
		}
		perm = os.FileMode(p) & os.ModePerm
	}
	if !f.Append {
		return writeIn(root, rel, data, perm)
	}
	if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
		return err
	}
	w, err := root.OpenFile(rel, os.O_CREATE|os.O_APPEND|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// writeIn writes data to the file name inside root with mode perm,
// making its directories.
func writeIn(root *os.Root, name string, data []byte, perm os.FileMode) error {
	if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	if err := root.WriteFile(name, data, perm); err != nil {
		return err
	}
	return root.Chmod(name, perm)
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(zr, 64<<20))
}
