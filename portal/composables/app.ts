// Application state: the runtime configuration, the sign-in session, the
// signed-in user and the selected VDC. Everything else is fetched by the
// pages through useApi().

import type { Discovery, Session } from '~/utils/oidc'

export interface PortalConfig {
  issuer: string
  clientId: string
  scopes: string[]
  graphql: string
}

export type VDCRole = 'ADMIN' | 'MEMBER' | 'VIEWER'

export interface Me {
  subject: string
  name: string
  email: string | null
  platformAdmin: boolean
  vdcs: { role: VDCRole; vdc: { name: string; description: string } }[]
}

export interface AppState {
  phase: 'loading' | 'failed' | 'signed-out' | 'ready'
  error: string
  config: PortalConfig | null
  discovery: Discovery | null
  session: Session | null
  // Why the sign-in page shows: a session that ran out, or a sign-out.
  reason: 'expired' | 'signed-out' | null
  me: Me | null
  tenant: string
  vdc: string | null
  // A message for the user about something the portal did on its own.
  notice: string
}

const vdcKey = 'flexplane.vdc'
const signedOutKey = 'flexplane.signed-out'

export function useAppState() {
  return useState<AppState>('app', () => ({
    phase: 'loading',
    error: '',
    config: null,
    discovery: null,
    session: null,
    reason: null,
    me: null,
    tenant: '',
    vdc: null,
    notice: '',
  }))
}

let expiryTimer: ReturnType<typeof setTimeout> | undefined

function expire() {
  const app = useAppState()
  if (!app.value.session) return
  app.value.session = null
  app.value.reason = 'expired'
  app.value.phase = 'signed-out'
  saveSession(null)
}

function armExpiry(s: Session) {
  clearTimeout(expiryTimer)
  // setTimeout cannot wait longer than ~24 days; tokens live far shorter.
  expiryTimer = setTimeout(expire, Math.min(Math.max(s.expiresAt - Date.now(), 0), 2 ** 31 - 1))
}

export function useApi() {
  const app = useAppState()
  return <T>(query: string, variables?: Record<string, unknown>, opts: { vdc?: string | null } = {}): Promise<T> => {
    const s = app.value.session
    const cfg = app.value.config
    if (!s || !cfg || Date.now() >= s.expiresAt) {
      expire()
      return Promise.reject(new ApiError('Your session has expired.', 'UNAUTHENTICATED'))
    }
    const vdc = opts.vdc !== undefined ? opts.vdc : app.value.vdc
    const send = (v: string | null) =>
      request<T>({ endpoint: cfg.graphql, token: s.accessToken, vdc: v, onUnauthenticated: expire }, query, variables)
    return send(vdc).catch(async (e: unknown) => {
      // The selected VDC was deleted, or the user's access to it revoked,
      // since it was chosen: pick another and try once more.
      if (!(vdc && opts.vdc === undefined && vdcGone(e, vdc))) throw e
      app.value.vdc = null
      await loadMe()
      app.value.notice = app.value.vdc
        ? `VDC ${vdc} is no longer available to you; switched to ${app.value.vdc}.`
        : `VDC ${vdc} is no longer available to you.`
      return send(app.value.vdc)
    })
  }
}

// vdcGone tells whether e is the API refusing the whole request because
// the VDC of its FlexPlane-VDC-ID header does not exist for the caller.
function vdcGone(e: unknown, vdc: string): boolean {
  return e instanceof ApiError && e.code === 'NOT_FOUND' && !e.errors[0]?.path && e.message === `VDC "${vdc}" not found`
}

const meQuery = `query Me {
  tenant { name }
  me { subject name email platformAdmin vdcs { role vdc { name description } } }
}`

// loadMe fetches the user and picks the VDC: the one chosen last time if
// still allowed, else the first.
export async function loadMe(): Promise<void> {
  const app = useAppState()
  const api = useApi()
  const data = await api<{ tenant: { name: string }; me: Me }>(meQuery, undefined, { vdc: null })
  app.value.me = data.me
  app.value.tenant = data.tenant.name
  const names = data.me.vdcs.map((a) => a.vdc.name)
  const wanted = app.value.vdc ?? localStorage.getItem(vdcKey)
  app.value.vdc = wanted && names.includes(wanted) ? wanted : (names[0] ?? null)
}

export function selectVDC(name: string) {
  const app = useAppState()
  app.value.vdc = name
  app.value.notice = ''
  localStorage.setItem(vdcKey, name)
}

// start loads the configuration, finishes a sign-in coming back from the
// provider, and loads the user.
export async function start(): Promise<void> {
  const app = useAppState()
  const router = useRouter()
  try {
    const res = await fetch('/config.json', { cache: 'no-store' })
    if (!res.ok) throw new Error(`The portal configuration (/config.json) answered ${res.status}.`)
    const cfg = (await res.json()) as PortalConfig
    app.value.config = cfg
    app.value.discovery = await discover(cfg.issuer)
    const url = new URL(window.location.href)
    if (url.pathname === callbackPath) {
      const { session, returnTo } = await completeLogin(app.value.discovery, cfg.clientId, url.searchParams)
      saveSession(session)
      await router.replace(returnTo)
    }
    const s = loadSession()
    if (!s || Date.now() >= s.expiresAt) {
      if (s) app.value.reason = 'expired'
      else if (sessionStorage.getItem(signedOutKey)) app.value.reason = 'signed-out'
      saveSession(null)
      app.value.phase = 'signed-out'
      return
    }
    sessionStorage.removeItem(signedOutKey)
    app.value.session = s
    armExpiry(s)
    await loadMe()
    app.value.phase = 'ready'
  } catch (e) {
    if (e instanceof ApiError && e.code === 'UNAUTHENTICATED') return // shown as expired
    app.value.error = (e as Error).message
    app.value.phase = 'failed'
  }
}

export async function signIn(): Promise<void> {
  const app = useAppState()
  const route = useRoute()
  const cfg = app.value.config
  const d = app.value.discovery
  if (!cfg || !d) return
  const returnTo = route.fullPath.startsWith(callbackPath) ? '/' : route.fullPath
  await beginLogin(d, cfg.clientId, cfg.scopes, returnTo)
}

export function signOut(): void {
  const app = useAppState()
  const cfg = app.value.config
  const d = app.value.discovery
  const idToken = app.value.session?.idToken
  clearTimeout(expiryTimer)
  saveSession(null)
  sessionStorage.setItem(signedOutKey, '1')
  app.value.session = null
  app.value.me = null
  app.value.reason = 'signed-out'
  app.value.phase = 'signed-out'
  const u = cfg && d ? logoutURL(d, cfg.clientId, idToken) : null
  if (u) window.location.assign(u)
}

// useCanChange tells whether the user may change things in the selected
// VDC (members and admins; viewers only look).
export function useCanChange() {
  const app = useAppState()
  return computed(() => {
    const role = app.value.me?.vdcs.find((a) => a.vdc.name === app.value.vdc)?.role
    return role === 'MEMBER' || role === 'ADMIN' || !!app.value.me?.platformAdmin
  })
}
