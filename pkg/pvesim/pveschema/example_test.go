package pveschema_test

import (
	"errors"
	"fmt"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
)

func Example() {
	s, err := pveschema.Load()
	if err != nil {
		panic(err)
	}
	e, vars, err := s.Lookup("POST", "/nodes/pve1/qemu/100/config")
	if err != nil {
		panic(err)
	}
	_, err = e.ValidateRequest(vars, map[string][]string{"cores": {"0"}, "onboot": {"true"}})
	var pe *pveschema.ParamError
	if errors.As(err, &pe) {
		fmt.Println(pe.Errors["cores"])
		fmt.Println(pe.Errors["onboot"])
	}
	nic, _ := e.ParseProperty("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0")
	fmt.Println(nic["model"], nic["macaddr"], nic["bridge"])
	p, _ := e.ValidateRequest(vars, map[string][]string{"cores": {"2"}})
	err = e.Authorize(p, func(path, priv string) bool { return path == "/vms/100" && priv == "VM.Audit" })
	fmt.Println(err)
	// Output:
	// value must have a minimum value of 1
	// type check ('boolean') failed - got 'true'
	// virtio BC:24:11:00:00:01 vmbr0
	// Permission check failed (/vms/100, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit)
}
