// OpenID Connect sign-in with oidc-client-ts (a certified, maintained
// browser library): authorization code flow with PKCE, tokens in the tab's
// session storage, renewal with the refresh token before the access token
// expires (the provider issues one for the offline_access scope, rotated on
// every use), and sign-out at the provider's end-session endpoint.

import { UserManager, WebStorageStateStore, type User } from 'oidc-client-ts'

export const callbackPath = '/auth/callback'

// renewBeforeSeconds is how long before its access token expires a session
// renews it: the page, and any form on it, stays as it is.
export const renewBeforeSeconds = 30

export interface Session {
  accessToken: string
  idToken?: string
  // Milliseconds since the epoch after which the access token is invalid.
  expiresAt: number
}

// What the round trip to the provider carries back.
interface LoginState {
  returnTo: string
}

export function newUserManager(issuer: string, clientId: string, scopes: string[]): UserManager {
  const store = new WebStorageStateStore({ store: window.sessionStorage })
  return new UserManager({
    authority: issuer,
    client_id: clientId,
    redirect_uri: window.location.origin + callbackPath,
    post_logout_redirect_uri: window.location.origin + '/',
    response_type: 'code',
    scope: scopes.join(' '),
    userStore: store,
    stateStore: store,
    automaticSilentRenew: true,
    accessTokenExpiringNotificationTimeInSeconds: renewBeforeSeconds,
    // Renewal uses the refresh token (no hidden iframe); the ID token
    // carries the profile, so no userinfo request either.
    loadUserInfo: false,
    monitorSession: false,
  })
}

export function sessionOf(u: User): Session {
  return {
    accessToken: u.access_token,
    idToken: u.id_token,
    expiresAt: (u.expires_at ?? 0) * 1000,
  }
}

// beginLogin sends the browser to the provider's login page.
export async function beginLogin(m: UserManager, returnTo: string): Promise<void> {
  const state: LoginState = { returnTo }
  await m.signinRedirect({ state })
}

// completeLogin finishes the code flow of the callback URL (state, PKCE
// and the ID token's nonce checked by the library) and returns the session
// and the path to go back to.
export async function completeLogin(m: UserManager): Promise<{ session: Session; returnTo: string }> {
  let u: User
  try {
    u = await m.signinRedirectCallback()
  } catch (e) {
    throw new Error(`Sign-in failed: ${(e as Error).message}. Sign in again.`)
  }
  const want = (u.state as LoginState | undefined)?.returnTo ?? '/'
  const returnTo = want.startsWith('/') && !want.startsWith('//') && !want.startsWith(callbackPath) ? want : '/'
  return { session: sessionOf(u), returnTo }
}
