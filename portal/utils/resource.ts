// Shapes shared by the catalog pages and the ResourceManager component.

import type { TypedDocumentNode } from '@urql/core'
import { graphql } from '~/gql'
import type { CreateComputeProfileInput, CreateImageInput, CreateStorageProfileInput, CreateVdcInput } from '~/gql/graphql'

export interface Column<Row> {
  key: string
  label: string
  value: (row: Row) => string
  mono?: boolean
}

export type FieldValue = string | number | boolean | null

export interface Field {
  // The input's key; also the API's field name without the "input." prefix
  // (e.g. "quotas.vcpus"), so that errors land next to their field.
  key: string
  label: string
  type: 'text' | 'number' | 'textarea' | 'checkbox'
  hint?: string
  // Only set on create (the name); read-only when editing.
  fixed?: boolean
  // May be left empty (numbers: sent as null).
  optional?: boolean
}

export type Values = Record<string, FieldValue>

// fieldFor maps an API error field ("input.pools[1].zone") to the key of
// the form field it belongs to ("pools"), or null.
export function fieldFor(apiField: string | undefined, fields: Field[]): string | null {
  if (!apiField) return null
  const f = apiField.replace(/^input\./, '')
  const match = fields
    .filter((x) => f === x.key || f.startsWith(x.key + '[') || f.startsWith(x.key + '.'))
    .sort((a, b) => b.key.length - a.key.length)[0]
  return match ? match.key : null
}

// readable strips the "input.field: " prefix the API puts on input errors.
export function readable(message: string, apiField?: string): string {
  if (apiField && message.startsWith(apiField + ': ')) return message.slice(apiField.length + 2)
  return message
}

// intOrNull turns a number input's value into an int, null when empty.
export function intOrNull(v: FieldValue): number | null {
  if (v === '' || v === null || v === undefined) return null
  return Number(v)
}

// textOf is a text input's value as a string.
export function textOf(v: FieldValue | undefined): string {
  return v === null || v === undefined ? '' : String(v)
}

// The catalog's mutations, by kind: createX, updateX (conditional on the
// resourceVersion read) and deleteX.
const catalogDocuments = {
  Image: {
    create: graphql(`mutation CreateImage($input: CreateImageInput!) { createImage(input: $input) { name } }`),
    update: graphql(`mutation UpdateImage($input: UpdateImageInput!) { updateImage(input: $input) { name } }`),
    remove: graphql(`mutation DeleteImage($n: String!, $rv: String) { deleteImage(name: $n, resourceVersion: $rv) { name } }`),
  },
  ComputeProfile: {
    create: graphql(`mutation CreateComputeProfile($input: CreateComputeProfileInput!) { createComputeProfile(input: $input) { name } }`),
    update: graphql(`mutation UpdateComputeProfile($input: UpdateComputeProfileInput!) { updateComputeProfile(input: $input) { name } }`),
    remove: graphql(`mutation DeleteComputeProfile($n: String!, $rv: String) { deleteComputeProfile(name: $n, resourceVersion: $rv) { name } }`),
  },
  StorageProfile: {
    create: graphql(`mutation CreateStorageProfile($input: CreateStorageProfileInput!) { createStorageProfile(input: $input) { name } }`),
    update: graphql(`mutation UpdateStorageProfile($input: UpdateStorageProfileInput!) { updateStorageProfile(input: $input) { name } }`),
    remove: graphql(`mutation DeleteStorageProfile($n: String!, $rv: String) { deleteStorageProfile(name: $n, resourceVersion: $rv) { name } }`),
  },
  VDC: {
    create: graphql(`mutation CreateVDC($input: CreateVDCInput!) { createVDC(input: $input) { name } }`),
    update: graphql(`mutation UpdateVDC($input: UpdateVDCInput!) { updateVDC(input: $input) { name } }`),
    remove: graphql(`mutation DeleteVDC($n: String!, $rv: String) { deleteVDC(name: $n, resourceVersion: $rv) { name } }`),
  },
}
export type CatalogKind = keyof typeof catalogDocuments
// The create input of a kind; its update input has the same fields,
// optional, and the resourceVersion.
interface CatalogInputs {
  Image: CreateImageInput
  ComputeProfile: CreateComputeProfileInput
  StorageProfile: CreateStorageProfileInput
  VDC: CreateVdcInput
}
export type CatalogInput<K extends CatalogKind> = CatalogInputs[K]
interface CatalogDocuments<C> {
  create: TypedDocumentNode<unknown, { input: C }>
  update: TypedDocumentNode<unknown, { input: C & { resourceVersion: string } }>
  remove: TypedDocumentNode<unknown, { n: string; rv: string }>
}

// catalogMutations returns the create, update and delete calls of a
// catalog kind; updates and deletes are conditional on the
// resourceVersion that was read.
export function catalogMutations<Row extends { name: string; resourceVersion: string }, K extends CatalogKind = CatalogKind>(
  api: ReturnType<typeof useApi>,
  kind: K,
  toInput: (v: Values) => CatalogInput<K>,
) {
  // Every kind's update input is its create input made optional: one shape.
  const docs = catalogDocuments[kind] as unknown as CatalogDocuments<CatalogInput<K>>
  return {
    create: (v: Values) => api(docs.create, { input: toInput(v) }),
    update: (v: Values, r: Row) => api(docs.update, { input: { ...toInput(v), resourceVersion: r.resourceVersion } }),
    remove: (r: Row) => api(docs.remove, { n: r.name, rv: r.resourceVersion }),
  }
}

// Refusal is where a dialog shows a failed submission: next to one of its
// fields (field set, with the message to show there) or at the form's top.
export interface Refusal {
  field?: string
  message: string
}

// refusalOf places the error of a dialog's submission: an API refusal with
// one of codes naming input.<key> for one of keys goes next to that field,
// anything else at the form's top; null for UNAUTHENTICATED (signing in
// again takes over).
export function refusalOf(e: unknown, keys: readonly string[], codes: readonly string[]): Refusal | null {
  if (!(e instanceof ApiError)) return { message: (e as Error).message }
  if (e.code === 'UNAUTHENTICATED') return null
  const key = e.field?.replace(/^input\./, '')
  if (codes.includes(e.code) && key && keys.includes(key)) return { field: key, message: readable(e.message, e.field) }
  return { message: `${errorTitle(e.code)}: ${e.message}` }
}
