// Browser test of a zone that does not answer (pkg/portal's TestBrowserMesh
// stops its agents first). Besides lib.mjs's variables:
//
//   PORTAL_DOWN_ZONE                   the zone that is down
//   PORTAL_ZONES                       every zone, comma separated
//
// The admin's zone page shows it unavailable and the other zones as usual;
// the hosts page lists the other zones' hosts; the member's VM list works.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { admin, base, env, session, shot, signIn } from './lib.mjs'

const down = env('PORTAL_DOWN_ZONE')
const up = env('PORTAL_ZONES').split(',').map((s) => s.trim()).filter((z) => z && z !== down)

test('a zone that is down shows as such and the rest of the page works', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/platform/zones')
  await signIn(page, admin)
  await page.getByRole('heading', { level: 1, name: 'Zones' }).waitFor()
  await page.locator(`article[data-zone="${down}"] .zone-head .status`).getByText('unavailable').waitFor()
  await page.getByRole('status').getByText(`Not answering: ${down}.`).waitFor()
  for (const z of up) {
    const card = page.locator(`article[data-zone="${z}"]`)
    await card.locator('.zone-head .status').getByText('online', { exact: true }).waitFor()
    assert.equal(await card.locator('meter').count(), 3)
  }
  await shot(page, 'zones-one-down')
  await page.goto(base + '/platform/hosts')
  await page.locator('tbody tr').first().waitFor()
  const zonesListed = await page.locator('tbody td[data-label="Zone"]').allInnerTexts()
  for (const z of up) assert.ok(zonesListed.includes(z), `hosts of ${z} listed`)
  await shot(page, 'hosts-one-down')
})
