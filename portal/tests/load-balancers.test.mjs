// The Load balancers page of a VDC, against a backend with zone alpha's
// external network and a flexgateway replica's admin API for alpha
// (TestBrowserLoadBalancers in pkg/portal starts it):
// - a member creates a balancer with a TCP listener over one of the VDC's
//   VMs (picked from its VMs): the form refuses port 70000 itself, and the
//   API's refusal of a certificate that does not match its key shows on the
//   key's field; the balancer is listed with its public address, its
//   listener and its backend;
// - the member edits it: moves the listener to port 8081, adds a backend
//   on the other VM and a TCP health check, and adds a certificate (the
//   API's refusal of a key that is not its own shows on the key's field);
//   opened again, the form shows the certificate by name with empty PEM
//   fields (never shown back), and saving it unchanged keeps it;
// - a viewer of the VDC sees it and has no button to create or delete;
// - the member deletes it (confirmed).
// Every page passes axe-core and fits a 390 px phone.
//
// Environment: the variables of lib.mjs, PORTAL_VIEWER_USER/PASSWORD (a
// viewer of the member's VDC), LB_CERT_PEM, LB_KEY_PEM (a certificate for
// web.example.com and its key) and LB_OTHER_KEY_PEM (a key that is not
// its own).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { check, phone } from './axe.mjs'
import { base, env, fieldError, go, member, said, session, shot, signIn } from './lib.mjs'

// The addresses of zone alpha's pool, 203.0.113.10 to .20.
const pool = /^203\.0\.113\.(1\d|20)$/

const viewer = { user: env('PORTAL_VIEWER_USER'), password: env('PORTAL_VIEWER_PASSWORD') }

test('a member creates a TCP load balancer over a VM', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Load balancers', 'Load balancers')
  await page.getByText('No load balancers yet.').waitFor()
  await page.getByRole('button', { name: 'New load balancer' }).click()
  const dialog = page.getByRole('dialog', { name: 'New load balancer' })
  await dialog.getByLabel('Name', { exact: true }).fill('web')
  await dialog.getByLabel('Zone').selectOption('alpha')
  await dialog.getByLabel('Port', { exact: true }).fill('70000')
  const vms = await dialog.getByLabel('Backend 1 VM').locator('option').allInnerTexts()
  assert.deepEqual(vms.sort(), ['vm-000 (alpha)', 'vm-001 (alpha)'])
  await dialog.getByLabel('Backend 1 VM').selectOption({ label: 'vm-001 (alpha)' })
  await dialog.getByLabel('Backend 1 port').fill('8080')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'listeners[0].port').getByText('Enter a port from 1 to 65535.').waitFor()
  await dialog.getByLabel('Port', { exact: true }).fill('80')

  // A certificate whose key is another's: the API refuses it on the key.
  await dialog.getByRole('button', { name: 'Add a certificate' }).click()
  await dialog.getByLabel('Certificate (PEM)').fill(env('LB_CERT_PEM'))
  await dialog.getByLabel('Private key (PEM)').fill(env('LB_OTHER_KEY_PEM'))
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'certificates[0].privateKeyPem').waitFor()
  assert.match(await fieldError(dialog, 'certificates[0].privateKeyPem').innerText(), /does not match/)
  await check(page, 'load balancer refused', false)
  await dialog.getByRole('button', { name: 'Remove certificate 1' }).click()
  await dialog.getByRole('button', { name: 'Create' }).click()
  await dialog.waitFor({ state: 'hidden' })

  const card = page.locator('article.balancer[data-balancer="web"]')
  await card.waitFor()
  // An address of alpha's pool (its first is the edge gateway's).
  const address = await card.getByTestId('public-address').innerText()
  assert.match(address, pool)
  await said(page, `Created load balancer web on ${address}.`)
  const listener = card.getByRole('table', { name: 'Listeners of web' }).locator('tbody tr')
  assert.equal(await listener.count(), 1)
  assert.equal(await listener.locator('td[data-label="Protocol"]').innerText(), 'TCP')
  assert.equal(await listener.locator('td[data-label="Port"]').innerText(), '80')
  assert.equal(await listener.locator('td[data-label="Routes"]').innerText(), '→ web')
  const backend = card.getByRole('table', { name: 'Pools of web' }).locator('tbody tr')
  assert.equal(await backend.count(), 1)
  assert.equal(await backend.locator('td[data-label="VM"]').innerText(), 'vm-001')
  assert.equal(await backend.locator('td[data-label="Port"]').innerText(), '8080')
  await shot(page, 'load-balancers')
  await phone(page, 'load balancers')
})

test('the member edits the balancer', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Load balancers', 'Load balancers')
  const card = page.locator('article.balancer[data-balancer="web"]')
  await card.getByTestId('public-address').getByText(pool).waitFor()
  const address = await card.getByTestId('public-address').innerText()
  await card.getByRole('button', { name: 'Edit load balancer web' }).click()
  const dialog = page.getByRole('dialog', { name: 'Edit load balancer web' })
  // The form holds the balancer as it is; its name and zone stay.
  assert.equal(await dialog.getByLabel('Name', { exact: true }).inputValue(), 'web')
  assert.equal(await dialog.getByLabel('Name', { exact: true }).isDisabled(), true)
  assert.equal(await dialog.getByLabel('Zone').isDisabled(), true)
  assert.equal(await dialog.getByLabel('Port', { exact: true }).inputValue(), '80')
  assert.equal(await dialog.getByLabel('Backend 1 port').inputValue(), '8080')
  await dialog.getByLabel('Port', { exact: true }).fill('8081')
  await dialog.getByRole('button', { name: 'Add a backend to pool 1' }).click()
  await dialog.getByLabel('Backend 2 VM').selectOption({ label: 'vm-000 (alpha)' })
  await dialog.getByLabel('Backend 2 port').fill('9090')
  await dialog.getByLabel('Health check').selectOption('TCP')
  await dialog.getByRole('button', { name: 'Add a certificate' }).click()
  await dialog.getByLabel('Certificate (PEM)').fill(env('LB_CERT_PEM'))
  await dialog.getByLabel('Private key (PEM)').fill(env('LB_OTHER_KEY_PEM'))
  await dialog.getByRole('button', { name: 'Save' }).click()
  await fieldError(dialog, 'certificates[0].privateKeyPem').waitFor()
  assert.match(await fieldError(dialog, 'certificates[0].privateKeyPem').innerText(), /does not match/)
  await check(page, 'load balancer edit refused', false)
  await dialog.getByLabel('Private key (PEM)').fill(env('LB_KEY_PEM'))
  await dialog.getByRole('button', { name: 'Save' }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, 'Saved load balancer web.')

  // The card shows the change; the address stayed.
  const listener = card.getByRole('table', { name: 'Listeners of web' }).locator('tbody tr')
  await listener.locator('td[data-label="Port"]').getByText('8081', { exact: true }).waitFor()
  assert.equal(await card.getByTestId('public-address').innerText(), address)
  const backends = card.getByRole('table', { name: 'Pools of web' }).locator('tbody tr')
  assert.equal(await backends.count(), 2)
  assert.deepEqual((await backends.locator('td[data-label="VM"]').allInnerTexts()).sort(), ['vm-000', 'vm-001'])
  assert.match(await backends.first().locator('td[data-label="Pool"]').innerText(), /TCP check/)
  const cert = card.getByRole('table', { name: 'Certificates of web' }).locator('tbody tr[data-certificate="cert1"]')
  assert.equal(await cert.locator('td[data-label="Subject names"]').innerText(), 'web.example.com')
  await shot(page, 'load-balancers-edited')

  // Opened again, the certificate is there by name, its PEM never shown
  // back; saving unchanged keeps it.
  await card.getByRole('button', { name: 'Edit load balancer web' }).click()
  await dialog.waitFor()
  assert.equal(await dialog.getByLabel('Certificate name').inputValue(), 'cert1')
  assert.equal(await dialog.getByLabel('Certificate (PEM)').inputValue(), '')
  assert.equal(await dialog.getByLabel('Private key (PEM)').inputValue(), '')
  await dialog.getByTestId('certificate-kept').waitFor()
  assert.equal(await dialog.getByLabel('Backend 2 port').inputValue(), '9090')
  assert.equal(await dialog.getByLabel('Health check').inputValue(), 'TCP')
  await check(page, 'load balancer edit', false)
  await dialog.getByRole('button', { name: 'Save' }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, 'Saved load balancer web.')
  assert.equal(await cert.locator('td[data-label="Subject names"]').innerText(), 'web.example.com')
})

test('a viewer of the VDC sees the balancer and cannot change it', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, viewer)
  await go(page, 'Load balancers', 'Load balancers')
  const card = page.locator('article.balancer[data-balancer="web"]')
  await card.getByTestId('public-address').getByText(pool).waitFor()
  for (const name of ['New load balancer', 'Delete', 'Delete load balancer web']) {
    assert.equal(await page.getByRole('button', { name }).count(), 0, `the viewer has a ${name} button`)
  }
  assert.equal(await card.getByRole('button').count(), 0, 'the viewer has buttons on the balancer')
  await shot(page, 'load-balancers-viewer')
})

test('the member deletes the balancer', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Load balancers', 'Load balancers')
  const card = page.locator('article.balancer[data-balancer="web"]')
  await card.getByTestId('public-address').getByText(pool).waitFor()
  const address = await card.getByTestId('public-address').innerText()
  await card.getByRole('button', { name: 'Delete load balancer web' }).click()
  const confirm = page.getByRole('dialog', { name: 'Delete load balancer web?' })
  await confirm.getByText(`${address} goes back`).waitFor()
  await check(page, 'delete load balancer', false)
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await page.getByText('No load balancers yet.').waitFor()
  await said(page, `Deleted load balancer web; ${address} is back in the pool.`)
  await shot(page, 'load-balancers-deleted')
})
