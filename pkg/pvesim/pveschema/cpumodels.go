package pveschema

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// cpuModels are the CPU models Proxmox VE 9 knows without QEMU's model files (its fallback
// list for x86_64 and aarch64) plus "host" for an x86_64 node: the values of the
// reported-model enumeration.
func cpuModels() []string {
	return strings.Fields(`
		486 pentium pentium2 pentium3 coreduo core2duo Conroe Penryn Nehalem Nehalem-IBRS
		Westmere Westmere-IBRS SandyBridge SandyBridge-IBRS IvyBridge IvyBridge-IBRS
		Haswell Haswell-IBRS Haswell-noTSX Haswell-noTSX-IBRS
		Broadwell Broadwell-IBRS Broadwell-noTSX Broadwell-noTSX-IBRS
		Skylake-Client Skylake-Client-IBRS Skylake-Client-noTSX-IBRS Skylake-Client-v4
		Skylake-Server Skylake-Server-IBRS Skylake-Server-noTSX-IBRS Skylake-Server-v4 Skylake-Server-v5
		Cascadelake-Server Cascadelake-Server-v2 Cascadelake-Server-noTSX Cascadelake-Server-v4 Cascadelake-Server-v5
		Cooperlake Cooperlake-v2 KnightsMill Icelake-Client Icelake-Client-noTSX
		Icelake-Server Icelake-Server-noTSX Icelake-Server-v3 Icelake-Server-v4 Icelake-Server-v5
		Icelake-Server-v6 Icelake-Server-v7
		SapphireRapids SapphireRapids-v2 SapphireRapids-v3 SapphireRapids-v4
		GraniteRapids GraniteRapids-v2 GraniteRapids-v3 SierraForest SierraForest-v2 SierraForest-v3
		ClearwaterForest
		athlon phenom Opteron_G1 Opteron_G2 Opteron_G3 Opteron_G4 Opteron_G5
		EPYC EPYC-IBPB EPYC-v3 EPYC-v4 EPYC-v5 EPYC-Rome EPYC-Rome-v2 EPYC-Rome-v3 EPYC-Rome-v4
		EPYC-Rome-v5 EPYC-Milan EPYC-Milan-v2 EPYC-Milan-v3 EPYC-Genoa EPYC-Genoa-v2 EPYC-Turin
		kvm32 kvm64 qemu32 qemu64 max host
		a64fx cortex-a35 cortex-a53 cortex-a55 cortex-a57 cortex-a710 cortex-a72 cortex-a76
		neoverse-n1 neoverse-n2 neoverse-v1
	`)
}

// builtinCPUModels are Proxmox's own models defined on top of QEMU's.
func builtinCPUModels() []string {
	return []string{"x86-64-v2", "x86-64-v2-AES", "x86-64-v3", "x86-64-v4"}
}

// vmCPUFlags are the CPU flags a VM-specific cpu option may set.
func vmCPUFlags() []string {
	return []string{"aes", "amd-no-ssb", "amd-ssbd", "hv-evmcs", "hv-tlbflush", "ibpb", "md-clear",
		"nested-virt", "pcid", "pdpe1gb", "spec-ctrl", "ssbd", "virt-ssbd"}
}

// cpuFormatValidator returns the check Proxmox runs on a parsed pve-vm-cpu-conf value, and
// fills the reported-model enumeration of the format.
func cpuFormatValidator(format map[string]*prop) func(Params) error {
	models := cpuModels()
	known := map[string]bool{}
	for _, m := range append(append([]string{}, models...), builtinCPUModels()...) {
		known[m] = true
	}
	enum := append([]string{}, models...)
	sort.SliceStable(enum, func(i, j int) bool { return strings.ToLower(enum[i]) < strings.ToLower(enum[j]) })
	if rm := format["reported-model"]; rm != nil {
		rm.Enum, rm.HasEnum = enum, true
	}
	flags := vmCPUFlags()
	flag := `[+-](?:` + strings.Join(flags, "|") + `)`
	flagsRE := regexp.MustCompile(`^` + flag + `(?:;` + flag + `)*$`)
	return func(p Params) error {
		cputype, _ := p.String("cputype")
		if cputype == "" {
			return errors.New("CPU is missing cputype")
		}
		if !known[cputype] && !strings.HasPrefix(cputype, "custom-") {
			return fmt.Errorf("Built-in cputype '%s' is not defined (missing 'custom-' prefix?)", cputype) //lint:ignore ST1005 Proxmox's message
		}
		if f, _ := p.String("flags"); f != "" && !flagsRE.MatchString(f) {
			return fmt.Errorf("VM-specific CPU flags must be a subset of: %s", strings.Join(flags, ", "))
		}
		if _, ok := p["reported-model"]; ok {
			return errors.New("Property 'reported-model' not allowed in VM-specific CPU config.") //lint:ignore ST1005 Proxmox's message
		}
		return nil
	}
}

// pruneBackupsValidator is Proxmox's check of a parsed prune-backups value.
func pruneBackupsValidator(p Params) error {
	keepAll, _ := p.Bool("keep-all")
	positive := false
	for k, v := range p {
		if n, ok := v.(int64); ok && k != "keep-all" && n > 0 {
			positive = true
		}
	}
	if positive && keepAll {
		return errors.New("keep-all cannot be set together with other options.") //lint:ignore ST1005 Proxmox's message
	}
	return nil
}
