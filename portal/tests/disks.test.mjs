// Browser tests of a VM's disks and size (pkg/portal's TestBrowserDisks).
// Besides lib.mjs's variables (PORTAL_URL, OIDC_ISSUER, PORTAL_MEMBER_*,
// PORTAL_ARTIFACTS, CHROMIUM):
//
//   PORTAL_VM_PATH    the VM page of a running VM of the member's VDC with one disk
//   PORTAL_VM_NAME    its name
//   PORTAL_RESIZE_TO  a compute profile other than the VM's
//
// The flow: the member opens the VM page, attaches a disk (a size of 0 is
// refused next to its field), grows it (a smaller size is refused the same
// way), detaches it behind a confirmation (the boot disk offers no
// detach), then resizes the VM: refused next to "Reboot if needed" while
// it is not ticked, done with a reboot once it is.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { check } from './axe.mjs'
import { base, env, fieldError, member, session, shot, signIn } from './lib.mjs'

const vmPath = env('PORTAL_VM_PATH')
const vmName = env('PORTAL_VM_NAME')
const resizeTo = env('PORTAL_RESIZE_TO')

describe("a VM's disks and size", () => {
  test('a member attaches, grows and detaches a disk and resizes the VM', async (t) => {
    const { page } = await session(t)
    await page.goto(base + '/')
    await signIn(page, member)
    await page.goto(base + vmPath)
    await page.getByRole('heading', { level: 1, name: vmName }).waitFor()
    const disks = page.getByTestId('vm-disks')
    await disks.locator('tbody tr[data-slot="scsi0"][data-boot="true"]').waitFor()
    assert.equal(await page.getByRole('button', { name: 'Detach disk scsi0' }).count(), 0, 'the boot disk offers a detach')

    // Attach: a size of 0 is refused next to its field, then 2 GiB.
    await page.getByRole('button', { name: 'Attach disk' }).click()
    const attach = page.getByRole('dialog', { name: 'Attach a disk' })
    await attach.getByLabel('Size (GiB)').fill('0')
    await attach.getByRole('button', { name: 'Attach' }).click()
    await fieldError(attach, 'sizeGiB').waitFor()
    await check(page, 'attach disk dialog')
    await attach.getByLabel('Size (GiB)').fill('2')
    await attach.getByRole('button', { name: 'Attach' }).click()
    await attach.waitFor({ state: 'hidden' })
    const added = disks.locator('tbody tr[data-slot="scsi1"]')
    await added.getByText('2 GiB').waitFor()
    await shot(page, 'vm-disk-attached')

    // Grow: smaller is refused, then 3 GiB.
    await page.getByRole('button', { name: 'Grow disk scsi1' }).click()
    const grow = page.getByRole('dialog', { name: 'Grow disk scsi1' })
    await grow.getByLabel('New size (GiB)').fill('1')
    await grow.getByRole('button', { name: 'Grow' }).click()
    await fieldError(grow, 'sizeGiB').getByText(/only grow/).waitFor()
    await grow.getByLabel('New size (GiB)').fill('3')
    await grow.getByRole('button', { name: 'Grow' }).click()
    await grow.waitFor({ state: 'hidden' })
    await added.getByText('3 GiB').waitFor()
    await shot(page, 'vm-disk-grown')

    // Detach, confirmed.
    await page.getByRole('button', { name: 'Detach disk scsi1' }).click()
    const confirm = page.getByRole('dialog', { name: 'Detach disk scsi1?' })
    await confirm.getByRole('button', { name: 'Detach' }).click()
    await confirm.waitFor({ state: 'hidden' })
    await added.waitFor({ state: 'detached' })

    // Resize: a reboot not allowed is refused next to its checkbox.
    await page.getByRole('group', { name: 'Actions' }).getByRole('button', { name: 'Resize' }).click()
    const resize = page.getByRole('dialog', { name: `Resize VM ${vmName}` })
    await resize.getByLabel('Compute profile').selectOption(resizeTo)
    await resize.getByRole('button', { name: 'Resize' }).click()
    await fieldError(resize, 'reboot').getByText(/rebooted/).waitFor()
    await shot(page, 'vm-resize-refused')
    await check(page, 'resize dialog')
    await resize.getByLabel('Reboot if needed').check()
    await resize.getByRole('button', { name: 'Resize' }).click()
    await resize.waitFor({ state: 'hidden' })
    await page.locator('ul.operations li[data-kind="RESIZE_VM"][data-state="SUCCEEDED"]').waitFor({ timeout: 60_000 })
    await shot(page, 'vm-resized')
  })
})
