// The Kubernetes page of a VDC, against a backend with managed Kubernetes
// (a management cluster running Cluster API and flexplane's provider over
// zone alpha; TestBrowserKubernetes in pkg/portal starts it), the VDC
// having a network "lan" in alpha, a compute profile "small" and a storage
// profile "ssd":
// - a member creates cluster "web" (a bad name refused by the form on its
//   field) and sees its control plane become ready with its components;
// - downloads a kubeconfig of their own (saved as kubeconfig-member in the
//   artifacts, checked by the Go side);
// - creates node pool "workers" of 2 (size 11 refused by the form, a
//   label with a reserved prefix refused by the API, each on its field),
//   with a label and a taint, and sees its 2 workers ready;
// - scales it to 3 (11 refused again) and sees the sizes change to 3 ready;
// - a viewer sees the cluster and its pool without a button to change
//   them, and downloads a read-only kubeconfig (kubeconfig-viewer);
// - the member deletes the pool and then the cluster, confirmed.
// Every state passes axe-core, the page and its dialogs fit a 390 px phone.
//
// Environment: the variables of lib.mjs, PORTAL_VIEWER_USER/PASSWORD (a
// viewer of the member's VDC) and KUBE_WAIT_MS (how long the control plane
// and the workers may take, default 120000).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { check, phone } from './axe.mjs'
import { artifacts, base, env, fieldError, go, member, said, session, shot, signIn } from './lib.mjs'

const viewer = { user: env('PORTAL_VIEWER_USER'), password: env('PORTAL_VIEWER_PASSWORD') }
const wait = Number(env('KUBE_WAIT_MS', '120000'))

const card = (page) => page.locator('article.cluster[data-cluster="web"]')
const poolRow = (page) => card(page).getByRole('table', { name: 'Node pools of web' }).locator('tr[data-pool="workers"]')

// sizes waits until the pool's row reads size, workers and ready.
async function sizes(page, size, workers, ready) {
  const row = poolRow(page)
  await row.getByTestId('pool-size').getByText(String(size), { exact: true }).waitFor({ timeout: wait })
  await row.getByTestId('pool-workers').getByText(String(workers), { exact: true }).waitFor({ timeout: wait })
  await row.getByTestId('pool-ready').getByText(String(ready), { exact: true }).waitFor({ timeout: wait })
}

// download presses the kubeconfig button and saves the file as name in
// the artifacts; it returns its text.
async function download(page, button, name) {
  const [file] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: button }).click()])
  assert.equal(file.suggestedFilename(), 'web.kubeconfig')
  const path = join(artifacts, name)
  await file.saveAs(path)
  return readFileSync(path, 'utf8')
}

test('a member creates a cluster, a node pool, scales it and downloads a kubeconfig', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Kubernetes', 'Kubernetes')
  await page.getByText('No Kubernetes clusters yet.').waitFor()

  // The new cluster: a bad name is refused on its field by the form.
  await page.getByRole('button', { name: 'New cluster' }).click()
  const dialog = page.getByRole('dialog', { name: 'New Kubernetes cluster' })
  await dialog.getByLabel('Name', { exact: true }).fill('Web_1')
  await dialog.getByLabel('Zone').selectOption('alpha')
  const networks = await dialog.getByLabel('Network').locator('option').allInnerTexts()
  assert.deepEqual(networks, ['lan (10.1.0.0/24)'])
  assert.deepEqual(await dialog.getByLabel('Kubernetes version').locator('option').allInnerTexts(), ['v1.36.4', 'v1.37.2'])
  // The older version, to upgrade it later.
  await dialog.getByLabel('Kubernetes version').selectOption('v1.36.4')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await fieldError(dialog, 'name').getByText("Enter 1 to 20 of a-z, 0-9 and '-', starting with a letter.").waitFor()
  await check(page, 'new cluster refused', false)
  await phone(page, 'new cluster dialog')
  await dialog.getByLabel('Name', { exact: true }).fill('web')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await dialog.waitFor({ state: 'hidden' })
  await said(page, 'Created cluster web; its control plane is starting.')

  // The control plane becomes ready, with its components.
  const c = card(page)
  await c.getByTestId('control-plane').getByText('ready', { exact: true }).waitFor({ timeout: wait })
  await c.getByTestId('cluster-phase').getByText('provisioned', { exact: true }).waitFor({ timeout: wait })
  assert.equal(await c.getByTestId('cluster-network').innerText(), 'lan (10.1.0.0/24)')
  // The workers reach the API server at a port of their network's gateway
  // address, which the VDC's edge gateway forwards.
  assert.equal(await c.getByTestId('cluster-endpoint').innerText(), '10.1.0.1:6443 in lan (10.1.0.0/24), through the edge gateway')
  const components = c.getByRole('list', { name: 'Control plane of web' }).locator('li')
  assert.ok((await components.count()) >= 2, 'the control plane lists its components')
  for (const name of await components.evaluateAll((li) => li.map((l) => l.getAttribute('data-component')))) {
    await c.locator(`li[data-component="${name}"] .status`).getByText('ready', { exact: true }).waitFor()
  }
  await c.locator('li[data-component="kube-apiserver"]').waitFor()

  // A kubeconfig of the member's own.
  const kubeconfig = await download(page, 'Download kubeconfig of web', 'kubeconfig-member')
  assert.ok(kubeconfig.length > 0, 'the kubeconfig is not empty')
  await page.locator('p.ok').getByText(/^Downloaded a kubeconfig of web, valid until \d{4}-\d\d-\d\d \d\d:\d\d UTC\.$/).waitFor()

  // The new node pool: size 11 refused by the form, a reserved label by
  // the API, each on its field.
  await c.getByRole('button', { name: 'New node pool in web' }).click()
  const pool = page.getByRole('dialog', { name: 'New node pool in web' })
  await pool.getByLabel('Name', { exact: true }).fill('workers')
  await pool.getByLabel('Compute profile').selectOption('small')
  await pool.getByLabel('Storage profile').selectOption('ssd')
  await pool.getByLabel('Size', { exact: true }).fill('11')
  await pool.getByLabel('Node labels').fill('node-role.kubernetes.io/worker=true')
  await pool.getByLabel('Node taints').fill('dedicated=web:NoSchedule')
  await pool.getByRole('button', { name: 'Create' }).click()
  await fieldError(pool, 'size').getByText('Enter a size from 0 to 10.').waitFor()
  await pool.getByLabel('Size', { exact: true }).fill('2')
  await pool.getByRole('button', { name: 'Create' }).click()
  await fieldError(pool, 'labels').waitFor()
  assert.match(await fieldError(pool, 'labels').innerText(), /reserved prefix/)
  await check(page, 'new node pool refused', false)
  await phone(page, 'new node pool dialog')
  await pool.getByLabel('Node labels').fill('tier=web')
  await pool.getByRole('button', { name: 'Create' }).click()
  await pool.waitFor({ state: 'hidden' })
  await said(page, 'Created node pool workers of web with 2 workers.')
  const row = poolRow(page)
  assert.equal(await row.locator('td[data-label="Profiles"]').innerText(), 'small, ssd')
  assert.equal(await row.locator('td[data-label="Labels"]').innerText(), 'tier=web')
  assert.equal(await row.locator('td[data-label="Taints"]').innerText(), 'dedicated=web:NoSchedule')
  await sizes(page, 2, 2, 2)
  await shot(page, 'kubernetes')
  await check(page, 'kubernetes', false)
  await phone(page, 'kubernetes')

  // Scale 2 → 3 (11 refused on its field).
  await c.getByRole('button', { name: 'Scale node pool workers of web' }).click()
  const scale = page.getByRole('dialog', { name: 'Scale node pool workers' })
  assert.equal(await scale.getByLabel('Size', { exact: true }).inputValue(), '2')
  await scale.getByLabel('Size', { exact: true }).fill('11')
  await scale.getByRole('button', { name: 'Scale' }).click()
  await fieldError(scale, 'size').getByText('Enter a size from 0 to 10.').waitFor()
  await check(page, 'scale refused', false)
  await scale.getByLabel('Size', { exact: true }).fill('3')
  await scale.getByRole('button', { name: 'Scale' }).click()
  await scale.waitFor({ state: 'hidden' })
  await said(page, 'Scaling node pool workers of web to 3.')
  await row.getByTestId('pool-size').getByText('3', { exact: true }).waitFor()
  await sizes(page, 3, 3, 3)
  await shot(page, 'kubernetes-scaled')
})

test('a viewer of the VDC sees the cluster, cannot change it and gets a read-only kubeconfig', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, viewer)
  await go(page, 'Kubernetes', 'Kubernetes')
  const c = card(page)
  await c.getByTestId('control-plane').getByText('ready', { exact: true }).waitFor()
  await sizes(page, 3, 3, 3)
  for (const name of ['New cluster', 'New node pool in web', 'Delete cluster web', 'Upgrade cluster web', 'Scale node pool workers of web', 'Delete node pool workers of web']) {
    assert.equal(await page.getByRole('button', { name }).count(), 0, `the viewer has a ${name} button`)
  }
  assert.deepEqual((await c.getByRole('button').allInnerTexts()).map((s) => s.trim()), ['Download read-only kubeconfig'], 'the viewer has only the kubeconfig button')
  const kubeconfig = await download(page, 'Download read-only kubeconfig of web', 'kubeconfig-viewer')
  assert.ok(kubeconfig.length > 0, 'the kubeconfig is not empty')
  await page.locator('p.ok').getByText(/^Downloaded a read-only kubeconfig of web, valid until .* UTC\.$/).waitFor()
  await shot(page, 'kubernetes-viewer')
})

test('the member deletes the node pool and the cluster', async (t) => {
  const { page } = await session(t)
  await page.goto(base + '/')
  await signIn(page, member)
  await go(page, 'Kubernetes', 'Kubernetes')
  const c = card(page)
  await poolRow(page).waitFor()

  // Upgrade v1.36.4 → v1.37.2: the control plane moves, then the pool
  // starts replacing its workers (here no kubelet joins, so the first new
  // worker never counts as available and the roll stops there).
  assert.equal(await c.getByTestId('cluster-version').innerText(), 'v1.36.4')
  assert.equal(await poolRow(page).getByTestId('pool-version').innerText(), 'v1.36.4')
  await c.getByRole('button', { name: 'Upgrade cluster web' }).click()
  const upgrade = page.getByRole('dialog', { name: 'Upgrade cluster web' })
  assert.deepEqual(await upgrade.getByLabel('Kubernetes version').locator('option').allInnerTexts(), ['v1.37.2'])
  await check(page, 'upgrade cluster', false)
  await upgrade.getByRole('button', { name: 'Upgrade' }).click()
  await upgrade.waitFor({ state: 'hidden' })
  await said(page, 'Upgrading cluster web to v1.37.2: the control plane first, then the workers.')
  await c.getByTestId('cluster-version').getByText('v1.37.2', { exact: true }).waitFor({ timeout: wait })
  await poolRow(page).getByTestId('pool-version').getByText(/^v1\.37\.2/).waitFor({ timeout: wait })
  await poolRow(page).getByTestId('pool-version').getByText(/up to date/).waitFor({ timeout: wait })
  assert.equal(await c.getByRole('button', { name: 'Upgrade cluster web' }).count(), 0, 'no newer version is offered')
  await shot(page, 'kubernetes-upgrading')

  await c.getByRole('button', { name: 'Delete node pool workers of web' }).click()
  const confirmPool = page.getByRole('dialog', { name: 'Delete node pool workers of web?' })
  await confirmPool.getByText(/^Its [34] workers are deleted with their VMs/).waitFor()
  await check(page, 'delete node pool', false)
  await confirmPool.getByRole('button', { name: 'Delete' }).click()
  await confirmPool.waitFor({ state: 'hidden' })
  await said(page, 'Deleting node pool workers of web.')
  await c.getByText('No node pools: the cluster has no workers.').waitFor({ timeout: wait })

  await c.getByRole('button', { name: 'Delete cluster web' }).click()
  const confirm = page.getByRole('dialog', { name: 'Delete cluster web?' })
  await confirm.getByText('its control plane with its etcd data').waitFor()
  await check(page, 'delete cluster', false)
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await confirm.waitFor({ state: 'hidden' })
  await said(page, 'Deleting cluster web.')
  await page.getByText('No Kubernetes clusters yet.').waitFor({ timeout: wait })
  await shot(page, 'kubernetes-deleted')
})
