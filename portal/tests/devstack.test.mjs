// Browser test of the portal on the real dev stack (`make dev`; pkg/dev/devstack's
// TestPortalOnDevStack starts it): every page goes through the orchestrator,
// its agents and the simulated Proxmox zones, and every sign-in through the
// dev provider's login form. Besides lib.mjs's variables (PORTAL_URL,
// OIDC_ISSUER, PORTAL_ADMIN_*, PORTAL_MEMBER_*, PORTAL_MEMBER_VDCS,
// PORTAL_ARTIFACTS, CHROMIUM):
//
//   PORTAL_OTHER_USER / _PASSWORD      a member of a VDC the member is not in
//   PORTAL_ZONES                       every zone, comma separated; the VM goes into the first
//   PORTAL_HOSTS                       how many hosts the zones have in all
//   PORTAL_COMPUTE_PROFILE             optional: the VM's compute profile (default the wizard's)
//   PORTAL_UPDATE_HOST / _OTHER        a host whose agent the admin updates, and one left as
//                                      it is (zone/name)
//   PORTAL_UPDATE_FROM / _TO           the version the agents run, the release the stack publishes
//
// One browser session, as a person would use it: the member signs in,
// switches from their first VDC to their second, looks at the catalog,
// creates a VM through the wizard and watches it reach RUNNING, stops it
// with the confirmation, and signs out; the other member signs in and finds
// the VM neither in the list nor at its address; the admin signs in and
// sees every zone and every host online and updates one host's agent to
// the second build the stack publishes. No request may go anywhere but the
// portal and the provider's login pages (lib.mjs), and both must be used.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { admin, base, checkZonesAndHosts, env, go, issuer, member, memberVDCs, run, session, shot, signIn, stopVM, updateAgentFromHostsPage } from './lib.mjs'

const other = { user: env('PORTAL_OTHER_USER'), password: env('PORTAL_OTHER_PASSWORD') }
const zones = env('PORTAL_ZONES').split(',').map((s) => s.trim()).filter(Boolean)
const hostCount = Number(env('PORTAL_HOSTS'))
const [firstVDC, vdc] = memberVDCs
const vmName = `e2e-${run}`
// The dev stack stages its images before it is ready; creating a VM is a
// clone, a resize and a start in the simulator.
const vmTimeout = 90_000

// listed waits until a list page shows its table (or says it is empty).
async function listed(page, label, heading, screenshot) {
  await go(page, label, heading)
  await page.getByRole('table').or(page.getByText(/^No .*s yet\.$/)).first().waitFor()
  if (screenshot) await shot(page, screenshot)
}

async function signOut(page) {
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByText('You are signed out.').waitFor()
  assert.equal(new URL(page.url()).origin, base)
}

test('the portal on the dev stack: a VM from the wizard, isolation between VDCs, every zone and host', async (t) => {
  const began = Date.now()
  const phase = (what) => console.log(`${((Date.now() - began) / 1000).toFixed(1)}s ${what}`)
  const { page, graphql, origins } = await session(t)

  // alice signs in through the provider's form and switches VDC.
  await page.goto(base + '/')
  await shot(page, 'signin')
  await signIn(page, member)
  const select = page.getByLabel('VDC', { exact: true })
  await select.selectOption(firstVDC)
  await page.getByRole('heading', { name: `VDC ${firstVDC}` }).waitFor()
  const before = graphql.length
  await select.selectOption(vdc)
  await page.getByRole('heading', { name: `VDC ${vdc}` }).waitFor()
  const sent = graphql.slice(before)
  assert.ok(sent.length > 0, 'no request after switching VDC')
  for (const r of sent) assert.equal(r.headers['flexplane-vdc-id'], vdc)
  // The VDC's quotas with what it uses of them.
  const quotas = await page.getByTestId('vdc-quotas').innerText()
  const vmsUsed = /vCPUs[\s\S]*\d+ of \d+[\s\S]*VMs\s*(\d+) of \d+/.exec(quotas)
  assert.ok(vmsUsed, `quotas and usage: ${quotas}`)
  await shot(page, 'home')
  phase(`${member.user} signed in, in VDC ${vdc}`)

  // The catalog and the VDC's networks.
  await listed(page, 'Networks', 'Networks')
  await page.locator(`tbody tr[data-zone="${zones[0]}"]`).first().waitFor()
  await shot(page, 'networks')
  await listed(page, 'Images', 'Images', 'images')
  await listed(page, 'Compute profiles', 'Compute profiles', 'compute-profiles')
  await listed(page, 'Storage profiles', 'Storage profiles', 'storage-profiles')

  // The wizard: the VM is created and its operation followed until it runs.
  await listed(page, 'VMs', 'VMs')
  await page.getByRole('link', { name: 'New VM' }).click()
  await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
  await page.getByLabel('Zone', { exact: true }).selectOption(zones[0])
  await page.getByLabel('Name', { exact: true }).fill(vmName)
  if (process.env.PORTAL_COMPUTE_PROFILE) await page.getByLabel('Compute profile').selectOption(process.env.PORTAL_COMPUTE_PROFILE)
  await page.getByLabel('SSH public keys').fill('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb0m5Xo2yVt0pYQm2b8r7dJcTnQe6D8l4p1tq8S9n0u e2e@devstack')
  await shot(page, 'vm-wizard')
  const created = Date.now()
  await page.getByRole('button', { name: 'Create VM' }).click()
  await page.getByRole('heading', { name: `Creating ${vmName} in VDC ${vdc}` }).waitFor()
  await shot(page, 'vm-wizard-progress')
  await page.getByTestId('created-status').getByText('RUNNING', { exact: true }).waitFor({ timeout: vmTimeout })
  await page.getByTestId('operation-state').getByText('SUCCEEDED', { exact: true }).waitFor()
  phase(`VM ${vmName} RUNNING ${Date.now() - created} ms after Create VM`)
  const creates = graphql.filter((r) => r.body.includes('createVM'))
  assert.equal(creates.length, 1, 'one createVM')
  assert.equal(creates[0].headers['flexplane-vdc-id'], vdc)
  await shot(page, 'vm-wizard-running')

  // The detail page, then stop with the confirmation.
  await page.getByRole('link', { name: vmName, exact: true }).click()
  await page.getByRole('heading', { level: 1, name: vmName }).waitFor()
  const vmPath = new URL(page.url()).pathname
  await page.getByTestId('vm-status').getByText('RUNNING').waitFor()
  assert.match(await page.locator('.props').first().innerText(), /Addresses\s*\d+\.\d+\.\d+\.\d+/)
  // Its NIC on the VDC's network with its address, its disk with the
  // storage profile, and the operations Proxmox recorded: the create and
  // the start it did.
  const nic = page.getByTestId('vm-nics').locator('tbody tr')
  await nic.first().waitFor()
  assert.equal(await nic.count(), 1)
  assert.match(await nic.innerText(), /net0[\s\S]*\d+\.\d+\.\d+\.\d+\/\d+[\s\S]*\d+\.\d+\.\d+\.\d+[\s\S]*([0-9A-F]{2}:){5}[0-9A-F]{2}[\s\S]*virtio/i)
  const disk = page.getByTestId('vm-disks').locator('tbody tr')
  assert.equal(await disk.count(), 1)
  assert.match(await disk.innerText(), /scsi0[\s\S]*GiB[\s\S]*\(\w+\)[\s\S]*\S+/)
  await page.locator('.operations li[data-kind="CREATE_VM"][data-state="SUCCEEDED"]').waitFor()
  await page.locator('.operations li[data-kind="START_VM"][data-state="SUCCEEDED"]').waitFor()
  // The live metrics are read again while the page shows.
  const reads = () => graphql.filter((r) => r.body.includes('cpuUsage')).length
  const readsBefore = reads()
  const deadline = Date.now() + 10_000
  while (reads() === readsBefore && Date.now() < deadline) await page.waitForTimeout(100)
  assert.ok(reads() > readsBefore, 'the metrics were not read again within 10 s')
  // Two reads give the network and disk rates.
  await page.getByTestId('vm-rates').getByText(/^in \d[\d.]* [KMG]?B\/s, out \d[\d.]* [KMG]?B\/s$/).waitFor()
  await page.getByTestId('vm-rates').getByText(/^read \d[\d.]* [KMG]?B\/s, write \d[\d.]* [KMG]?B\/s$/).waitFor()
  await shot(page, 'vm-detail')
  await stopVM(page, vmTimeout)
  // The stop is in Proxmox's history too (the page reads it after the stop).
  await page.locator('.operations li[data-kind="STOP_VM"][data-state="SUCCEEDED"] time').waitFor()
  await shot(page, 'vm-stopped')
  // At phone width the page fits: nothing scrolls sideways.
  await page.setViewportSize({ width: 390, height: 844 })
  await page.getByTestId('vm-nics').waitFor()
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the VM page is wider than a phone')
  await shot(page, 'vm-detail-phone')
  await page.setViewportSize({ width: 1280, height: 800 })
  await listed(page, 'VMs', 'VMs')
  const row = page.locator(`tbody tr[data-name="${vmName}"]`)
  assert.match(await row.innerText(), new RegExp(`stopped[\\s\\S]*${zones[0]}`))
  await shot(page, 'vms')
  phase(`VM ${vmName} stopped`)
  await signOut(page)

  // bob, in another VDC, sees nothing of it.
  await signIn(page, other)
  await listed(page, 'VMs', 'VMs')
  assert.equal(await page.locator(`tbody tr[data-name="${vmName}"]`).count(), 0, `${other.user} sees the VM in the list`)
  await page.goto(base + vmPath)
  await page.getByRole('alert').getByText('This VM does not exist in this VDC.').waitFor()
  await shot(page, 'vm-not-found')
  phase(`${other.user} does not see the VM`)
  await signOut(page)

  // The admin sees every zone and host online.
  await signIn(page, admin)
  await checkZonesAndHosts(page, zones, hostCount)
  await shot(page, 'hosts')
  // One agent updated to the second build the stack publishes.
  const update = { host: env('PORTAL_UPDATE_HOST'), other: env('PORTAL_UPDATE_OTHER'), from: env('PORTAL_UPDATE_FROM'), to: env('PORTAL_UPDATE_TO') }
  await updateAgentFromHostsPage(t, page, { ...update, shots: 'agent-update' })
  phase(`${admin.user} updates ${update.host} from ${update.from} to ${update.to}`)
  await listed(page, 'VDCs', 'VDCs')
  // The VDCs' usage counts the VM (stopped VMs hold their resources).
  const vms = await page.locator(`tbody tr[data-name="${vdc}"] td[data-label="VMs"]`).innerText()
  assert.match(vms.trim(), new RegExp(`^${Number(vmsUsed[1]) + 1} of \\d+$`), `VMs of ${vdc}`)
  await shot(page, 'vdcs')
  phase(`${admin.user} sees ${zones.length} zones and ${hostCount} hosts online`)

  // Every page fits a phone's width (390 px): nothing scrolls sideways.
  await page.setViewportSize({ width: 390, height: 844 })
  const wide = []
  for (const path of ['/', '/vms', '/vms/new', '/networks', '/images', '/profiles/compute', '/profiles/storage', '/platform/zones', '/platform/hosts', '/platform/vdcs']) {
    await page.goto(base + path)
    await page.locator('main h1').first().waitFor()
    await page.getByText('Loading…').first().waitFor({ state: 'detached' })
    if (!(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth))) {
      wide.push(path)
      await shot(page, `too-wide-${path.replace(/\W+/g, '-')}`)
    }
  }
  assert.deepEqual(wide, [], 'pages wider than a phone')
  phase('every page fits a phone')

  // Both origins were used, and no other (lib.mjs fails the test on any).
  console.log('requests by origin:', JSON.stringify(Object.fromEntries(origins)))
  assert.ok(origins.get(base) > 0 && origins.get(issuer) > 0, 'the portal and the login pages were both used')
})
