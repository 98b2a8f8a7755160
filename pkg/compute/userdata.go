package compute

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A VM's own user-data (CreateInput.UserData) is a #cloud-config document
// or a shell script starting with "#!". Given to Proxmox as cicustom's
// user= snippet it replaces the user-data Proxmox would generate (the
// hostname, the cloud-init user and its SSH keys), so the snippet flexplane
// writes is a multipart MIME document of two parts, which cloud-init merges
// as it merges any parts: first flexplane's #cloud-config (what Proxmox
// would have generated from the VM's name, ciuser and sshkeys), then the
// caller's, a text/cloud-config part whose Merge-Type adds to lists and
// never replaces a key flexplane's part set, or a text/x-shellscript part.
// The network configuration is not part of the user-data: Proxmox keeps
// generating it from ipconfigN (the snippet names only user=).

// MaxUserData bounds a create's user-data.
const MaxUserData = 64 << 10

// userDataMergeType is how cloud-init merges the caller's cloud-config
// part into flexplane's: lists (users, runcmd, write_files,
// ssh_authorized_keys, packages) are appended to, dictionaries merged
// recursively, and a key flexplane's part set (hostname, user) is kept.
const userDataMergeType = "list(append)+dict(no_replace,recurse_list)+str()"

// checkUserData validates a create's user-data for a VM whose cloud-init
// user is user: a #cloud-config document that parses as a YAML mapping
// and keeps user, or a script starting with "#!". Errors are BAD_INPUT on
// userData naming why (a parse error its line).
func checkUserData(data []byte, user string) error {
	if len(data) > MaxUserData {
		return badInput("userData", "user-data is %d bytes, more than %d", len(data), MaxUserData)
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	switch {
	case bytes.HasPrefix(data, []byte("#!")):
		return nil
	case string(bytes.TrimRight(first, " \t\r")) != "#cloud-config":
		return badInput("userData", "user-data must be a #cloud-config document (its first line \"#cloud-config\") or a script starting with \"#!\"")
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return badInput("userData", "user-data is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc == nil {
		return nil // only the header and comments
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return badInput("userData", "a #cloud-config document must be a YAML mapping of cloud-init modules' keys")
	}
	users, ok := m["users"]
	if !ok {
		return nil
	}
	list, ok := users.([]any)
	if !ok {
		return badInput("userData", "users must be a list")
	}
	for i, u := range list {
		name := ""
		switch u := u.(type) {
		case string:
			name = u
		case map[string]any:
			name, _ = u["name"].(string)
		}
		if user != "" && name == user {
			return badInput("userData", "users[%d] is %q, the VM's own cloud-init user, which flexplane creates with the VM's SSH keys; give its keys in sshKeys, or name another user", i, user)
		}
	}
	return nil
}

// mergedUserData is the snippet of a VM's user-data: flexplane's part
// (from the intent: the VM's name, user and SSH keys) and the caller's.
func mergedUserData(in *Intent, data []byte) []byte {
	var own strings.Builder
	fmt.Fprintf(&own, "#cloud-config\nhostname: %s\nfqdn: %s\nmanage_etc_hosts: true\n", in.Name, in.Name)
	if in.User != "" {
		fmt.Fprintf(&own, "user: %s\n", in.User)
	}
	if len(in.SSHKeys) > 0 {
		own.WriteString("ssh_authorized_keys:\n")
		for _, k := range in.SSHKeys {
			b, _ := yaml.Marshal(k) // quoted as YAML needs
			fmt.Fprintf(&own, "  - %s", b)
		}
	}
	own.WriteString("chpasswd:\n  expire: false\nusers:\n  - default\n")

	var b bytes.Buffer
	// A random boundary, which the caller's part cannot hold: it cannot
	// end its part early and add parts of its own.
	w := multipart.NewWriter(&b)
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=%q\nMIME-Version: 1.0\n\n", w.Boundary())
	part := func(h textproto.MIMEHeader, body []byte) {
		h.Set("MIME-Version", "1.0")
		p, _ := w.CreatePart(h)
		_, _ = p.Write(body)
		if !bytes.HasSuffix(body, []byte("\n")) {
			_, _ = p.Write([]byte("\n"))
		}
	}
	part(textproto.MIMEHeader{"Content-Type": {`text/cloud-config; charset="utf-8"`},
		"Content-Disposition": {`attachment; filename="flexplane.cfg"`}}, []byte(own.String()))
	if bytes.HasPrefix(data, []byte("#!")) {
		part(textproto.MIMEHeader{"Content-Type": {`text/x-shellscript; charset="utf-8"`},
			"Content-Disposition": {`attachment; filename="user-script"`}}, data)
	} else {
		part(textproto.MIMEHeader{"Content-Type": {`text/cloud-config; charset="utf-8"`},
			"Content-Disposition": {`attachment; filename="user-data.cfg"`},
			"Merge-Type":          {userDataMergeType}}, data)
	}
	_ = w.Close()
	return b.Bytes()
}

// userDataSum is the SHA-256 of user-data, in hex: the intent records it
// (the user-data itself is in the snippet only).
func userDataSum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// tenantUserData returns the caller's part of a user-data snippet that
// mergedUserData made (nil for one it did not make: user-data given
// verbatim, which names no part of flexplane's that could be rewritten).
func tenantUserData(snippet []byte) []byte {
	head, body, ok := bytes.Cut(snippet, []byte("\n\n"))
	if !ok {
		return nil
	}
	ct, found := strings.CutPrefix(string(bytes.SplitN(head, []byte("\n"), 2)[0]), "Content-Type: ")
	if !found {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/mixed" || params["boundary"] == "" {
		return nil
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var parts [][]byte
	own := false
	for {
		p, err := r.NextPart()
		if err != nil {
			break
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return nil
		}
		if p.FileName() == "flexplane.cfg" {
			own = true
			continue
		}
		parts = append(parts, b)
	}
	if !own || len(parts) != 1 {
		return nil
	}
	// mergedUserData ends a part with a new line it adds when the caller's
	// has none; the caller's checked part is the same either way.
	return parts[0]
}
