// The portal's navigation. Sections group pages by who uses them; the
// mesh and inventory screens slot in here as the API gains them:
//   Compute (VDC): VMs (list, detail, create wizard), then Networks;
//   Platform (admins): Zones and Hosts next to VDCs.
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
    label: 'Catalog',
    items: [
      { to: '/images', label: 'Images' },
      { to: '/profiles/compute', label: 'Compute profiles' },
      { to: '/profiles/storage', label: 'Storage profiles' },
    ],
  },
  { label: 'Platform', adminOnly: true, items: [{ to: '/platform/vdcs', label: 'VDCs' }] },
]
