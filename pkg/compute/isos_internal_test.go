package compute

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// TestISOSniffer: a file passes when it has "CD001" at byte 32769, read in
// any chunk sizes; one with other bytes there fails as soon as they pass,
// and one that ends before them fails at its end.
func TestISOSniffer(t *testing.T) {
	t.Parallel()
	iso := make([]byte, 40<<10)
	copy(iso[isoSignatureAt:], "CD001")
	bad := bytes.Clone(iso)
	bad[isoSignatureAt+4] = '2'
	for _, c := range []struct {
		name string
		file []byte
		want error
	}{
		{"iso", iso, nil},
		{"other bytes there", bad, errNotISO},
		{"too short", iso[:isoSignatureAt+3], errNotISO},
		{"empty", nil, errNotISO},
	} {
		for _, r := range []io.Reader{bytes.NewReader(c.file), iotest.OneByteReader(bytes.NewReader(c.file)), iotest.HalfReader(bytes.NewReader(c.file))} {
			n, err := io.Copy(io.Discard, &isoSniffer{r: r})
			if c.want == nil && (err != nil || n != int64(len(c.file))) {
				t.Errorf("%s: %v after %d of %d bytes, want all", c.name, err, n, len(c.file))
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("%s: %v after %d bytes, want %v", c.name, err, n, c.want)
			}
		}
	}
}

// TestISOConfig: the ISO's file names its image back; a clone's cloud-init
// drive leaves ide2 first and is made again in ide0 with the ISO, which
// is booted first; the eject keeps the other boot devices.
func TestISOConfig(t *testing.T) {
	t.Parallel()
	vol := "shared:iso/fp-iso-blue.installer.iso"
	if got := isoImageOf(vol); got != "blue.installer" {
		t.Errorf("isoImageOf(%s) = %q", vol, got)
	}
	for _, v := range []string{"local:iso/debian.iso", "shared:iso/fp-iso-x.img", "none"} {
		if got := isoImageOf(v); got != "" {
			t.Errorf("isoImageOf(%s) = %q, want none", v, got)
		}
	}
	if got := AttachedISO(pveapi.Config{"ide2": vol + ",media=cdrom"}); got != "blue.installer" {
		t.Errorf("AttachedISO = %q", got)
	}
	in := &Intent{ISO: vol, Image: "tiny", Storage: "local-lvm"}
	ch, del := plannedISO(pveapi.Config{"ide2": "local-lvm:vm-100-cloudinit,media=cdrom", "boot": "order=scsi0"}, in, map[string]any{}, nil)
	if len(ch) != 0 || len(del) != 1 || del[0] != "ide2" {
		t.Errorf("with the cloud-init drive in ide2: %v, delete %v", ch, del)
	}
	ch, del = plannedISO(pveapi.Config{"boot": "order=scsi0"}, in, map[string]any{}, nil)
	if ch["ide2"] != vol+",media=cdrom" || ch["boot"] != "order=ide2;scsi0" || ch["ide0"] != "local-lvm:cloudinit" || len(del) != 0 {
		t.Errorf("then: %v, delete %v", ch, del)
	}
	in.Image = ""
	if ch, _ = plannedISO(pveapi.Config{"ide2": vol + ",media=cdrom", "boot": "order=ide2;scsi0"}, in, map[string]any{}, nil); len(ch) != 0 {
		t.Errorf("an ISO alone, in place: %v", ch)
	}
	if got := diskBootOrder(pveapi.Config{"boot": "order=ide2;scsi0;net0", "scsi0": "local-lvm:vm-1-disk-0,size=4G"}); got != "order=scsi0;net0" {
		t.Errorf("diskBootOrder = %q", got)
	}
	if got := diskBootOrder(pveapi.Config{"boot": "order=ide2", "scsi0": "local-lvm:vm-1-disk-0,size=4G"}); got != "order=scsi0" {
		t.Errorf("diskBootOrder of the ISO alone = %q", got)
	}
}
