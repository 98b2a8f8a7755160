// Browser test of host maintenance from the Hosts page (pkg/portal's
// TestBrowserMaintenance runs a zone of two hosts and one running VM).
// Besides lib.mjs's variables:
//
//   PORTAL_MAINT_HOST                  the VM's host, zone/name
//   PORTAL_MAINT_VM                    the VM's name
//
// The admin presses the host's Maintenance button, follows the drain until
// the host is in maintenance with the VM moved, then ends the maintenance.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { admin, base, env, session, shot, signIn } from './lib.mjs'

const host = env('PORTAL_MAINT_HOST')
const vm = env('PORTAL_MAINT_VM')

test('an admin drains a host from the Hosts page and ends its maintenance', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/platform/hosts')
  await signIn(page, admin)
  await page.getByRole('heading', { level: 1, name: 'Hosts' }).waitFor()
  const row = page.getByRole('table', { name: 'Hosts', exact: true }).locator(`tr[data-name="${host}"]`)
  const cell = row.locator('td[data-label="Maintenance"]')
  await cell.waitFor()
  assert.equal(await cell.getAttribute('data-maintenance'), 'NONE')
  await page.getByRole('button', { name: `Maintenance of ${host}`, exact: true }).click()
  // The page refreshes every few seconds: the drain shows the VM moved.
  await row.locator('td[data-label="Maintenance"][data-maintenance="MAINTENANCE"]').waitFor({ timeout: 60_000 })
  const item = cell.getByRole('list', { name: `Drain of ${host}` }).locator(`li[data-vm="${vm}"]`)
  await item.waitFor()
  assert.equal(await item.getAttribute('data-status'), 'DONE')
  await shot(page, 'host-maintenance-drained')
  await page.getByRole('button', { name: `End maintenance of ${host}`, exact: true }).click()
  await row.locator('td[data-label="Maintenance"][data-maintenance="NONE"]').waitFor({ timeout: 30_000 })
  await shot(page, 'host-maintenance-ended')
})
