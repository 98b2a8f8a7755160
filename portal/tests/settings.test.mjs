// The VDC settings page, against the in-process backend (TestBrowser in
// pkg/portal):
// - the platform admin, in the member's first VDC, grants bob a role,
//   changes it, and removes it again (each confirmed where it deletes);
// - makes a service account: its token shows once, with a Copy button, and
//   works against the API in that VDC; its use shows as "Last used";
// - rotates the token (the old one is refused from then on, the new one
//   works) and deletes the account (its token is refused);
// - a member of the VDC sees its members but nothing to change them with,
//   and no service accounts.
// Every state passes axe-core, the page fits a 390 px phone.
// Variables of lib.mjs.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { check, phone } from './axe.mjs'
import { admin, base, fieldError, go, member, memberVDCs, said, session, shot, signIn } from './lib.mjs'

const vdc = memberVDCs[0]

// api sends a query to the API with a bearer token, as a script would.
async function api(token, query) {
  const r = await fetch(base + '/graphql', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}`, 'FlexPlane-VDC-ID': vdc },
    body: JSON.stringify({ query }),
  })
  return { status: r.status, body: await r.json() }
}

async function openSettings(page, who) {
  await page.goto(base + '/')
  await signIn(page, who)
  await page.getByLabel('VDC', { exact: true }).selectOption(vdc)
  await go(page, 'VDC settings', 'VDC settings')
  await page.getByRole('heading', { level: 2, name: 'Members' }).waitFor()
}

test('a VDC admin manages its members and service accounts', async (t) => {
  const { page } = await session(t)
  await openSettings(page, admin)

  // A member: added, its role changed, removed.
  await page.getByRole('button', { name: 'Add member' }).click()
  let dialog = page.getByRole('dialog', { name: 'Add member' })
  await dialog.getByRole('button', { name: 'Add' }).click()
  await fieldError(dialog, 'user').getByText('Enter the user name').waitFor()
  await dialog.getByLabel('User').fill('bob')
  await dialog.getByLabel('Role').selectOption('VIEWER')
  await check(page, 'member form', false)
  await dialog.getByRole('button', { name: 'Add' }).click()
  await said(page, 'Added bob as viewer.')
  const bob = page.locator('tbody tr[data-user="bob"]')
  await bob.locator('td[data-label="Role"]').getByText('Viewer').waitFor()
  await bob.getByText('this VDC').waitFor()
  await page.getByRole('button', { name: 'Change role of bob' }).click()
  dialog = page.getByRole('dialog', { name: 'Change the role of bob' })
  await dialog.getByLabel('Role').selectOption('MEMBER')
  await dialog.getByRole('button', { name: 'Save' }).click()
  await said(page, 'bob is now member.')
  await bob.locator('td[data-label="Role"]').getByText('Member').waitFor()

  // A service account: its token once, with a Copy button.
  await page.getByText('No service accounts yet.').waitFor()
  await page.getByRole('button', { name: 'New service account' }).click()
  dialog = page.getByRole('dialog', { name: 'New service account' })
  await dialog.getByLabel('Name').fill('Bad Name')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'name').waitFor()
  await dialog.getByLabel('Name').fill('ci')
  await dialog.getByLabel('Role').selectOption('MEMBER')
  await dialog.getByRole('button', { name: 'Create' }).click()
  let tokenDialog = page.getByRole('dialog', { name: 'Token of ci', exact: true })
  await tokenDialog.waitFor()
  const token = await tokenDialog.getByLabel('Token', { exact: true }).inputValue()
  assert.match(token, new RegExp(`^fpsa_${vdc}_sa-[0-9a-f]{20}_[A-Za-z0-9_-]{43}$`))
  await tokenDialog.getByRole('button', { name: 'Copy' }).click()
  await tokenDialog.getByRole('status').getByText(/Copied|Selected/).waitFor()
  await check(page, 'token dialog', false)
  await shot(page, 'vdc-settings-token')
  await tokenDialog.getByRole('button', { name: 'Done' }).click()
  await tokenDialog.waitFor({ state: 'hidden' })
  assert.equal(await page.getByText(token).count(), 0, 'the token shows only once')

  // The token works in its VDC, as a script uses it; the page shows its use.
  let r = await api(token, '{ currentVDC { name } }')
  assert.equal(r.status, 200, JSON.stringify(r.body))
  assert.equal(r.body.data.currentVDC.name, vdc)
  await page.reload()
  await page.getByRole('heading', { level: 1, name: 'VDC settings' }).waitFor()
  const ci = page.locator('tbody tr[data-name="ci"]')
  await ci.getByTestId('last-used').getByText(/UTC$/).waitFor()
  await shot(page, 'vdc-settings')
  await phone(page, 'VDC settings')

  // Rotation without grace: the old token is refused, the new one works.
  await page.getByRole('button', { name: 'Rotate token of ci' }).click()
  await page.getByRole('dialog', { name: 'Rotate the token of ci?' }).getByRole('button', { name: 'Rotate' }).click()
  tokenDialog = page.getByRole('dialog', { name: 'Token of ci', exact: true })
  await tokenDialog.waitFor()
  const rotated = await tokenDialog.getByLabel('Token', { exact: true }).inputValue()
  assert.notEqual(rotated, token)
  assert.match(rotated, new RegExp(`^fpsa_${vdc}_sa-[0-9a-f]{20}_[A-Za-z0-9_-]{43}$`))
  await tokenDialog.getByRole('button', { name: 'Done' }).click()
  r = await api(token, '{ me { subject } }')
  assert.equal(r.status, 401)
  assert.equal(r.body.errors[0].extensions.code, 'UNAUTHENTICATED')
  r = await api(rotated, '{ me { subject } }')
  assert.equal(r.status, 200, JSON.stringify(r.body))

  // Deletion: the account goes, its token is refused.
  await page.getByRole('button', { name: 'Delete ci' }).click()
  await page.getByRole('dialog', { name: 'Delete service account ci?' }).getByRole('button', { name: 'Delete' }).click()
  await said(page, 'Deleted service account ci.')
  await page.getByText('No service accounts yet.').waitFor()
  r = await api(rotated, '{ me { subject } }')
  assert.equal(r.status, 401)
  assert.match(r.body.errors[0].message, /does not exist/)

  // bob's grant removed, confirmed.
  await page.getByRole('button', { name: 'Remove bob' }).click()
  await page.getByRole('dialog', { name: 'Remove bob?' }).getByRole('button', { name: 'Remove' }).click()
  await said(page, 'Removed bob.')
  await bob.waitFor({ state: 'detached' })
})

test('a member of the VDC sees its members but cannot change them', async (t) => {
  const { page } = await session(t)
  await openSettings(page, member)
  await page.locator(`tbody tr[data-user="${member.user}"]`).getByText('the identity provider').waitFor()
  assert.equal(await page.getByRole('button', { name: 'Add member' }).count(), 0)
  assert.equal(await page.getByRole('heading', { name: 'Service accounts' }).count(), 0)
  await check(page, 'VDC settings of a member', false)
})
