package pveapi

import "testing"

// TestParseTransfer reads a migration's progress off qemu-server's log
// lines: the latest line of each drive's mirror job plus the memory's.
func TestParseTransfer(t *testing.T) {
	lines := []string{
		"starting migration of VM 100 to node 'pve2' (10.0.0.2)",
		"drive-scsi0: transferred 1.0 GiB of 4.0 GiB (25.00%) in 2s",
		"drive-scsi1: transferred 512.0 MiB of 1.0 GiB (50.00%) in 2s",
		"drive-scsi0: transferred 2.0 GiB of 4.0 GiB (50.00%) in 4s",
		"migration active, transferred 256.0 MiB of 512.0 MiB VM-state, 64.0 MiB/s",
		"drive-scsi0: transferred garbage of 4.0 GiB (50.00%) in 4s",
	}
	got := ParseTransfer(lines)
	want := Transfer{Done: 2<<30 + 512<<20 + 256<<20, Total: 4<<30 + 1<<30 + 512<<20, BytesPerSecond: 64 << 20}
	if got != want {
		t.Errorf("ParseTransfer = %+v, want %+v", got, want)
	}
	if got := ParseTransfer([]string{"drive-virtio0: transferred 10.0 MiB of 10.0 MiB (100.00%) in 1m 10s, ready"}); got.Done != 10<<20 || got.BytesPerSecond != float64(10<<20)/70 {
		t.Errorf("minutes: %+v", got)
	}
	if got := ParseTransfer(nil); got != (Transfer{}) {
		t.Errorf("no lines: %+v", got)
	}
}
