variable "zone" {
  description = "The zone's name (flexctl's zones, the portal's Zones page)."
  type        = string
}

variable "image" {
  description = "An image of the catalog."
  type        = string
}

variable "compute_profile" {
  description = "A compute profile (vCPUs and memory)."
  type        = string
}

variable "storage_profile" {
  description = "A storage profile with a pool in the zone."
  type        = string
}

variable "disk_gib" {
  description = "The VM's disk in GiB: at least the image's size."
  type        = number
  default     = 10
}

variable "cidr" {
  description = "The network's IPv4 range; its first address is the gateway, the VM takes the tenth."
  type        = string
  default     = "10.20.0.0/24"
}

variable "ssh_keys" {
  description = "OpenSSH public keys for the VM's user."
  type        = list(string)
  default     = []
}

variable "public_ssh_port" {
  description = "The edge gateway's public port forwarded to the VM's port 22."
  type        = number
  default     = 2222
}
