// Following operations from the pages: the subscription with the signed-in
// session, polling the operation query as the fallback.

import { follow, type Operation } from '~/utils/operation'
import { graphql } from '~/gql'

const operationQuery = graphql(`
  query PollOperation($id: ID!) { operation(id: $id) { ...OperationFields } }
`)

export function useFollowOperation() {
  const app = useAppState()
  const api = useApi()
  return (id: string, onUpdate: (op: Operation) => void, onMode?: (m: 'subscription' | 'polling') => void) => {
    const cfg = app.value.config
    const s = app.value.session
    return follow({
      id,
      endpoint: cfg?.graphql ?? '/graphql',
      token: s?.accessToken ?? '',
      vdc: app.value.vdc ?? '',
      poll: async () => (await api(operationQuery, { id })).operation,
      onUpdate,
      onMode,
    })
  }
}

// useTrackedOperation holds the last operation a section started, followed
// to its end: op is its latest state, and ended runs once it is no longer
// RUNNING (the section reads its list again).
export function useTrackedOperation(ended: () => void) {
  const follow = useFollowOperation()
  const op = ref<Operation | null>(null)
  const stops: (() => void)[] = []
  function track(o: Operation) {
    op.value = o
    if (o.state !== 'RUNNING') {
      ended()
      return
    }
    const f = follow(o.id, (u) => {
      if (op.value?.id === u.id) op.value = u
      if (u.state !== 'RUNNING') ended()
    })
    stops.push(f.stop)
    f.done.catch(() => {})
  }
  onBeforeUnmount(() => stops.forEach((s) => s()))
  return { op, track }
}

// VM power actions and what they are called on the pages.
export const vmActions = [
  { key: 'start', mutation: 'startVM', label: 'Start', verb: 'Starting', when: ['STOPPED'], danger: false, confirm: 'Start the VM.' },
  { key: 'stop', mutation: 'stopVM', label: 'Stop', verb: 'Stopping', when: ['RUNNING', 'PAUSED'], danger: true, confirm: 'Power the VM off at once, like pulling the plug; unsaved data in the guest is lost.' },
  { key: 'shutdown', mutation: 'shutdownVM', label: 'Shut down', verb: 'Shutting down', when: ['RUNNING'], danger: false, confirm: 'Ask the guest OS to shut down (ACPI).' },
  { key: 'reboot', mutation: 'rebootVM', label: 'Reboot', verb: 'Rebooting', when: ['RUNNING'], danger: false, confirm: 'Reboot the VM.' },
  { key: 'delete', mutation: 'deleteVM', label: 'Delete', verb: 'Deleting', when: ['RUNNING', 'STOPPED', 'PAUSED', 'UNKNOWN'], danger: true, confirm: 'Stop the VM if it runs and destroy it with its disks; its addresses are released. This cannot be undone.' },
] as const

export type VMAction = (typeof vmActions)[number]

// The mutation of each power action, by its name in vmActions.
export const vmActionDocuments = {
  startVM: graphql(`mutation StartVM($id: ID!) { startVM(id: $id) { ...OperationFields } }`),
  stopVM: graphql(`mutation StopVM($id: ID!) { stopVM(id: $id) { ...OperationFields } }`),
  shutdownVM: graphql(`mutation ShutdownVM($id: ID!) { shutdownVM(id: $id) { ...OperationFields } }`),
  rebootVM: graphql(`mutation RebootVM($id: ID!) { rebootVM(id: $id) { ...OperationFields } }`),
  deleteVM: graphql(`mutation DeleteVM($id: ID!, $keepBackups: Boolean) { deleteVM(id: $id, keepBackups: $keepBackups) { ...OperationFields } }`),
}

// runVMAction sends the action's mutation for the VM and resolves to the
// operation it started; keepBackups is delete's choice (the API keeps the
// VM's backups when it is absent).
export async function runVMAction(api: ReturnType<typeof useApi>, a: VMAction, id: string, keepBackups?: boolean): Promise<Operation> {
  const vars = a.mutation === 'deleteVM' && keepBackups !== undefined ? { id, keepBackups } : { id }
  const r = (await api(vmActionDocuments[a.mutation], vars)) as Record<string, Operation>
  return r[a.mutation]!
}
