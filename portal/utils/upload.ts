// Uploads of a file through the GraphQL multipart request spec: one
// multipart/form-data POST whose parts are operations, map and the file,
// in that order, sent with XMLHttpRequest so that the page can show how
// much of the file went out and cancel it.

import { print, type DocumentNode } from 'graphql'
import { ApiError, rateLimitedMessage, type GraphQLErrorEntry } from './graphql'

export interface UploadRequest {
  // endpoint is the GraphQL URL; token the bearer token; vdc the
  // FlexPlane-VDC-ID header (none when null).
  endpoint: string
  token: string
  vdc: string | null
  // query is the mutation; variables its variables, with null where the
  // file goes; filePath the variable's path in them (e.g. "in.file").
  query: DocumentNode | string
  variables: Record<string, unknown>
  filePath: string
  file: Blob
  // onProgress gets the bytes of the request sent so far and its total.
  onProgress?: (sent: number, total: number) => void
  onUnauthenticated?: () => void
}

export interface Upload<T> {
  // done resolves to the mutation's data, or rejects with an ApiError
  // (code CANCELLED once cancel was called).
  done: Promise<T>
  cancel: () => void
}

// uploadFile starts the upload and returns it.
export function uploadFile<T>(r: UploadRequest): Upload<T> {
  const xhr = new XMLHttpRequest()
  const body = new FormData()
  body.append('operations', JSON.stringify({ query: typeof r.query === 'string' ? r.query : print(r.query), variables: r.variables }))
  body.append('map', JSON.stringify({ 0: [`variables.${r.filePath}`] }))
  body.append('0', r.file, r.file instanceof File ? r.file.name : 'file')
  const done = new Promise<T>((resolve, reject) => {
    xhr.open('POST', r.endpoint)
    xhr.setRequestHeader('Authorization', `Bearer ${r.token}`)
    if (r.vdc) xhr.setRequestHeader('FlexPlane-VDC-ID', r.vdc)
    xhr.upload.onprogress = (e) => r.onProgress?.(e.loaded, e.lengthComputable ? e.total : r.file.size)
    xhr.onabort = () => reject(new ApiError('The upload was cancelled; nothing was stored.', 'CANCELLED'))
    xhr.onerror = () => reject(new ApiError('The API cannot be reached (the upload broke off).', 'NETWORK'))
    xhr.onload = () => {
      let res: { data?: T | null; errors?: GraphQLErrorEntry[] } | null = null
      try {
        res = JSON.parse(xhr.responseText)
      } catch {
        res = null
      }
      const errors = res?.errors ?? []
      if (xhr.status === 401 || errors.some((e) => e.extensions?.code === 'UNAUTHENTICATED')) {
        r.onUnauthenticated?.()
        return reject(new ApiError(errors[0]?.message || 'Your session has expired.', 'UNAUTHENTICATED', errors))
      }
      if (errors.length > 0) {
        const code = errors[0]!.extensions?.code || 'INTERNAL'
        const e = new ApiError(errors[0]!.message, code, errors, res?.data ?? null)
        if (code === 'RATE_LIMITED') e.message = rateLimitedMessage(e.retryAfter)
        return reject(e)
      }
      if (!res?.data) return reject(new ApiError(`The API answered ${xhr.status} without a GraphQL response.`, 'INTERNAL'))
      resolve(res.data)
    }
    xhr.send(body)
  })
  return { done, cancel: () => xhr.abort() }
}
