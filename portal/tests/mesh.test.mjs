// Browser tests of the portal against a backend with real zones, hosts and
// VMs (pkg/portal's TestBrowserMesh, or `make dev`). Besides lib.mjs's
// variables (PORTAL_URL, OIDC_ISSUER, PORTAL_ADMIN_*, PORTAL_MEMBER_*,
// PORTAL_MEMBER_VDCS, PORTAL_ARTIFACTS, CHROMIUM):
//
//   PORTAL_OTHER_USER / _PASSWORD      a member of a VDC the member is not in
//   PORTAL_ZONES                       every zone, comma separated; the VM goes into the first
//                                      and moves to the second (one host, pve1; the member's
//                                      first VDC has no network there)
//   PORTAL_HOSTS                       how many hosts the zones have in all
//   PORTAL_VIEWER_USER / _PASSWORD     optional: a viewer of the member's first VDC
//   PORTAL_AGENT_UPDATE                optional: 1 when every host's agent has an update
//   PORTAL_MEMBER_VM_QUOTA             optional: 1 when the member's first VDC allows one VM
//                                      only (a second create is then refused, readably)
//
// The flow: the member signs in, switches VDC, creates a network when the
// zone has none, creates a VM through the wizard and watches it reach
// RUNNING, migrates it to the other host of its zone, stops it and moves
// it to the second zone (after a snapshot and a missing network are
// refused); the other member cannot see it; the admin sees every
// zone and host online. Refusals (bad input, a network in use, the quota)
// read as such.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { axe, check, fits } from './axe.mjs'
import { admin, artifacts, base, checkZonesAndHosts, env, go, member, memberVDCs, run, session, shot, signIn, stopVM, timeout } from './lib.mjs'

const other = { user: env('PORTAL_OTHER_USER'), password: env('PORTAL_OTHER_PASSWORD') }
const zones = env('PORTAL_ZONES').split(',').map((s) => s.trim()).filter(Boolean)
const hostCount = Number(env('PORTAL_HOSTS'))
const zone = zones[0]
const vdc = memberVDCs[0]
const vmName = `e2e-${run}`
// Creating a VM may first stage its image into the zone.
const vmTimeout = 60_000

describe('portal with zones and VMs', () => {
  let vmPath = ''

  test('a member creates a VM through the wizard, watches it run and stops it', async (t) => {
    const { page, graphql } = await session(t)
    await page.goto(base + '/')
    await signIn(page, member)
    const select = page.getByLabel('VDC', { exact: true })
    for (const v of [memberVDCs[1], vdc]) {
      await select.selectOption(v)
      await page.getByRole('heading', { name: `VDC ${v}` }).waitFor()
    }

    // A network in the zone, created here when there is none.
    await go(page, 'Networks', 'Networks')
    await page.getByRole('table').or(page.getByText('No networks yet.')).first().waitFor()
    if ((await page.locator(`tbody tr[data-zone="${zone}"]`).count()) === 0) {
      const dialog = page.getByRole('dialog')
      await page.getByRole('button', { name: 'New network' }).click()
      await dialog.getByLabel('Name', { exact: true }).fill('Bad Name')
      await dialog.getByLabel('Zone', { exact: true }).selectOption(zone)
      await dialog.getByRole('button', { name: 'Create' }).click()
      await dialog.locator('[data-field="name"] .field-error').waitFor()
      await dialog.getByLabel('Name', { exact: true }).fill(`lan-${run}`)
      await dialog.getByRole('button', { name: 'Create' }).click()
      await dialog.waitFor({ state: 'hidden' })
      await page.locator(`tbody tr[data-zone="${zone}"]`).first().waitFor()
    }
    await shot(page, 'networks')

    // The wizard: a bad name is refused next to its field, then the VM is
    // created and its operation followed until it runs.
    await go(page, 'VMs', 'VMs')
    await page.getByRole('link', { name: 'New VM' }).click()
    await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
    await page.getByLabel('Zone', { exact: true }).selectOption(zone)
    await page.getByLabel('Name', { exact: true }).fill('Bad_Name')
    await page.getByLabel('SSH public keys').fill('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb0m5Xo2yVt0pYQm2b8r7dJcTnQe6D8l4p1tq8S9n0u e2e@portal')
    await page.getByRole('button', { name: 'Create VM' }).click()
    await page.locator('[data-field="name"] .field-error').waitFor()
    assert.equal(await page.getByLabel('Name', { exact: true }).getAttribute('aria-invalid'), 'true')
    await shot(page, 'vm-wizard-invalid')
    await page.getByLabel('Name', { exact: true }).fill(vmName)
    // 1 GiB: the disk is copied to the other zone below.
    await page.getByLabel('Disk size (GiB)', { exact: true }).fill('1')
    const started = Date.now()
    await page.getByRole('button', { name: 'Create VM' }).click()
    await page.getByRole('heading', { name: `Creating ${vmName} in VDC ${vdc}` }).waitFor()
    await shot(page, 'vm-wizard-progress')
    await page.getByTestId('created-status').getByText('RUNNING', { exact: true }).waitFor({ timeout: vmTimeout })
    await page.getByTestId('operation-state').getByText('SUCCEEDED', { exact: true }).waitFor()
    await page.getByText('(followed by subscription)').waitFor()
    console.log(`VM ${vmName} RUNNING ${Date.now() - started} ms after Create VM`)
    const creates = graphql.filter((r) => r.body.includes('createVM'))
    assert.equal(creates.length, 2, 'one refused and one accepted createVM')
    for (const r of creates) assert.equal(r.headers['flexplane-vdc-id'], vdc)
    await shot(page, 'vm-wizard-running')

    // The detail page: configuration, live metrics, stop with confirmation.
    await page.getByRole('link', { name: vmName, exact: true }).click()
    await page.getByRole('heading', { level: 1, name: vmName }).waitFor()
    vmPath = new URL(page.url()).pathname
    await page.getByTestId('vm-status').getByText('RUNNING').waitFor()
    await page.getByText('Live metrics').waitFor()
    assert.match(await page.locator('.props').first().innerText(), /vCPUs[\s\S]*Memory[\s\S]*Disk[\s\S]*Addresses\s*\d+\.\d+\.\d+\.\d+/)
    await shot(page, 'vm-detail')

    // The console (before any page.routeWebSocket, whose stand-in
    // WebSocket noVNC does not take): noVNC loads only now, and the VM's
    // test picture (colour bars over its name) arrives through the
    // orchestrator, the mesh, the agent and Proxmox's vncwebsocket; the
    // page stays accessible and fits a phone with it open.
    const consoleScripts = []
    let opened = false
    page.on('response', (r) => {
      if (opened && r.request().resourceType() === 'script') consoleScripts.push(r.url())
    })
    assert.equal(await page.locator('[data-testid="vm-console"] canvas').count(), 0)
    opened = true
    await page.getByRole('button', { name: 'Open console' }).click()
    await page.getByTestId('console-status').getByText(`Connected to ${vmName}.`, { exact: false }).waitFor()
    // The colour at (x, y) of noVNC's canvas once it has the VM's 640x400
    // ("r,g,b"), or whether it is want.
    const pixel = ([x, y, want]) => {
      const c = document.querySelector('[data-testid="vm-console"] canvas')
      const got = c && c.width === 640 && c.height === 400 ? Array.from(c.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)).join(',') : null
      return want === undefined ? got : got === want
    }
    // Bars 0 (grey) and 5 (red), and the dark blue band under them.
    for (const [x, y, rgb] of [[40, 100, '192,192,192'], [440, 100, '192,0,0'], [4, 396, '0,32,96']]) {
      await page.waitForFunction(pixel, [x, y, rgb], { timeout }).catch(() => {})
      assert.equal(await page.evaluate(pixel, [x, y]), rgb, `console pixel (${x}, ${y})`)
    }
    assert.ok(consoleScripts.length > 0, 'noVNC loads when the console opens, not before')
    await axe(page, 'VM page with its console')
    await page.setViewportSize({ width: 390, height: 800 })
    await fits(page, 'VM page with its console')
    await page.setViewportSize({ width: 1280, height: 800 })
    await shot(page, 'vm-console')
    await page.getByRole('button', { name: 'Close console' }).click()
    await page.getByText('Console closed.').waitFor()

    const confirm = page.getByRole('dialog')

    // Without a websocket the progress of an action is polled.
    let blockWebSockets = true
    await page.routeWebSocket(/\/graphql$/, (ws) => (blockWebSockets ? ws.close() : ws.connectToServer()))
    await page.getByRole('button', { name: 'Reboot', exact: true }).click()
    await confirm.getByRole('button', { name: 'Reboot', exact: true }).click()
    await page.locator('.operations li[data-state="SUCCEEDED"] strong').getByText('reboot', { exact: true }).waitFor({ timeout: vmTimeout })
    await page.getByText('(followed by polling)').waitFor()
    await page.getByTestId('vm-status').getByText('RUNNING').waitFor()
    blockWebSockets = false

    // Snapshots: a bad name is refused next to its field; one with the RAM
    // of the running VM is taken, rolled back to (the VM runs again) and
    // deleted, each followed as an operation.
    const snapRow = page.locator('[data-testid="vm-snapshots"] tbody tr[data-name="pre-change"]')
    const snapDialog = page.getByRole('dialog', { name: 'Take a snapshot' })
    await page.getByTestId('vm-no-snapshots').waitFor()
    await page.getByRole('button', { name: 'Take snapshot' }).click()
    await snapDialog.getByLabel('Name', { exact: true }).fill('1st')
    await snapDialog.getByRole('button', { name: 'Take snapshot' }).click()
    await snapDialog.locator('[data-field="name"] .field-error').waitFor()
    await snapDialog.getByLabel('Name', { exact: true }).fill('pre-change')
    await snapDialog.getByLabel('Description', { exact: true }).fill('before the change')
    await snapDialog.getByLabel('Include RAM', { exact: true }).check()
    await snapDialog.getByRole('button', { name: 'Take snapshot' }).click()
    await snapDialog.waitFor({ state: 'hidden' })
    await page.locator('.operations li[data-state="SUCCEEDED"][data-kind="CREATE_SNAPSHOT"]').waitFor({ timeout: vmTimeout })
    await snapRow.waitFor()
    assert.match(await snapRow.innerText(), /pre-change \(current\)[\s\S]*yes[\s\S]*GiB[\s\S]*before the change/)
    await shot(page, 'vm-snapshots')
    // A snapshot does not move across zones: the API's preflight refusal
    // shows in the Migrate dialog, and nothing moves.
    const migrate = page.getByRole('dialog', { name: `Migrate VM ${vmName}` })
    const migrateButton = page.getByRole('group', { name: 'Actions' }).getByRole('button', { name: 'Migrate', exact: true })
    await migrateButton.click()
    await migrate.getByLabel('Another zone').check()
    await migrate.getByLabel('Zone', { exact: true }).selectOption(zones[1])
    await migrate.getByRole('button', { name: 'Migrate', exact: true }).click()
    await migrate.getByRole('alert').getByText(/^Conflict: .*snapshot "pre-change"/).waitFor()
    await migrate.getByRole('button', { name: 'Cancel' }).click()
    await migrate.waitFor({ state: 'hidden' })
    await page.getByRole('button', { name: 'Roll back to pre-change' }).click()
    await confirm.getByRole('button', { name: 'Roll back', exact: true }).click()
    await page.locator('.operations li[data-state="SUCCEEDED"][data-kind="ROLLBACK_SNAPSHOT"]').waitFor({ timeout: vmTimeout })
    await page.getByTestId('vm-status').getByText('RUNNING').waitFor()
    await page.getByRole('button', { name: 'Delete snapshot pre-change' }).click()
    await confirm.getByRole('button', { name: 'Delete', exact: true }).click()
    await page.locator('.operations li[data-state="SUCCEEDED"][data-kind="DELETE_SNAPSHOT"]').waitFor({ timeout: vmTimeout })
    await snapRow.waitFor({ state: 'detached' })
    await page.getByTestId('vm-no-snapshots').waitFor()

    // Migrate: the dialog passes axe and fits a phone, opens from the
    // keyboard and closes on Escape, offers the other zones; the VM moves
    // online to the other host of its zone, followed to the end with the
    // bytes it moved. migrated.json tells TestBrowserMesh where it went, to
    // check through GraphQL.
    // The VM's disk is on a host's own storage: it is not highly available.
    await page.getByTestId('vm-ha').getByText('No', { exact: true }).waitFor()
    const from = (await page.getByTestId('vm-host').innerText()).trim()
    await migrateButton.focus()
    await page.keyboard.press('Enter')
    const hostSelect = migrate.getByLabel('Host', { exact: true })
    await hostSelect.waitFor()
    const to = await hostSelect.inputValue()
    assert.ok(to && to !== from, `the dialog offers ${to} for a VM on ${from}`)
    await migrate.getByLabel('Another zone').check()
    assert.deepEqual(await migrate.getByLabel('Zone', { exact: true }).locator('option').allInnerTexts(), zones.slice(1))
    await page.setViewportSize({ width: 390, height: 844 })
    await check(page, 'vm migrate dialog', true)
    await shot(page, 'vm-migrate')
    await page.keyboard.press('Escape')
    await migrate.waitFor({ state: 'hidden' })
    await page.setViewportSize({ width: 1280, height: 800 })
    await migrateButton.click()
    await migrate.getByLabel(`Another host of zone ${zone}`).check()
    await hostSelect.selectOption(to)
    await migrate.getByRole('button', { name: 'Migrate', exact: true }).click()
    await migrate.waitFor({ state: 'hidden' })
    const migrated = page.locator('.operations li[data-state="SUCCEEDED"][data-kind="MIGRATE_VM"]').first()
    await migrated.waitFor({ timeout: vmTimeout })
    assert.match(await migrated.getByTestId('operation-progress').innerText(), /GiB \(100 %\) moved, /)
    await page.getByTestId('vm-host').getByText(to, { exact: true }).waitFor()
    await page.getByTestId('vm-status').getByText('RUNNING').waitFor()
    await shot(page, 'vm-migrated')

    await stopVM(page, vmTimeout)
    await page.getByText('(followed by subscription)').waitFor()
    await shot(page, 'vm-stopped')

    // Across zones: while the VDC has no network in the target zone the
    // API refuses (the NIC's network has no namesake there), next to the
    // networks; once it has one of the same name, that one is preselected,
    // and the stopped VM moves with its disk, followed step by step with
    // the bytes it moved, to the other zone under the same id (the same
    // page).
    const target = zones[1]
    const netName = (await page.locator('[data-testid="vm-nics"] td[data-label="Network"] span').first().innerText()).trim().split(/\s+/)[0]
    const toZone = async () => {
      await migrateButton.click()
      await migrate.getByLabel('Another zone').check()
      await migrate.getByLabel('Zone', { exact: true }).selectOption(target)
    }
    await toZone()
    await migrate.getByText(`This VDC has no network in zone ${target}`).waitFor()
    await migrate.getByRole('button', { name: 'Migrate', exact: true }).click()
    await migrate.getByTestId('migrate-networks-error').getByText(/^Invalid input: .*does not have/).waitFor()
    await shot(page, 'vm-migrate-refused')
    await migrate.getByRole('button', { name: 'Cancel' }).click()
    await migrate.waitFor({ state: 'hidden' })
    await go(page, 'Networks', 'Networks')
    const netDialog = page.getByRole('dialog')
    await page.getByRole('button', { name: 'New network' }).click()
    await netDialog.getByLabel('Name', { exact: true }).fill(netName)
    await netDialog.getByLabel('Zone', { exact: true }).selectOption(target)
    await netDialog.getByRole('button', { name: 'Create' }).click()
    await netDialog.waitFor({ state: 'hidden' })
    await page.locator(`tbody tr[data-zone="${target}"]`).first().waitFor()
    await go(page, 'VMs', 'VMs')
    await page.getByRole('link', { name: vmName, exact: true }).click()
    await page.getByRole('heading', { level: 1, name: vmName }).waitFor()
    assert.equal(new URL(page.url()).pathname, vmPath)
    await toZone()
    const netSelect = migrate.getByLabel(`Network for ${netName}`, { exact: true })
    assert.match(await netSelect.locator('option:checked').innerText(), new RegExp(`^${netName} \\(`), 'the network of the same name is preselected')
    assert.deepEqual(await migrate.getByLabel('Host in the zone', { exact: true }).locator('option').allInnerTexts(), ['any', 'pve1'])
    await page.setViewportSize({ width: 390, height: 844 })
    await check(page, 'vm migrate dialog, another zone', true)
    await shot(page, 'vm-migrate-zone')
    await page.setViewportSize({ width: 1280, height: 800 })
    // Every state the migration panel shows, as the browser renders it.
    await page.evaluate(() => {
      window.migrationTexts = []
      new MutationObserver(() => {
        const el = document.querySelector('[data-testid="migration"]')
        if (el) window.migrationTexts.push(el.innerText)
      }).observe(document.body, { subtree: true, childList: true, characterData: true })
    })
    await migrate.getByRole('button', { name: 'Migrate', exact: true }).click()
    await migrate.waitFor({ state: 'hidden' })
    const panel = page.getByTestId('migration')
    await panel.getByRole('heading', { name: `Migration from zone ${zone} to zone ${target}` }).waitFor()
    await panel.getByTestId('migration-done').waitFor({ timeout: 180_000 })
    await page.getByTestId('vm-zone').getByText(target, { exact: true }).waitFor()
    await page.getByTestId('vm-status').getByText('STOPPED').waitFor()
    assert.equal(new URL(page.url()).pathname, vmPath, 'the VM keeps its id')
    assert.match(await panel.getByTestId('migration-done').innerText(), new RegExp(`now in zone ${target} on pve1, with the same id\\. .*GiB \\(100 %\\) moved`))
    const seen = await page.evaluate(() => window.migrationTexts)
    assert.ok(seen.some((s) => /Step copy/.test(s)), `the copy step was shown: ${JSON.stringify(seen.slice(0, 20))}`)
    assert.ok(seen.some((s) => /Step \w+[\s\S]*GiB[\s\S]* moved, /.test(s)), 'the bytes moved were shown while it ran')
    await page.locator('[data-testid="vm-nics"] td[data-label="Network"]').getByText(netName).first().waitFor()
    writeFileSync(join(artifacts, 'migrated.json'), JSON.stringify({ vdc, name: vmName, host: 'pve1', zone: target, path: vmPath }))
    await shot(page, 'vm-migrated-zone')

    // The list, with its filters.
    await go(page, 'VMs', 'VMs')
    const row = page.locator(`tbody tr[data-name="${vmName}"]`)
    await row.waitFor()
    assert.match(await row.innerText(), new RegExp(`stopped[\\s\\S]*${target}`))
    await page.getByLabel('Status', { exact: true }).selectOption('RUNNING')
    await row.waitFor({ state: 'detached' })
    await page.getByLabel('Status', { exact: true }).selectOption('STOPPED')
    await page.getByLabel('Search by name').fill(run)
    await row.waitFor()
    await shot(page, 'vms')

    // The VM's network (now in the other zone) cannot be deleted while it
    // is in use.
    await go(page, 'Networks', 'Networks')
    await page.locator(`tbody tr[data-zone="${target}"] button`).first().click()
    await confirm.getByRole('button', { name: 'Delete', exact: true }).click()
    await confirm.getByRole('alert').getByText(/^Conflict: /).waitFor()
    await shot(page, 'network-in-use')
    await confirm.getByRole('button', { name: 'Cancel' }).click()
    await page.locator(`tbody tr[data-zone="${target}"]`).first().waitFor()

    if (process.env.PORTAL_MEMBER_VM_QUOTA === '1') {
      await go(page, 'VMs', 'VMs')
      await page.getByRole('link', { name: 'New VM' }).click()
      await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
      await page.getByLabel('Zone', { exact: true }).selectOption(zone)
      await page.getByLabel('Name', { exact: true }).fill(`${vmName}-2`)
      await page.getByRole('button', { name: 'Create VM' }).click()
      await page.getByRole('alert').getByText('Quota exceeded:').waitFor()
      await shot(page, 'vm-quota-exceeded')
    }
  })

  test('a member creates a VM with a static address, refused next to the field when it is the gateway', async (t) => {
    const { page } = await session(t)
    await page.goto(base + '/networks')
    await signIn(page, member)
    const second = memberVDCs[1]
    await page.getByLabel('VDC', { exact: true }).selectOption(second)
    await page.getByText(`Isolated IPv4 networks of VDC ${second}`).waitFor()
    await page.getByRole('table').or(page.getByText('No networks yet.')).first().waitFor()
    if ((await page.locator(`tbody tr[data-zone="${zone}"]`).count()) === 0) {
      const dialog = page.getByRole('dialog')
      await page.getByRole('button', { name: 'New network' }).click()
      await dialog.getByLabel('Name', { exact: true }).fill(`lan-${run}`)
      await dialog.getByLabel('Zone', { exact: true }).selectOption(zone)
      await dialog.getByRole('button', { name: 'Create' }).click()
      await dialog.waitFor({ state: 'hidden' })
    }
    const gateway = (await page.locator(`tbody tr[data-zone="${zone}"] td[data-label="Gateway"]`).first().innerText()).trim()
    const parts = gateway.split('.').map(Number)
    const address = [...parts.slice(0, 3), parts[3] + 9].join('.')

    await go(page, 'VMs', 'VMs')
    await page.getByRole('link', { name: 'New VM' }).click()
    await page.getByRole('heading', { level: 1, name: 'New VM' }).waitFor()
    await page.getByLabel('Zone', { exact: true }).selectOption(zone)
    await page.getByLabel('Name', { exact: true }).fill(`${vmName}-static`)
    await page.getByLabel('NIC 1 address', { exact: true }).selectOption('static')
    const field = page.getByLabel('NIC 1 static address', { exact: true })
    await field.fill(gateway)
    await page.getByRole('button', { name: 'Create VM' }).click()
    await page.locator('[data-field="nics.0.address"] .field-error').waitFor()
    assert.equal(await field.getAttribute('aria-invalid'), 'true')
    assert.equal(await field.evaluate((el) => el === document.activeElement), true)
    await shot(page, 'vm-wizard-static-invalid')
    await field.fill(address)
    await page.getByRole('button', { name: 'Create VM' }).click()
    await page.getByTestId('created-status').getByText('RUNNING', { exact: true }).waitFor({ timeout: vmTimeout })
    await page.locator('.progress .mono').getByText(address).waitFor()
  })

  test("another VDC's member does not see the VM", async (t) => {
    assert.ok(vmPath, 'the VM was not created')
    const { page } = await session(t)
    await page.goto(base + '/vms')
    await signIn(page, other)
    await page.getByRole('heading', { level: 1, name: 'VMs' }).waitFor()
    await page.getByRole('table').or(page.getByText('No VMs yet.')).first().waitFor()
    assert.equal(await page.locator(`tbody tr[data-name="${vmName}"]`).count(), 0)
    await page.goto(base + vmPath)
    await page.getByText('This VM does not exist in this VDC.').waitFor()
  })

  test('a viewer sees the VM but cannot change it', { skip: !process.env.PORTAL_VIEWER_USER }, async (t) => {
    assert.ok(vmPath, 'the VM was not created')
    const viewer = { user: env('PORTAL_VIEWER_USER'), password: env('PORTAL_VIEWER_PASSWORD') }
    const { page } = await session(t)
    await page.goto(base + '/vms')
    await signIn(page, viewer)
    await page.locator(`tbody tr[data-name="${vmName}"]`).waitFor()
    assert.equal(await page.getByRole('link', { name: 'New VM' }).count(), 0)
    await page.goto(base + vmPath)
    await page.getByRole('heading', { level: 1, name: vmName }).waitFor()
    await page.getByTestId('vm-status').waitFor()
    assert.equal(await page.getByRole('group', { name: 'Actions' }).getByRole('button').count(), 0)
  })

  test('an admin sees every zone and host online', async (t) => {
    const { page } = await session(t)
    await page.goto(base + '/')
    await signIn(page, admin)
    await checkZonesAndHosts(page, zones, hostCount)
    if (process.env.PORTAL_AGENT_UPDATE === '1') {
      assert.equal(await page.locator('tbody td[data-label="Agent"]').getByText('update available').count(), hostCount)
    }
    await shot(page, 'hosts')

    // A zone's region: a bad one is refused next to its field; a good one
    // shows on the zone; then the zone is back in no region.
    await go(page, 'Zones', 'Zones')
    const policy = page.locator(`article[data-zone="${zone}"] [data-testid="zone-policy"]`)
    const zoneDialog = page.getByRole('dialog', { name: `Zone ${zone}` })
    await page.getByRole('button', { name: `Edit region and dedication of ${zone}` }).click()
    await zoneDialog.getByLabel('Region', { exact: true }).fill('Bad Region')
    await zoneDialog.getByRole('button', { name: 'Save' }).click()
    await zoneDialog.locator('[data-field="region"] .field-error').waitFor()
    await zoneDialog.getByLabel('Region', { exact: true }).fill(`e2e-${run}`)
    await zoneDialog.getByRole('button', { name: 'Save' }).click()
    await zoneDialog.waitFor({ state: 'hidden' })
    await policy.getByText(`e2e-${run}`, { exact: true }).waitFor()
    assert.match(await policy.innerText(), /open to every VDC/)
    await shot(page, 'zone-region')
    await page.getByRole('button', { name: `Edit region and dedication of ${zone}` }).click()
    await zoneDialog.getByLabel('Region', { exact: true }).fill('')
    await zoneDialog.getByRole('button', { name: 'Save' }).click()
    await zoneDialog.waitFor({ state: 'hidden' })
    await policy.getByText('none', { exact: true }).waitFor()
  })
})
