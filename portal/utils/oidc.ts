// OpenID Connect login for a public browser client: authorization code
// flow with PKCE (S256) against the issuer's discovery document. The
// provider of `make dev` issues no refresh tokens, so an expired session
// means signing in again.

export interface Discovery {
  issuer: string
  authorization_endpoint: string
  token_endpoint: string
  end_session_endpoint?: string
}

export interface Session {
  accessToken: string
  idToken?: string
  // Milliseconds since the epoch after which the access token is invalid.
  expiresAt: number
}

// What survives the round trip to the provider (sessionStorage).
interface PendingLogin {
  state: string
  nonce: string
  verifier: string
  returnTo: string
}

const pendingKey = 'flexplane.login'
const sessionKey = 'flexplane.session'
export const callbackPath = '/auth/callback'

export function base64url(bytes: Uint8Array): string {
  let s = ''
  for (const b of bytes) s += String.fromCharCode(b)
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

function randomString(n = 32): string {
  return base64url(crypto.getRandomValues(new Uint8Array(n)))
}

async function challenge(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))
  return base64url(new Uint8Array(digest))
}

export async function discover(issuer: string): Promise<Discovery> {
  const url = issuer.replace(/\/$/, '') + '/.well-known/openid-configuration'
  let res: Response
  try {
    res = await fetch(url, { headers: { Accept: 'application/json' } })
  } catch (e) {
    throw new Error(`The identity provider ${issuer} cannot be reached (${(e as Error).message}).`)
  }
  if (!res.ok) throw new Error(`The identity provider ${issuer} answered ${res.status} for its discovery document.`)
  const doc = (await res.json()) as Discovery
  if (doc.issuer.replace(/\/$/, '') !== issuer.replace(/\/$/, '')) {
    throw new Error(`The discovery document names issuer ${doc.issuer}, not the configured ${issuer}.`)
  }
  return doc
}

export function redirectURI(): string {
  return window.location.origin + callbackPath
}

// beginLogin sends the browser to the provider's login page.
export async function beginLogin(d: Discovery, clientId: string, scopes: string[], returnTo: string): Promise<void> {
  const pending: PendingLogin = { state: randomString(), nonce: randomString(), verifier: randomString(48), returnTo }
  sessionStorage.setItem(pendingKey, JSON.stringify(pending))
  const u = new URL(d.authorization_endpoint)
  u.search = new URLSearchParams({
    response_type: 'code',
    client_id: clientId,
    redirect_uri: redirectURI(),
    scope: scopes.join(' '),
    state: pending.state,
    nonce: pending.nonce,
    code_challenge: await challenge(pending.verifier),
    code_challenge_method: 'S256',
  }).toString()
  window.location.assign(u.toString())
}

function claims(jwt: string): Record<string, unknown> {
  const part = jwt.split('.')[1]
  if (!part) throw new Error('malformed token')
  const b64 = part.replace(/-/g, '+').replace(/_/g, '/')
  const json = decodeURIComponent(
    Array.from(atob(b64), (c) => '%' + c.charCodeAt(0).toString(16).padStart(2, '0')).join(''),
  )
  return JSON.parse(json) as Record<string, unknown>
}

// completeLogin exchanges the code of the callback URL for tokens and
// returns the session and the path to go back to. The API verifies the
// access token's signature; here the ID token's nonce binds the answer to
// the request this browser made.
export async function completeLogin(d: Discovery, clientId: string, params: URLSearchParams): Promise<{ session: Session; returnTo: string }> {
  const raw = sessionStorage.getItem(pendingKey)
  sessionStorage.removeItem(pendingKey)
  const err = params.get('error')
  if (err) throw new Error(`Sign-in failed at the identity provider: ${params.get('error_description') || err}.`)
  if (!raw) throw new Error('This sign-in was not started here (or was already used). Sign in again.')
  const pending = JSON.parse(raw) as PendingLogin
  if (params.get('state') !== pending.state) throw new Error('The sign-in answer does not match the request (state). Sign in again.')
  const code = params.get('code')
  if (!code) throw new Error('The identity provider returned no authorization code.')
  const res = await fetch(d.token_endpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code,
      redirect_uri: redirectURI(),
      client_id: clientId,
      code_verifier: pending.verifier,
    }),
  })
  const body = (await res.json().catch(() => ({}))) as Record<string, unknown>
  if (!res.ok || typeof body.access_token !== 'string') {
    throw new Error(`The identity provider refused the sign-in: ${String(body.error_description || body.error || res.status)}.`)
  }
  const idToken = typeof body.id_token === 'string' ? body.id_token : undefined
  if (idToken && claims(idToken).nonce !== pending.nonce) {
    throw new Error('The identity token does not match this sign-in (nonce). Sign in again.')
  }
  let expiresAt = Date.now() + (Number(body.expires_in) || 300) * 1000
  try {
    const exp = claims(body.access_token).exp
    if (typeof exp === 'number') expiresAt = Math.min(expiresAt, exp * 1000)
  } catch {
    // Opaque access tokens carry no expiry of their own.
  }
  const returnTo = pending.returnTo.startsWith('/') && !pending.returnTo.startsWith('//') ? pending.returnTo : '/'
  return { session: { accessToken: body.access_token, idToken, expiresAt }, returnTo }
}

export function loadSession(): Session | null {
  try {
    const s = JSON.parse(sessionStorage.getItem(sessionKey) || 'null') as Session | null
    return s && typeof s.accessToken === 'string' && typeof s.expiresAt === 'number' ? s : null
  } catch {
    return null
  }
}

export function saveSession(s: Session | null): void {
  if (s) sessionStorage.setItem(sessionKey, JSON.stringify(s))
  else sessionStorage.removeItem(sessionKey)
}

// logoutURL is where to send the browser to end the provider's session too,
// or null when the provider has no end-session endpoint.
export function logoutURL(d: Discovery, clientId: string, idToken?: string): string | null {
  if (!d.end_session_endpoint) return null
  const u = new URL(d.end_session_endpoint)
  const q = new URLSearchParams({ client_id: clientId, post_logout_redirect_uri: window.location.origin + '/' })
  if (idToken) q.set('id_token_hint', idToken)
  u.search = q.toString()
  return u.toString()
}
