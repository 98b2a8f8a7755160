// Browser test of the Hosts page's refused agents (pkg/portal's
// TestBrowserRefusedAgents starts an agent that claims a node of zone alpha
// without proving it). Besides lib.mjs's variables:
//
//   PORTAL_REFUSED_AGENT               the mesh name of the refused agent
//   PORTAL_REFUSED_CLAIM               what it claims, zone/node
//
// The admin's Hosts page lists the zone's genuine host and, in its Refused
// agents table, the refused agent with its claim and why.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { admin, base, env, session, shot, signIn } from './lib.mjs'

const refused = env('PORTAL_REFUSED_AGENT')
const claim = env('PORTAL_REFUSED_CLAIM')

test('the Hosts page lists an agent that did not prove its zone as refused, not as a host', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/platform/hosts')
  await signIn(page, admin)
  await page.getByRole('heading', { level: 1, name: 'Hosts' }).waitFor()
  const table = page.getByRole('table', { name: 'Refused agents', exact: true })
  const row = table.locator(`tr[data-refused="${refused}"]`)
  await row.waitFor()
  assert.match(await row.locator('td[data-label="Claims"]').innerText(), new RegExp(`^${claim}\\b`))
  assert.match(await row.locator('td[data-label="Reason"]').innerText(), /signature/)
  const hosts = page.getByRole('table', { name: 'Hosts', exact: true })
  assert.equal(await hosts.locator(`tr[data-name="${claim}"]`).count(), 1, `one host ${claim}`)
  await shot(page, 'hosts-refused-agent')
})
