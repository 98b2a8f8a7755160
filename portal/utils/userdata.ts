// A VM's cloud-init user-data as createVM takes it (at most 64 KiB).

// userDataLimit is the API's bound on userData, in bytes (UTF-8).
export const userDataLimit = 64 * 1024

// userDataBytes is the size of text as the API counts it (UTF-8 bytes).
export function userDataBytes(text: string): number {
  return new TextEncoder().encode(text).length
}

// userDataError refuses user-data over the limit before it is sent; the
// API checks the rest (its form, its YAML) and names the line it refuses.
export function userDataError(text: string): string {
  const n = userDataBytes(text)
  return n > userDataLimit ? `The user-data is ${n.toLocaleString('en')} bytes, more than the 64 KiB (65,536 bytes) a VM takes.` : ''
}
