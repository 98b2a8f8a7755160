// Partial answers: a request spanning zones answers what the reachable
// zones have, with one ZONE_UNAVAILABLE error per zone that did not answer.

export interface PartialAnswer<T> {
  data: T
  // The zones that did not answer.
  down: string[]
}

// partial resolves to the data and the zones that did not answer when every
// error of the request is ZONE_UNAVAILABLE; any other error is thrown.
export async function partial<T>(p: Promise<T>): Promise<PartialAnswer<T>> {
  try {
    return { data: await p, down: [] }
  } catch (e) {
    if (e instanceof ApiError && e.data && e.errors.length > 0 && e.errors.every((x) => x.extensions?.code === 'ZONE_UNAVAILABLE')) {
      const down = [...new Set(e.errors.map((x) => String(x.extensions?.zone ?? '')).filter(Boolean))].sort()
      return { data: e.data as T, down }
    }
    throw e
  }
}

// errorTitle names an API error code for people.
export function errorTitle(code: string): string {
  const titles: Record<string, string> = {
    CONFLICT: 'Conflict',
    NOT_FOUND: 'Not found',
    BAD_USER_INPUT: 'Invalid input',
    QUOTA_EXCEEDED: 'Quota exceeded',
    CAPACITY_EXCEEDED: 'No host has room',
    FORBIDDEN: 'Not allowed',
    ZONE_UNAVAILABLE: 'Zone unavailable',
    RATE_LIMITED: 'Too many requests',
  }
  return titles[code] ?? 'Error'
}
