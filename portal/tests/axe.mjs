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
// A failure names the outermost elements that reach past the screen.
export async function fits(page, name) {
  const { width, wide } = await page.evaluate(() => {
    const width = document.documentElement.scrollWidth
    const wide = []
    if (width <= 390) return { width, wide }
    for (const el of document.body.querySelectorAll('*')) {
      if (el.getBoundingClientRect().right <= 390 || wide.some((w) => w.el.contains(el))) continue
      if (el.closest('.table-wrap, dialog:not([open])')) continue
      wide.push({ el, what: `${el.tagName.toLowerCase()}${el.className ? '.' + String(el.className).trim().replace(/\s+/g, '.') : ''}: ${(el.textContent ?? '').trim().slice(0, 120)}` })
    }
    return { width, wide: wide.slice(0, 5).map((w) => w.what) }
  })
  assert.ok(width <= 390, `${name} is ${width} px wide on a 390 px phone; too wide: ${wide.join(' | ')}`)
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
