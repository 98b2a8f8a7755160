// Shapes shared by the catalog pages and the ResourceManager component.

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

type Api = <T>(query: string, variables?: Record<string, unknown>) => Promise<T>

// catalogMutations returns the create, update and delete calls of a
// catalog kind (createX/updateX/deleteX in the schema); updates and
// deletes are conditional on the resourceVersion that was read.
export function catalogMutations<Row extends { name: string; resourceVersion: string }>(
  api: Api,
  kind: 'Image' | 'ComputeProfile' | 'StorageProfile' | 'VDC',
  toInput: (v: Values) => Record<string, unknown>,
) {
  return {
    create: (v: Values) =>
      api(`mutation($input: Create${kind}Input!) { create${kind}(input: $input) { name } }`, { input: toInput(v) }),
    update: (v: Values, r: Row) =>
      api(`mutation($input: Update${kind}Input!) { update${kind}(input: $input) { name } }`, {
        input: { ...toInput(v), resourceVersion: r.resourceVersion },
      }),
    remove: (r: Row) =>
      api(`mutation($n: String!, $rv: String) { delete${kind}(name: $n, resourceVersion: $rv) { name } }`, {
        n: r.name,
        rv: r.resourceVersion,
      }),
  }
}
