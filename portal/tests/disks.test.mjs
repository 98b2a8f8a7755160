// Browser tests of a VM's disks, size and backups (pkg/portal's
// TestBrowserDisks).
// Besides lib.mjs's variables (PORTAL_URL, OIDC_ISSUER, PORTAL_MEMBER_*,
// PORTAL_ARTIFACTS, CHROMIUM):
//
//   PORTAL_VM_PATH    the VM page of a running VM of the member's VDC with one disk
//   PORTAL_VM_NAME    its name
//   PORTAL_RESIZE_TO  a compute profile other than the VM's
//   PORTAL_RESTORE_AS the name of the VM a backup is restored into
//   PORTAL_IMAGE_FROM_VM, PORTAL_IMAGE_UPLOADED  names of the images made
//                     from the VM and uploaded
//   PORTAL_VM_FROM_UPLOAD  the name of the VM made from the uploaded image
//   PORTAL_IMAGE_ZONE the zone images are uploaded into (the VDC's first)
//   PORTAL_STAGE_ZONE another zone of the VDC the upload is staged to
//
// The flow: the member opens the VM page, attaches a disk (a size of 0 is
// refused next to its field), grows it (a smaller size is refused the same
// way), detaches it behind a confirmation (the boot disk offers no
// detach), then resizes the VM: refused next to "Reboot if needed" while
// it is not ticked, done with a reboot once it is. Then it backs the VM up
// (the backup listed on the VM page and on the VDC's Backups page), sets
// a backup schedule (one that does not parse refused next to its field)
// and removes it,
// restores the backup into a new VM (the VM's own name refused next to
// the name field as CONFLICT) that runs, sees the delete dialog keep the
// backups by default, and deletes the backup. Then the VDC's images:
// Create image of the running VM is refused next to the VM; stopped, its
// image is made; on the Images page an upload under that name is refused
// next to the name, a 2 MiB raw file is uploaded (progress to 100 %) and
// listed, ready in its zone, then staged to the other zone (the row shows
// it staging there until it is ready), the VM's image deleted behind a
// confirmation, and a VM created from the uploaded one through the
// create-VM form.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { check } from './axe.mjs'
import { base, env, fieldError, member, session, shot, signIn, stopVM } from './lib.mjs'

const vmPath = env('PORTAL_VM_PATH')
const vmName = env('PORTAL_VM_NAME')
const resizeTo = env('PORTAL_RESIZE_TO')
const fromVMImage = env('PORTAL_IMAGE_FROM_VM')
const uploaded = env('PORTAL_IMAGE_UPLOADED')
const fromUpload = env('PORTAL_VM_FROM_UPLOAD')
const isoImage = env('PORTAL_ISO')
const restoreAs = env('PORTAL_RESTORE_AS')
const imageZone = env('PORTAL_IMAGE_ZONE')
const stageZone = env('PORTAL_STAGE_ZONE')

describe("a VM's disks, size and backups", () => {
  test('a member attaches, grows and detaches a disk, resizes the VM and backs it up', async (t) => {
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

    // Back up: the operation followed, the backup listed on the VM page.
    await page.getByRole('button', { name: 'Back up now' }).click()
    const backup = page.getByRole('dialog', { name: `Back up VM ${vmName}` })
    await backup.getByLabel('Description').fill('before the upgrade')
    await check(page, 'backup dialog')
    await backup.getByRole('button', { name: 'Back up' }).click()
    await backup.waitFor({ state: 'hidden' })
    await page.locator('[data-testid="backup-operation"][data-state="SUCCEEDED"]').waitFor({ timeout: 60_000 })
    const vmBackups = page.getByRole('table', { name: `Backups of VM ${vmName}` })
    await vmBackups.locator('tbody tr[data-status="SUCCEEDED"]').getByText('before the upgrade').waitFor()
    await shot(page, 'vm-backup-taken')

    // A schedule: one that does not parse is refused next to its field;
    // set, it shows what it keeps and that it is active; removed, none.
    await page.getByRole('button', { name: 'Set schedule' }).click()
    const sched = page.getByRole('dialog', { name: `Backup schedule of VM ${vmName}` })
    await sched.getByLabel('Schedule').fill('02:61')
    await sched.getByRole('button', { name: 'Save schedule' }).click()
    await fieldError(sched, 'schedule').waitFor()
    await check(page, 'backup schedule dialog')
    await sched.getByLabel('Schedule').fill('mon..fri 02:00')
    await sched.getByLabel('Keep the last').fill('3')
    await sched.getByRole('button', { name: 'Save schedule' }).click()
    await sched.waitFor({ state: 'hidden' })
    await page.locator('[data-testid="backup-schedule"][data-state="ACTIVE"]').getByText('keeps the last 3').waitFor()
    await page.getByRole('button', { name: 'Remove schedule' }).click()
    const unschedule = page.getByRole('dialog', { name: `Remove the backup schedule of VM ${vmName}?` })
    await unschedule.getByRole('button', { name: 'Remove' }).click()
    await page.locator('[data-testid="backup-schedule"][data-state="NONE"]').waitFor()

    // The VDC's Backups page, from the navigation, lists it too.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Backups', exact: true }).click()
    await page.getByRole('heading', { level: 1, name: 'Backups' }).waitFor()
    const row = page.getByRole('table', { name: 'Backups' }).locator(`tbody tr[data-vm="${vmName}"][data-status="SUCCEEDED"]`)
    await row.getByText('before the upgrade').waitFor()
    await check(page, 'backups page')

    // Restore: a name taken is refused next to the field, then a new VM.
    await row.getByRole('button', { name: /^Restore backup/ }).click()
    const restore = page.getByRole('dialog', { name: `Restore backup of ${vmName}` })
    await restore.getByLabel('New VM name').fill(vmName)
    await restore.getByRole('button', { name: 'Restore' }).click()
    await fieldError(restore, 'name').getByText(/Conflict/).waitFor()
    await restore.getByLabel('New VM name').fill(restoreAs)
    await restore.getByRole('button', { name: 'Restore' }).click()
    await restore.waitFor({ state: 'hidden' })
    const restored = page.locator('[data-testid="restore-operation"][data-state="SUCCEEDED"]')
    await restored.waitFor({ timeout: 90_000 })
    await shot(page, 'backup-restored')
    await restored.getByRole('link', { name: restoreAs }).click()
    await page.getByRole('heading', { level: 1, name: restoreAs }).waitFor()
    await page.getByTestId('vm-status').getByText('RUNNING').waitFor({ timeout: 60_000 })

    // Deleting a VM keeps its backups unless told otherwise.
    await page.getByRole('group', { name: 'Actions' }).getByRole('button', { name: 'Delete' }).click()
    const del = page.getByRole('dialog', { name: `Delete VM ${restoreAs}?` })
    assert.ok(await del.getByLabel(/Keep the VM's backups/).isChecked(), 'the delete dialog does not keep backups by default')
    await del.getByRole('button', { name: 'Cancel' }).click()

    // Delete the backup, confirmed, on the Backups page.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Backups', exact: true }).click()
    await row.getByRole('button', { name: /^Delete backup/ }).click()
    const confirmDelete = page.getByRole('dialog', { name: `Delete backup of ${vmName}?` })
    await confirmDelete.getByRole('button', { name: 'Delete' }).click()
    await confirmDelete.waitFor({ state: 'hidden' })
    await row.waitFor({ state: 'detached' })
    await page.getByText('No backups yet.').waitFor()
  })

  test("a member makes an image of the stopped VM, uploads one, creates a VM from it and deletes one", async (t) => {
    const { page } = await session(t)
    await page.goto(base + '/')
    await signIn(page, member)
    await page.goto(base + vmPath)
    await page.getByRole('heading', { level: 1, name: vmName }).waitFor()
    await page.getByTestId('vm-status').getByText('RUNNING').waitFor()

    // Create image while the VM runs: CONFLICT next to the VM.
    const actions = page.getByRole('group', { name: 'Actions' })
    await actions.getByRole('button', { name: 'Create image' }).click()
    const fromVM = page.getByRole('dialog', { name: `Create image of VM ${vmName}` })
    await fromVM.getByLabel('Name', { exact: true }).fill(fromVMImage)
    await fromVM.getByRole('button', { name: 'Create image' }).click()
    await fieldError(fromVM, 'vm').getByText(/stop it first/).waitFor()
    await shot(page, 'vm-image-refused')
    await fromVM.getByRole('button', { name: 'Cancel' }).click()

    // Stopped, it is copied; the operation is followed on the page.
    await stopVM(page, 60_000)
    await actions.getByRole('button', { name: 'Create image' }).click()
    await fromVM.getByLabel('Name', { exact: true }).fill(fromVMImage)
    await fromVM.getByRole('button', { name: 'Create image' }).click()
    await fromVM.waitFor({ state: 'hidden' })
    await page.locator('ul.operations li[data-kind="CREATE_IMAGE"][data-state="SUCCEEDED"]').waitFor({ timeout: 60_000 })

    // The Images page: the platform's and the VDC's, with their owner.
    await page.goto(base + '/images')
    const own = page.getByRole('table', { name: 'Images of the VDC' })
    await own.locator(`tr[data-name="${fromVMImage}"]`).getByText('from a VM').waitFor()
    await page.locator('tr[data-name="tiny"]').getByText('platform').waitFor()

    // Upload: a name in use is CONFLICT on the name; then the file goes
    // out with its progress up to 100 % and the image is listed.
    await page.getByRole('button', { name: 'Upload image' }).click()
    const upload = page.getByRole('dialog', { name: 'Upload image' })
    await upload.getByLabel('File').setInputFiles({ name: `${uploaded}.raw`, mimeType: 'application/octet-stream', buffer: Buffer.alloc(2 << 20, 1) })
    assert.equal(await upload.getByLabel('Format').inputValue(), 'RAW', 'a .raw file is RAW')
    assert.equal(await upload.getByLabel('Name', { exact: true }).inputValue(), uploaded, 'the name from the file')
    await upload.getByLabel('Name', { exact: true }).fill(fromVMImage)
    await upload.getByLabel('Runs cloud-init').check()
    await upload.getByRole('button', { name: 'Upload' }).click()
    await fieldError(upload, 'name').getByText(/already/).waitFor()
    await check(page, 'upload dialog')
    await upload.getByLabel('Name', { exact: true }).fill(uploaded)
    await upload.getByRole('button', { name: 'Upload' }).click()
    await upload.waitFor({ state: 'hidden', timeout: 60_000 })
    // The closed dialog keeps the bar as the upload left it.
    await page.locator('[data-testid="upload-progress"][data-percent="100"]').waitFor({ state: 'attached' })
    await own.locator(`tr[data-name="${uploaded}"]`).getByText('RAW').waitFor()

    // Stage to zone: ready in the zone it was uploaded into, it is staged
    // to the other one, which the dialog offers; the row shows it staging
    // there (the list read again) until it is ready.
    const uploadedRow = own.locator(`tr[data-name="${uploaded}"]`)
    await uploadedRow.locator(`[data-zone="${imageZone}"][data-state="STAGED"]`).getByText('ready').waitFor()
    await uploadedRow.getByRole('button', { name: `Stage ${uploaded} to a zone` }).click()
    const stage = page.getByRole('dialog', { name: `Stage image ${uploaded} to a zone` })
    assert.deepEqual(await stage.getByLabel('Zone').locator('option').allTextContents(), [stageZone], 'the zones offered')
    await check(page, 'stage dialog')
    await stage.getByRole('button', { name: 'Stage' }).click()
    await stage.waitFor({ state: 'hidden' })
    await page.getByTestId('vdc-images-status').getByText(new RegExp(`(Staging image|Image) ${uploaded}`)).waitFor()
    await uploadedRow.locator(`[data-zone="${stageZone}"][data-state="STAGED"]`).getByText('ready').waitFor({ timeout: 60_000 })
    assert.equal(await uploadedRow.getByRole('button', { name: `Stage ${uploaded} to a zone` }).count(), 0, 'staged everywhere, it offers no staging')

    // An ISO: its format follows the file, and it is listed as ISO.
    await page.getByRole('button', { name: 'Upload image' }).click()
    const isoFile = Buffer.alloc(40 << 10)
    isoFile.write('CD001', 32769)
    await upload.getByLabel('File').setInputFiles({ name: `${isoImage}.iso`, mimeType: 'application/x-iso9660-image', buffer: isoFile })
    assert.equal(await upload.getByLabel('Format').inputValue(), 'ISO', 'an .iso file is ISO')
    await upload.getByRole('button', { name: 'Upload' }).click()
    await upload.waitFor({ state: 'hidden', timeout: 60_000 })
    await own.locator(`tr[data-name="${isoImage}"]`).getByText('ISO', { exact: true }).waitFor()
    await shot(page, 'vdc-images')

    // Delete the VM's image, confirmed.
    await own.getByRole('button', { name: `Delete ${fromVMImage}` }).click()
    const confirm = page.getByRole('dialog', { name: `Delete image ${fromVMImage}?` })
    await confirm.getByRole('button', { name: 'Delete' }).click()
    await confirm.waitFor({ state: 'hidden' })
    await own.locator(`tr[data-name="${fromVMImage}"]`).waitFor({ state: 'detached' })

    // The create-VM form offers the uploaded image among the VDC's.
    await page.goto(base + '/vms/new')
    await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
    await page.locator('#vm-image optgroup[label^="Images of VDC"] option').getByText(uploaded).waitFor({ state: 'attached' })
    await page.getByLabel('Image', { exact: true }).selectOption(uploaded)
    await page.getByLabel('ISO', { exact: true }).selectOption(isoImage)
    await page.getByLabel('Name', { exact: true }).fill(fromUpload)
    await page.getByLabel('SSH public keys').fill('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb0m5Xo2yVt0pYQm2b8r7dJcTnQe6D8l4p1tq8S9n0u e2e@portal')
    await page.getByLabel('Disk size (GiB)', { exact: true }).fill('1')
    await page.getByRole('button', { name: 'Create VM' }).click()
    await page.getByTestId('created-status').getByText('RUNNING', { exact: true }).waitFor({ timeout: 60_000 })

    // Its page shows the ISO, and Detach ISO ejects it.
    await page.getByRole('link', { name: fromUpload, exact: true }).click()
    await page.getByTestId('vm-iso').getByText(isoImage, { exact: true }).waitFor()
    await page.getByRole('button', { name: 'Detach ISO' }).click()
    await page.getByTestId('vm-iso-status').waitFor()
    await page.getByTestId('vm-iso').waitFor({ state: 'detached' })
  })
})
