// Browser tests of the portal: playwright-core driving Debian's chromium
// (never a downloaded browser). They run against any deployment given by
// the environment:
//
//   PORTAL_URL                         the portal, e.g. http://127.0.0.1:8080
//   OIDC_ISSUER                        the identity provider (its login form is the dev provider's)
//   PORTAL_ADMIN_USER / _PASSWORD      a platform admin
//   PORTAL_MEMBER_USER / _PASSWORD     a VDC member who is not an admin
//   PORTAL_MEMBER_VDCS                 the member's VDCs, comma separated, at least two
//   PORTAL_ARTIFACTS                   where screenshots go (default test-artifacts)
//   CHROMIUM                           the browser (default /usr/bin/chromium)
//
// Every request the pages make is recorded; a request to any origin other
// than the portal's and the identity provider's fails the test (lib.mjs).
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { admin, base, member, memberVDCs, nav, open, run, session, shot, signIn } from './lib.mjs'

describe('portal', () => {
  test('a member signs in, switches VDC and sees the catalog, but no platform section', async (t) => {
    const { page, graphql } = await session(t)
    await page.goto(base + '/')
    await shot(page, 'signin')
    await signIn(page, member)
    await page.getByRole('heading', { name: /^Welcome/ }).waitFor()

    // The switcher offers exactly the member's VDCs.
    const select = page.getByLabel('VDC', { exact: true })
    const options = (await select.locator('option').evaluateAll((os) => os.map((o) => o.value))).sort()
    assert.deepEqual(options, [...memberVDCs].sort())

    // Switching changes the VDC of every request and what the home page shows.
    const initial = await select.inputValue()
    assert.ok(memberVDCs.includes(initial), `initial VDC ${initial}`)
    await page.getByRole('heading', { name: `VDC ${initial}` }).waitFor()
    const other = memberVDCs.find((v) => v !== initial)
    for (const vdc of [other, initial]) {
      const before = graphql.length
      await select.selectOption(vdc)
      await page.getByRole('heading', { name: `VDC ${vdc}` }).waitFor()
      const sent = graphql.slice(before).filter((r) => r.body.includes('currentVDC'))
      assert.ok(sent.length > 0, 'no request after switching VDC')
      for (const r of sent) assert.equal(r.headers['flexplane-vdc-id'], vdc)
      // prod holds 1 of its 4 public addresses; dev has no such quota.
      const addresses = page.getByTestId('vdc-quotas').locator('.usage').filter({ hasText: 'Public addresses' })
      await addresses.getByText(vdc === 'prod' ? '1 of 4' : '0 (no quota)', { exact: true }).waitFor()
      const clusters = page.getByTestId('vdc-quotas').locator('.usage').filter({ hasText: 'Kubernetes clusters' })
      await clusters.getByText('0 (no quota)', { exact: true }).waitFor()
    }
    // A switch while the last VDC's answer is still on its way: the other
    // VDC's query is sent on its own and shown, and the late answer of the
    // VDC switched away from changes nothing when it comes.
    await select.selectOption(other)
    await page.getByRole('heading', { name: `VDC ${other}` }).waitFor()
    let release
    const held = new Promise((r) => { release = r })
    let holding
    const isHeld = new Promise((r) => { holding = r })
    const hold = async (route) => {
      const r = route.request()
      if (r.headers()['flexplane-vdc-id'] === initial && (r.postData() ?? '').includes('currentVDC')) {
        holding(r)
        await held
      }
      await route.continue()
    }
    await page.route('**/graphql', hold)
    await select.selectOption(initial)
    const late = await isHeld
    const before = graphql.length
    await select.selectOption(other)
    await page.getByRole('heading', { name: `VDC ${other}` }).waitFor()
    assert.ok(graphql.slice(before).some((r) => r.body.includes('currentVDC') && r.headers['flexplane-vdc-id'] === other), `no request of ${other}'s home page while ${initial}'s was on its way`)
    const answered = page.waitForResponse((res) => res.request() === late)
    release()
    await answered
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))))
    assert.equal(await page.locator('#vdc-heading').textContent(), `VDC ${other}`, `${initial}'s late answer replaced ${other}'s`)
    await page.unroute('**/graphql', hold)
    await select.selectOption(initial)
    await page.getByRole('heading', { name: `VDC ${initial}` }).waitFor()
    await shot(page, 'home')
    // The first Tab reaches the skip link, which moves focus to the content.
    await page.locator('body').focus()
    await page.keyboard.press('Tab')
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Skip to content')
    // Where the keyboard is shows: a visible outline.
    const outline = () => page.evaluate(() => {
      const s = getComputedStyle(document.activeElement)
      return `${s.outlineStyle} ${s.outlineWidth}`
    })
    assert.match(await outline(), /^solid [1-9]/, 'the focused skip link has no visible outline')
    await page.keyboard.press('Enter')
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'content')
    // The next Tab reaches the page's first control, outlined too.
    await page.keyboard.press('Tab')
    assert.notEqual(await page.evaluate(() => document.activeElement?.tagName), 'BODY')
    assert.match(await outline(), /^solid [1-9]/, 'the focused control has no visible outline')
    // The choice survives a reload, and so does the session.
    await page.reload()
    await page.getByRole('heading', { name: `VDC ${initial}` }).waitFor()

    // No platform section for a member.
    await nav(page).getByRole('link', { name: 'Images' }).waitFor()
    assert.equal(await nav(page).getByText('Platform').count(), 0)
    assert.equal(await nav(page).getByRole('link', { name: 'VDCs' }).count(), 0)

    await open(page, 'Images', 'Images')
    assert.ok((await page.locator('tbody tr').count()) > 0, 'no images listed')
    assert.equal(await page.getByRole('button', { name: /^New / }).count(), 0, 'a member may not create images')
    await shot(page, 'images')
    await open(page, 'Compute profiles', 'Compute profiles')
    assert.ok((await page.locator('tbody tr').count()) > 0, 'no compute profiles listed')
    await shot(page, 'compute-profiles')
    await open(page, 'Storage profiles', 'Storage profiles')
    assert.ok((await page.locator('tbody tr').count()) > 0, 'no storage profiles listed')
    await shot(page, 'storage-profiles')

    // Every API request carries the bearer token; all but the first
    // (which learns the VDCs) carry the VDC.
    assert.ok(graphql.length > 0)
    for (const r of graphql) {
      assert.match(r.headers.authorization || '', /^Bearer \S+$/)
      if (!r.body.includes('query Me')) assert.ok(memberVDCs.includes(r.headers['flexplane-vdc-id']), `no VDC on ${r.body}`)
    }

    // A token the API refuses ends the session clearly; signing in again
    // returns to the same page.
    // (oidc-client-ts keeps the session as oidc.user:<issuer>:<client>.)
    await page.evaluate(() => {
      const k = Object.keys(sessionStorage).find((k) => k.startsWith('oidc.user:'))
      const s = JSON.parse(sessionStorage.getItem(k))
      s.access_token = 'not-a-valid-token'
      sessionStorage.setItem(k, JSON.stringify(s))
    })
    await page.reload()
    await page.getByText('Your session has expired').waitFor()
    await shot(page, 'session-expired')
    await signIn(page, member, 'Sign in again')
    assert.equal(new URL(page.url()).pathname, '/profiles/storage')
    await page.getByRole('heading', { level: 1, name: 'Storage profiles' }).waitFor()

    // Sign out ends the provider's session too and comes back signed out.
    await page.getByRole('button', { name: 'Sign out' }).click()
    await page.getByText('You are signed out.').waitFor()
    assert.equal(new URL(page.url()).origin, base)
  })

  test('a session that runs out asks to sign in again without any click', async (t) => {
    const { page } = await session(t)
    await page.goto(base + '/profiles/compute')
    await signIn(page, member)
    await page.locator('tbody tr').first().waitFor()
    // A session whose refresh token the provider no longer honours (it
    // was revoked, or expired) cannot renew: it ends with its access token.
    await page.evaluate(() => {
      const k = Object.keys(sessionStorage).find((k) => k.startsWith('oidc.user:'))
      const s = JSON.parse(sessionStorage.getItem(k))
      s.expires_at = Math.floor(Date.now() / 1000) + 3
      s.refresh_token = 'revoked'
      sessionStorage.setItem(k, JSON.stringify(s))
    })
    await page.reload()
    await page.getByRole('heading', { level: 1, name: 'Compute profiles' }).waitFor()
    await page.getByText('Your session has expired').waitFor()
    await page.getByRole('button', { name: 'Sign in again' }).waitFor()
  })

  test('the portal is usable at phone width', async (t) => {
    const { page } = await session(t, { width: 390, height: 844 })
    await page.goto(base + '/images')
    await signIn(page, member)
    assert.equal(new URL(page.url()).pathname, '/images')
    const toggle = page.getByRole('button', { name: 'Menu' })
    assert.equal(await nav(page).isVisible(), false, 'the navigation should be folded away')
    await toggle.focus()
    await page.keyboard.press('Enter')
    await nav(page).getByRole('link', { name: 'Compute profiles' }).waitFor()
    await shot(page, 'phone-menu')
    await nav(page).getByRole('link', { name: 'Compute profiles' }).click()
    await page.getByRole('heading', { level: 1, name: 'Compute profiles' }).waitFor()
    await page.locator('tbody tr').first().waitFor()
    await shot(page, 'phone-compute-profiles')
  })

  test('an admin manages compute profiles, with API errors next to their fields', async (t) => {
    const { page } = await session(t)
    await page.goto(base + '/')
    await signIn(page, admin)
    await nav(page).getByText('Platform').waitFor()
    await open(page, 'VDCs', 'VDCs')
    await shot(page, 'vdcs')

    await open(page, 'Compute profiles', 'Compute profiles')
    const name = `e2e-${run}`
    const dialog = page.getByRole('dialog')
    const field = (key) => dialog.locator(`[data-field="${key}"]`)

    // Created through the form, it shows in the list.
    await page.getByRole('button', { name: 'New compute profile' }).click()
    await dialog.getByLabel('Name', { exact: true }).fill(name)
    await dialog.getByLabel('vCPUs', { exact: true }).fill('16')
    await dialog.getByLabel('Memory (MiB)', { exact: true }).fill('32768')
    await shot(page, 'compute-profile-form')
    await dialog.getByRole('button', { name: 'Create' }).click()
    const row = page.locator(`tbody tr[data-name="${name}"]`)
    await row.waitFor()
    assert.match(await row.innerText(), /16[\s\S]*32 GiB/)
    await dialog.waitFor({ state: 'hidden' })

    // Invalid input: the API's message appears next to the field at fault,
    // which gets the focus, and nothing is created.
    await page.getByRole('button', { name: 'New compute profile' }).click()
    await dialog.getByLabel('Name', { exact: true }).fill(`${name}-bad`)
    await dialog.getByLabel('vCPUs', { exact: true }).fill('0')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await field('vcpus').locator('.field-error').getByText('must be between 1 and 1024, got 0').waitFor()
    assert.equal(await dialog.getByLabel('vCPUs', { exact: true }).getAttribute('aria-invalid'), 'true')
    assert.equal(await dialog.getByLabel('vCPUs', { exact: true }).evaluate((el) => el === document.activeElement), true)
    await shot(page, 'compute-profile-invalid')
    await dialog.getByLabel('vCPUs', { exact: true }).fill('2')
    await dialog.getByLabel('Name', { exact: true }).fill('Not A Name')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await field('name').locator('.field-error').getByText(/lower-case letters/).waitFor()
    assert.equal(await field('vcpus').locator('.field-error').count(), 0)

    // A name that exists is a conflict, said as such.
    await dialog.getByLabel('Name', { exact: true }).fill(name)
    await dialog.getByRole('button', { name: 'Create' }).click()
    await dialog.getByRole('alert').getByText('Conflict:').waitFor()
    await page.keyboard.press('Escape')
    await dialog.waitFor({ state: 'hidden' })
    assert.equal(await page.locator(`tbody tr[data-name="${name}-bad"]`).count(), 0)

    // Edit, then delete with confirmation.
    await page.getByRole('button', { name: `Edit ${name}` }).click()
    assert.equal(await dialog.getByLabel('Name', { exact: true }).getAttribute('readonly'), '')
    await dialog.getByLabel('vCPUs', { exact: true }).fill('12')
    await dialog.getByRole('button', { name: 'Save' }).click()
    await dialog.waitFor({ state: 'hidden' })
    await page.locator(`tbody tr[data-name="${name}"] td[data-label="vCPUs"]`).getByText('12', { exact: true }).waitFor()
    await page.getByRole('button', { name: `Delete ${name}` }).click()
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click()
    await row.waitFor({ state: 'detached' })

    // Storage profiles: an error inside the zone map lands on that field.
    await open(page, 'Storage profiles', 'Storage profiles')
    const storage = `e2e-${run}-ssd`
    await page.getByRole('button', { name: 'New storage profile' }).click()
    await dialog.getByLabel('Name', { exact: true }).fill(storage)
    await dialog.getByLabel('Tier', { exact: true }).fill('ssd')
    await dialog.getByLabel('Zone storage', { exact: true }).fill('fra1=local-lvm, fra1=ceph')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await field('pools').locator('.field-error').getByText('zone "fra1" is listed twice').waitFor()
    await dialog.getByLabel('Zone storage', { exact: true }).fill('fra1=local-lvm, hel1=ceph')
    await dialog.getByLabel('Write limit (MB/s)', { exact: true }).fill('250')
    await dialog.getByRole('button', { name: 'Create' }).click()
    const srow = page.locator(`tbody tr[data-name="${storage}"]`)
    await srow.waitFor()
    assert.match(await srow.innerText(), /unlimited[\s\S]*250 MB\/s[\s\S]*fra1=local-lvm, hel1=ceph/)
    await page.getByRole('button', { name: `Delete ${storage}` }).click()
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click()
    await srow.waitFor({ state: 'detached' })
    // Images: a bad checksum is refused next to its field.
    await open(page, 'Images', 'Images')
    await page.getByRole('button', { name: 'New image' }).click()
    await dialog.getByLabel('Name', { exact: true }).fill(`e2e-${run}-img`)
    await dialog.getByLabel('Version', { exact: true }).fill('1')
    await dialog.getByLabel('Download URL', { exact: true }).fill('http://images.example/x.qcow2')
    await dialog.getByLabel('Checksum', { exact: true }).fill('md5:abc')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await field('checksum').locator('.field-error').getByText(/must be sha256:/).waitFor()
    await page.keyboard.press('Escape')
    await dialog.waitFor({ state: 'hidden' })
  })

  test('an admin manages VDCs and their quotas', async (t) => {
    const { page } = await session(t)
    await page.goto(base + '/platform/vdcs')
    await signIn(page, admin)
    await page.getByRole('heading', { level: 1, name: 'VDCs' }).waitFor()
    await page.locator('tbody tr').first().waitFor()
    const dialog = page.getByRole('dialog')
    const name = `e2e-${run}`

    await page.getByRole('button', { name: 'New VDC' }).click()
    await dialog.getByLabel('Name', { exact: true }).fill(name)
    await dialog.getByLabel('vCPU quota', { exact: true }).fill('-1')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await dialog.locator('[data-field="quotas.vcpus"] .field-error').getByText(/must be between 0 and/).waitFor()
    await shot(page, 'vdc-invalid')
    await dialog.getByLabel('vCPU quota', { exact: true }).fill('24')
    await dialog.getByLabel('VM quota', { exact: true }).fill('')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await dialog.locator('[data-field="quotas.vms"] .field-error').getByText('Enter a whole number.').waitFor()
    await dialog.getByLabel('VM quota', { exact: true }).fill('5')
    // The public addresses quota: the API's range check shows on its field.
    await dialog.getByLabel('Public address quota', { exact: true }).fill('-1')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await dialog.locator('[data-field="quotas.publicAddresses"] .field-error').getByText(/must be between 0 and/).waitFor()
    await dialog.getByLabel('Public address quota', { exact: true }).fill('2')
    // The Kubernetes clusters quota, likewise.
    await dialog.getByLabel('Kubernetes cluster quota', { exact: true }).fill('-1')
    await dialog.getByRole('button', { name: 'Create' }).click()
    await dialog.locator('[data-field="quotas.kubernetesClusters"] .field-error').getByText(/must be between 0 and/).waitFor()
    await dialog.getByLabel('Kubernetes cluster quota', { exact: true }).fill('3')
    await dialog.getByRole('button', { name: 'Create' }).click()
    const row = page.locator(`tbody tr[data-name="${name}"]`)
    await row.waitFor()
    assert.match(await row.innerText(), /24[\s\S]*32 GiB[\s\S]*500 GiB[\s\S]*5/)
    assert.equal(await row.locator('td[data-label="Public addresses"]').innerText(), '0 of 2')
    assert.equal(await row.locator('td[data-label="Kubernetes clusters"]').innerText(), '0 of 3')
    // prod's row counts the address it holds; it has no clusters quota.
    assert.equal(await page.locator('tbody tr[data-name="prod"] td[data-label="Public addresses"]').innerText(), '1 of 4')
    assert.equal(await page.locator('tbody tr[data-name="prod"] td[data-label="Kubernetes clusters"]').innerText(), '0 (no quota)')
    // Edited: the form holds the quotas; emptied, the VDC has none.
    await row.getByRole('button', { name: `Edit ${name}` }).click()
    assert.equal(await dialog.getByLabel('Public address quota', { exact: true }).inputValue(), '2')
    assert.equal(await dialog.getByLabel('Kubernetes cluster quota', { exact: true }).inputValue(), '3')
    await dialog.getByLabel('Public address quota', { exact: true }).fill('')
    await dialog.getByLabel('Kubernetes cluster quota', { exact: true }).fill('')
    await dialog.getByRole('button', { name: 'Save' }).click()
    await row.locator('td[data-label="Public addresses"]').getByText('0 (no quota)', { exact: true }).waitFor()
    await row.locator('td[data-label="Kubernetes clusters"]').getByText('0 (no quota)', { exact: true }).waitFor()
    await row.getByRole('button', { name: `Edit ${name}` }).click()
    assert.equal(await dialog.getByLabel('Public address quota', { exact: true }).inputValue(), '')
    assert.equal(await dialog.getByLabel('Kubernetes cluster quota', { exact: true }).inputValue(), '')
    await page.keyboard.press('Escape')
    await dialog.waitFor({ state: 'hidden' })
    // An admin may use every VDC: the new one is in the switcher at once.
    const switcher = page.getByLabel('VDC', { exact: true })
    await switcher.locator(`option[value="${name}"]`).waitFor({ state: 'attached' })
    await switcher.selectOption(name)

    // Deleted from another tab while selected here: this tab's next request
    // finds it gone, switches to another VDC and says so.
    const other = await page.context().newPage()
    await other.goto(base + '/platform/vdcs')
    await signIn(other, admin)
    await other.getByRole('button', { name: `Delete ${name}` }).click()
    // The VDC has backups: refused, with the API's count, until the
    // confirmation is told to delete them too.
    const confirm = other.getByRole('dialog')
    await confirm.getByRole('button', { name: 'Delete' }).click()
    await confirm.getByRole('alert').getByText(`VDC ${name} still has 2 backups`, { exact: false }).waitFor()
    assert.equal(await other.locator(`tbody tr[data-name="${name}"]`).count(), 1)
    await confirm.getByLabel('Also delete its backups').check()
    await confirm.getByRole('button', { name: 'Delete' }).click()
    await other.locator(`tbody tr[data-name="${name}"]`).waitFor({ state: 'detached' })
    await other.close()

    await nav(page).getByRole('link', { name: 'Home' }).click()
    await page.getByText(`VDC ${name} is no longer available to you; switched to`).waitFor()
    await page.getByRole('heading', { name: /^VDC / }).waitFor()
    assert.notEqual(await switcher.inputValue(), name)
    assert.equal(await switcher.locator(`option[value="${name}"]`).count(), 0)
    await shot(page, 'vdc-gone')
  })
})
