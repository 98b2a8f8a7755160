// axe-core in the page under test: zero serious or critical violations.
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

// axe runs axe-core on the page as it shows now (an open dialog included)
// and fails on serious or critical violations.
export async function axe(page, name) {
  await page.evaluate(axeSource)
  const r = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const res = await window.axe.run(document, { resultTypes: ['violations'] })
    return res.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }))
  })
  const bad = r.filter((v) => v.impact === 'serious' || v.impact === 'critical')
  assert.deepEqual(bad, [], `axe violations on ${name}`)
}

// fits checks the page does not scroll sideways on a 390 px phone.
export async function fits(page, name) {
  const w = await page.evaluate(() => document.documentElement.scrollWidth)
  assert.ok(w <= 390, `${name} is ${w} px wide on a 390 px phone`)
}

// check runs axe and, on a phone, checks the page fits.
export async function check(page, name, phone) {
  await axe(page, name)
  if (phone) await fits(page, name)
}

// phone checks the page as it is now on a 390 px phone, with axe, and
// gives the page its size back.
export async function phone(page, name) {
  const size = page.viewportSize()
  await page.setViewportSize({ width: 390, height: 844 })
  await check(page, name, true)
  await page.setViewportSize(size)
}
