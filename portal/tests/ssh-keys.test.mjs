// The SSH keys page of the user menu and the VM wizard's key picker,
// against a backend with a zone (TestBrowserSSHKeys in pkg/portal starts
// it, with a network of the member's VDC in the zone):
// - the member opens SSH keys from the user menu, pastes a malformed key
//   (the API's refusal shown on the field), then a key with options, and
//   sees its type, its SHA256 fingerprint (as ssh-keygen -l prints it) and
//   its options; a second key of the same name is refused on the name;
// - the member creates a VM picking the key by name in the wizard;
// - the member deletes the key after a confirmation.
// The page passes axe-core and fits a 390 px phone.
//
// Environment: PORTAL_URL, OIDC_ISSUER, PORTAL_MEMBER_USER/PASSWORD,
// PORTAL_MEMBER_VDCS (the member's VDC first), PORTAL_ARTIFACTS,
// PORTAL_SSH_KEY (an authorized_keys line, options first),
// PORTAL_ZONE (the zone of the VM), PORTAL_VM_NAME (its name).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { check, phone } from './axe.mjs'
import { base, env, fieldError, member, said, session, shot, signIn } from './lib.mjs'

const key = env('PORTAL_SSH_KEY')
const zone = env('PORTAL_ZONE')
const vmName = env('PORTAL_VM_NAME')
// Creating the VM first stages its image into the zone.
const vmTimeout = 60_000

// fingerprint is the key's SHA256 fingerprint as ssh-keygen -l prints it:
// the unpadded base64 of the SHA-256 of the key's blob.
function fingerprint(line) {
  const fields = line.split(/\s+/)
  const i = fields.findIndex((f) => /^(ssh-|ecdsa-|sk-)/.test(f))
  const blob = Buffer.from(fields[i + 1], 'base64')
  return 'SHA256:' + createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')
}

test('a member adds a key, creates a VM with it and deletes it', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await page.getByRole('banner').getByRole('link', { name: 'SSH keys', exact: true }).click()
  await page.getByRole('heading', { level: 1, name: 'SSH keys' }).waitFor()
  await page.getByText('No SSH keys yet.').waitFor()

  // A malformed key: the API's refusal on the key's field.
  const dialog = page.getByRole('dialog', { name: 'Add SSH key' })
  await page.getByRole('button', { name: 'Add SSH key' }).click()
  await dialog.getByLabel('Name', { exact: true }).fill('laptop')
  await dialog.getByLabel('Public key', { exact: true }).fill('ssh-ed25519 AAAAnot-a-key')
  await dialog.getByRole('button', { name: 'Add', exact: true }).click()
  await fieldError(dialog, 'publicKey').waitFor()
  assert.match(await fieldError(dialog, 'publicKey').innerText(), /not an OpenSSH public key/)
  assert.equal(await dialog.getByLabel('Public key', { exact: true }).getAttribute('aria-invalid'), 'true')
  await check(page, 'ssh key form', false)
  await shot(page, 'ssh-keys-invalid')

  // The key with its options: listed with its type, fingerprint and options.
  await dialog.getByLabel('Public key', { exact: true }).fill(key)
  await dialog.getByRole('button', { name: 'Add', exact: true }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, `Added SSH key laptop (${fingerprint(key)}).`)
  const row = page.locator('tbody tr[data-name="laptop"]')
  assert.equal(await row.getByTestId('fingerprint').innerText(), fingerprint(key))
  assert.match(await row.innerText(), /ssh-ed25519/)
  const options = await row.getByRole('list', { name: 'Options' }).getByRole('listitem').allInnerTexts()
  assert.deepEqual(options, ['no-pty', 'from="10.0.0.0/8"'])

  // The same name again: refused on the name, nothing added.
  await page.getByRole('button', { name: 'Add SSH key' }).click()
  await dialog.getByLabel('Name', { exact: true }).fill('laptop')
  await dialog.getByLabel('Public key', { exact: true }).fill(key)
  await dialog.getByRole('button', { name: 'Add', exact: true }).click()
  await fieldError(dialog, 'name').waitFor()
  await dialog.getByRole('button', { name: 'Cancel' }).click()
  assert.equal(await page.locator('tbody tr').count(), 1)
  await check(page, 'ssh keys', false)
  await phone(page, 'ssh keys')
  await shot(page, 'ssh-keys')

  // The wizard offers the key by name.
  await page.goto(base + '/vms/new')
  await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
  await page.getByLabel('Zone', { exact: true }).selectOption(zone)
  await page.getByLabel('Name', { exact: true }).fill(vmName)
  await page.getByLabel('Disk size (GiB)', { exact: true }).fill('1')
  const picker = page.getByRole('group', { name: 'Your SSH keys' })
  await picker.getByText(fingerprint(key)).waitFor()
  await picker.getByRole('checkbox', { name: /^laptop/ }).check()
  await check(page, 'vm wizard with keys', false)
  await shot(page, 'vm-wizard-keys')
  await page.getByRole('button', { name: 'Create VM' }).click()
  await page.getByRole('heading', { name: new RegExp(`^Creating ${vmName}`) }).waitFor()
  await page.getByTestId('operation-state').getByText('SUCCEEDED', { exact: true }).waitFor({ timeout: vmTimeout })

  // Deleted after a confirmation.
  await page.getByRole('banner').getByRole('link', { name: 'SSH keys', exact: true }).click()
  await page.getByRole('heading', { level: 1, name: 'SSH keys' }).waitFor()
  await page.getByRole('button', { name: 'Delete SSH key laptop' }).click()
  const confirm = page.getByRole('dialog', { name: 'Delete SSH key laptop?' })
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await said(page, 'Deleted SSH key laptop.')
  await page.getByText('No SSH keys yet.').waitFor()
  await shot(page, 'ssh-keys-deleted')
})
