// Placement through the portal, and the operators' enrollment keys and
// image staging pages, against a zone of two hosts whose VDC has a network
// and a running VM (pkg/portal's TestBrowserMaintenance runs it after
// tests/maintenance.test.mjs):
// - the member creates a SPREAD placement group (a bad name refused on its
//   field), creates a VM in it through the wizard (which offers no host:
//   pinning is an admin's), sees its host and group on the VMs page and
//   the group listing it, and is refused the group's delete (CONFLICT);
// - the platform admin, in the member's VDC, pins a second VM of the
//   group to the first one's host (refused on the Host field: the group
//   spreads), then to the other host, and it runs there;
// - the admin creates a reusable enrollment key (its secret shown once),
//   sees it listed unused and valid, and revokes it (then expired);
// - the admin stages an image into the zone from the Image staging page
//   and sees it staged.
// Each page passes axe-core.
//
// Besides lib.mjs's variables:
//
//   PORTAL_ZONE           the zone
//   PORTAL_STAGE_IMAGE    an image of the catalog not staged in the zone
//   PORTAL_ARTIFACTS      also gets placement.json: the two VMs' hosts and the key's id
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { check, phone } from './axe.mjs'
import { admin, artifacts, base, env, fieldError, go, member, memberVDCs, said, session, shot, signIn } from './lib.mjs'

const zone = env('PORTAL_ZONE')
const stageImage = env('PORTAL_STAGE_IMAGE')
const vdc = memberVDCs[0]
const vmTimeout = 60_000
const found = {}

// createVM fills the wizard (zone, name, an image other than the one the
// last test stages, placement group, the host when given) and submits it.
async function createVM(page, name, group, host) {
  await page.goto(base + '/vms/new')
  await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
  await page.getByLabel('Zone', { exact: true }).selectOption(zone)
  await page.getByLabel('Name', { exact: true }).fill(name)
  const images = await page.getByLabel('Image', { exact: true }).locator('option').evaluateAll((os) => os.map((o) => o.value))
  await page.getByLabel('Image', { exact: true }).selectOption(images.find((i) => i !== stageImage))
  await page.getByLabel('Disk size (GiB)', { exact: true }).fill('4')
  await page.getByLabel('Placement group', { exact: true }).selectOption(group)
  if (host) await page.getByLabel('Host', { exact: true }).selectOption(host)
  await page.getByRole('button', { name: 'Create VM' }).click()
}

async function running(page, name) {
  await page.getByRole('heading', { name: `Creating ${name} in VDC ${vdc}` }).waitFor()
  await page.getByTestId('created-status').getByText('RUNNING', { exact: true }).waitFor({ timeout: vmTimeout })
}

test('a member creates a placement group and a VM in it', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Placement groups', 'Placement groups')
  await page.getByText('No placement groups yet.').waitFor()

  const dialog = page.getByRole('dialog', { name: 'New placement group' })
  await page.getByRole('button', { name: 'New placement group' }).click()
  await dialog.getByLabel('Name', { exact: true }).fill('Web_1')
  await dialog.getByLabel('Zone', { exact: true }).selectOption(zone)
  await dialog.getByLabel('Policy', { exact: true }).selectOption('SPREAD')
  await dialog.getByRole('button', { name: 'Create', exact: true }).click()
  await fieldError(dialog, 'name').waitFor()
  await check(page, 'placement group form', false)
  await dialog.getByLabel('Name', { exact: true }).fill('web')
  await dialog.getByRole('button', { name: 'Create', exact: true }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, 'Created placement group web.')
  const card = page.locator('article[data-group="web"]')
  assert.equal(await card.getByTestId('group-zone').innerText(), zone)
  assert.equal(await card.getByTestId('group-policy').getAttribute('data-policy'), 'SPREAD')
  assert.equal(await card.getByTestId('vm-count').innerText(), '0')

  // The wizard offers the group and, to a member, no host.
  await page.goto(base + '/vms/new')
  await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
  await page.getByLabel('Placement group', { exact: true }).locator('option[value="web"]').waitFor({ state: 'attached' })
  assert.equal(await page.getByLabel('Host', { exact: true }).count(), 0, 'a member is offered a host')
  await createVM(page, 'spread-a', 'web')
  await running(page, 'spread-a')

  // The VMs page: its host and its group.
  await go(page, 'VMs', 'VMs')
  const row = page.locator('tr[data-name="spread-a"]')
  await row.locator('td[data-label="Placement group"]').getByText('web', { exact: true }).waitFor()
  const host = (await row.locator('td[data-label="Host"]').innerText()).trim()
  assert.match(host, /^pve\d+$/)
  found.first = host
  assert.equal((await page.locator('tr[data-name="drained"] td[data-label="Placement group"]').innerText()).trim(), '–')
  await shot(page, 'placement-vms')

  // The group lists it; its delete is refused while the VM is in it.
  await go(page, 'Placement groups', 'Placement groups')
  await card.locator('li[data-vm="spread-a"]').waitFor()
  assert.equal(await card.locator('li[data-vm="spread-a"]').getAttribute('data-host'), host)
  await phone(page, 'placement groups')
  await page.getByRole('button', { name: 'Delete placement group web' }).click()
  const confirm = page.getByRole('dialog', { name: 'Delete placement group web?' })
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.getByRole('alert').getByText(/^Conflict/).waitFor()
  await shot(page, 'placement-groups-conflict')
  await confirm.getByRole('button', { name: 'Cancel' }).click()
})

test('an admin pins a VM of the group to a host', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, admin)
  await page.getByLabel('VDC', { exact: true }).selectOption(vdc)
  await page.goto(base + '/vms/new')
  await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
  await page.getByLabel('Zone', { exact: true }).selectOption(zone)
  const hosts = page.getByLabel('Host', { exact: true })
  await hosts.locator(`option[value="${found.first}"]`).waitFor({ state: 'attached' })
  const names = (await hosts.locator('option').evaluateAll((os) => os.map((o) => o.value))).filter(Boolean)
  assert.equal(names.length, 2, `the zone's hosts offered: ${names}`)
  const other = names.find((n) => n !== found.first)

  // The group spreads: the first VM's host cannot take the second.
  await createVM(page, 'spread-b', 'web', found.first)
  await fieldError(page, 'host').waitFor()
  assert.equal(await hosts.getAttribute('aria-invalid'), 'true')
  await check(page, 'vm wizard, host refused', false)
  await shot(page, 'placement-pin-refused')
  await hosts.selectOption(other)
  await page.getByRole('button', { name: 'Create VM' }).click()
  await running(page, 'spread-b')
  found.second = other
})

test('an admin creates, lists and revokes an enrollment key', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, admin)
  await go(page, 'Enrollment keys', 'Enrollment keys')
  await page.getByRole('button', { name: 'New enrollment key' }).click()
  const dialog = page.getByRole('dialog', { name: 'New enrollment key' })
  await dialog.getByLabel('Valid for', { exact: true }).selectOption('86400')
  await dialog.getByRole('checkbox', { name: /Reusable/ }).check()
  await dialog.getByRole('button', { name: 'Create', exact: true }).click()
  const shown = page.getByRole('dialog', { name: /^Enrollment key \d+$/ })
  await shown.waitFor()
  const secret = await shown.getByLabel('Secret', { exact: true }).inputValue()
  assert.ok(secret.length >= 16, `the secret shown: ${secret}`)
  const id = (await shown.getByRole('heading').innerText()).replace('Enrollment key ', '')
  await check(page, 'enrollment key secret', false)
  await shown.getByRole('button', { name: 'Done' }).click()
  await shown.waitFor({ state: 'hidden' })
  await said(page, `Created enrollment key ${id}.`)
  const row = page.locator(`tr[data-key="${id}"]`)
  assert.equal(await row.getAttribute('data-state'), 'valid')
  assert.equal(await row.locator('td[data-label="Uses"]').innerText(), 'reusable')
  assert.equal(await row.getByTestId('key-used').innerText(), 'no')
  assert.equal(await page.getByText(secret).count(), 0, 'the list shows the secret')
  await phone(page, 'enrollment keys')
  await shot(page, 'enrollment-keys')

  await page.getByRole('button', { name: `Revoke enrollment key ${id}` }).click()
  const confirm = page.getByRole('dialog', { name: `Revoke enrollment key ${id}?` })
  await confirm.getByRole('button', { name: 'Revoke' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await said(page, `Revoked enrollment key ${id}.`)
  await page.locator(`tr[data-key="${id}"][data-state="expired"]`).waitFor()
  assert.equal(await page.getByRole('button', { name: `Revoke enrollment key ${id}` }).count(), 0)
  found.key = id
})

test('an admin stages an image into a zone', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, admin)
  await go(page, 'Image staging', 'Image staging')
  const cell = page.locator(`tr[data-image="${stageImage}"] td[data-zone="${zone}"]`)
  await cell.waitFor()
  assert.equal(await cell.getAttribute('data-state'), 'ABSENT')
  await page.getByRole('button', { name: `Stage ${stageImage} in ${zone}`, exact: true }).click()
  // The page refreshes every 3 s while the zone downloads it.
  await page.locator(`tr[data-image="${stageImage}"] td[data-zone="${zone}"][data-state="STAGED"]`).waitFor({ timeout: vmTimeout })
  assert.equal(await page.getByRole('button', { name: `Stage ${stageImage} in ${zone}`, exact: true }).count(), 0)
  await phone(page, 'image staging')
  await shot(page, 'image-staging')
  writeFileSync(join(artifacts, 'placement.json'), JSON.stringify(found))
})
