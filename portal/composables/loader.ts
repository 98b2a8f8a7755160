// useLoader runs a page's load now, again every `every` ms while the page
// shows and the browser tab is visible (0: never; at once when the tab
// becomes visible again) and whenever reloadOn changes, and keeps its
// state: a refused session shows as expired (not here), any other error as
// text.

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
  const visible = () => document.visibilityState !== 'hidden'
  const onVisibility = () => {
    if (visible()) reload()
  }
  onMounted(() => {
    reload()
    if (!opts.every) return
    timer = setInterval(() => visible() && reload(), opts.every)
    document.addEventListener('visibilitychange', onVisibility)
  })
  onBeforeUnmount(() => {
    clearInterval(timer)
    document.removeEventListener('visibilitychange', onVisibility)
  })
  if (opts.reloadOn) watch(opts.reloadOn, reload)
  return { loading, error, reload }
}
