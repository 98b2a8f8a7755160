// The portal's navigation. Sections group pages by who uses them:
// Compute (the selected VDC's VMs and networks), the catalog, and the
// platform views for admins.
export interface NavItem {
  to: string
  label: string
}

export interface NavSection {
  label: string
  adminOnly?: boolean
  items: NavItem[]
}

export const navigation: NavSection[] = [
  { label: 'Overview', items: [{ to: '/', label: 'Home' }] },
  {
    label: 'Compute',
    items: [
      { to: '/vms', label: 'VMs' },
      { to: '/backups', label: 'Backups' },
      { to: '/networks', label: 'Networks' },
      { to: '/networking', label: 'Networking' },
      { to: '/load-balancers', label: 'Load balancers' },
      { to: '/security-groups', label: 'Security groups' },
      { to: '/placement-groups', label: 'Placement groups' },
      { to: '/kubernetes', label: 'Kubernetes' },
      { to: '/settings', label: 'VDC settings' },
    ],
  },
  {
    label: 'Catalog',
    items: [
      { to: '/images', label: 'Images' },
      { to: '/profiles/compute', label: 'Compute profiles' },
      { to: '/profiles/storage', label: 'Storage profiles' },
    ],
  },
  {
    label: 'Platform',
    adminOnly: true,
    items: [
      { to: '/platform/zones', label: 'Zones' },
      { to: '/platform/hosts', label: 'Hosts' },
      { to: '/platform/enrollment-keys', label: 'Enrollment keys' },
      { to: '/platform/image-staging', label: 'Image staging' },
      { to: '/platform/vdcs', label: 'VDCs' },
      { to: '/platform/external-networks', label: 'External networks' },
    ],
  },
]
