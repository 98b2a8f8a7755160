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
  deleteVM: graphql(`mutation DeleteVM($id: ID!) { deleteVM(id: $id) { ...OperationFields } }`),
}

// runVMAction sends the action's mutation for the VM and resolves to the
// operation it started.
export async function runVMAction(api: ReturnType<typeof useApi>, a: VMAction, id: string): Promise<Operation> {
  const r = (await api(vmActionDocuments[a.mutation], { id })) as Record<string, Operation>
  return r[a.mutation]!
}
