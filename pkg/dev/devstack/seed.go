package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// demoVDC is a VDC of the demo data with its networks' address plan.
type demoVDC struct {
	name, description string
	// cidrs are the /24 networks of the VDC's network "main", by zone.
	cidrs map[string]string
	// member is the demo user who works in it.
	member string
}

// demoVDCs are the VDCs of the demo data.
func demoVDCs() []demoVDC {
	return []demoVDC{
		{name: "prod", description: "Production", member: "alice", cidrs: map[string]string{"fra1": "10.10.1.0/24", "hel1": "10.10.2.0/24"}},
		{name: "dev", description: "Development", member: "alice", cidrs: map[string]string{"fra1": "10.20.1.0/24", "hel1": "10.20.2.0/24"}},
		{name: "staging", description: "Staging", member: "bob", cidrs: map[string]string{"fra1": "10.30.1.0/24", "hel1": "10.30.2.0/24"}},
	}
}

// demoVM is a VM of the demo data.
type demoVM struct {
	vdc, name, zone, image, compute, storage string
}

// demoVMs are the VMs of the demo data.
func demoVMs() []demoVM {
	return []demoVM{
		{vdc: "prod", name: "web-1", zone: "fra1", image: "debian-12", compute: "small", storage: "ssd-standard"},
		{vdc: "prod", name: "db-1", zone: "hel1", image: "ubuntu-24.04", compute: "medium", storage: "nvme-performance"},
		{vdc: "staging", name: "app-1", zone: "fra1", image: "ubuntu-24.04", compute: "small", storage: "ssd-standard"},
	}
}

// seeder creates the demo data through the GraphQL API; every step first
// reads what exists, so a second start changes nothing that is already there.
type seeder struct {
	log     *slog.Logger
	clients map[string]*Client // by user
	images  map[string]imageRef
	zones   []string
	// upstreams are the data plane's routers of the zones' external
	// networks (Cluster.Upstream), by zone; none without the data plane.
	upstreams map[string]string
	// ctx bounds the background work of the seeder (following creates).
	ctx context.Context
}

// imageRef is where the local image server serves an image.
type imageRef struct{ url, checksum string }

func (s *seeder) run(ctx context.Context) error {
	for _, step := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"vdcs", s.vdcs},
		{"compute profiles", s.computeProfiles},
		{"storage profiles", s.storageProfiles},
		{"images", s.imageCatalog},
		{"networks", s.networks},
		{"external networks", s.externalNetworks},
		{"vms", s.vms},
	} {
		if err := step.f(ctx); err != nil {
			return fmt.Errorf("demo data: %s: %w", step.name, err)
		}
	}
	return nil
}

// names runs a query whose field lists objects with a name.
func names(ctx context.Context, c *Client, vdc, query, field string) ([]string, error) {
	var d map[string][]struct{ Name string }
	if err := c.Do(ctx, vdc, query, nil, &d); err != nil {
		return nil, err
	}
	var out []string
	for _, x := range d[field] {
		out = append(out, x.Name)
	}
	return out, nil
}

// createMissing runs mutation with each input whose name is not in have.
func (s *seeder) createMissing(ctx context.Context, what, listQuery, field, mutation string, inputs []map[string]any) error {
	admin := s.clients["admin"]
	have, err := names(ctx, admin, "", listQuery, field)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		name := in["name"].(string)
		if slices.Contains(have, name) {
			continue
		}
		if err := admin.Do(ctx, "", mutation, map[string]any{"input": in}, nil); err != nil {
			return fmt.Errorf("create %s %s: %w", what, name, err)
		}
		s.log.Info("created "+what, "name", name)
	}
	return nil
}

func (s *seeder) vdcs(ctx context.Context) error {
	var in []map[string]any
	for _, v := range demoVDCs() {
		in = append(in, map[string]any{"name": v.name, "description": v.description,
			"quotas": map[string]any{"vcpus": 64, "memoryMiB": 131072, "storageGiB": 2000, "vms": 20}})
	}
	return s.createMissing(ctx, "VDC", `{ vdcs { name } }`, "vdcs",
		`mutation($input: CreateVDCInput!) { createVDC(input: $input) { name } }`, in)
}

func (s *seeder) computeProfiles(ctx context.Context) error {
	in := []map[string]any{
		{"name": "small", "description": "1 vCPU, 2 GiB", "vcpus": 1, "memoryMiB": 2048},
		{"name": "medium", "description": "4 vCPUs, 8 GiB", "vcpus": 4, "memoryMiB": 8192},
		{"name": "large", "description": "8 vCPUs, 32 GiB", "vcpus": 8, "memoryMiB": 32768},
	}
	return s.createMissing(ctx, "compute profile", `{ computeProfiles { name } }`, "computeProfiles",
		`mutation($input: CreateComputeProfileInput!) { createComputeProfile(input: $input) { name } }`, in)
}

// storageProfiles maps the tiers to the simulated nodes' storages: the
// cluster-wide NFS storage "shared" and the node-local thin LVM
// "local-lvm".
func (s *seeder) storageProfiles(ctx context.Context) error {
	pools := func(storage string) []map[string]any {
		var out []map[string]any
		for _, z := range s.zones {
			out = append(out, map[string]any{"zone": z, "pool": storage})
		}
		return out
	}
	in := []map[string]any{
		{"name": "ssd-standard", "description": "Shared SSD storage", "tier": "ssd", "readMBps": 500, "writeMBps": 300, "pools": pools("shared")},
		{"name": "nvme-performance", "description": "Local NVMe, unthrottled", "tier": "nvme", "pools": pools("local-lvm")},
		{"name": "backup-standard", "description": "Backups on each host's own storage", "tier": "backup", "kind": "BACKUP", "pools": pools("local")},
	}
	return s.createMissing(ctx, "storage profile", `{ storageProfiles { name } }`, "storageProfiles",
		`mutation($input: CreateStorageProfileInput!) { createStorageProfile(input: $input) { name } }`, in)
}

// imageCatalog creates the images, or points them at the image server
// again when its address changed since the last start.
func (s *seeder) imageCatalog(ctx context.Context) error {
	admin := s.clients["admin"]
	var d struct {
		Images []struct{ Name, URL, Checksum string }
	}
	if err := admin.Do(ctx, "", `{ images { name url checksum } }`, nil, &d); err != nil {
		return err
	}
	for _, img := range standIns() {
		ref := s.images[img.Name]
		sum := "sha256:" + ref.checksum
		i := slices.IndexFunc(d.Images, func(x struct{ Name, URL, Checksum string }) bool { return x.Name == img.Name })
		switch {
		case i < 0:
			in := map[string]any{"name": img.Name, "description": img.Description, "version": img.Version,
				"url": ref.url, "checksum": sum, "cloudInit": true}
			if err := admin.Do(ctx, "", `mutation($input: CreateImageInput!) { createImage(input: $input) { name } }`,
				map[string]any{"input": in}, nil); err != nil {
				return fmt.Errorf("create image %s: %w", img.Name, err)
			}
			s.log.Info("created image", "name", img.Name, "url", ref.url)
		case d.Images[i].URL != ref.url || d.Images[i].Checksum != sum:
			in := map[string]any{"name": img.Name, "url": ref.url, "checksum": sum}
			if err := admin.Do(ctx, "", `mutation($input: UpdateImageInput!) { updateImage(input: $input) { name } }`,
				map[string]any{"input": in}, nil); err != nil {
				return fmt.Errorf("update image %s: %w", img.Name, err)
			}
			s.log.Info("updated image", "name", img.Name, "url", ref.url)
		}
	}
	return nil
}

// networks creates the network "main" of every VDC in every zone, as the
// VDC's member.
func (s *seeder) networks(ctx context.Context) error {
	for _, v := range demoVDCs() {
		c := s.clients[v.member]
		var d struct {
			Networks []struct {
				Name string
				Zone struct{ Name string }
			}
		}
		if err := c.Do(ctx, v.name, `{ networks { name zone { name } } }`, nil, &d); err != nil {
			return err
		}
		for _, z := range s.zones {
			if slices.ContainsFunc(d.Networks, func(n struct {
				Name string
				Zone struct{ Name string }
			}) bool {
				return n.Name == "main" && n.Zone.Name == z
			}) {
				continue
			}
			cidr := v.cidrs[z]
			in := map[string]any{"name": "main", "zone": z, "cidr": cidr, "gateway": gatewayOf(cidr)}
			err := c.Do(ctx, v.name, `mutation($input: CreateNetworkInput!) { createNetwork(input: $input) { id } }`,
				map[string]any{"input": in}, nil)
			if err != nil {
				return fmt.Errorf("create network main of %s in %s: %w", v.name, z, err)
			}
			s.log.Info("created network", "vdc", v.name, "zone", z, "cidr", cidr)
		}
	}
	return nil
}

// externalNetworks registers, as the platform admin, each zone's external
// network on the data plane's router (its upstream), so that edge
// gateways, port forwards, 1:1 addresses and load balancers can be tried
// at once: bridge vmbr0, the router's /24, public addresses .10 to .99
// (the tests take theirs from .200 up).
func (s *seeder) externalNetworks(ctx context.Context) error {
	c := s.clients["admin"]
	var d struct {
		ExternalNetworks struct{ Nodes []struct{ Zone string } }
	}
	if err := c.Do(ctx, "", `{ externalNetworks { nodes { zone } } }`, nil, &d); err != nil {
		return err
	}
	for _, z := range s.zones {
		up, ok := s.upstreams[z]
		if !ok || slices.ContainsFunc(d.ExternalNetworks.Nodes, func(n struct{ Zone string }) bool { return n.Zone == z }) {
			continue
		}
		prefix, err := netip.ParsePrefix(up)
		if err != nil || !prefix.Addr().Is4() || prefix.Bits() != 24 {
			return fmt.Errorf("the upstream of %s is %q, want an IPv4 address in a /24", z, up)
		}
		base := prefix.Masked().Addr().As4()
		addr := func(last byte) string { return netip.AddrFrom4([4]byte{base[0], base[1], base[2], last}).String() }
		in := map[string]any{"zone": z, "bridge": "vmbr0", "cidr": prefix.Masked().String(), "gateway": prefix.Addr().String(),
			"poolStart": addr(10), "poolEnd": addr(99)}
		if err := c.Do(ctx, "", `mutation($input: CreateExternalNetworkInput!) { createExternalNetwork(input: $input) { zone } }`,
			map[string]any{"input": in}, nil); err != nil {
			return fmt.Errorf("create the external network of %s: %w", z, err)
		}
		s.log.Info("created external network", "zone", z, "cidr", in["cidr"], "gateway", in["gateway"])
	}
	return nil
}

// gatewayOf is the first address of a /24 written a.b.c.0/24.
func gatewayOf(cidr string) string {
	var a, b, c int
	fmt.Sscanf(cidr, "%d.%d.%d.0/24", &a, &b, &c)
	return fmt.Sprintf("%d.%d.%d.1", a, b, c)
}

// vms creates the demo VMs that do not exist yet. It does not wait for
// them to run.
func (s *seeder) vms(ctx context.Context) error {
	for _, vm := range demoVMs() {
		c := s.clients[memberOf(vm.vdc)]
		var d struct {
			VMs []struct{ Name string } `json:"vms"`
		}
		if err := c.Do(ctx, vm.vdc, `query($name: String) { vms(filter: {name: $name}) { name } }`,
			map[string]any{"name": vm.name}, &d); err != nil {
			return err
		}
		if slices.ContainsFunc(d.VMs, func(x struct{ Name string }) bool { return x.Name == vm.name }) {
			continue
		}
		net, err := networkID(ctx, c, vm.vdc, vm.zone, "main")
		if err != nil {
			return err
		}
		op, err := CreateVM(ctx, c, vm.vdc, VMSpec{Name: vm.name, Zone: vm.zone, Image: vm.image,
			ComputeProfile: vm.compute, StorageProfile: vm.storage, DiskGiB: 10, Network: net, User: userOf(vm.image)})
		if err != nil {
			var re *ResponseError
			if errors.As(err, &re) && re.HasCode("CONFLICT") {
				continue
			}
			return fmt.Errorf("create VM %s in %s: %w", vm.name, vm.vdc, err)
		}
		s.log.Info("creating demo VM", "vdc", vm.vdc, "name", vm.name, "zone", vm.zone, "operation", op)
		go s.follow(s.ctx, c, vm, op)
	}
	return nil
}

// userOf is the usual cloud-init user of an image.
func userOf(image string) string {
	name, _, _ := strings.Cut(image, "-")
	return name
}

func memberOf(vdc string) string {
	for _, v := range demoVDCs() {
		if v.name == vdc {
			return v.member
		}
	}
	return "admin"
}

// networkID is the id of the VDC's network name in zone.
func networkID(ctx context.Context, c *Client, vdc, zone, name string) (string, error) {
	var d struct {
		Networks []struct{ ID, Name string }
	}
	if err := c.Do(ctx, vdc, `query($zone: String) { networks(zone: $zone) { id name } }`,
		map[string]any{"zone": zone}, &d); err != nil {
		return "", err
	}
	for _, n := range d.Networks {
		if n.Name == name {
			return n.ID, nil
		}
	}
	return "", fmt.Errorf("no network %s of VDC %s in zone %s", name, vdc, zone)
}

// VMSpec is what CreateVM asks for.
type VMSpec struct {
	Name, Zone, Image, ComputeProfile, StorageProfile string
	DiskGiB                                           int
	// User is the cloud-init user; default "flexplane".
	User string
	// Network is the id of the network of the VM's one NIC (automatic
	// address).
	Network string
	// UserData is the VM's own cloud-init user-data ("" none).
	UserData string
}

// CreateVM asks the API's createVM for a VM and returns the id of its
// operation; it returns once the create is accepted, not when the VM runs
// (follow it with Operation, find the VM with the vms query).
func CreateVM(ctx context.Context, c *Client, vdc string, spec VMSpec) (string, error) {
	in := map[string]any{
		"name": spec.Name, "zone": spec.Zone, "image": spec.Image,
		"computeProfile": spec.ComputeProfile, "storageProfile": spec.StorageProfile, "diskGiB": spec.DiskGiB,
		"nics": []map[string]any{{"network": spec.Network}}, "user": cmp.Or(spec.User, "flexplane"),
	}
	if spec.UserData != "" {
		in["userData"] = spec.UserData
	}
	var d struct {
		CreateVM struct {
			Operation struct{ ID string }
		} `json:"createVM"`
	}
	err := c.Do(ctx, vdc, `mutation($input: CreateVMInput!) { createVM(input: $input) { operation { id } } }`,
		map[string]any{"input": in}, &d)
	return d.CreateVM.Operation.ID, err
}

// Operation is the state of an operation (a create, power action or
// delete).
type Operation struct {
	ID, State, Step string
	Error           *string
}

// GetOperation reads an operation of vdc.
func GetOperation(ctx context.Context, c *Client, vdc, id string) (Operation, error) {
	var d struct{ Operation Operation }
	err := c.Do(ctx, vdc, `query($id: ID!) { operation(id: $id) { id state step error } }`, map[string]any{"id": id}, &d)
	return d.Operation, err
}

// follow logs how the demo VM's create ends (in the background: the stack
// does not wait for VMs to run).
func (s *seeder) follow(ctx context.Context, c *Client, vm demoVM, op string) {
	for {
		o, err := GetOperation(ctx, c, vm.vdc, op)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("demo VM: operation unreadable", "vdc", vm.vdc, "name", vm.name, "err", err)
			return
		case o.State == "SUCCEEDED":
			s.log.Info("demo VM created", "vdc", vm.vdc, "name", vm.name, "zone", vm.zone)
			return
		case o.State == "FAILED":
			s.log.Warn("demo VM failed", "vdc", vm.vdc, "name", vm.name, "step", o.Step, "err", cmp.Or(*o.Error, "?"))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
