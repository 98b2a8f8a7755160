# A network, a VM on it and a port forward to the VM's SSH port, in the VDC
# of $FLEXPLANE_VDC, with the token of $FLEXPLANE_TOKEN, at the API of
# $FLEXPLANE_ENDPOINT (docs/use/terraform.md).

terraform {
  required_providers {
    flexplane = {
      source = "flexplane/flexplane"
    }
  }
}

provider "flexplane" {}

data "flexplane_zone" "this" {
  name = var.zone
}

resource "flexplane_network" "lan" {
  name    = "lan"
  zone    = data.flexplane_zone.this.name
  cidr    = var.cidr
  gateway = cidrhost(var.cidr, 1)
}

resource "flexplane_vm" "web" {
  name            = "web"
  zone            = data.flexplane_zone.this.name
  image           = var.image
  compute_profile = var.compute_profile
  storage_profile = var.storage_profile
  disk_gib        = var.disk_gib
  user            = "ubuntu"
  ssh_keys        = var.ssh_keys
  nics = [
    { network = flexplane_network.lan.id, address = cidrhost(var.cidr, 10) },
  ]

  timeouts = {
    create = "10m"
  }
}

resource "flexplane_port_forward" "ssh" {
  vm_id       = flexplane_vm.web.id
  protocol    = "TCP"
  public_port = var.public_ssh_port
  target_port = 22
}

output "vm_id" {
  value = flexplane_vm.web.id
}

output "vm_address" {
  value = flexplane_vm.web.nics[0].address
}

output "ssh" {
  value = "${flexplane_port_forward.ssh.public_address}:${flexplane_port_forward.ssh.public_port}"
}
