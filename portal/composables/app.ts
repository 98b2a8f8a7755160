// Application state: the runtime configuration, the sign-in session, the
// signed-in user and the selected VDC. Everything else is fetched by the
// pages through useApi().

import type { UserManager } from 'oidc-client-ts'
import type { AnyVariables, Client, DocumentInput } from '@urql/core'
import type { Session } from '~/utils/oidc'
import type { Upload, UploadRequest } from '~/utils/upload'
import { graphql } from '~/gql'

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
    session: null,
    reason: null,
    me: null,
    tenant: '',
    vdc: null,
    notice: '',
  }))
}

// The tab's one OpenID client (oidc-client-ts), made from the runtime
// configuration by start(); it renews the session by itself.
let manager: UserManager | undefined

// expire ends a session that can no longer be renewed: the sign-in page
// says so and signing in again returns to the same page.
function expire() {
  const app = useAppState()
  if (!app.value.session) return
  app.value.session = null
  app.value.reason = 'expired'
  app.value.phase = 'signed-out'
  void manager?.removeUser()
}

// The tab's GraphQL client (urql), made by start() for the configured
// endpoint.
let client: Client | undefined

// useApi returns the function pages send queries and mutations with: a
// typed document (graphql() of gql/), its variables, and
// optionally another VDC than the selected one.
export function useApi() {
  const app = useAppState()
  return <T, V extends AnyVariables = AnyVariables>(
    query: DocumentInput<T, V>,
    variables?: V,
    opts: { vdc?: string | null } = {},
  ): Promise<T> => {
    const s = app.value.session
    if (!s || !client || Date.now() >= s.expiresAt) {
      expire()
      return Promise.reject(new ApiError('Your session has expired.', 'UNAUTHENTICATED'))
    }
    const c = client
    const vdc = opts.vdc !== undefined ? opts.vdc : app.value.vdc
    // The token is read at each send: a renewal in between is used at once.
    const send = (v: string | null) =>
      request<T, V>({ client: c, token: app.value.session?.accessToken ?? s.accessToken, vdc: v, onUnauthenticated: expire }, query, variables)
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

// useUpload returns the function pages upload a file with (uploadFile of
// utils/upload.ts) to the configured endpoint, with the session's token
// and the selected VDC.
export function useUpload() {
  const app = useAppState()
  return <T>(r: Omit<UploadRequest, 'endpoint' | 'token' | 'vdc' | 'onUnauthenticated'>): Upload<T> => {
    const s = app.value.session
    if (!s || Date.now() >= s.expiresAt) {
      expire()
      return { done: Promise.reject(new ApiError('Your session has expired.', 'UNAUTHENTICATED')), cancel: () => {} }
    }
    const endpoint = app.value.config?.graphql ?? '/graphql'
    return uploadFile<T>({ ...r, endpoint, token: s.accessToken, vdc: app.value.vdc, onUnauthenticated: expire })
  }
}

// vdcGone tells whether e is the API refusing the whole request because
// the VDC of its FlexPlane-VDC-ID header does not exist for the caller.
function vdcGone(e: unknown, vdc: string): boolean {
  return e instanceof ApiError && e.code === 'NOT_FOUND' && !e.errors[0]?.path && e.message === `VDC "${vdc}" not found`
}

const meQuery = graphql(`
  query Me {
    tenant { name }
    me { subject name email platformAdmin vdcs { role vdc { name description } } }
  }
`)

// loadMe fetches the user and picks the VDC: the one chosen last time if
// still allowed, else the first.
export async function loadMe(): Promise<void> {
  const app = useAppState()
  const api = useApi()
  const data = await api(meQuery, undefined, { vdc: null })
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
// provider, and loads the user. Renewals replace the session's token in
// place (the page, and what is typed into it, stays); a session that
// cannot be renewed shows as expired when its token runs out.
export async function start(): Promise<void> {
  const app = useAppState()
  const router = useRouter()
  try {
    const res = await fetch('/config.json', { cache: 'no-store' })
    if (!res.ok) throw new Error(`The portal configuration (/config.json) answered ${res.status}.`)
    const cfg = (await res.json()) as PortalConfig
    app.value.config = cfg
    client = newClient(cfg.graphql)
    const m = newUserManager(cfg.issuer, cfg.clientId, cfg.scopes)
    manager = m
    try {
      await m.metadataService.getMetadata()
    } catch (e) {
      throw new Error(`The identity provider ${cfg.issuer} cannot be reached (${(e as Error).message}).`)
    }
    m.events.addUserLoaded((u) => {
      if (app.value.session) app.value.session = sessionOf(u)
    })
    m.events.addAccessTokenExpired(expire)
    const url = new URL(window.location.href)
    if (url.pathname === callbackPath) {
      const { returnTo } = await completeLogin(m)
      await router.replace(returnTo)
    }
    let u = await m.getUser()
    if (u?.expired && u.refresh_token) u = await m.signinSilent().catch(() => null)
    if (!u || u.expired) {
      if (u) app.value.reason = 'expired'
      else if (sessionStorage.getItem(signedOutKey)) app.value.reason = 'signed-out'
      await m.removeUser()
      app.value.phase = 'signed-out'
      return
    }
    sessionStorage.removeItem(signedOutKey)
    app.value.session = sessionOf(u)
    await loadMe()
    app.value.phase = 'ready'
  } catch (e) {
    if (e instanceof ApiError && e.code === 'UNAUTHENTICATED') return // shown as expired
    app.value.error = (e as Error).message
    app.value.phase = 'failed'
  }
}

export async function signIn(): Promise<void> {
  const route = useRoute()
  if (!manager) return
  const returnTo = route.fullPath.startsWith(callbackPath) ? '/' : route.fullPath
  await beginLogin(manager, returnTo)
}

// signOut ends the session here and at the provider (its end-session
// endpoint, which also ends the refresh token).
export async function signOut(): Promise<void> {
  const app = useAppState()
  const idToken = app.value.session?.idToken
  sessionStorage.setItem(signedOutKey, '1')
  app.value.session = null
  app.value.me = null
  app.value.reason = 'signed-out'
  app.value.phase = 'signed-out'
  if (!manager) return
  try {
    await manager.signoutRedirect({ id_token_hint: idToken })
  } catch {
    await manager.removeUser() // the provider has no end-session endpoint
  }
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

// useIsVdcAdmin tells whether the user is an ADMIN of the selected VDC
// (platform admins are, in every VDC): what the API asks of those who
// pin a VM to a host or pick the VDC's default security group.
export function useIsVdcAdmin() {
  const app = useAppState()
  return computed(() => {
    const role = app.value.me?.vdcs.find((a) => a.vdc.name === app.value.vdc)?.role
    return role === 'ADMIN' || !!app.value.me?.platformAdmin
  })
}
