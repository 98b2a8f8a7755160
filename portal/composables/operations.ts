// Following operations from the pages: the subscription with the signed-in
// session, polling the operation query as the fallback.

import { follow, operationFields, type Operation } from '~/utils/operation'

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
      poll: async () =>
        (await api<{ operation: Operation | null }>(`query($id: ID!) { operation(id: $id) { ${operationFields} } }`, { id }))
          .operation,
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
