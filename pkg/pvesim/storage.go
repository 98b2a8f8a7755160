package pvesim

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

func (st *state) storageStatus(n *node, s *storageDef) map[string]any {
	total := st.c.cfg.StorageSize
	used := st.usedOn(n.name, s.id)
	if used > total {
		used = total
	}
	e := map[string]any{
		"storage":       s.id,
		"type":          s.typ,
		"content":       joinContent(s.content),
		"shared":        boolInt(s.shared),
		"active":        1,
		"enabled":       1,
		"total":         total,
		"used":          used,
		"avail":         total - used,
		"used_fraction": float64(used) / float64(total),
		"status":        "available",
	}
	return e
}

func (cl *call) storageOn() (*storageDef, error) {
	id := cl.vars["storage"]
	s := cl.c.st.storage(id)
	if s == nil {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", id)
	}
	return s, nil
}

func hNodeStorageList(cl *call) (any, error) {
	c := cl.c
	n := c.st.nodes[cl.vars["node"]]
	content, _ := cl.p.str("content")
	only, _ := cl.p.str("storage")
	out := []map[string]any{}
	for _, s := range c.st.storages {
		if only != "" && s.id != only {
			continue
		}
		if content != "" {
			ok := true
			for _, ct := range splitList(content) {
				ok = ok && s.hasContent(ct)
			}
			if !ok {
				continue
			}
		}
		e := c.st.storageStatus(n, s)
		delete(e, "status")
		out = append(out, e)
	}
	return out, nil
}

// storageSubdirs is the directory index of an existing storage.
func storageSubdirs() handlerFunc {
	idx := subdirs("subdir", "content", "download-url", "file-restore", "identity", "import-metadata", "prunebackups", "rrd", "rrddata", "status", "upload")
	return func(cl *call) (any, error) {
		if _, err := cl.storageOn(); err != nil {
			return nil, err
		}
		return idx(cl)
	}
}

func hNodeStorageStatus(cl *call) (any, error) {
	c := cl.c
	s, err := cl.storageOn()
	if err != nil {
		return nil, err
	}
	e := c.st.storageStatus(c.st.nodes[cl.vars["node"]], s)
	delete(e, "status")
	delete(e, "used_fraction")
	return e, nil
}

func volumeJSON(v *volume) map[string]any {
	e := map[string]any{
		"volid":   v.volid,
		"content": v.content,
		"format":  v.format,
		"size":    v.size,
		"ctime":   v.ctime,
	}
	if v.vmid != 0 {
		e["vmid"] = v.vmid
	}
	if v.content == "images" {
		e["used"] = v.size / 8
	}
	if v.parent != "" {
		_, base, _ := strings.Cut(v.parent, ":")
		e["parent"] = base
	}
	if v.notes != "" {
		e["notes"] = v.notes
	}
	if v.format == "pbs-vm" {
		// PBS lists a snapshot's comment, the first line of its notes
		// (the volume's own GET has them all), and its guest type.
		e["notes"], _, _ = strings.Cut(v.notes, "\n")
		if v.notes == "" {
			delete(e, "notes")
		}
		e["subtype"] = "qemu"
	}
	if v.protected {
		e["protected"] = 1
	}
	return e
}

func hStorageContent(cl *call) (any, error) {
	c := cl.c
	s, err := cl.storageOn()
	if err != nil {
		return nil, err
	}
	content, _ := cl.p.str("content")
	vmid, hasVMID := cl.p.int("vmid")
	vols := c.st.volumesOn(cl.vars["node"], s.id)
	ids := sortedKeys(vols)
	out := []map[string]any{}
	for _, id := range ids {
		v := vols[id]
		if content != "" && v.content != content {
			continue
		}
		if hasVMID && int64(v.vmid) != vmid {
			continue
		}
		out = append(out, volumeJSON(v))
	}
	return out, nil
}

// volume resolves the {storage} and {volume} of a content path; {volume} is a full
// volid or a name on the storage.
func (cl *call) volume() (*storageDef, *volume, error) {
	s, err := cl.storageOn()
	if err != nil {
		return nil, nil, err
	}
	volid := cl.vars["volume"]
	if !strings.Contains(volid, ":") {
		volid = s.id + ":" + volid
	}
	v := cl.c.st.volumesOn(cl.vars["node"], s.id)[volid]
	if v == nil {
		return nil, nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", volid)
	}
	return s, v, nil
}

func hStorageVolumeGet(cl *call) (any, error) {
	s, v, err := cl.volume()
	if err != nil {
		return nil, err
	}
	_, name, _ := strings.Cut(v.volid, ":")
	path := s.path + "/" + name
	if s.typ == "lvmthin" {
		path = "/dev/pve/" + name
	}
	if v.file != "" && v.content == "images" {
		path = v.file // the bytes are there (Config.DiskDir)
	}
	return map[string]any{
		"path": path, "size": v.size, "used": v.size, "format": v.format,
		"notes": v.notes, "protected": boolInt(v.protected),
	}, nil
}

func hStorageVolumeDelete(cl *call) (any, error) {
	c := cl.c
	_, v, err := cl.volume()
	if err != nil {
		return nil, err
	}
	node, volid := cl.vars["node"], v.volid
	if v.protected {
		return nil, errorf(http.StatusInternalServerError, "volume '%s' is protected", volid)
	}
	if v.vmid != 0 {
		if g := c.st.guests[v.vmid]; g != nil {
			for _, used := range g.volumes() {
				if used == volid {
					return nil, errorf(http.StatusInternalServerError, "unable to delete volume '%s' - volume is still in use by VM %d", volid, v.vmid)
				}
			}
		}
	}
	// The task id is the storage, or "VMID@storage" for a guest's volume, as
	// PVE::API2::Storage::Content's delete names its worker (a UPID holds no ':').
	id := v.storage
	if v.vmid != 0 {
		id = fmt.Sprintf("%d@%s", v.vmid, v.storage)
	}
	t := c.st.runTask(node, "imgdel", id, cl.user, c.taskDuration(0, 0), func(*task) error {
		c.st.removeVolume(node, volid)
		return nil
	})
	return t.upid, nil
}

var contentExt = map[string]*regexp.Regexp{
	"iso":    regexp.MustCompile(`^[^/\s]+\.(iso|img)$`),
	"vztmpl": regexp.MustCompile(`^[^/\s]+\.tar\.(gz|xz|zst|bz2)$`),
	"import": regexp.MustCompile(`^[^/\s]+\.(ova|ovf|qcow2|raw|vmdk|img)$`),
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "md5":
		return md5.New()
	case "sha1":
		return sha1.New()
	case "sha224":
		return sha256.New224()
	case "sha256":
		return sha256.New()
	case "sha384":
		return sha512.New384()
	case "sha512":
		return sha512.New()
	}
	return nil
}

// checksum is the hash a download or upload is verified with and the expected sum; nil
// without checksum parameters.
func (cl *call) checksum() (hash.Hash, string, error) {
	checksum, hasSum := cl.p.str("checksum")
	algo, hasAlgo := cl.p.str("checksum-algorithm")
	if hasSum && !hasAlgo {
		return nil, "", paramError("checksum-algorithm", "missing.")
	}
	if hasAlgo && !hasSum {
		return nil, "", paramError("checksum", "missing.")
	}
	if !hasAlgo {
		return nil, "", nil
	}
	h := newHash(algo)
	if h == nil {
		return nil, "", paramError("checksum-algorithm", "value '"+algo+"' does not have a value in the enumeration 'md5, sha1, sha224, sha256, sha384, sha512'")
	}
	return h, checksum, nil
}

func volumeFormat(content, filename string) string {
	switch content {
	case "iso":
		return "iso"
	case "vztmpl":
		switch {
		case strings.HasSuffix(filename, ".zst"):
			return "tzst"
		case strings.HasSuffix(filename, ".xz"):
			return "txz"
		}
		return "tgz"
	}
	if i := strings.LastIndex(filename, "."); i >= 0 {
		return filename[i+1:]
	}
	return "raw"
}

// hDownloadURL really downloads the URL in a task, verifies the checksum and stores the
// volume; a wrong checksum fails the task.
func hDownloadURL(cl *call) (any, error) {
	c := cl.c
	s, err := cl.storageOn()
	if err != nil {
		return nil, err
	}
	node := cl.vars["node"]
	content, _ := cl.p.str("content")
	filename, _ := cl.p.str("filename")
	rawURL, _ := cl.p.str("url")
	verify := true
	if cl.p.has("verify-certificates") {
		verify = cl.p.bool("verify-certificates")
	}
	if !s.hasContent(content) {
		return nil, paramError("content", fmt.Sprintf("storage '%s' does not support '%s' content", s.id, content))
	}
	re := contentExt[content]
	if re == nil {
		return nil, paramError("content", fmt.Sprintf("content type '%s' not supported for download", content))
	}
	if !re.MatchString(filename) {
		return nil, paramError("filename", "wrong file extension")
	}
	h, checksum, err := cl.checksum()
	if err != nil {
		return nil, err
	}
	hasSum := h != nil
	if !strings.HasPrefix(rawURL, "http://") && !strings.HasPrefix(rawURL, "https://") {
		return nil, paramError("url", "invalid format - only http and https URLs are allowed")
	}
	volid := fmt.Sprintf("%s:%s/%s", s.id, content, filename)
	dir := contentDirs[content]
	t := c.st.newTask(node, "download", filename, cl.user)
	t.log = append(t.log, fmt.Sprintf("downloading %s to %s/%s/%s", rawURL, s.path, dir, filename))
	client := c.downloadClient(verify)
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		size, sum, err := fetch(c, client, rawURL, h)
		c.mu.Lock()
		defer c.mu.Unlock()
		defer c.markDirty()
		if !t.running {
			return
		}
		if err == nil && hasSum && !strings.EqualFold(sum, checksum) {
			err = fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", sum, strings.ToLower(checksum))
		}
		if err == nil && c.st.findVolume(node, volid) != nil {
			err = fmt.Errorf("refusing to override existing file '%s/%s/%s'", s.path, dir, filename)
		}
		var path string
		if err == nil {
			if hasSum {
				t.log = append(t.log, "calculating checksum...OK, checksum verified")
			}
			if path, err = c.st.placeFile(node, s, content, filename, "", size); err != nil {
				err = fmt.Errorf("download of '%s' failed: %v", rawURL, err)
			}
		}
		if err == nil {
			c.st.addVolume(node, &volume{volid: volid, storage: s.id, content: content, format: volumeFormat(content, filename), size: size, file: path})
			t.log = append(t.log, fmt.Sprintf("download of '%s' to '%s/%s/%s' finished", rawURL, s.path, dir, filename))
		}
		t.finish(err)
	}()
	return t.upid, nil
}

// contentDirs are the directories of a file storage that hold each content kept as
// files, as Proxmox lays them out.
var contentDirs = map[string]string{"iso": "template/iso", "vztmpl": "template/cache", "import": "import", "snippets": "snippets"}

// hUpload stores a file sent as multipart/form-data (ISO images, container templates,
// import sources) in an imgcopy task, checking the checksum if one is given.
func hUpload(cl *call) (any, error) {
	c := cl.c
	s, err := cl.storageOn()
	if err != nil {
		return nil, err
	}
	node := cl.vars["node"]
	content, _ := cl.p.str("content")
	filename, _ := cl.p.str("filename")
	if s.path == "" {
		return nil, errorf(http.StatusInternalServerError, "can't upload to storage type '%s'", s.typ)
	}
	if !contentExt[content].MatchString(filename) {
		return nil, paramError("filename", "wrong file extension")
	}
	if !s.hasContent(content) {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support '%s' content", s.id, content)
	}
	h, checksum, err := cl.checksum()
	if err != nil {
		return nil, err
	}
	file := cl.file
	if file == nil {
		return nil, errorf(http.StatusBadRequest, "upload without a file")
	}
	sum := ""
	if h != nil {
		algo, _ := cl.p.str("checksum-algorithm")
		if sum, err = file.sum(algo); err != nil {
			return nil, errorf(http.StatusInternalServerError, "%v", err)
		}
	}
	// The spooled file becomes the volume's (or is deleted when the task fails):
	// the bytes are never held in memory.
	file.kept = true
	volid := fmt.Sprintf("%s:%s/%s", s.id, content, filename)
	dest := fmt.Sprintf("%s/%s/%s", s.path, contentDirs[content], filename)
	avail := c.cfg.StorageSize - c.st.usedOn(node, s.id)
	t := c.st.runTask(node, "imgcopy", "", cl.user, c.taskDuration(0, float64(file.size)/float64(1<<30)), func(t *task) (err error) {
		defer func() {
			if err != nil {
				_ = os.Remove(file.path)
			}
		}()
		t.log = append(t.log, "starting file import from: /var/tmp/pveupload-"+filename, "target node: "+node,
			"target file: "+dest, fmt.Sprintf("file size is: %d", file.size))
		if h != nil {
			if !strings.EqualFold(sum, checksum) {
				return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", sum, strings.ToLower(checksum))
			}
			t.log = append(t.log, "calculating checksum of uploaded file...OK, checksum verified")
		}
		if c.st.findVolume(node, volid) != nil {
			return fmt.Errorf("refusing to override existing file '%s'", dest)
		}
		if file.size > avail {
			return fmt.Errorf("copy failed: error writing '%s': No space left on device", dest)
		}
		// With Config.FileRoot the file moves into the storage's directory.
		path, err := c.st.placeFile(node, s, content, filename, file.path, file.size)
		switch {
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("refusing to override existing file '%s'", dest)
		case err != nil:
			return fmt.Errorf("copy failed: %v", err)
		case path == "":
			path = file.path
		}
		c.st.addVolume(node, &volume{volid: volid, storage: s.id, content: content, format: volumeFormat(content, filename), size: file.size, file: path})
		t.log = append(t.log, "finished file import successfully")
		return nil
	})
	return t.upid, nil
}

func (c *Cluster) downloadClient(verify bool) *http.Client {
	if c.download != nil {
		return c.download
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if !verify {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the caller asked for verify-certificates=0
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Minute}
}

func fetch(c *Cluster, client *http.Client, rawURL string, h hash.Hash) (int64, string, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, "", fmt.Errorf("download failed: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("download failed: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("download failed: %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	var w io.Writer = io.Discard
	if h != nil {
		w = h
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("download failed: %w", err)
	}
	sum := ""
	if h != nil {
		sum = hex.EncodeToString(h.Sum(nil))
	}
	return n, sum, nil
}

// hStorageConfigList is /storage: the cluster's storage definitions.
func hStorageConfigList(cl *call) (any, error) {
	c := cl.c
	typ, _ := cl.p.str("type")
	out := []map[string]any{}
	for _, s := range c.st.storages {
		if typ == "" || s.typ == typ {
			out = append(out, c.st.storageConfig(s))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["storage"].(string) < out[j]["storage"].(string) })
	return out, nil
}

// storageCfgDigest is the SHA-1 of storage.cfg as the simulated cluster would write it.
func (st *state) storageCfgDigest() string {
	var b strings.Builder
	for _, s := range st.storages {
		fmt.Fprintf(&b, "%s: %s\n\tcontent %s\n", s.typ, s.id, joinContent(s.content))
		if s.path != "" {
			fmt.Fprintf(&b, "\tpath %s\n", s.path)
		}
		if p := s.pbs; p != nil {
			fmt.Fprintf(&b, "\tserver %s\n\tdatastore %s\n\tport %d\n\tnamespace %s\n\tusername %s\n\tfingerprint %s\n",
				p.server, p.datastore, p.port, p.namespace, p.username, p.fingerprint)
		}
		b.WriteString("\n")
	}
	sum := sha1.Sum([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

func (st *state) storageConfig(s *storageDef) map[string]any {
	e := map[string]any{"storage": s.id, "type": s.typ, "content": joinContent(s.content), "digest": st.storageCfgDigest()}
	switch s.typ {
	case "dir":
		e["path"] = s.path
	case "lvmthin":
		e["thinpool"] = "data"
		e["vgname"] = "pve"
	case "nfs":
		e["path"] = s.path
		e["server"] = "10.0.0.250"
		e["export"] = "/export/pve"
		e["shared"] = 1
	case "pbs":
		s.pbs.config(e)
	}
	return e
}

func hStorageConfigGet(cl *call) (any, error) {
	s := cl.c.st.storage(cl.vars["storage"])
	if s == nil {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", cl.vars["storage"])
	}
	return cl.c.st.storageConfig(s), nil
}

// hStorageVolumeUpdate sets a volume's notes or protection flag.
func hStorageVolumeUpdate(cl *call) (any, error) {
	_, v, err := cl.volume()
	if err != nil {
		return nil, err
	}
	if notes, ok := cl.p.str("notes"); ok {
		v.notes = notes
	}
	if cl.p.has("protected") {
		v.protected = cl.p.bool("protected")
	}
	return nil, nil
}

// hStorageAlloc allocates a disk image for a VM ("vm-100-disk-1" or "vm-100-disk-1.qcow2").
func hStorageAlloc(cl *call) (any, error) {
	c := cl.c
	s, err := cl.storageOn()
	if err != nil {
		return nil, err
	}
	if !s.hasContent("images") {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support content-type 'images'", s.id)
	}
	vmid, _ := cl.p.int("vmid")
	name, _ := cl.p.str("filename")
	sizeArg, _ := cl.p.str("size")
	size, ok := parseSize(sizeArg)
	if strings.IndexFunc(sizeArg, func(r rune) bool { return r < '0' || r > '9' }) < 0 {
		size *= 1 << 10 // a plain number is KiB, as in pvesm alloc
	}
	if !ok || size <= 0 {
		return nil, paramError("size", "unable to parse size '"+sizeArg+"'")
	}
	if !strings.HasPrefix(name, fmt.Sprintf("vm-%d-", vmid)) && !strings.HasPrefix(name, fmt.Sprintf("base-%d-", vmid)) {
		return nil, paramError("filename", fmt.Sprintf("name '%s' does not conform to the naming rules for VM %d", name, vmid))
	}
	format := cl.p.strOr("format", "raw")
	volid := s.id + ":" + name
	if s.typ != "lvmthin" {
		if !strings.Contains(name, ".") {
			name += "." + cl.p.strOr("format", "qcow2")
		}
		format = name[strings.LastIndex(name, ".")+1:]
		volid = fmt.Sprintf("%s:%d/%s", s.id, vmid, name)
	}
	node := cl.vars["node"]
	if c.st.findVolume(node, volid) != nil {
		return nil, errorf(http.StatusInternalServerError, "volume '%s' already exists", volid)
	}
	c.st.addVolume(node, &volume{volid: volid, storage: s.id, content: "images", format: format, size: size, vmid: int(vmid)})
	return volid, nil
}

// storageContentTypes are the content types each storage type allows.
var storageContentTypes = map[string][]string{
	"dir":     {"backup", "images", "import", "iso", "rootdir", "snippets", "vztmpl"},
	"nfs":     {"backup", "images", "import", "iso", "rootdir", "snippets", "vztmpl"},
	"lvmthin": {"images", "rootdir"},
}

// hStorageConfigUpdate is PUT /storage/{storage}: of a storage's options,
// its content types are simulated (snippets, say, enabled for cicustom).
func hStorageConfigUpdate(cl *call) (any, error) {
	c := cl.c
	s := c.st.storage(cl.vars["storage"])
	if s == nil {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", cl.vars["storage"])
	}
	if s.pbs != nil {
		return nil, errorf(http.StatusNotImplemented, "changing a storage of type 'pbs' is not simulated")
	}
	for k := range cl.p {
		if k != "content" && k != "digest" && k != "storage" {
			return nil, errorf(http.StatusNotImplemented, "changing a storage's '%s' is not simulated", k)
		}
	}
	if d, ok := cl.p.str("digest"); ok && d != c.st.storageCfgDigest() {
		return nil, errorf(http.StatusInternalServerError, "detected modified configuration - file changed by other user? Try again.")
	}
	if content, ok := cl.p.str("content"); ok {
		var list []string
		for _, ct := range splitList(content) {
			if !slices.Contains(storageContentTypes[s.typ], ct) {
				return nil, paramError("content", fmt.Sprintf("storage type '%s' does not support content type '%s'", s.typ, ct))
			}
			if !slices.Contains(list, ct) {
				list = append(list, ct)
			}
		}
		sort.Strings(list)
		s.content = list
		if err := c.makeFileRoots(); err != nil {
			return nil, errorf(http.StatusInternalServerError, "%v", err)
		}
		c.markDirty()
	}
	return map[string]any{"storage": s.id, "type": s.typ}, nil
}
