// Where a list paged by connection cursors is (vmsConnection,
// hostsConnection, ...): the cursors the pages shown so far started after,
// so that Next page passes the shown page's endCursor and Previous page
// goes back to the cursor the page before started after.

export function useCursorPages(size: number) {
  // null: the first page.
  const starts = ref<(string | null)[]>([null])
  // Which of them the page shown started after (set when its data arrives).
  const shown = ref(0)
  const endCursor = ref<string | null>(null)
  return {
    first: size,
    // page is what the next load asks for (first, after), and arrived what
    // it calls with the connection's pageInfo once its page is there.
    page() {
      const index = starts.value.length - 1
      return {
        first: size,
        after: starts.value[index] ?? null,
        arrived: (info: { endCursor?: string | null }) => {
          shown.value = index
          endCursor.value = info.endCursor ?? null
        },
      }
    },
    // This page's first row (0-based) and whether there are pages before it.
    offset: computed(() => shown.value * size),
    hasPrevious: computed(() => shown.value > 0),
    // next and previous move to the next or previous page and tell whether
    // there is one to load; reset goes back to the first.
    next(): boolean {
      if (!endCursor.value) return false
      starts.value = [...starts.value, endCursor.value]
      return true
    },
    previous(): boolean {
      if (starts.value.length <= 1) return false
      starts.value = starts.value.slice(0, -1)
      return true
    },
    reset() {
      starts.value = [null]
    },
  }
}

// everyNode reads a connection to its end, page by page, and returns every
// node: fetchPage asks for the page after a cursor (null: the first).
export async function everyNode<N>(
  fetchPage: (after: string | null) => Promise<{ nodes: N[]; pageInfo: { hasNextPage: boolean; endCursor?: string | null } }>,
): Promise<N[]> {
  const out: N[] = []
  let after: string | null = null
  for (;;) {
    const c = await fetchPage(after)
    out.push(...c.nodes)
    if (!c.pageInfo.hasNextPage || !c.pageInfo.endCursor) return out
    after = c.pageInfo.endCursor
  }
}
