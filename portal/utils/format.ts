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

// percent shows a 0..1 fraction as a whole percentage.
export function percent(f: number | null | undefined): string {
  if (f === null || f === undefined || Number.isNaN(f)) return '–'
  return `${Math.round(f * 100)} %`
}

// duration shows seconds as the two largest units, e.g. "3 d 4 h".
export function duration(s: number | null | undefined): string {
  if (s === null || s === undefined) return '–'
  if (s <= 0) return '0 s'
  const units: [string, number][] = [['d', 86400], ['h', 3600], ['min', 60], ['s', 1]]
  const parts: string[] = []
  let rest = Math.floor(s)
  for (const [u, n] of units) {
    if (rest >= n && parts.length < 2) {
      parts.push(`${Math.floor(rest / n)} ${u}`)
      rest %= n
    } else if (parts.length > 0) break
  }
  return parts.join(' ')
}

// gibibytes shows a size in GiB, in TiB from 1024 GiB up.
export function gibibytes(gib: number): string {
  return gib >= 1024 ? `${(gib / 1024).toFixed(1)} TiB` : `${gib} GiB`
}

// rate shows bytes per second in B/s, KB/s, MB/s or GB/s (decimal units, as
// network and disk rates are given).
export function rate(bytesPerSecond: number | null | undefined): string {
  if (bytesPerSecond === null || bytesPerSecond === undefined || Number.isNaN(bytesPerSecond)) return '–'
  const units = ['B/s', 'KB/s', 'MB/s', 'GB/s']
  let v = Math.max(bytesPerSecond, 0)
  let i = 0
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000
    i++
  }
  return `${i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`
}

// progressText shows how far an operation (a migration, a backup) has
// copied: bytes moved of the total and the rate.
export function progressText(p: { bytesMoved: number; bytesTotal: number; bytesPerSecond: number }): string {
  const gib = (b: number) => (b / 2 ** 30).toFixed(2)
  const total = p.bytesTotal > 0 ? ` of ${gib(p.bytesTotal)} GiB (${Math.floor((100 * p.bytesMoved) / p.bytesTotal)} %)` : ' GiB'
  return `${gib(p.bytesMoved)}${total} moved, ${rate(p.bytesPerSecond)}`
}
