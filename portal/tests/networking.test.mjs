// The Networking page of a VDC and the platform's External networks page,
// against a backend whose agents run the edge gateways (TestBrowserNetworking
// in pkg/portal starts it):
// - the platform admin creates zone alpha's external network; the form
//   refuses a malformed CIDR itself and shows the API's refusal of a router
//   inside the pool on its field;
// - a member creates a firewall rule (the API's refusal of a CIDR that is no
//   network address shown on its field), a port forward to a VM picked from
//   the VDC's VMs (a second one of the same port refused), a 1:1 address
//   and bandwidth limits, and sees them on the gateway, active on a node,
//   with the pool's first address and the rule's counters;
// - a viewer of the VDC sees all of it and has nothing to change it with;
// - the member deletes the rule, then the gateway (each confirmed).
// Every page passes axe-core and fits a 390 px phone.
//
// Environment: PORTAL_URL, OIDC_ISSUER, PORTAL_ADMIN_USER/PASSWORD,
// PORTAL_MEMBER_USER/PASSWORD, PORTAL_MEMBER_VDCS (the member's VDC first),
// PORTAL_VIEWER_USER/PASSWORD (a viewer of it), PORTAL_ARTIFACTS.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { check, phone } from './axe.mjs'
import { admin, base, env, fieldError, go, member, memberVDCs, said, session, shot, signIn } from './lib.mjs'

const viewer = { user: env('PORTAL_VIEWER_USER'), password: env('PORTAL_VIEWER_PASSWORD') }
const vdc = memberVDCs[0]
// The gateway is placed and applied by the orchestrator's next passes.
const applyTimeout = 60_000

test('the platform admin creates the external network of a zone', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, admin)
  await go(page, 'External networks', 'External networks')
  await page.getByText('No external networks yet.').waitFor()
  await page.getByRole('button', { name: 'New external network' }).click()
  const dialog = page.getByRole('dialog', { name: 'New external network' })
  await dialog.getByLabel('Zone').selectOption('alpha')
  await dialog.getByLabel('CIDR').fill('203.0.113.0/33')
  await dialog.getByLabel('Router').fill('203.0.113.15')
  await dialog.getByLabel('Pool start').fill('203.0.113.10')
  await dialog.getByLabel('Pool end').fill('203.0.113.20')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'cidr').getByText('Enter an IPv4 network').waitFor()
  await dialog.getByLabel('CIDR').fill('203.0.113.0/24')
  await dialog.getByRole('button', { name: 'Create' }).click()
  // The router inside the pool: the API refuses it, on its field.
  await fieldError(dialog, 'gateway').waitFor()
  assert.match(await fieldError(dialog, 'gateway').innerText(), /pool/i)
  await check(page, 'external network form', false)
  await dialog.getByLabel('Router').fill('203.0.113.254')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await dialog.waitFor({ state: 'hidden' })
  const row = page.locator('tbody tr[data-zone="alpha"]')
  await row.getByTestId('allocated').getByText('0 of 11').waitFor()
  await said(page, 'Created the external network of alpha with 11 public addresses.')
  await shot(page, 'external-networks')
  await phone(page, 'external networks')
})

test('a member sets up the gateway: a rule, a port forward, a 1:1 address and limits', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Networking', 'Networking')
  await page.getByText(/^No edge gateways yet/).waitFor()

  // A firewall rule: the form's own check, then the API's, then created.
  await page.getByRole('button', { name: 'New firewall rule' }).click()
  let dialog = page.getByRole('dialog', { name: 'New firewall rule' })
  await dialog.getByLabel('Zone').selectOption('alpha')
  await dialog.getByLabel('First port').fill('70000')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'fromPort').getByText('Enter a port from 1 to 65535.').waitFor()
  await dialog.getByLabel('First port').fill('22')
  await dialog.getByLabel('Source').fill('10.1.2.3/8')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'source').waitFor()
  assert.match(await fieldError(dialog, 'source').innerText(), /network address|10\.0\.0\.0\/8/i)
  await dialog.getByLabel('Source').fill('198.51.100.0/24')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, 'Created firewall rule 1 in alpha.')
  const card = page.locator('article.gateway[data-zone="alpha"]')
  const rule = card.getByRole('table', { name: 'Firewall rules in alpha' }).locator('tbody tr')
  await rule.first().waitFor()
  assert.equal(await rule.count(), 1)
  assert.equal(await rule.locator('td[data-label="Ports"]').innerText(), '22')
  assert.equal(await rule.locator('td[data-label="Source"]').innerText(), '198.51.100.0/24')
  assert.equal(await rule.locator('td[data-label="Action"]').innerText(), 'allow')

  // A port forward to a VM of the VDC; the same port again is refused.
  for (const attempt of [1, 2]) {
    await page.getByRole('button', { name: 'New port forward' }).click()
    dialog = page.getByRole('dialog', { name: 'New port forward' })
    const vms = await dialog.getByLabel('VM', { exact: true }).locator('option').allInnerTexts()
    assert.deepEqual(vms.sort(), ['vm-000 (alpha)', 'vm-001 (alpha)'])
    await dialog.getByLabel('VM', { exact: true }).selectOption({ label: 'vm-001 (alpha)' })
    await dialog.getByLabel('Public port').fill('8080')
    await dialog.getByLabel('VM port').fill('80')
    await dialog.getByRole('button', { name: 'Create' }).click()
    if (attempt === 2) {
      await fieldError(dialog, 'publicPort').waitFor()
      await check(page, 'port forward refused', false)
      await dialog.getByRole('button', { name: 'Cancel' }).click()
    }
    await dialog.waitFor({ state: 'hidden' })
  }
  const forward = card.getByRole('table', { name: 'Port forwards in alpha' }).locator('tbody tr')
  assert.equal(await forward.count(), 1)
  assert.equal(await forward.locator('td[data-label="Public"]').innerText(), '203.0.113.10:8080')
  assert.equal(await forward.locator('td[data-label="VM"]').innerText(), 'vm-001')

  // A 1:1 address for the other VM: the lowest free one.
  await page.getByRole('button', { name: 'New 1:1 address' }).click()
  dialog = page.getByRole('dialog', { name: 'New 1:1 address' })
  await dialog.getByLabel('VM', { exact: true }).selectOption({ label: 'vm-000 (alpha)' })
  await dialog.getByLabel('Public address').fill('203.0.113.300')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'publicAddress').getByText('Enter an IPv4 address').waitFor()
  await dialog.getByLabel('Public address').fill('')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await dialog.waitFor({ state: 'hidden' })
  await card.locator('tr[data-address="203.0.113.11"] td[data-label="VM"]').getByText('vm-000').waitFor()

  // Bandwidth limits of the gateway.
  await card.getByRole('button', { name: 'Set limits in alpha' }).click()
  dialog = page.getByRole('dialog', { name: 'Bandwidth limits' })
  await dialog.getByLabel('Egress (Mbit/s)').fill('200000')
  await dialog.getByRole('button', { name: 'Save' }).click()
  await fieldError(dialog, 'egressMbps').waitFor()
  await dialog.getByLabel('Egress (Mbit/s)').fill('500')
  await dialog.getByLabel('Ingress (Mbit/s)').fill('400')
  await dialog.getByRole('button', { name: 'Save' }).click()
  await dialog.waitFor({ state: 'hidden' })
  await card.getByTestId('egress').getByText('500 Mbit/s').waitFor()
  await card.getByTestId('ingress').getByText('400 Mbit/s').waitFor()

  // The orchestrator places the gateway and its agent runs it: active on a
  // node, with the pool's first address and the rule's counters.
  await card.getByTestId('gateway-status').getByText('active').waitFor({ timeout: applyTimeout })
  assert.equal(await card.getByTestId('public-address').innerText(), '203.0.113.10')
  assert.match(await card.locator('dd').first().innerText(), /^pve\d$/)
  assert.match(await rule.locator('td[data-label="Packets"]').innerText(), /^\d[\d,]*$/)
  await shot(page, 'networking')
  await phone(page, 'networking')
})

test('a viewer of the VDC sees the gateway and cannot change it', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, viewer)
  await go(page, 'Networking', 'Networking')
  const card = page.locator('article.gateway[data-zone="alpha"]')
  await card.getByRole('table', { name: 'Firewall rules in alpha' }).waitFor()
  await card.getByRole('table', { name: 'Port forwards in alpha' }).waitFor()
  await card.getByTestId('egress').getByText('500 Mbit/s').waitFor()
  for (const name of ['New firewall rule', 'New port forward', 'New 1:1 address', 'Set limits', 'Delete']) {
    assert.equal(await page.getByRole('button', { name }).count(), 0, `the viewer has a ${name} button`)
  }
  assert.equal(await card.getByRole('button').count(), 0, 'the viewer has buttons on the gateway')
  await shot(page, 'networking-viewer')
})

test('the member deletes the rule and then the gateway', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Networking', 'Networking')
  const card = page.locator('article.gateway[data-zone="alpha"]')
  await card.getByRole('button', { name: 'Delete firewall rule 1 in alpha' }).click()
  let confirm = page.getByRole('dialog', { name: 'Delete firewall rule 1 in alpha?' })
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await card.getByText('No rules: inbound traffic is dropped, outbound allowed.').waitFor()

  await card.getByRole('button', { name: 'Delete gateway in alpha' }).click()
  confirm = page.getByRole('dialog', { name: 'Delete the gateway in alpha?' })
  await confirm.getByText('its port forwards and 1:1 addresses').waitFor()
  await check(page, 'delete gateway', false)
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await page.getByText(/^No edge gateways yet/).waitFor()
  await said(page, 'Deleted the gateway in alpha; its addresses are back in the pool.')
  await shot(page, 'networking-deleted')
})
