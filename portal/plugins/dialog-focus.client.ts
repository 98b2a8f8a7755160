// Keyboard use of the portal's modal dialogs (<dialog> opened with
// showModal(), in every page and component): Tab and Shift+Tab go round
// the dialog's own controls instead of leaving for the browser's, Escape
// closes the dialog (the browser does that), and once it closed, focus
// returns to the control that opened it (the page's main content when
// that control is gone, e.g. the row of a deleted item).

const focusable =
  'a[href], button:not([disabled]), input:not([disabled]):not([type="hidden"]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])'

function openModal(): HTMLDialogElement | null {
  const open = [...document.querySelectorAll<HTMLDialogElement>('dialog[open]')].filter((d) => d.matches(':modal'))
  return open.at(-1) ?? null
}

export default defineNuxtPlugin(() => {
  // The last control focused outside every dialog: what opened one.
  let opener: HTMLElement | null = null
  document.addEventListener('focusin', (e) => {
    const t = e.target
    if (t instanceof HTMLElement && !t.closest('dialog')) opener = t
  })
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Tab' || e.altKey || e.ctrlKey || e.metaKey) return
    const d = openModal()
    if (!d) return
    const items = [...d.querySelectorAll<HTMLElement>(focusable)].filter((el) => el.getClientRects().length > 0)
    const first = items[0]
    const last = items.at(-1)
    if (!first || !last) return
    const active = document.activeElement
    const inside = active instanceof Node && d.contains(active)
    if (e.shiftKey && (active === first || !inside)) {
      e.preventDefault()
      last.focus()
    } else if (!e.shiftKey && (active === last || !inside)) {
      e.preventDefault()
      first.focus()
    }
  })
  // close does not bubble: listen in the capture phase.
  document.addEventListener(
    'close',
    (e) => {
      const d = e.target
      if (!(d instanceof HTMLDialogElement)) return
      const back = opener
      // After the page reacted to the close (e.g. removed a deleted row).
      setTimeout(() => {
        const active = document.activeElement
        if (active && active !== document.body && !d.contains(active)) return // the page chose a focus itself
        if (back?.isConnected && back.getClientRects().length > 0) back.focus()
        else document.getElementById('content')?.focus()
      })
    },
    true,
  )
})
