//go:build !race

package tfprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/tfprovider"
)

// TestMain points terraform-plugin-testing at the OpenTofu CLI of `make
// tofu-bin` and at the provider's source address (registry.opentofu.org,
// which a configuration's source "flexplane/flexplane" means to tofu).
// plugin-testing reads these from the process's environment only. The
// CLI reads an empty configuration of the test's own, never the host's.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if bin, err := tofuBin(); err == nil {
		dir, err := os.MkdirTemp("", "tfprovider")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		cfg := filepath.Join(dir, "tofurc")
		if err := os.WriteFile(cfg, nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Setenv("TF_CLI_CONFIG_FILE", cfg)
		os.Setenv("TF_ACC", "1")
		os.Setenv("TF_ACC_TERRAFORM_PATH", bin)
		os.Setenv("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
		os.Setenv("TF_ACC_PROVIDER_NAMESPACE", "flexplane")
		os.Setenv("CHECKPOINT_DISABLE", "1")
	}
	return m.Run()
}

// TestProviderWithOpenTofu drives the provider with the real OpenTofu CLI
// against a running orchestrator (mesh harness: real agents, simulated
// Proxmox), authenticated by service accounts' fpsa_ tokens. In VDC red,
// through terraform-plugin-testing: an API refusal reported on the
// attribute it names; create of a security group, a network, a VM in the
// group, a port forward, a firewall rule, a 1:1 address and a service
// account, with the data sources; update in place (the group's rules and
// description, the VM's compute profile, its boot disk grown), the rule
// and the 1:1 address replaced; a smaller disk refused at plan time on
// disk_gib; a managed Kubernetes cluster and a node pool of one worker
// followed until ready, imported and destroyed (the management cluster's
// namespace gone after a short create grace); import of each by id;
// drift (a VM deleted outside shows in the
// next plan, and the apply after it creates it again); destroy leaving
// nothing; after every apply a second plan is empty. In VDC blue, at the
// same time: docs/examples/terraform applied with tofu through a
// dev_overrides CLI configuration and the FLEXPLANE_* variables, planned
// again (empty) and destroyed.
func TestProviderWithOpenTofu(t *testing.T) {
	tofu := tofuPath(t)
	s := startStack(t)

	t.Run("acceptance", func(t *testing.T) {
		t.Parallel()
		testAcceptance(t, s)
	})
	t.Run("example", func(t *testing.T) {
		t.Parallel()
		testExample(t, s, tofu)
	})
}

// providerConfig is the head of the acceptance configurations: the
// provider from its source address, with the API's endpoint, a token and
// VDC red.
func providerConfig(endpoint, token string) string {
	return fmt.Sprintf(`
terraform {
  required_providers {
    flexplane = { source = "flexplane/flexplane" }
  }
}

provider "flexplane" {
  endpoint = %q
  token    = %q
  vdc      = "red"
}
`, endpoint, token)
}

// accVars are what vary between the acceptance configuration's steps.
type accVars struct {
	description, ports string // the security group's
	profile            string // the VM's compute profile
	diskGiB            int    // the VM's disk
	ruleDescription    string // the firewall rule's
	oneToOne           string // the 1:1 address's public_address; empty: unset
	schedule           string // the VM's backup schedule
	keepLast           int    // its keep_last
	keepBackups        string // the VM's keep_backups; empty: unset
	dataGiB            int    // the VM's data disk
}

// accConfig is the acceptance configuration with v.
func accConfig(endpoint, token string, v accVars) string {
	oneToOne := ""
	if v.oneToOne != "" {
		oneToOne = fmt.Sprintf("public_address = %q", v.oneToOne)
	}
	keepBackups := ""
	if v.keepBackups != "" {
		keepBackups = "keep_backups    = " + v.keepBackups
	}
	return providerConfig(endpoint, token) + fmt.Sprintf(`
data "flexplane_zone" "alpha" {
  name = "alpha"
}

data "flexplane_image" "tiny" {
  name = "tiny"
}

data "flexplane_compute_profile" "vm" {
  name = %q
}

data "flexplane_storage_profile" "ssd" {
  name = "ssd"
}

resource "flexplane_security_group" "web" {
  name        = "web"
  description = %q
  rules = [
    { direction = "INBOUND", protocol = "TCP", ports = %q, peer_cidr = "0.0.0.0/0" },
  ]
}

resource "flexplane_network" "lan" {
  name    = "acc"
  zone    = data.flexplane_zone.alpha.name
  cidr    = "10.30.0.0/24"
  gateway = "10.30.0.1"
}

resource "flexplane_vm" "web" {
  name            = "acc"
  zone            = data.flexplane_zone.alpha.name
  image           = data.flexplane_image.tiny.name
  compute_profile = data.flexplane_compute_profile.vm.name
  storage_profile = data.flexplane_storage_profile.ssd.name
  disk_gib        = %d
  user            = "ubuntu"
  security_groups = [flexplane_security_group.web.name]
  nics = [
    { network = flexplane_network.lan.id },
  ]
  %s
}

resource "flexplane_port_forward" "ssh" {
  vm_id       = flexplane_vm.web.id
  protocol    = "TCP"
  public_port = 2200
  target_port = 22
}

resource "flexplane_firewall_rule" "ssh" {
  zone        = data.flexplane_zone.alpha.name
  direction   = "INBOUND"
  protocol    = "TCP"
  from_port   = 22
  to_port     = 22
  source      = "198.51.100.0/24"
  action      = "ALLOW"
  description = %q
}

resource "flexplane_one_to_one_address" "web" {
  vm_id = flexplane_vm.web.id
  %s
}

resource "flexplane_service_account" "ci" {
  name = "ci"
  role = "VIEWER"
}

resource "flexplane_backup_schedule" "web" {
  vm        = flexplane_vm.web.id
  schedule  = %q
  keep_last = %d
}

resource "flexplane_disk" "data" {
  vm       = flexplane_vm.web.id
  size_gib = %d
}

resource "flexplane_backup" "web" {
  vm          = flexplane_vm.web.id
  description = "before the upgrade"
}

data "flexplane_backups" "all" {
  depends_on = [flexplane_backup.web]
}
`, v.profile, v.description, v.ports, v.diskGiB, keepBackups, v.ruleDescription, oneToOne, v.schedule, v.keepLast, v.dataGiB)
}

// kubeConfig is a managed Kubernetes cluster on a network of its own with
// a node pool of one worker.
func kubeConfig(endpoint, token string) string {
	return providerConfig(endpoint, token) + `
resource "flexplane_network" "k" {
  name    = "k"
  zone    = "alpha"
  cidr    = "10.31.0.0/24"
  gateway = "10.31.0.1"
}

resource "flexplane_kubernetes_cluster" "k" {
  name    = "k"
  zone    = "alpha"
  version = "v1.37.2"
  network = flexplane_network.k.id
}

resource "flexplane_node_pool" "w" {
  cluster         = flexplane_kubernetes_cluster.k.id
  name            = "w"
  compute_profile = "small"
  storage_profile = "ssd"
  size            = 1
}
`
}

// badScheduleConfig asks for a backup schedule that does not parse.
func badScheduleConfig(endpoint, token string) string {
	return providerConfig(endpoint, token) + `
resource "flexplane_backup_schedule" "bad" {
  vm       = "no-such-vm"
  schedule = "every full moon"
}
`
}

// lbConfig is a load balancer with one TCP listener on port and an empty pool.
func lbConfig(endpoint, token string, port int) string {
	return providerConfig(endpoint, token) + fmt.Sprintf(`
resource "flexplane_load_balancer" "lb" {
  name        = "lb"
  zone        = "alpha"
  description = "port %d"
  listeners   = [{ name = "web", protocol = "TCP", port = %d, pool = "web" }]
  pools       = [{ name = "web", backends = [] }]
}
`, port, port)
}

// badConfig asks for a VM whose static address is outside its network.
func badConfig(endpoint, token string) string {
	return providerConfig(endpoint, token) + `
resource "flexplane_network" "lan" {
  name    = "acc"
  zone    = "alpha"
  cidr    = "10.30.0.0/24"
  gateway = "10.30.0.1"
}

resource "flexplane_vm" "bad" {
  name            = "bad"
  zone            = "alpha"
  image           = "tiny"
  compute_profile = "small"
  storage_profile = "ssd"
  disk_gib        = 4
  user            = "ubuntu"
  nics = [
    { network = flexplane_network.lan.id, address = "10.99.0.5" },
  ]
}
`
}

func testAcceptance(t *testing.T, s *stack) {
	endpoint := s.h.Orchestrator.URL()
	token := s.serviceAccount(t, "red", "tofu", "ADMIN")
	v1 := accConfig(endpoint, token, accVars{description: "web servers", ports: "22", profile: "small", diskGiB: 4, ruleDescription: "ssh",
		schedule: "daily", keepLast: 3, dataGiB: 2})
	v2vars := accVars{description: "web servers, and HTTP", ports: "22,80", profile: "large", diskGiB: 6,
		ruleDescription: "ssh from the office", oneToOne: "203.0.113.15", schedule: "mon..fri 02:00", keepLast: 5, keepBackups: "false", dataGiB: 3}
	v2 := accConfig(endpoint, token, v2vars)
	shrunk := v2vars
	shrunk.diskGiB = 5
	var vmID, ruleID, oneToOneID, backupID string
	factories := map[string]func() (tfprotov6.ProviderServer, error){
		"flexplane": providerserver.NewProtocol6WithError(tfprovider.New(tfprovider.Config{Version: "test"})()),
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			return nothingLeft(s, token, "red", "tofu")
		},
		Steps: []resource.TestStep{
			{ // refused input: the API's error on the attribute it names
				Config:      badConfig(endpoint, token),
				ExpectError: regexp.MustCompile(`(?s)create VM: BAD_USER_INPUT.*address = "10\.99\.0\.5".*attribute nics\[0\]\.address`),
			},
			{ // a schedule that does not parse: refused on its attribute
				Config:      badScheduleConfig(endpoint, token),
				ExpectError: regexp.MustCompile(`(?s)set backup schedule: BAD_USER_INPUT.*schedule = "every full moon".*does not parse.*attribute schedule`),
			},
			{ // managed Kubernetes: a cluster and a pool of one worker, followed until ready
				Config: kubeConfig(endpoint, token),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("flexplane_kubernetes_cluster.k", "control_plane_ready", "true"),
					resource.TestCheckResourceAttr("flexplane_kubernetes_cluster.k", "phase", "PROVISIONED"),
					resource.TestCheckResourceAttr("flexplane_kubernetes_cluster.k", "running_version", "v1.37.2"),
					resource.TestCheckResourceAttrPair("flexplane_kubernetes_cluster.k", "network", "flexplane_network.k", "id"),
					resource.TestCheckResourceAttrPair("flexplane_node_pool.w", "cluster", "flexplane_kubernetes_cluster.k", "id"),
					resource.TestCheckResourceAttr("flexplane_node_pool.w", "workers", "1"),
					resource.TestCheckResourceAttr("flexplane_node_pool.w", "ready_workers", "1"),
				),
			},
			{Config: kubeConfig(endpoint, token), ResourceName: "flexplane_kubernetes_cluster.k", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"timeouts"}},
			{Config: kubeConfig(endpoint, token), ResourceName: "flexplane_node_pool.w", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"timeouts"}},
			{ // a load balancer: create, update in place, import
				Config: lbConfig(endpoint, token, 80),
				Check:  resource.TestMatchResourceAttr("flexplane_load_balancer.lb", "public_address", regexp.MustCompile(`^203\.0\.113\.`)),
			},
			{
				Config: lbConfig(endpoint, token, 8080),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("flexplane_load_balancer.lb", plancheck.ResourceActionUpdate),
				}},
				Check: resource.TestCheckResourceAttr("flexplane_load_balancer.lb", "listeners.0.port", "8080"),
			},
			{Config: lbConfig(endpoint, token, 8080), ResourceName: "flexplane_load_balancer.lb", ImportState: true, ImportStateVerify: true},
			{
				Config: v1,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("flexplane_vm.web", "status", "RUNNING"),
					resource.TestCheckResourceAttr("flexplane_vm.web", "host", "pve1"),
					resource.TestCheckResourceAttr("flexplane_vm.web", "security_groups.0", "web"),
					resource.TestMatchResourceAttr("flexplane_vm.web", "nics.0.address", regexp.MustCompile(`^10\.30\.0\.\d+$`)),
					resource.TestCheckResourceAttrPair("flexplane_vm.web", "nics.0.network", "flexplane_network.lan", "id"),
					resource.TestCheckResourceAttrPair("flexplane_port_forward.ssh", "vm_id", "flexplane_vm.web", "id"),
					resource.TestMatchResourceAttr("flexplane_port_forward.ssh", "public_address", regexp.MustCompile(`^203\.0\.113\.`)),
					resource.TestMatchResourceAttr("flexplane_service_account.ci", "token", regexp.MustCompile(`^fpsa_`)),
					resource.TestCheckResourceAttr("data.flexplane_compute_profile.vm", "vcpus", "1"),
					resource.TestCheckResourceAttr("data.flexplane_storage_profile.ssd", "zones.0", "alpha"),
					resource.TestCheckResourceAttr("data.flexplane_image.tiny", "cloud_init", "true"),
					resource.TestCheckResourceAttr("data.flexplane_zone.alpha", "status", "ONLINE"),
					resource.TestCheckResourceAttrWith("flexplane_vm.web", "id", func(v string) error { vmID = v; return nil }),
					resource.TestCheckResourceAttr("flexplane_firewall_rule.ssh", "from_port", "22"),
					resource.TestCheckResourceAttr("flexplane_firewall_rule.ssh", "source", "198.51.100.0/24"),
					resource.TestCheckResourceAttr("flexplane_firewall_rule.ssh", "position", "0"),
					resource.TestCheckResourceAttrWith("flexplane_firewall_rule.ssh", "id", func(v string) error { ruleID = v; return nil }),
					resource.TestCheckResourceAttrPair("flexplane_one_to_one_address.web", "vm_id", "flexplane_vm.web", "id"),
					resource.TestMatchResourceAttr("flexplane_one_to_one_address.web", "public_address", regexp.MustCompile(`^203\.0\.113\.`)),
					resource.TestCheckResourceAttrWith("flexplane_one_to_one_address.web", "id", func(v string) error { oneToOneID = v; return nil }),
					resource.TestCheckResourceAttrPair("flexplane_backup_schedule.web", "id", "flexplane_vm.web", "id"),
					resource.TestCheckResourceAttr("flexplane_backup_schedule.web", "state", "ACTIVE"),
					resource.TestCheckResourceAttr("flexplane_vm.web", "keep_backups", "true"),
					resource.TestCheckResourceAttr("flexplane_backup.web", "status", "SUCCEEDED"),
					resource.TestCheckResourceAttr("flexplane_backup.web", "vm_name", "acc"),
					resource.TestCheckResourceAttr("flexplane_backup.web", "zone", "alpha"),
					resource.TestCheckResourceAttrWith("flexplane_backup.web", "id", func(v string) error { backupID = v; return nil }),
					resource.TestCheckResourceAttr("data.flexplane_backups.all", "backups.#", "1"),
					resource.TestCheckResourceAttr("flexplane_disk.data", "size_gib", "2"),
					resource.TestCheckResourceAttr("flexplane_disk.data", "storage_profile", "ssd"),
					resource.TestMatchResourceAttr("flexplane_disk.data", "slot", regexp.MustCompile(`^scsi[1-9]$`)),
					func(st *terraform.State) error {
						return diskGiB(s, token, vmID, st.RootModule().Resources["flexplane_disk.data"].Primary.Attributes["slot"], 2)
					},
					resource.TestCheckResourceAttrPair("data.flexplane_backups.all", "backups.0.id", "flexplane_backup.web", "id"),
					resource.TestCheckResourceAttr("data.flexplane_backups.all", "backups.0.description", "before the upgrade"),
					func(*terraform.State) error { return backupSchedule(s, token, vmID, "daily", 3) },
				),
			},
			{ // update in place (the VM's disk grown); what the API cannot change replaced
				Config: v2,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("flexplane_security_group.web", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("flexplane_vm.web", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("flexplane_port_forward.ssh", plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction("flexplane_firewall_rule.ssh", plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectResourceAction("flexplane_one_to_one_address.web", plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectResourceAction("flexplane_backup_schedule.web", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("flexplane_backup.web", plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction("flexplane_disk.data", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("flexplane_security_group.web", "rules.0.ports", "22,80"),
					resource.TestCheckResourceAttr("flexplane_security_group.web", "description", "web servers, and HTTP"),
					resource.TestCheckResourceAttr("flexplane_vm.web", "compute_profile", "large"),
					resource.TestCheckResourceAttr("flexplane_vm.web", "disk_gib", "6"),
					resource.TestCheckResourceAttrWith("flexplane_vm.web", "id", func(v string) error {
						if v != vmID {
							return fmt.Errorf("the VM was replaced: %s, was %s", v, vmID)
						}
						return nil
					}),
					func(*terraform.State) error { return bootDiskGiB(s, token, vmID, 6) },
					resource.TestCheckResourceAttr("flexplane_firewall_rule.ssh", "description", "ssh from the office"),
					resource.TestCheckResourceAttrWith("flexplane_firewall_rule.ssh", "id", changed("firewall rule", &ruleID)),
					resource.TestCheckResourceAttr("flexplane_one_to_one_address.web", "public_address", "203.0.113.15"),
					resource.TestCheckResourceAttrWith("flexplane_one_to_one_address.web", "id", changed("1:1 address", &oneToOneID)),
					resource.TestCheckResourceAttr("flexplane_backup_schedule.web", "schedule", "mon..fri 02:00"),
					resource.TestCheckResourceAttr("flexplane_vm.web", "keep_backups", "false"),
					func(*terraform.State) error { return backupSchedule(s, token, vmID, "mon..fri 02:00", 5) },
					resource.TestCheckResourceAttr("flexplane_disk.data", "size_gib", "3"),
					func(st *terraform.State) error {
						return diskGiB(s, token, vmID, st.RootModule().Resources["flexplane_disk.data"].Primary.Attributes["slot"], 3)
					},
					resource.TestCheckResourceAttrWith("flexplane_backup.web", "id", func(v string) error {
						if v != backupID {
							return fmt.Errorf("the backup was taken again: %s, was %s", v, backupID)
						}
						return nil
					}),
				),
			},
			{ // a smaller disk: refused at plan time on disk_gib, never a replacement
				Config:      accConfig(endpoint, token, shrunk),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)disk_gib cannot shrink.*disk_gib\s+= 5.*a disk only grows: 5 GiB is less than its 6 GiB`),
			},
			{Config: v2, ResourceName: "flexplane_vm.web", ImportState: true, ImportStateVerify: true,
				// What the API does not read back: the create's inputs.
				ImportStateVerifyIgnore: []string{"image", "compute_profile", "storage_profile", "user", "timeouts", "keep_backups"}},
			{Config: v2, ResourceName: "flexplane_network.lan", ImportState: true, ImportStateVerify: true},
			{Config: v2, ResourceName: "flexplane_backup.web", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"storage_profile"}},
			{Config: v2, ResourceName: "flexplane_backup_schedule.web", ImportState: true, ImportStateVerify: true},
			{Config: v2, ResourceName: "flexplane_disk.data", ImportState: true, ImportStateVerify: true},
			{Config: v2, ResourceName: "flexplane_port_forward.ssh", ImportState: true, ImportStateVerify: true},
			{Config: v2, ResourceName: "flexplane_security_group.web", ImportState: true, ImportStateVerify: true},
			{Config: v2, ResourceName: "flexplane_firewall_rule.ssh", ImportState: true, ImportStateVerify: true},
			{Config: v2, ResourceName: "flexplane_one_to_one_address.web", ImportState: true, ImportStateVerify: true},
			{Config: v2, ResourceName: "flexplane_service_account.ci", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"token"}},
			{ // drift: the VM (and with it its schedule) and the backup deleted outside show in the next plan
				PreConfig: func() {
					outside(t, s, token, `mutation($id: ID!) { deleteVM(id: $id) { state } }`, vmID)
					outside(t, s, token, `mutation($id: ID!) { deleteBackup(id: $id) { id } }`, backupID)
				},
				Config:             v2,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{ // and the next apply creates them again: nothing of them was left in the state
				Config: v2,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("flexplane_vm.web", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("flexplane_backup_schedule.web", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("flexplane_backup.web", plancheck.ResourceActionCreate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("flexplane_vm.web", "status", "RUNNING"),
					resource.TestCheckResourceAttrWith("flexplane_vm.web", "id", func(v string) error { vmID = v; return nil }),
					// The schedule's job runs (the simulator's clock moved
					// over a weekday's 02:00) and writes an archive that is no
					// resource: keep_backups = false deletes it with the VM,
					// and the destroy leaves no backup.
					func(*terraform.State) error { return scheduledRun(t, s, token, vmID) },
				),
			},
		},
	})
}

// nothingLeft fails when VDC vdc holds a VM, a network, a security group,
// a port forward, a firewall rule, a 1:1 address, a load balancer, a
// Kubernetes cluster, a backup or a service account other than keep.
func nothingLeft(s *stack, token, vdc, keep string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := gqltest.Post(ctx, nil, s.h.GraphQLURL(), gqltest.Request{Query: `{
	  vmsConnection(first: 1) { totalCount }
	  networksConnection(first: 1) { totalCount }
	  securityGroups { name }
	  edgeGateways(first: 10) { nodes { portForwards { id } firewallRules { id } oneToOneAddresses { id } } }
	  loadBalancers(first: 10) { nodes { id } }
	  kubernetesClusters { totalCount }
	  backups(first: 1) { nodes { id } }
	  serviceAccounts { name } }`, Authorization: "Bearer " + token, VDC: vdc})
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return fmt.Errorf("list what is left: %w", err)
	}
	var left struct {
		VMs      struct{ TotalCount int } `json:"vmsConnection"`
		Networks struct{ TotalCount int } `json:"networksConnection"`
		Groups   []struct{ Name string }  `json:"securityGroups"`
		Gateways struct {
			Nodes []struct{ PortForwards, FirewallRules, OneToOneAddresses []struct{ ID string } }
		} `json:"edgeGateways"`
		Accounts []struct{ Name string }               `json:"serviceAccounts"`
		LBs      struct{ Nodes []struct{ ID string } } `json:"loadBalancers"`
		Clusters struct{ TotalCount int }              `json:"kubernetesClusters"`
		Backups  struct{ Nodes []struct{ ID string } } `json:"backups"`
	}
	if err := r.Decode(&left); err != nil {
		return err
	}
	forwards := 0
	for _, g := range left.Gateways.Nodes {
		forwards += len(g.PortForwards) + len(g.FirewallRules) + len(g.OneToOneAddresses)
	}
	if left.VMs.TotalCount != 0 || left.Networks.TotalCount != 0 || len(left.Groups) != 0 || forwards != 0 || len(left.LBs.Nodes) != 0 || left.Clusters.TotalCount != 0 ||
		len(left.Backups.Nodes) != 0 || len(left.Accounts) != 1 || left.Accounts[0].Name != keep {
		b, _ := json.Marshal(left)
		return fmt.Errorf("left in VDC %s after destroy: %s", vdc, b)
	}
	return nil
}

func testExample(t *testing.T, s *stack, tofu string) {
	token := s.serviceAccount(t, "blue", "example", "MEMBER")
	providerDir := buildProvider(t)
	cli := devOverrides(t, providerDir)
	dir := copyExample(t)
	env := []string{flexctl.EnvEndpoint + "=" + s.h.Orchestrator.URL(), flexctl.EnvToken + "=" + token, flexctl.EnvVDC + "=blue"}
	run := func(args ...string) tofuRun {
		r := runTofu(t, tofu, dir, cli, env, args...)
		t.Logf("tofu %s: exit %d", strings.Join(args, " "), r.code)
		return r
	}
	if r := run(append([]string{"apply", "-auto-approve", "-input=false", "-no-color"}, exampleVars...)...); r.code != 0 {
		t.Fatalf("tofu apply: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r := run("output", "-json")
	var out map[string]struct{ Value any }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("tofu output: %v\n%s", err, r.stdout)
	}
	if ssh, _ := out["ssh"].Value.(string); !regexp.MustCompile(`^203\.0\.113\.\d+:2222$`).MatchString(ssh) {
		t.Errorf("ssh output %q", ssh)
	}
	if addr, _ := out["vm_address"].Value.(string); addr != "10.20.0.10" {
		t.Errorf("vm_address output %q, want 10.20.0.10", addr)
	}
	if r := run(append([]string{"plan", "-detailed-exitcode", "-input=false", "-no-color"}, exampleVars...)...); r.code != 0 {
		t.Errorf("a second plan is not empty: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := run(append([]string{"destroy", "-auto-approve", "-input=false", "-no-color"}, exampleVars...)...); r.code != 0 {
		t.Fatalf("tofu destroy: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if err := nothingLeft(s, s.h.Token(t, "admin"), "blue", "example"); err != nil {
		t.Error(err)
	}
}

// changed is a check that an id differs from *was (the resource was
// replaced) and records it in *was.
func changed(what string, was *string) func(string) error {
	return func(v string) error {
		if v == *was {
			return fmt.Errorf("the %s was not replaced: id %s", what, v)
		}
		*was = v
		return nil
	}
}

// bootDiskGiB fails unless the API reads the boot disk of VM id as gib GiB.
func bootDiskGiB(s *stack, token, id string, gib float64) error {
	return diskGiB(s, token, id, "", gib)
}

// diskGiB fails unless the API reads the disk of VM id in slot (the boot
// disk for "") as gib GiB.
func diskGiB(s *stack, token, id, slot string, gib float64) error {
	var out struct {
		VM struct {
			Disks []struct {
				Slot    string
				Boot    bool
				SizeGiB float64
			}
		}
	}
	if err := readVM(s, token, id, "disks { slot boot sizeGiB }", &out); err != nil {
		return err
	}
	for _, d := range out.VM.Disks {
		if (d.Slot == slot || slot == "" && d.Boot) && d.SizeGiB == gib {
			return nil
		}
	}
	return fmt.Errorf("the VM's disks are %+v, want %q (empty: the boot disk) of %v GiB", out.VM.Disks, slot, gib)
}

// backupSchedule fails unless the API reads the backup schedule of VM id
// as schedule, keeping the last keepLast archives.
func backupSchedule(s *stack, token, id, schedule string, keepLast int) error {
	var out struct {
		VM struct {
			BackupSchedule *struct {
				Schedule, State string
				KeepLast        int
			}
		}
	}
	if err := readVM(s, token, id, "backupSchedule { schedule keepLast state }", &out); err != nil {
		return err
	}
	if b := out.VM.BackupSchedule; b == nil || b.Schedule != schedule || b.KeepLast != keepLast || b.State != "ACTIVE" {
		return fmt.Errorf("the VM's backup schedule is %+v, want %q keeping %d, active", b, schedule, keepLast)
	}
	return nil
}

// outside runs mutation on the object id in VDC red, as if outside
// OpenTofu, and fails the test when the API refuses it.
func outside(t *testing.T, s *stack, token, mutation, id string) {
	t.Helper()
	r, err := gqltest.Post(context.Background(), nil, s.h.GraphQLURL(), gqltest.Request{
		Query: mutation, Variables: map[string]any{"id": id}, Authorization: "Bearer " + token, VDC: "red"})
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		t.Fatalf("%s outside: %v", mutation, err)
	}
}

// scheduledRun moves zone alpha's clock three days on, past a weekday's
// 02:00, and waits until VM id's backup schedule has written an archive.
func scheduledRun(t *testing.T, s *stack, token, id string) error {
	s.h.Clusters[0].Sim.AdvanceClockForTest(73 * time.Hour)
	poll.Until(t, time.Minute, "the scheduled backup of the VM", func() error {
		var out struct {
			VM struct {
				Backups []struct {
					Status      string
					Description *string
				}
			}
		}
		if err := readVM(s, token, id, "backups { status description }", &out); err != nil {
			return err
		}
		for _, b := range out.VM.Backups {
			if b.Description == nil && b.Status == "SUCCEEDED" {
				return nil
			}
		}
		return fmt.Errorf("the VM's backups are %+v, none scheduled", out.VM.Backups)
	})
	return nil
}

// readVM reads fields of VM id of VDC red with token into out (whose
// field VM receives them).
func readVM(s *stack, token, id, fields string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := gqltest.Post(ctx, nil, s.h.GraphQLURL(), gqltest.Request{
		Query:     `query($id: ID!) { vm(id: $id) { ` + fields + ` } }`,
		Variables: map[string]any{"id": id}, Authorization: "Bearer " + token, VDC: "red"})
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return fmt.Errorf("read the VM's %s: %w", fields, err)
	}
	return r.Decode(out)
}
