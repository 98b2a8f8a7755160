// The user-data editor of the VM wizard, against a backend whose zone keeps
// snippets (TestBrowserUserData in pkg/portal starts it, with a network of
// the member's VDC in the zone):
// - the editor is a monospace textarea with a hint of the two forms it
//   takes and its size counted live against 64 KiB (over it, the wizard
//   refuses before sending);
// - a cloud-config that is not YAML is refused by the API on the field,
//   with the line it names quoted and selected in the text;
// - fixed, the VM is created; pkg/portal checks through Proxmox that its
//   snippet holds the tenant's part.
// The wizard with the refusal passes axe-core and fits a 390 px phone.
//
// Environment: PORTAL_URL, OIDC_ISSUER, PORTAL_MEMBER_USER/PASSWORD,
// PORTAL_MEMBER_VDCS (the member's VDC first), PORTAL_ARTIFACTS,
// PORTAL_ZONE (the zone of the VM), PORTAL_VM_NAME (its name),
// PORTAL_USER_DATA (the cloud-config it is created with).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { check, phone } from './axe.mjs'
import { base, env, fieldError, member, session, shot, signIn } from './lib.mjs'

const zone = env('PORTAL_ZONE')
const vmName = env('PORTAL_VM_NAME')
const userData = env('PORTAL_USER_DATA')
// Creating the VM first stages its image into the zone.
const vmTimeout = 60_000

const size = (text) => `${Buffer.byteLength(text).toLocaleString('en')} of 65,536 bytes (64 KiB)`

test('a member is refused a bad cloud-config on its line, fixes it and creates the VM', async (t) => {
  const { page, graphql } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await page.goto(base + '/vms/new')
  await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
  await page.getByLabel('Zone', { exact: true }).selectOption(zone)
  await page.getByLabel('Name', { exact: true }).fill(vmName)
  await page.getByLabel('Disk size (GiB)', { exact: true }).fill('1')

  const editor = page.getByLabel('User-data (optional)', { exact: true })
  const counter = page.getByTestId('user-data-size')
  assert.equal(await editor.evaluate((el) => el.tagName), 'TEXTAREA')
  assert.match(await editor.evaluate((el) => getComputedStyle(el).fontFamily), /mono/i)
  await page.getByText('Either a #cloud-config YAML document').waitFor()
  assert.equal((await counter.innerText()).trim(), size(''))

  // Counted live, in UTF-8 bytes; over 64 KiB the wizard refuses at once.
  const huge = '#cloud-config\n#' + 'é'.repeat(33_000) + '\n'
  await editor.fill(huge)
  const tooMany = (Buffer.byteLength(huge) - 65536).toLocaleString('en')
  assert.equal((await counter.innerText()).replace(/\s+/g, ' ').trim(), `${size(huge)}: ${tooMany} too many`)
  await page.getByRole('button', { name: 'Create VM' }).click()
  await fieldError(page, 'userData').getByText(/more than the 64 KiB/).waitFor()
  assert.equal(graphql.filter((r) => r.body.includes('createVM(')).length, 0, 'user-data over the limit was sent')

  // Not YAML: the API's refusal on the field, the line it names quoted
  // and selected.
  const bad = '#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: hello\nhostname: a: b\n'
  await editor.fill(bad)
  assert.equal((await counter.innerText()).trim(), size(bad))
  await page.getByRole('button', { name: 'Create VM' }).click()
  await fieldError(page, 'userData').getByText(/not valid YAML: line 5/).waitFor()
  assert.equal((await page.getByTestId('user-data-line').innerText()).trim(), 'Line 5: hostname: a: b')
  assert.equal(await editor.getAttribute('aria-invalid'), 'true')
  const selected = await editor.evaluate((el) => [document.activeElement === el, el.value.slice(el.selectionStart, el.selectionEnd)])
  assert.deepEqual(selected, [true, 'hostname: a: b'], 'the refused line is focused and selected')
  assert.equal(graphql.filter((r) => r.body.includes('createVM(')).length, 1)
  await check(page, 'vm wizard with a refused user-data', false)
  await phone(page, 'vm wizard with a refused user-data')
  await shot(page, 'vm-wizard-user-data-refused')

  // Fixed: the VM is created with it.
  await editor.fill(userData)
  assert.equal((await counter.innerText()).trim(), size(userData))
  await shot(page, 'vm-wizard-user-data')
  await page.getByRole('button', { name: 'Create VM' }).click()
  await page.getByRole('heading', { name: new RegExp(`^Creating ${vmName}`) }).waitFor()
  await page.getByTestId('operation-state').getByText('SUCCEEDED', { exact: true }).waitFor({ timeout: vmTimeout })
  const create = JSON.parse(graphql.filter((r) => r.body.includes('createVM(')).at(-1).body)
  assert.equal(create.variables.in.userData, userData, 'the user-data is sent as typed')
  await shot(page, 'vm-wizard-user-data-created')
})
