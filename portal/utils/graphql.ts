// The portal's GraphQL transport: urql (@urql/core) for queries and
// mutations, graphql-ws for subscriptions, with the bearer token and the
// selected VDC (FlexPlane-VDC-ID) on every request. Documents are typed by
// @graphql-codegen (gql/, from graph/flexplane.graphql and the documents in
// the pages: `graphql(...)`), so a query that does not fit the schema, or a
// page that reads a field it did not ask for, fails the type check.

import { Client, createRequest, fetchExchange, gql, type AnyVariables, type DocumentInput, type OperationResult } from '@urql/core'
import { createClient as createWSClient } from 'graphql-ws'
import { print, type DocumentNode } from 'graphql'

export interface GraphQLErrorEntry {
  message: string
  path?: (string | number)[]
  extensions?: { code?: string; field?: string; zone?: string; [k: string]: unknown }
}

// ApiError is a failed request: the first error's code and field, all
// errors, whatever partial data came with them, and for RATE_LIMITED the
// seconds to wait.
export class ApiError extends Error {
  code: string
  field?: string
  errors: GraphQLErrorEntry[]
  data: unknown
  retryAfter?: number
  constructor(message: string, code: string, errors: GraphQLErrorEntry[] = [], data: unknown = null) {
    super(message)
    this.code = code
    this.errors = errors
    this.field = errors[0]?.extensions?.field
    this.data = data
    const wait = Number(errors[0]?.extensions?.retryAfter)
    if (code === 'RATE_LIMITED' && Number.isFinite(wait) && wait > 0) this.retryAfter = Math.ceil(wait)
  }
}

// rateLimitedMessage says, for people, that they were refused for going
// too fast and when to try again.
export function rateLimitedMessage(retryAfter?: number): string {
  const when = retryAfter ? `in ${retryAfter} second${retryAfter === 1 ? '' : 's'}` : 'in a moment'
  return `You are making changes faster than the API allows; nothing was changed. Try again ${when}.`
}

export interface RequestContext {
  client: Client
  token: string
  vdc: string | null
  onUnauthenticated: () => void
}

// request sends one query or mutation through the portal's urql client
// with the bearer token and the VDC header, and resolves to its data; a
// refused session calls onUnauthenticated, any error (a partial answer's
// included, with its data) is thrown as an ApiError.
export async function request<T, V extends AnyVariables = AnyVariables>(
  ctx: RequestContext,
  doc: DocumentInput<T, V> | string,
  variables?: V,
): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${ctx.token}` }
  if (ctx.vdc) headers['FlexPlane-VDC-ID'] = ctx.vdc
  const query = typeof doc === 'string' ? gql(doc) : doc
  const isMutation = query.definitions.some((d) => d.kind === 'OperationDefinition' && d.operation === 'mutation')
  const opts = { requestPolicy: 'network-only' as const, fetchOptions: { headers } }
  // urql shares one result among the queries in flight with the same key,
  // which it makes of the document and variables only: the same query for
  // another VDC, sent while the first is still on its way, would get the
  // first VDC's answer. The key here names the VDC too.
  const req = createRequest<T, V>(query as DocumentInput<T, V>, (variables ?? {}) as V)
  const op = ctx.client.createRequestOperation<T, V>(
    isMutation ? 'mutation' : 'query',
    { ...req, key: keyWithVDC(req.key, ctx.vdc) },
    opts,
  )
  const res: OperationResult<T, V> = await ctx.client.executeRequestOperation<T, V>(op).toPromise()
  const err = res.error
  if (!err) return res.data as T
  const errors: GraphQLErrorEntry[] = err.graphQLErrors.map((e) => ({
    message: e.message,
    path: e.path ? [...e.path] : undefined,
    extensions: e.extensions as GraphQLErrorEntry['extensions'],
  }))
  const status = (err.response as Response | undefined)?.status
  if (status === 401 || errors.some((e) => e.extensions?.code === 'UNAUTHENTICATED')) {
    ctx.onUnauthenticated()
    throw new ApiError(errors[0]?.message || 'Your session has expired.', 'UNAUTHENTICATED', errors)
  }
  if (errors.length > 0) {
    const first = errors[0]!
    const code = first.extensions?.code || 'INTERNAL'
    if (code === 'RATE_LIMITED') {
      const e = new ApiError('', code, errors, res.data ?? null)
      e.message = rateLimitedMessage(e.retryAfter)
      throw e
    }
    throw new ApiError(first.message, code, errors, res.data ?? null)
  }
  if (status) throw new ApiError(`The API answered ${status} without a GraphQL response.`, 'INTERNAL')
  throw new ApiError(`The API cannot be reached (${err.networkError?.message ?? err.message}).`, 'NETWORK')
}

// keyWithVDC mixes the VDC into an operation's key (FNV-1a over the key
// and the VDC's name).
function keyWithVDC(key: number, vdc: string | null): number {
  let h = 0x811c9dc5
  for (const c of `${key}\u0000${vdc ?? ''}`) {
    h ^= c.codePointAt(0)!
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h
}

// newClient is the portal's GraphQL client: urql over HTTP POST for
// queries and mutations, graphql-ws (graphql-transport-ws) for
// subscriptions. Headers are set per request (the token renews, the VDC
// changes), so one client serves the whole tab.
export function newClient(endpoint: string): Client {
  return new Client({
    url: new URL(endpoint, window.location.href).toString(),
    exchanges: [fetchExchange],
    preferGetMethod: false,
    requestPolicy: 'network-only',
  })
}

// subscribe follows a subscription over its own graphql-ws connection
// (the token and VDC travel in connection_init); it calls onOpen once the
// server acknowledged the connection, onNext with every result and onEnd
// when the stream ends, fails or cannot be opened. It returns a function
// that stops it.
export function subscribe<T, V extends Record<string, unknown>>(
  opts: { endpoint: string; token: string; vdc: string; query: DocumentInput<T, V> | string; variables: V },
  onOpen: () => void,
  onNext: (data: T) => void,
  onEnd: (failed: boolean) => void,
): () => void {
  const url = new URL(opts.endpoint, window.location.href)
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:'
  const ws = createWSClient({
    url: url.toString(),
    connectionParams: { Authorization: `Bearer ${opts.token}`, 'FlexPlane-VDC-ID': opts.vdc },
    retryAttempts: 0,
    lazy: true,
    on: { connected: onOpen },
  })
  const query = typeof opts.query === 'string' ? opts.query : print(opts.query as DocumentNode)
  const stop = ws.subscribe<T>(
    { query, variables: opts.variables },
    {
      next: (r) => {
        if (r.data) onNext(r.data as T)
      },
      error: () => onEnd(true),
      complete: () => onEnd(false),
    },
  )
  return () => {
    stop()
    void ws.dispose()
  }
}
