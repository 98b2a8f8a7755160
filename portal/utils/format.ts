// Formatting and parsing helpers of the pages.

export function mebibytes(mib: number): string {
  if (mib >= 1024 && mib % 1024 === 0) return `${mib / 1024} GiB`
  if (mib >= 1024) return `${(mib / 1024).toFixed(1)} GiB`
  return `${mib} MiB`
}

export function formatPools(pools: { zone: string; pool: string }[]): string {
  return pools.map((p) => `${p.zone}=${p.pool}`).join(', ')
}

// parsePools reads "fra1=local-lvm, hel1=ceph"; a malformed entry is an
// input error on the pools field, like the API's own.
export function parsePools(s: string): { zone: string; pool: string }[] {
  const out: { zone: string; pool: string }[] = []
  for (const part of s.split(',').map((x) => x.trim()).filter(Boolean)) {
    const i = part.indexOf('=')
    if (i <= 0 || i === part.length - 1) {
      throw new ApiError(`"${part}" is not zone=storage`, 'BAD_USER_INPUT', [
        { message: `"${part}" is not zone=storage`, extensions: { code: 'BAD_USER_INPUT', field: 'input.pools' } },
      ])
    }
    out.push({ zone: part.slice(0, i).trim(), pool: part.slice(i + 1).trim() })
  }
  return out
}
