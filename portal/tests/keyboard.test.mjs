// Every page with the keyboard only (issue 22), against the backend of
// pkg/portal TestBrowserConventions (zone alpha with 2 hosts, VDC red with
// many VMs, 3 running): on each page the main actions are reached with Tab
// (each control showing the focus ring when it gets there) and activated
// with Enter or Space; dialogs keep Tab inside them, close on Escape and
// give the focus back to the control that opened them, and pass axe-core
// while open. No mouse click.
// Variables of lib.mjs.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { admin, base, member, run, session, shot } from './lib.mjs'
import { axe } from './axe.mjs'

// focusRing checks the focused element shows the portal's focus ring (a
// :focus-visible outline in the focus colour).
async function focusRing(page, what) {
  const r = await page.evaluate(() => {
    const el = document.activeElement
    const probe = document.createElement('span')
    probe.style.color = 'var(--focus)'
    document.body.append(probe)
    const focus = getComputedStyle(probe).color
    probe.remove()
    const s = el ? getComputedStyle(el) : null
    return {
      visible: !!el && el.matches(':focus-visible'),
      style: s?.outlineStyle,
      width: parseFloat(s?.outlineWidth ?? '0'),
      color: s?.outlineColor,
      focus,
    }
  })
  assert.ok(r.visible && r.style !== 'none' && r.width >= 2 && r.color === r.focus, `${what} shows no focus ring: ${JSON.stringify(r)}`)
}

// tabTo presses Tab (Shift+Tab with back) until target has the focus,
// and checks its focus ring.
async function tabTo(page, target, what, { back = false, max = 80 } = {}) {
  await target.waitFor()
  const el = await target.elementHandle()
  for (let i = 0; i < max; i++) {
    await page.keyboard.press(back ? 'Shift+Tab' : 'Tab')
    if (await page.evaluate((e) => document.activeElement === e, el)) {
      await focusRing(page, what)
      return
    }
  }
  assert.fail(`${max} Tab presses never reached ${what}`)
}

const isFocused = (page, target) => target.evaluate((e) => document.activeElement === e)

// dialogKeepsFocus checks that the open dialog has the focus, passes axe
// and that Tab and Shift+Tab go round its controls without leaving it.
async function dialogKeepsFocus(page, dialog, what) {
  await dialog.waitFor()
  await axe(page, what)
  const inside = () => dialog.evaluate((d) => d.contains(document.activeElement))
  assert.ok(await inside(), `${what}: the dialog has the focus when it opens`)
  const controls = await dialog.locator('button:not([disabled]), input, select, textarea, a[href]').count()
  for (let i = 0; i < controls + 2; i++) {
    await page.keyboard.press('Tab')
    assert.ok(await inside(), `${what}: Tab ${i + 1} left the dialog`)
  }
  for (let i = 0; i < controls + 2; i++) {
    await page.keyboard.press('Shift+Tab')
    assert.ok(await inside(), `${what}: Shift+Tab ${i + 1} left the dialog`)
  }
}

// escapeCloses presses Escape in the open dialog and checks the focus went
// back to opener.
async function escapeCloses(page, dialog, opener, what) {
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'hidden' })
  await page.waitForFunction((e) => document.activeElement === e, await opener.elementHandle())
  await focusRing(page, `${what} (focus given back)`)
}

// follow activates the focused link or button with Enter and waits for the
// page's heading.
async function enterTo(page, heading) {
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { level: 1, name: heading }).waitFor()
}

const nav = (page) => page.getByRole('navigation', { name: 'Main' })

// signInByKeyboard reaches the portal's Sign in button with Tab and
// presses Enter; the provider's login form is not the portal's.
async function signInByKeyboard(page, who) {
  await page.goto(base + '/')
  const button = page.getByRole('button', { name: 'Sign in', exact: true })
  await tabTo(page, button, 'Sign in')
  await page.keyboard.press('Enter')
  await page.getByLabel('Username').fill(who.user)
  await page.getByLabel('Password').fill(who.password)
  await page.getByLabel('Password').press('Enter')
  await page.waitForURL((u) => u.origin === base && !u.pathname.startsWith('/auth/callback'))
  await page.locator('header.topbar').waitFor()
}

test('a member uses every page with the keyboard only', async (t) => {
  const { page } = await session(t)
  await signInByKeyboard(page, member)

  // Home: the skip link first, then the content.
  await page.getByRole('heading', { level: 1, name: /^Welcome/ }).waitFor()
  await page.keyboard.press('Tab')
  await focusRing(page, 'Skip to content')
  assert.equal(await page.evaluate(() => document.activeElement?.textContent?.trim()), 'Skip to content')
  await page.keyboard.press('Enter')
  await page.waitForFunction(() => document.activeElement?.id === 'content')

  // VMs: from the navigation; the filters and the pager.
  await tabTo(page, nav(page).getByRole('link', { name: 'VMs', exact: true }), 'VMs link', { back: true })
  await enterTo(page, 'VMs')
  const range = page.getByTestId('list-range')
  await range.getByText(/^1–50 of /).waitFor()
  await tabTo(page, page.getByLabel('Status'), 'status filter')
  // A select opens and picks with the keyboard (ArrowDown in a closed
  // select changes its value in Chromium).
  await page.keyboard.press('ArrowDown')
  await page.keyboard.press('ArrowDown')
  await page.waitForURL((u) => u.searchParams.get('status') === 'RUNNING')
  await page.locator('tbody tr').first().waitFor()
  await page.waitForFunction(() => document.querySelectorAll('tbody tr').length === 3)
  // Space on the focused select would open it: go on with Tab.
  const vmLink = page.locator('tbody tr a').first()
  const vmName = (await vmLink.innerText()).trim()
  await tabTo(page, vmLink, `the link of ${vmName}`)
  await enterTo(page, vmName)

  // A VM: an action through its confirmation, the graphs' timeframe, the
  // snapshot dialog.
  await page.getByTestId('vm-status').getByText('RUNNING').waitFor()
  const reboot = page.getByRole('button', { name: 'Reboot', exact: true })
  await tabTo(page, reboot, 'Reboot')
  await page.keyboard.press('Enter')
  const confirm = page.getByRole('dialog', { name: `Reboot VM ${vmName}?` })
  await dialogKeepsFocus(page, confirm, 'the reboot confirmation')
  await escapeCloses(page, confirm, reboot, 'Escape on the reboot confirmation')
  // Open it again and confirm with Tab and Space.
  await page.keyboard.press('Space')
  await confirm.waitFor()
  await tabTo(page, confirm.getByRole('button', { name: 'Reboot', exact: true }), 'the confirmation’s Reboot')
  await page.keyboard.press('Space')
  await confirm.waitFor({ state: 'hidden' })
  await page.locator('.operations li[data-kind="REBOOT_VM"][data-state="SUCCEEDED"]').first().waitFor({ timeout: 30_000 })
  // The focus is back on the (still running) VM's Reboot.
  await page.waitForFunction(() => document.activeElement?.textContent?.trim() === 'Reboot' && !document.activeElement.closest('dialog'))
  const week = page.getByRole('region', { name: /^Graphs of / }).getByRole('button', { name: 'Week', exact: true })
  await tabTo(page, week, 'the Week timeframe')
  await page.keyboard.press('Space')
  await page.waitForFunction((e) => e.getAttribute('aria-pressed') === 'true', await week.elementHandle())
  await focusRing(page, 'the pressed Week timeframe')
  const take = page.getByRole('button', { name: 'Take snapshot', exact: true })
  await tabTo(page, take, 'Take snapshot')
  await page.keyboard.press('Enter')
  const snap = page.getByRole('dialog', { name: 'Take a snapshot' })
  await dialogKeepsFocus(page, snap, 'the snapshot dialog')
  await escapeCloses(page, snap, take, 'Escape on the snapshot dialog')
  await shot(page, 'keyboard-vm')

  // The wizard: typing, adding and removing a NIC, submitting.
  await tabTo(page, nav(page).getByRole('link', { name: 'VMs', exact: true }), 'VMs link', { back: true })
  await enterTo(page, 'VMs')
  const newVM = page.getByRole('link', { name: 'New VM', exact: true })
  await tabTo(page, newVM, 'New VM')
  await enterTo(page, 'New VM')
  await tabTo(page, page.getByLabel('Name', { exact: true }), 'the VM name')
  await page.keyboard.type('typed-by-keyboard')
  const addNIC = page.getByRole('button', { name: 'Add a NIC' })
  await tabTo(page, addNIC, 'Add a NIC')
  await page.keyboard.press('Space')
  const removeNIC = page.getByRole('button', { name: 'Remove NIC 2' })
  await removeNIC.waitFor()
  await tabTo(page, removeNIC, 'Remove NIC 2', { back: true })
  await page.keyboard.press('Enter')
  await removeNIC.waitFor({ state: 'detached' })
  const create = page.getByRole('button', { name: 'Create VM' })
  await tabTo(page, create, 'Create VM')
  const sent = page.waitForResponse((r) => r.url() === `${base}/graphql` && /"operationName":"CreateVM"/.test(r.request().postData() || ''))
  await page.keyboard.press('Enter')
  await sent
  // The catalog of this backend is empty: the API refuses, and the focus
  // goes to the field it names (or the form says why).
  await page.waitForFunction(() => document.activeElement?.getAttribute('aria-invalid') === 'true' || !!document.querySelector('.form-error'))
  assert.equal(await page.getByText(/^Creating /).count(), 0, 'nothing was created')
  assert.equal(await page.getByLabel('Name', { exact: true }).inputValue(), 'typed-by-keyboard')

  // Networks: create one and delete it through their dialogs.
  await tabTo(page, nav(page).getByRole('link', { name: 'Networks', exact: true }), 'Networks link', { back: true })
  await enterTo(page, 'Networks')
  const newNet = page.getByRole('button', { name: 'New network' })
  await tabTo(page, newNet, 'New network')
  await page.keyboard.press('Enter')
  const netDialog = page.getByRole('dialog', { name: 'New network' })
  await dialogKeepsFocus(page, netDialog, 'the network dialog')
  await escapeCloses(page, netDialog, newNet, 'Escape on the network dialog')
  await page.keyboard.press('Enter')
  await netDialog.waitFor()
  const netName = `kb-${run}`
  await tabTo(page, netDialog.getByLabel('Name'), 'the network name')
  await page.keyboard.type(netName)
  await page.keyboard.press('Enter')
  await netDialog.waitFor({ state: 'hidden' })
  const del = page.getByRole('button', { name: `Delete ${netName} in alpha` })
  await tabTo(page, del, `Delete ${netName}`)
  await page.keyboard.press('Enter')
  const delDialog = page.getByRole('dialog', { name: `Delete network ${netName} in alpha?` })
  await delDialog.waitFor()
  assert.ok(await isFocused(page, delDialog.getByRole('button', { name: 'Cancel' })), 'a delete confirmation starts on Cancel')
  await page.keyboard.press('Tab')
  await focusRing(page, 'the confirmation’s Delete')
  await page.keyboard.press('Space')
  await delDialog.waitFor({ state: 'hidden' })
  await page.locator(`tr[data-name="${netName}"]`).waitFor({ state: 'detached' })
  // The row that opened it is gone: the focus is on the page's content.
  await page.waitForFunction(() => document.activeElement?.id === 'content')

  // The catalog pages: reached, with nothing to change for a member.
  for (const [link, heading] of [['Images', 'Images'], ['Compute profiles', 'Compute profiles'], ['Storage profiles', 'Storage profiles']]) {
    await tabTo(page, nav(page).getByRole('link', { name: link, exact: true }), `${link} link`, { back: true })
    await enterTo(page, heading)
  }

  // On a phone the menu opens and closes with the keyboard.
  await page.setViewportSize({ width: 390, height: 844 })
  const menu = page.getByRole('button', { name: 'Menu' })
  await tabTo(page, menu, 'Menu', { back: true })
  await page.keyboard.press('Enter')
  await page.waitForFunction((e) => e.getAttribute('aria-expanded') === 'true', await menu.elementHandle())
  await tabTo(page, nav(page).getByRole('link', { name: 'Home', exact: true }), 'Home link')
  await enterTo(page, /^Welcome/)
  assert.equal(await menu.getAttribute('aria-expanded'), 'false', 'the menu closed')
  await shot(page, 'keyboard-phone')
})

test('an admin uses the platform pages with the keyboard only', async (t) => {
  const { page, graphql } = await session(t)
  await signInByKeyboard(page, admin)

  // Zones: the policy dialog, then a zone's page.
  await page.goto(base + '/platform/zones')
  const edit = page.getByRole('button', { name: 'Edit region and dedication of alpha' })
  await tabTo(page, edit, 'Edit alpha')
  await page.keyboard.press('Enter')
  const zoneDialog = page.getByRole('dialog', { name: 'Zone alpha' })
  await dialogKeepsFocus(page, zoneDialog, 'the zone dialog')
  await escapeCloses(page, zoneDialog, edit, 'Escape on the zone dialog')
  await tabTo(page, page.locator('article[data-zone="alpha"] h2 a'), 'the alpha link', { back: true })
  await enterTo(page, 'alpha')
  const month = page.getByRole('region', { name: /^Graphs of / }).getByRole('button', { name: 'Month', exact: true })
  await tabTo(page, month, 'the Month timeframe')
  await page.keyboard.press('Enter')
  await page.waitForFunction((e) => e.getAttribute('aria-pressed') === 'true', await month.elementHandle())

  // Hosts, one a page: Next and Previous page by cursors, then a host.
  await page.goto(base + '/platform/hosts?first=1')
  const range = page.getByTestId('list-range')
  await range.getByText('1–1 of 2').waitFor()
  const first = await page.locator('tbody tr').first().getAttribute('data-name')
  const nextPage = page.getByRole('button', { name: 'Next page' })
  await tabTo(page, nextPage, 'Next page')
  const before = graphql.length
  await page.keyboard.press('Enter')
  await range.getByText('2–2 of 2').waitFor()
  const second = await page.locator('tbody tr').first().getAttribute('data-name')
  assert.notEqual(second, first, 'the second page shows the other host')
  const asked = graphql.slice(before).map((g) => JSON.parse(g.body)).find((b) => b.operationName === 'HostList')
  assert.ok(asked?.variables?.after, 'the second page was asked for by cursor')
  assert.ok(await nextPage.isDisabled(), 'no page after the last')
  await tabTo(page, page.getByRole('button', { name: 'Previous page' }), 'Previous page', { back: true })
  await page.keyboard.press('Space')
  await range.getByText('1–1 of 2').waitFor()
  await tabTo(page, page.locator('tbody tr a').first(), 'the host link', { back: true })
  await enterTo(page, new RegExp(`^${first.split('/')[1]}`))
  await page.getByRole('region', { name: /^Graphs of / }).waitFor()

  // VDCs: edit one and save it; open the new-VDC dialog and leave it.
  await tabTo(page, nav(page).getByRole('link', { name: 'VDCs', exact: true }), 'VDCs link', { back: true })
  await enterTo(page, 'VDCs')
  const editRed = page.getByRole('button', { name: 'Edit red' })
  await tabTo(page, editRed, 'Edit red')
  await page.keyboard.press('Enter')
  const vdcDialog = page.getByRole('dialog', { name: 'Edit VDC red' })
  await dialogKeepsFocus(page, vdcDialog, 'the VDC dialog')
  await tabTo(page, vdcDialog.getByRole('button', { name: 'Save' }), 'Save')
  await page.keyboard.press('Enter')
  await vdcDialog.waitFor({ state: 'hidden' })
  await page.getByText('Saved VDC red.', { exact: true }).first().waitFor()
  await page.waitForFunction((e) => document.activeElement === e, await editRed.elementHandle())
  const newVDC = page.getByRole('button', { name: 'New VDC' })
  await tabTo(page, newVDC, 'New VDC', { back: true })
  await page.keyboard.press('Space')
  const newDialog = page.getByRole('dialog', { name: 'New VDC' })
  await dialogKeepsFocus(page, newDialog, 'the new VDC dialog')
  await escapeCloses(page, newDialog, newVDC, 'Escape on the new VDC dialog')

  // The catalog's editors: the new-image dialog.
  await tabTo(page, nav(page).getByRole('link', { name: 'Images', exact: true }), 'Images link', { back: true })
  await enterTo(page, 'Images')
  const newImage = page.getByRole('button', { name: 'New image' })
  await tabTo(page, newImage, 'New image')
  await page.keyboard.press('Enter')
  const imageDialog = page.getByRole('dialog', { name: 'New image' })
  await dialogKeepsFocus(page, imageDialog, 'the image dialog')
  await escapeCloses(page, imageDialog, newImage, 'Escape on the image dialog')
  await shot(page, 'keyboard-admin')
})
