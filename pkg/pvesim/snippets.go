package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Snippets and other files. With Config.FileRoot, a file storage's
// directory is a real directory, and its `snippets` content is the files
// of its snippets subdirectory, as on a Proxmox node: whatever writes a
// file there (the flexplane agent; Proxmox's API cannot upload snippets)
// makes a volume <storage>:snippets/<file> (format "snippet") that the
// content listing shows and a VM's cicustom may name; deleting the volume
// removes the file. Its `import` and `iso` content are likewise the files
// of its import/ and template/iso/ subdirectories (the agent writes
// uploads there; the upload endpoint and download-url place their files
// there too). cloudinit/dump answers a VM's cloud-init data: the snippet its
// cicustom names, else what Proxmox would generate.

// NodeRoot is the directory of node's file system (Config.FileRoot/node;
// "" without FileRoot): the agent of node writes its storages' files
// under it.
func (c *Cluster) NodeRoot(node string) string {
	if c.cfg.FileRoot == "" {
		return ""
	}
	return filepath.Join(c.cfg.FileRoot, node)
}

// makeFileRoots creates the nodes' roots and, in each, the path of every
// shared file storage as a link to its one directory.
func (c *Cluster) makeFileRoots() error {
	if c.cfg.FileRoot == "" {
		return nil
	}
	for _, node := range c.nodes {
		for _, s := range c.st.storages {
			if s.path == "" {
				continue
			}
			p := filepath.Join(c.NodeRoot(node), s.path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if !s.shared {
				if err := os.MkdirAll(p, 0o755); err != nil {
					return err
				}
				continue
			}
			dir := filepath.Join(c.cfg.FileRoot, "shared", s.path)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(dir, p); err != nil && !os.IsExist(err) {
				return err
			}
		}
	}
	return nil
}

// fileContents are the contents a file storage keeps as the files of a
// directory under its path (contentDirs) with Config.FileRoot.
var fileContents = []string{"snippets", "import", "iso"}

// contentDir is the directory of storage s's content on node ("" when
// its content is not kept as files there).
func (st *state) contentDir(node string, s *storageDef, content string) string {
	sub := contentDirs[content]
	if st.c.cfg.FileRoot == "" || s.path == "" || !slices.Contains(fileContents, content) || !s.hasContent(content) {
		return ""
	}
	if s.shared {
		return filepath.Join(st.c.cfg.FileRoot, "shared", s.path, sub)
	}
	return filepath.Join(st.c.NodeRoot(node), s.path, sub)
}

// syncFiles makes the volumes of s in m (its volumes on node) of every
// content kept as files (fileContents) the files of its directory: a
// file of the content's extensions (contentExt) is a volume
// <storage>:<content>/<file>, of the format its name says (snippets:
// "snippet"); a volume whose file went is gone. Hidden files (a
// writer's temporary ones) are not volumes. The caller holds mu.
func (st *state) syncFiles(node string, s *storageDef, m map[string]*volume) {
	for _, content := range fileContents {
		dir := st.contentDir(node, s, content)
		if dir == "" {
			continue
		}
		files := map[string]os.FileInfo{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
				continue
			}
			if re := contentExt[content]; re != nil && !re.MatchString(e.Name()) {
				continue
			}
			if fi, err := e.Info(); err == nil {
				files[s.id+":"+content+"/"+e.Name()] = fi
			}
		}
		for id, v := range m {
			if v.content == content && files[id] == nil {
				delete(m, id)
			}
		}
		for id, fi := range files {
			v := m[id]
			if v == nil {
				format := "snippet"
				if content != "snippets" {
					format = volumeFormat(content, fi.Name())
				}
				v = &volume{volid: id, storage: s.id, content: content, format: format, ctime: fi.ModTime().Unix()}
				if !s.shared {
					v.node = node
				}
				m[id] = v
			}
			v.file = filepath.Join(dir, fi.Name())
			v.size = fi.Size()
		}
	}
}

// placeFile makes the file of a new volume <content>/<name> of storage
// s on node, when that content is kept as files: src (a file of the
// cluster's, moved) or, without one, a sparse file of size bytes. It
// refuses an existing file, as Proxmox refuses to override one. It
// returns the file's path ("" when the content is not kept as files).
// The caller holds mu.
func (st *state) placeFile(node string, s *storageDef, content, name, src string, size int64) (string, error) {
	dir := st.contentDir(node, s, content)
	if dir == "" {
		return "", nil
	}
	dest := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if src == "" {
		f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return "", err
		}
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return dest, err
	}
	// A link never replaces a file; across file systems, a copy.
	if err := os.Link(src, dest); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if err := copyNew(src, dest); err != nil {
			return "", err
		}
	}
	_ = os.Chmod(dest, 0o644)
	_ = os.Remove(src)
	return dest, nil
}

// copyNew copies src into dest, a new file.
func copyNew(src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dest)
	}
	return err
}

// snippetVolume resolves the volid of a cicustom entry on node.
func (st *state) snippetVolume(node, volid string) (*volume, error) {
	sid, name, ok := strings.Cut(volid, ":")
	s := st.storage(sid)
	if !ok || s == nil {
		return nil, fmt.Errorf("storage '%s' does not exist", sid)
	}
	if !strings.HasPrefix(name, "snippets/") {
		return nil, fmt.Errorf("%s is not in the snippets directory", volid)
	}
	if !s.hasContent("snippets") {
		return nil, fmt.Errorf("storage '%s' does not support content-type 'snippets'", sid)
	}
	v := st.findVolume(node, volid)
	if v == nil {
		return nil, fmt.Errorf("volume '%s' does not exist", volid)
	}
	return v, nil
}

// cicustomKeys are the parts of a cicustom value.
var cicustomKeys = map[string]bool{"meta": true, "network": true, "user": true, "vendor": true}

// checkCICustom validates a cicustom value for a guest on node: a list
// of <type>=<volid>, each volid a snippet that exists.
func (st *state) checkCICustom(node, value string) error {
	seen := map[string]bool{}
	for part := range strings.SplitSeq(value, ",") {
		k, volid, ok := strings.Cut(part, "=")
		if !ok || !cicustomKeys[k] || volid == "" || seen[k] {
			return paramError("cicustom", fmt.Sprintf("invalid format - format error\ncicustom.%s: property is not defined in schema and the schema does not allow additional properties", part))
		}
		seen[k] = true
		if _, err := st.snippetVolume(node, volid); err != nil {
			return paramError("cicustom", err.Error())
		}
	}
	return nil
}

// hCloudInitDump is GET .../qemu/{vmid}/cloudinit/dump: the guest's
// cloud-init data of a type (user, network, meta).
func hCloudInitDump(cl *call, g *guest) (any, error) {
	typ, _ := cl.p.str("type")
	return cl.c.st.cloudInitData(g, typ)
}

// cloudInitData is guest g's cloud-init data of a type (user, network,
// meta): the snippet its cicustom names for it, else what Proxmox would
// generate. The caller holds mu.
func (st *state) cloudInitData(g *guest, typ string) (string, error) {
	custom := map[string]string{}
	if cc, ok := g.conf["cicustom"].(string); ok {
		for part := range strings.SplitSeq(cc, ",") {
			if k, v, ok := strings.Cut(part, "="); ok {
				custom[k] = v
			}
		}
	}
	if volid := custom[typ]; volid != "" {
		v, err := st.snippetVolume(g.node, volid)
		if err != nil {
			return "", errorf(http.StatusInternalServerError, "%s", err)
		}
		b, err := os.ReadFile(v.file)
		if err != nil {
			return "", errorf(http.StatusInternalServerError, "unable to read '%s': %v", volid, err)
		}
		return string(b), nil
	}
	str := func(k string) string { s, _ := g.conf[k].(string); return s }
	name := str("name")
	if name == "" {
		name = fmt.Sprintf("VM%d", g.vmid)
	}
	var b strings.Builder
	switch typ {
	case "user":
		fmt.Fprintf(&b, "#cloud-config\nhostname: %s\nmanage_etc_hosts: true\nfqdn: %s\n", name, name)
		if u := str("ciuser"); u != "" {
			fmt.Fprintf(&b, "user: %s\n", u)
		}
		if keys := str("sshkeys"); keys != "" {
			b.WriteString("ssh_authorized_keys:\n")
			dec, _ := url.PathUnescape(keys)
			for k := range strings.SplitSeq(dec, "\n") {
				if k = strings.TrimSpace(k); k != "" {
					fmt.Fprintf(&b, "  - %s\n", k)
				}
			}
		}
		b.WriteString("chpasswd:\n  expire: False\nusers:\n  - default\npackage_upgrade: true\n")
	case "network":
		b.WriteString("version: 1\nconfig:\n")
		keys := []string{}
		for k := range g.conf {
			if strings.HasPrefix(k, "net") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			mac := parseProperty(str(k)).get("virtio")
			fmt.Fprintf(&b, "    - type: physical\n      name: eth%s\n      mac_address: '%s'\n", strings.TrimPrefix(k, "net"), strings.ToLower(mac))
			ip := parseProperty(str("ipconfig" + strings.TrimPrefix(k, "net"))).get("ip")
			if ip != "" && ip != "dhcp" {
				fmt.Fprintf(&b, "      subnets:\n      - type: static\n        address: '%s'\n", ip)
			}
		}
	case "meta":
		sum := sha1.Sum([]byte(fmt.Sprintf("%d/%s", g.vmid, str("name"))))
		fmt.Fprintf(&b, "instance-id: %s\n", hex.EncodeToString(sum[:]))
	default:
		return "", paramError("type", "value '"+typ+"' does not have a value in the enumeration 'user, network, meta'")
	}
	return b.String(), nil
}
