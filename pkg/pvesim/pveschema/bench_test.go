package pveschema

import "testing"

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	s, err := loadShared()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := s.Lookup("GET", "/nodes/pve1/tasks/UPID:pve1:00001234:00005678:65000000:qmstart:100:root@pam:/status"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateConfig validates a typical VM configuration update.
func BenchmarkValidateConfig(b *testing.B) {
	s, err := loadShared()
	if err != nil {
		b.Fatal(err)
	}
	e, vars, err := s.Lookup("POST", "/nodes/pve1/qemu/100/config")
	if err != nil {
		b.Fatal(err)
	}
	raw := map[string][]string{
		"cores": {"4"}, "memory": {"8192"}, "cpu": {"x86-64-v2-AES"}, "onboot": {"1"},
		"net0":      {"virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1"},
		"scsi0":     {"local-lvm:32,discard=on,iops=2000,mbps_rd=100,mbps_wr=50"},
		"ipconfig0": {"ip=10.0.0.5/24,gw=10.0.0.1"}, "tags": {"tenant-a;web"},
	}
	for b.Loop() {
		if _, err := e.ValidateRequest(vars, raw); err != nil {
			b.Fatal(err)
		}
	}
}
