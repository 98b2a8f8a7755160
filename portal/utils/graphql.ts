// A small GraphQL client: POST to the configured endpoint with the bearer
// token and the selected VDC (FlexPlane-VDC-ID) on every request.

export interface GraphQLErrorEntry {
  message: string
  path?: (string | number)[]
  extensions?: { code?: string; field?: string; zone?: string; [k: string]: unknown }
}

// ApiError is a failed request: the first error's code and field, all
// errors, and whatever partial data came with them.
export class ApiError extends Error {
  code: string
  field?: string
  errors: GraphQLErrorEntry[]
  data: unknown
  constructor(message: string, code: string, errors: GraphQLErrorEntry[] = [], data: unknown = null) {
    super(message)
    this.code = code
    this.errors = errors
    this.field = errors[0]?.extensions?.field
    this.data = data
  }
}

export interface RequestContext {
  endpoint: string
  token: string
  vdc: string | null
  onUnauthenticated: () => void
}

export async function request<T>(ctx: RequestContext, query: string, variables?: Record<string, unknown>): Promise<T> {
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    Accept: 'application/json',
    Authorization: `Bearer ${ctx.token}`,
  }
  if (ctx.vdc) headers['FlexPlane-VDC-ID'] = ctx.vdc
  let res: Response
  try {
    res = await fetch(ctx.endpoint, { method: 'POST', headers, body: JSON.stringify({ query, variables }) })
  } catch (e) {
    throw new ApiError(`The API cannot be reached (${(e as Error).message}).`, 'NETWORK')
  }
  const body = (await res.json().catch(() => null)) as { data?: T; errors?: GraphQLErrorEntry[] } | null
  const errors = body?.errors ?? []
  if (res.status === 401 || errors.some((e) => e.extensions?.code === 'UNAUTHENTICATED')) {
    ctx.onUnauthenticated()
    throw new ApiError(errors[0]?.message || 'Your session has expired.', 'UNAUTHENTICATED', errors)
  }
  if (!body) throw new ApiError(`The API answered ${res.status} without a GraphQL response.`, 'INTERNAL')
  if (errors.length > 0) {
    const first = errors[0]!
    throw new ApiError(first.message, first.extensions?.code || 'INTERNAL', errors, body.data ?? null)
  }
  return body.data as T
}
