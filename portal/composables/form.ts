// useDialogForm is the state of a form in a <dialog>: open() shows it with
// fresh values, save() checks them (check returns a message per field it
// refuses), sends them and closes the dialog; the API's refusals show on
// their field (BAD_USER_INPUT with extensions.field input.<key>, the field
// focused) or above the form. The fields' controls have the ids
// `${prefix}-${key}`, the key's brackets and dots made dashes (a nested
// field such as listeners[0].port is the control lb-listeners-0-port): an
// API field with such a control shows its error there even when it is no
// key of the values. fieldCodes are further codes whose refusals show
// on the field they name (e.g. CONFLICT for a name taken; BAD_USER_INPUT
// always does); codeField names the field a code shows on when the API
// names none (e.g. QUOTA_EXCEEDED on an upload's file).

export function useDialogForm<V extends Record<string, unknown>>(opts: {
  prefix: string
  blank: () => V
  check?: (v: V) => Record<string, string>
  fieldCodes?: string[]
  codeField?: Record<string, string>
  // send sends the values and returns what the page says it did.
  send: (v: V) => Promise<string>
  done: (said: string) => Promise<void> | void
}) {
  const dialog = ref<HTMLDialogElement | null>(null)
  const values = ref(opts.blank()) as Ref<V>
  const fieldErrors = ref<Record<string, string>>({})
  const formError = ref('')
  const saving = ref(false)
  const controlId = (key: string) => `${opts.prefix}-${key.replace(/[^A-Za-z0-9_-]+/g, '-').replace(/-$/, '')}`
  const focus = (key: string) => nextTick(() => document.getElementById(controlId(key))?.focus())

  function open(start: Partial<V> = {}) {
    values.value = { ...opts.blank(), ...start }
    fieldErrors.value = {}
    formError.value = ''
    dialog.value?.showModal()
  }

  async function save() {
    formError.value = ''
    fieldErrors.value = opts.check?.(values.value) ?? {}
    const first = Object.keys(fieldErrors.value)[0]
    if (first) {
      focus(first)
      return
    }
    saving.value = true
    try {
      const said = await opts.send(values.value)
      dialog.value?.close()
      await opts.done(said)
    } catch (e) {
      if (!(e instanceof ApiError)) formError.value = (e as Error).message
      else if (e.code === 'UNAUTHENTICATED') return
      else {
        const key = e.field?.replace(/^input\./, '') ?? opts.codeField?.[e.code]
        const onField = e.code === 'BAD_USER_INPUT' || !!opts.fieldCodes?.includes(e.code) || !!opts.codeField?.[e.code]
        if (onField && key && (key in values.value || document.getElementById(controlId(key)))) {
          const prefix = e.code === 'BAD_USER_INPUT' ? '' : `${errorTitle(e.code)}: `
          fieldErrors.value = { [key]: prefix + readable(e.message, e.field) }
          focus(key)
        } else formError.value = `${errorTitle(e.code)}: ${e.message}`
      }
    } finally {
      saving.value = false
    }
  }

  return { dialog, values, fieldErrors, formError, saving, open, save, close: () => dialog.value?.close() }
}

// Checks of form input, each the message for a refused value or ''.

// portError refuses what is no port (1 to 65535); empty passes when optional.
export function portError(v: unknown, optional = false): string {
  if (optional && (v === '' || v === null || v === undefined)) return ''
  const n = Number(v)
  return v !== '' && Number.isInteger(n) && n >= 1 && n <= 65535 ? '' : 'Enter a port from 1 to 65535.'
}

// cidrError refuses what is no IPv4 CIDR (a.b.c.d/n); empty passes.
export function cidrError(v: unknown): string {
  const s = String(v ?? '').trim()
  if (s === '') return ''
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(s)
  const ok = m && m.slice(1, 5).every((o) => Number(o) <= 255) && Number(m[5]) <= 32
  return ok ? '' : 'Enter an IPv4 network such as 198.51.100.0/24.'
}

// ipError refuses what is no IPv4 address; empty passes when optional.
export function ipError(v: unknown, optional = false): string {
  const s = String(v ?? '').trim()
  if (s === '') return optional ? '' : 'Enter an IPv4 address.'
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(s)
  return m && m.slice(1).every((o) => Number(o) <= 255) ? '' : 'Enter an IPv4 address such as 203.0.113.10.'
}

// errorsOf keeps the non-empty messages of a field → message record.
export function errorsOf(all: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(all).filter(([, m]) => m))
}

// emptyToNull turns an empty text field into null (the API's "any").
export function emptyToNull(v: unknown): string | null {
  const s = String(v ?? '').trim()
  return s === '' ? null : s
}
