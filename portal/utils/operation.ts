// Following an operation (createVM and the power actions): the operation
// subscription over a websocket (graphql-transport-ws, the token and VDC in
// connection_init), and polling the operation query when the websocket
// cannot be used or closes before the operation ended.

import { graphql } from '~/gql'
import type { OperationFieldsFragment } from '~/gql/graphql'

// What the pages read of an operation: spread `...OperationFields` into a
// document's selection (graphql() adds the fragment itself).
graphql(`
  fragment OperationFields on Operation { id kind state step error vmId updatedAt progress { bytesMoved bytesTotal bytesPerSecond } }
`)
export type Operation = OperationFieldsFragment

// The same fields as a selection string, for documents built at run time.
// Deprecated: use the OperationFields fragment in a graphql() document.
export const operationFields = 'id kind state step error vmId updatedAt progress { bytesMoved bytesTotal bytesPerSecond }'

const operationSubscription = graphql(`
  subscription FollowOperation($id: ID!) { operation(id: $id) { ...OperationFields } }
`)

export interface FollowOptions {
  // The operation's id.
  id: string
  // The GraphQL endpoint (absolute or relative to the page).
  endpoint: string
  token: string
  vdc: string
  // Polls the operation query; used when the subscription is unavailable.
  poll: () => Promise<Operation | null>
  onUpdate: (op: Operation) => void
  // How the operation is being followed, for the page to show.
  onMode?: (mode: 'subscription' | 'polling') => void
  pollInterval?: number
}

// follow reports every state of the operation until it ends and resolves to
// its last state; stop() ends following early.
export function follow(opts: FollowOptions): { done: Promise<Operation>; stop: () => void } {
  let stopped = false
  let timer: ReturnType<typeof setTimeout> | undefined
  let resolveDone: (op: Operation) => void = () => {}
  let rejectDone: (e: Error) => void = () => {}
  const done = new Promise<Operation>((res, rej) => {
    resolveDone = res
    rejectDone = rej
  })
  let last: Operation | null = null
  let finished = false
  const update = (op: Operation) => {
    if (stopped || finished) return
    last = op
    opts.onUpdate(op)
    if (op.state !== 'RUNNING') {
      finished = true
      clearTimeout(timer)
      resolveDone(op)
      queueMicrotask(() => unsubscribe())
    }
  }

  let failures = 0
  const poll = async () => {
    if (stopped || finished) return
    try {
      const op = await opts.poll()
      failures = 0
      if (op) update(op)
    } catch (e) {
      // NOT_FOUND once a failed create was cleaned up; give up after a few.
      if (++failures >= 5 || (e instanceof ApiError && e.code === 'UNAUTHENTICATED')) {
        finished = true
        rejectDone(e as Error)
        return
      }
    }
    if (!stopped && !finished) timer = setTimeout(poll, opts.pollInterval ?? 1000)
  }
  const fallback = () => {
    if (stopped || finished || timer !== undefined) return
    opts.onMode?.('polling')
    timer = setTimeout(poll, 0)
  }

  const unsubscribe = subscribe(
    {
      endpoint: opts.endpoint,
      token: opts.token,
      vdc: opts.vdc,
      query: operationSubscription,
      variables: { id: opts.id },
    },
    () => opts.onMode?.('subscription'),
    (data) => update(data.operation),
    () => {
      if (!finished) fallback()
    },
  )
  return {
    done,
    stop: () => {
      stopped = true
      clearTimeout(timer)
      unsubscribe()
      if (!finished && last) resolveDone(last)
    },
  }
}
