// useLoader runs a page's load now, again every `every` ms while the page
// shows (0: never) and whenever reloadOn changes, and keeps its state: a
// refused session shows as expired (not here), any other error as text.

import type { WatchSource } from 'vue'

export function useLoader(load: () => Promise<void>, opts: { every?: number; reloadOn?: WatchSource } = {}) {
  const loading = ref(true)
  const error = ref('')
  async function reload() {
    try {
      await load()
      error.value = ''
    } catch (e) {
      if (!(e instanceof ApiError && e.code === 'UNAUTHENTICATED')) error.value = (e as Error).message
    } finally {
      loading.value = false
    }
  }
  let timer: ReturnType<typeof setInterval> | undefined
  onMounted(() => {
    reload()
    if (opts.every) timer = setInterval(reload, opts.every)
  })
  onBeforeUnmount(() => clearInterval(timer))
  if (opts.reloadOn) watch(opts.reloadOn, reload)
  return { loading, error, reload }
}
