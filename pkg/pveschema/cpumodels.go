package pveschema

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// cpuModels are the CPU models built into Proxmox VE 9's QEMU (qm's cputype values),
// plus "host" and "max"; custom models are "custom-<name>".
func cpuModels() map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Fields(`
		486 athlon core2duo coreduo kvm32 kvm64 pentium pentium2 pentium3 phenom qemu32 qemu64
		host max
		x86-64-v2 x86-64-v2-AES x86-64-v3 x86-64-v4
		Conroe Penryn Nehalem Nehalem-IBRS Westmere Westmere-IBRS
		SandyBridge SandyBridge-IBRS IvyBridge IvyBridge-IBRS
		Haswell Haswell-IBRS Haswell-noTSX Haswell-noTSX-IBRS
		Broadwell Broadwell-IBRS Broadwell-noTSX Broadwell-noTSX-IBRS
		Skylake-Client Skylake-Client-IBRS Skylake-Client-noTSX-IBRS Skylake-Client-v4
		Skylake-Server Skylake-Server-IBRS Skylake-Server-noTSX-IBRS Skylake-Server-v4 Skylake-Server-v5
		Cascadelake-Server Cascadelake-Server-noTSX Cascadelake-Server-v2 Cascadelake-Server-v4 Cascadelake-Server-v5
		Cooperlake Cooperlake-v2
		Icelake-Client Icelake-Client-noTSX Icelake-Server Icelake-Server-noTSX
		Icelake-Server-v3 Icelake-Server-v4 Icelake-Server-v5 Icelake-Server-v6
		SapphireRapids SapphireRapids-v2 GraniteRapids KnightsMill
		Opteron_G1 Opteron_G2 Opteron_G3 Opteron_G4 Opteron_G5
		EPYC EPYC-IBPB EPYC-v3 EPYC-v4 EPYC-Rome EPYC-Rome-v2 EPYC-Rome-v3 EPYC-Rome-v4
		EPYC-Milan EPYC-Milan-v2 EPYC-Genoa
		cortex-a57 cortex-a72 cortex-a76 neoverse-n1 neoverse-n2 neoverse-v1
	`) {
		m[s] = true
	}
	return m
}

var customCPURE = regexp.MustCompile(`^custom-[a-zA-Z0-9\-_.]+$`)

func cpuVerifiers(models map[string]bool) map[string]func(string) error {
	return map[string]func(string) error{
		"pve-cpu-model": func(v string) error {
			if models[v] || customCPURE.MatchString(v) {
				return nil
			}
			return fmt.Errorf("built-in cputype '%s' is not defined (missing 'custom-' prefix?)", v)
		},
		"pve-cpu-builtin-model": func(v string) error {
			if models[v] && v != "host" && v != "max" {
				return nil
			}
			return fmt.Errorf("CPU model '%s' is not a built-in model", v)
		},
		"pve-phys-bits": func(v string) error {
			if v == "host" {
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 8 || n > 64 {
				return errors.New("value must be an integer between 8 and 64 or 'host'")
			}
			return nil
		},
	}
}
