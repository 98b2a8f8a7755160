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
import { admin, base, env, session, signIn, updateAgentFromHostsPage } from './lib.mjs'

const host = env('PORTAL_UPDATE_HOST')
const other = env('PORTAL_UPDATE_OTHER')
const from = env('PORTAL_UPDATE_FROM')
const to = env('PORTAL_UPDATE_TO')

test('an admin updates a host agent from the Hosts page and sees it done at the new version', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/platform/hosts')
  await signIn(page, admin)
  await page.getByRole('heading', { level: 1, name: 'Hosts' }).waitFor()
  await updateAgentFromHostsPage(t, page, { host, other, from, to, shots: 'agent-update' })
})
