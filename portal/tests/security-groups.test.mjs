// The Security groups page and the VM page's groups, against a backend
// with a zone and a running VM of the member's VDC (TestBrowserSecurityGroups
// in pkg/portal starts it):
// - the member creates a group whose rule has a reversed port range: the
//   API's refusal is shown on that rule's ports field; fixed, the group is
//   listed with its rule count, and the VM wizard offers it;
// - on the VM's page the member puts the VM in the group; the group lists
//   it as a member;
// - deleting the group is refused (CONFLICT) while the VM is in it; taken
//   out of it on the VM's page, the group is deleted after a confirmation;
// - an admin of the VDC makes a group its default (then refused its
//   delete), sets the default back to none and deletes it.
// The page passes axe-core and fits a 390 px phone.
//
// Environment: PORTAL_URL, OIDC_ISSUER, PORTAL_MEMBER_USER/PASSWORD,
// PORTAL_MEMBER_VDCS (the member's VDC first), PORTAL_ARTIFACTS,
// PORTAL_VM_PATH (the VM's page), PORTAL_VM_NAME (its name).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { check, phone } from './axe.mjs'
import { admin, base, env, fieldError, go, member, memberVDCs, said, session, shot, signIn } from './lib.mjs'

const vmPath = env('PORTAL_VM_PATH')
const vmName = env('PORTAL_VM_NAME')

async function setGroups(page, groups, message) {
  await page.goto(base + vmPath)
  await page.getByRole('heading', { level: 2, name: 'Security groups' }).waitFor()
  await page.getByRole('button', { name: 'Change security groups' }).click()
  const dialog = page.getByRole('dialog', { name: `Security groups of ${vmName}` })
  const web = dialog.getByRole('checkbox', { name: /^web/ })
  await web.waitFor()
  await web.setChecked(groups.includes('web'))
  await dialog.getByRole('button', { name: 'Save', exact: true }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, message)
}

test('a member creates a group, puts a VM in it and deletes it', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Security groups', exact: true }).click()
  await page.getByRole('heading', { level: 1, name: 'Security groups' }).waitFor()
  await page.getByText('No security groups yet.').waitFor()

  // A reversed port range: refused on the rule's ports field.
  const dialog = page.getByRole('dialog', { name: 'New security group' })
  await page.getByRole('button', { name: 'New security group' }).click()
  await dialog.getByLabel('Name', { exact: true }).fill('web')
  await dialog.getByLabel('Description', { exact: true }).fill('the web servers')
  await dialog.getByLabel('Rule 1 ports', { exact: true }).fill('443')
  await dialog.getByRole('button', { name: 'Add a rule' }).click()
  await dialog.getByLabel('Rule 2 ports', { exact: true }).fill('8100:8000')
  await dialog.getByLabel('Rule 2 peer', { exact: true }).selectOption('cidr')
  await dialog.getByLabel('Rule 2 peer network', { exact: true }).fill('10.1.0.0/24')
  await dialog.getByRole('button', { name: 'Create', exact: true }).click()
  await fieldError(dialog, 'rules[1].ports').waitFor()
  assert.match(await fieldError(dialog, 'rules[1].ports').innerText(), /below its last/)
  assert.equal(await dialog.getByLabel('Rule 2 ports', { exact: true }).getAttribute('aria-invalid'), 'true')
  await check(page, 'security group form', false)
  await shot(page, 'security-groups-invalid')

  // Fixed: created and listed with its two rules.
  await dialog.getByLabel('Rule 2 ports', { exact: true }).fill('8000:8100')
  await dialog.getByRole('button', { name: 'Create', exact: true }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, 'Created security group web.')
  const card = page.locator('article[data-group="web"]')
  assert.equal(await card.getByTestId('rule-count').innerText(), '2')
  assert.equal(await card.getByTestId('member-count').innerText(), '0')
  // The default group is the admins': a member has no button for it.
  assert.equal(await page.getByRole('button', { name: 'Change default group' }).count(), 0)

  // The create wizard offers it once the VDC's default is unticked.
  await page.goto(base + '/vms/new')
  const picker = page.getByRole('group', { name: 'Security groups' })
  await picker.getByRole('checkbox', { name: /the VDC's default/ }).uncheck()
  await picker.getByRole('checkbox', { name: /^web/ }).waitFor()
  await check(page, 'vm wizard with groups', false)

  // The VM put in it on its page, then listed as its member.
  await setGroups(page, ['web'], `${vmName} is in web.`)
  // The list is the VM read again after the change: wait for that read.
  await page.getByTestId('vm-security-groups').getByRole('listitem').filter({ hasText: /^web$/ }).waitFor()
  assert.deepEqual(await page.getByTestId('vm-security-groups').getByRole('listitem').allInnerTexts(), ['web'])
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Security groups', exact: true }).click()
  await card.locator(`[data-member="${vmName}"]`).waitFor()
  assert.equal(await card.getByTestId('member-count').innerText(), '1')
  await check(page, 'security groups', false)
  await phone(page, 'security groups')
  await shot(page, 'security-groups')

  // Refused while the VM is in it.
  await page.getByRole('button', { name: 'Delete security group web' }).click()
  const confirm = page.getByRole('dialog', { name: 'Delete security group web?' })
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.getByRole('alert').getByText(/^Conflict/i).waitFor()
  await shot(page, 'security-groups-conflict')
  await confirm.getByRole('button', { name: 'Cancel' }).click()

  // Out of it, then deleted.
  await setGroups(page, [], `${vmName} is in no security group: its firewall is off.`)
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Security groups', exact: true }).click()
  await card.getByText('No VMs in it.').waitFor()
  await page.getByRole('button', { name: 'Delete security group web' }).click()
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await said(page, 'Deleted security group web.')
  await page.getByText('No security groups yet.').waitFor()
  await shot(page, 'security-groups-deleted')
})

test('an admin sets the default group and takes it back', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, admin)
  await page.getByLabel('VDC', { exact: true }).selectOption(memberVDCs[0])
  await go(page, 'Security groups', 'Security groups')
  await page.getByRole('button', { name: 'New security group' }).click()
  const dialog = page.getByRole('dialog', { name: 'New security group' })
  await dialog.getByLabel('Name', { exact: true }).fill('base')
  await dialog.getByRole('button', { name: 'Remove rule 1' }).click()
  await dialog.getByRole('button', { name: 'Create', exact: true }).click()
  await said(page, 'Created security group base.')

  const setDefault = async (name, message) => {
    await page.getByRole('button', { name: 'Change default group' }).click()
    const d = page.getByRole('dialog', { name: 'Default security group' })
    await d.getByLabel('Group for new VMs', { exact: true }).selectOption(name)
    await d.getByRole('button', { name: 'Save', exact: true }).click()
    await d.waitFor({ state: 'hidden' })
    await said(page, message)
  }
  await setDefault('base', `New VMs of ${memberVDCs[0]} are put in base.`)
  await page.getByTestId('default-group').getByText('base', { exact: true }).waitFor()
  await check(page, 'security groups, admin', false)
  await shot(page, 'security-groups-default')

  // The default cannot be deleted; once it is none, it can.
  await page.getByRole('button', { name: 'Delete security group base' }).click()
  const confirm = page.getByRole('dialog', { name: 'Delete security group base?' })
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.getByRole('alert').getByText(/^Conflict/i).waitFor()
  await confirm.getByRole('button', { name: 'Cancel' }).click()
  await setDefault('', `New VMs of ${memberVDCs[0]} are put in no group.`)
  await page.getByTestId('default-group').getByText('none', { exact: true }).waitFor()
  await page.getByRole('button', { name: 'Delete security group base' }).click()
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await said(page, 'Deleted security group base.')
})
