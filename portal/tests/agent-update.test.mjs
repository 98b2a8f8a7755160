// Browser test of updating an agent from the Hosts page (pkg/portal's
// TestBrowserAgentUpdate runs real agent processes at one version and
// publishes a newer release). Besides lib.mjs's variables:
//
//   PORTAL_UPDATE_HOST                 the host to update, zone/name
//   PORTAL_UPDATE_OTHER                a host left as it is, zone/name
//   PORTAL_UPDATE_FROM                 the version the agents run
//   PORTAL_UPDATE_TO                   the published release
//
// The admin sees both hosts at the old version with an update available,
// presses the host's Update button, follows the rollout until it succeeded,
// and finds the host at the new version, done, the other one untouched.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { admin, base, env, session, shot, signIn } from './lib.mjs'

const host = env('PORTAL_UPDATE_HOST')
const other = env('PORTAL_UPDATE_OTHER')
const from = env('PORTAL_UPDATE_FROM')
const to = env('PORTAL_UPDATE_TO')
// An update: sending the release, a restart, the mesh joined again, the
// orchestrator's health check, the page's 3 s refresh.
const updateTimeout = 120_000

test('an admin updates a host agent from the Hosts page and sees it done at the new version', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/platform/hosts')
  await signIn(page, admin)
  await page.getByRole('heading', { level: 1, name: 'Hosts' }).waitFor()
  const agent = (name) => page.locator(`tbody tr[data-name="${name}"] td[data-label="Agent"]`)
  for (const name of [host, other]) {
    await agent(name).locator('.mono').getByText(from, { exact: true }).waitFor()
    await agent(name).getByText('update available', { exact: true }).waitFor()
  }
  await page.getByText(`Newest agent release: ${to}`).waitFor()
  await shot(page, 'agent-update-available')

  await page.getByRole('button', { name: `Update ${host}`, exact: true }).click()
  const rollout = page.getByRole('region', { name: 'Agent update' })
  await rollout.getByRole('heading', { name: `Update to ${to}: running` }).waitFor()
  assert.equal(await rollout.locator('li').count(), 1, 'the rollout has the one host')
  assert.equal(await rollout.locator('li').getAttribute('data-name'), host)
  // While it runs, the other buttons wait for it.
  assert.ok(await page.getByRole('button', { name: `Update ${other}`, exact: true }).isDisabled())
  await shot(page, 'agent-update-running')

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
  await shot(page, 'agent-update-done')
})
