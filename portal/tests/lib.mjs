// Shared by the browser tests: the deployment under test (from the
// environment), the browser, sessions that record every request, sign-in
// through the provider's real login form, and screenshots.
import { after, before } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { chromium } from 'playwright-core'

export function env(name, fallback) {
  const v = process.env[name] || fallback
  if (!v) throw new Error(`${name} must be set (see the comment at the top of the test files)`)
  return v
}

export const base = new URL(env('PORTAL_URL')).origin
export const issuer = new URL(env('OIDC_ISSUER')).origin
const allowedOrigins = new Set([base, issuer])
export const admin = { user: env('PORTAL_ADMIN_USER'), password: env('PORTAL_ADMIN_PASSWORD') }
export const member = { user: env('PORTAL_MEMBER_USER'), password: env('PORTAL_MEMBER_PASSWORD') }
export const memberVDCs = env('PORTAL_MEMBER_VDCS').split(',').map((s) => s.trim()).filter(Boolean)
export const artifacts = resolve(env('PORTAL_ARTIFACTS', 'test-artifacts'))
export const run = Date.now().toString(36)
export const timeout = 15_000

let browser
before(async () => {
  mkdirSync(artifacts, { recursive: true })
  browser = await chromium.launch({
    executablePath: env('CHROMIUM', '/usr/bin/chromium'),
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
})
after(async () => {
  await browser?.close()
  console.log(`screenshots: ${artifacts}`)
})

// session opens a fresh browser context that records every request.
export async function session(t, viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport })
  context.setDefaultTimeout(timeout)
  const offOrigin = []
  const graphql = []
  // How many requests went to each origin (data: and blob: URLs aside).
  const origins = new Map()
  // Every request, kept as an artifact next to the screenshots.
  const requests = []
  context.on('request', (r) => {
    const url = r.url()
    if (url.startsWith('data:') || url.startsWith('blob:')) return
    requests.push(`${r.method()} ${url}`)
    const origin = new URL(url).origin
    origins.set(origin, (origins.get(origin) ?? 0) + 1)
    if (!allowedOrigins.has(origin)) offOrigin.push(`${r.method()} ${url}`)
    if (url === `${base}/graphql`) graphql.push({ headers: r.headers(), body: r.postData() || '' })
  })
  const page = await context.newPage()
  page.on('websocket', (ws) => {
    if (!allowedOrigins.has(new URL(ws.url().replace(/^ws/, 'http')).origin)) offOrigin.push(`WS ${ws.url()}`)
  })
  const errors = []
  page.on('pageerror', (e) => errors.push(e.message))
  // The server's Content-Security-Policy would block any off-origin load
  // or unexpected script: a violation is a failure too.
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy/i.test(m.text())) errors.push(m.text())
  })
  t.after(async () => {
    // What the page showed last, to see why a test failed.
    const slug = t.name.toLowerCase().replace(/[^a-z0-9]+/g, '-').slice(0, 60)
    await page.screenshot({ path: join(artifacts, `last-${slug}.png`), fullPage: true }).catch(() => {})
    writeFileSync(join(artifacts, `requests-${slug}.txt`), requests.join('\n') + '\n')
    await context.close()
    assert.deepEqual(offOrigin, [], 'requests left the portal and identity provider origins')
    assert.deepEqual(errors, [], 'uncaught errors in the page')
  })
  return { page, graphql, origins }
}

export async function shot(page, name) {
  const file = join(artifacts, `${name}.png`)
  await page.screenshot({ path: file, fullPage: true })
}

// signIn goes through the real authorization code flow: the portal's sign-in
// button, the provider's login form, the callback.
export async function signIn(page, who, button = 'Sign in') {
  await page.getByRole('button', { name: button, exact: true }).click()
  await page.waitForURL((u) => u.origin === issuer)
  await page.getByLabel('Username').fill(who.user)
  await page.getByLabel('Password').fill(who.password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.waitForURL((u) => u.origin === base && !u.pathname.startsWith('/auth/callback'))
  await page.locator('header.topbar').waitFor()
}

export const nav = (page) => page.getByRole('navigation', { name: 'Main' })

export async function open(page, label, heading) {
  await nav(page).getByRole('link', { name: label, exact: true }).click()
  await page.getByRole('heading', { level: 1, name: heading }).waitFor()
  await page.getByRole('table').or(page.getByText(/^No .*s yet\.$/)).first().waitFor()
}


// go follows a link of the main navigation and waits for the page's heading.
export async function go(page, label, heading) {
  await nav(page).getByRole('link', { name: label, exact: true }).click()
  await page.getByRole('heading', { level: 1, name: heading }).waitFor()
}

// stopVM stops the VM of the detail page through its confirmation and
// waits until it is stopped.
export async function stopVM(page, timeout) {
  const confirm = page.getByRole('dialog')
  await page.getByRole('button', { name: 'Stop', exact: true }).click()
  await confirm.getByText('unsaved data in the guest is lost').waitFor()
  await confirm.getByRole('button', { name: 'Stop', exact: true }).click()
  await page.getByTestId('vm-status').getByText('STOPPED').waitFor({ timeout })
  await page.locator('.operations li[data-state="SUCCEEDED"] strong').getByText('stop', { exact: true }).waitFor()
  await page.getByRole('button', { name: 'Start', exact: true }).waitFor()
}

// checkZonesAndHosts checks, as an admin, that the zones page shows every
// zone online with its three usage bars and the hosts page every host
// online, and takes their screenshots.
export async function checkZonesAndHosts(page, zones, hostCount) {
  await go(page, 'Zones', 'Zones')
  for (const z of zones) {
    const card = page.locator(`article[data-zone="${z}"]`)
    await card.locator('.zone-head .status').getByText('online', { exact: true }).waitFor()
    assert.equal(await card.locator('meter').count(), 3, `CPU, memory and storage bars of ${z}`)
  }
  assert.equal(await page.locator('article[data-zone]').count(), zones.length)
  assert.equal(await page.locator('.zone-hosts li').count(), hostCount)
  await shot(page, 'zones')
  await go(page, 'Hosts', 'Hosts')
  await page.locator('tbody tr').first().waitFor()
  assert.equal(await page.locator('tbody tr').count(), hostCount)
  assert.equal(await page.locator('tbody td[data-label="Status"] .status.online').count(), hostCount)
  const hostZones = new Set((await page.locator('tbody td[data-label="Zone"]').allInnerTexts()).map((z) => z.trim()))
  assert.deepEqual([...hostZones].sort(), [...zones].sort())
}

// An agent's update: sending the release, a restart, the mesh joined
// again, the orchestrator's health check, the Hosts page's 3 s refresh.
const updateTimeout = 120_000

// updateAgentFromHostsPage, on the Hosts page as an admin, checks that host
// and other (zone/name) run from with an update to the newest release to
// available, presses host's Update button, follows the rollout until it
// succeeded and checks host runs to, done, and other is untouched; the
// screenshots are named shots-available, -running and -done.
export async function updateAgentFromHostsPage(t, page, { host, other, from, to, shots }) {
  const agent = (name) => page.locator(`tbody tr[data-name="${name}"] td[data-label="Agent"]`)
  for (const name of [host, other]) {
    await agent(name).locator('.mono').getByText(from, { exact: true }).waitFor()
    await agent(name).getByText('update available', { exact: true }).waitFor()
  }
  await page.getByText(`Newest agent release: ${to}`).waitFor()
  await shot(page, `${shots}-available`)

  await page.getByRole('button', { name: `Update ${host}`, exact: true }).click()
  const rollout = page.getByRole('region', { name: 'Agent update' })
  await rollout.getByRole('heading', { name: `Update to ${to}: running` }).waitFor()
  assert.equal(await rollout.locator('li').count(), 1, 'the rollout has the one host')
  assert.equal(await rollout.locator('li').getAttribute('data-name'), host)
  // While it runs, the other buttons wait for it.
  assert.ok(await page.getByRole('button', { name: `Update ${other}`, exact: true }).isDisabled())
  await shot(page, `${shots}-running`)

  // Progress as the agent reports it, until the rollout succeeded.
  const seen = new Set()
  const deadline = Date.now() + updateTimeout
  while ((await rollout.getAttribute('data-state')) === 'RUNNING') {
    assert.ok(Date.now() < deadline, `the rollout still runs after ${updateTimeout} ms; seen ${[...seen]}`)
    const badge = agent(host).locator('[data-update]')
    if (await badge.count()) seen.add(await badge.getAttribute('data-update'))
    await page.waitForTimeout(250)
  }
  t.diagnostic(`update states seen: ${[...seen].join(', ')}`)
  assert.equal(await rollout.getAttribute('data-state'), 'SUCCEEDED', await rollout.innerText())
  await rollout.getByRole('heading', { name: `Update to ${to}: succeeded` }).waitFor()
  assert.equal(await rollout.locator(`li[data-name="${host}"]`).getAttribute('data-state'), 'DONE')

  // The host runs the new version and says so; the other one does not.
  await agent(host).locator('.mono').getByText(to, { exact: true }).waitFor()
  await agent(host).locator('[data-update="DONE"]').getByText(`done ${to}`).waitFor()
  assert.equal(await agent(host).getByText('update available').count(), 0)
  assert.equal(await page.getByRole('button', { name: `Update ${host}`, exact: true }).count(), 0)
  await agent(other).locator('.mono').getByText(from, { exact: true }).waitFor()
  await agent(other).getByText('update available', { exact: true }).waitFor()
  assert.ok(await page.getByRole('button', { name: `Update ${other}`, exact: true }).isEnabled())
  await shot(page, `${shots}-done`)
}

// fieldError is the error shown under a form field (FormField's data-field).
export const fieldError = (dialog, field) => dialog.locator(`[data-field="${field}"] .field-error`)

// said waits for the page's message about what it did.
export const said = (page, text) => page.locator('p.ok').getByText(text, { exact: true }).waitFor()
