/**
 * The field tables of docs/API.md against the OpenAPI document, which is generated from
 * the zod schemas that validate the requests and describe the answers (src/openapi/):
 * each table below names every field of its schema and no other, gives the schema's type
 * in its `type` column (`string`, `integer`, `number`, `boolean`, `object`, `array`,
 * `any`), says `null` there exactly when the field may be null, and a request table says
 * `required` exactly for the fields the schema requires.
 *
 * A field is named by its path in the first column, in backquotes, several to a row when
 * they share their type: `limits.projects_max` (a field of an object), `lines[].type` (of
 * each element of an array), `wallets.*.total` (of each value of a map).
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import '../../src/app.js';
import { openApiDocument } from '../../src/openapi/routes.js';

const api_md = readFileSync(resolve(import.meta.dirname, '../../docs/API.md'), 'utf8');

type JsonSchema = {
  $ref?: string;
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  additionalProperties?: boolean | JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  allOf?: JsonSchema[];
};

interface Field {
  types: Set<string>;
  nullable: boolean;
  required: boolean;
}

interface Table {
  /** The heading line of the section the table is in. */
  heading: string;
  /** Which table of the section, from 0. */
  index?: number;
  method: string;
  path: string;
  /** An answer's status, or `request` for the request body. */
  of: number | 'request';
  /** The part of the answer the table describes: `data[]` for the entries of a list. */
  at?: string;
}

const tables: Table[] = [
  { heading: '### POST /v1/customers/deposit', index: 1, method: 'post', path: '/v1/customers/deposit', of: 200 },
  { heading: '### POST /v1/billing/unfreeze', method: 'post', path: '/v1/billing/unfreeze', of: 'request' },
  { heading: '### GET /v1/customers/{id}', method: 'get', path: '/v1/customers/{customer_id}', of: 200 },
  { heading: '### POST /v1/customers', method: 'post', path: '/v1/customers', of: 'request' },
  { heading: '### GET /v1/models', method: 'get', path: '/v1/models', of: 200, at: 'data[]' },
  { heading: '### GET /v1/usage', method: 'get', path: '/v1/usage', of: 200, at: 'data[]' },
  { heading: '## Events and webhooks', method: 'get', path: '/v1/events', of: 200, at: 'data[]' },
  { heading: '### POST /v1/webhooks', method: 'post', path: '/v1/webhooks', of: 'request' },
  { heading: '### GET /v1/webhooks/{id}/deliveries', method: 'get', path: '/v1/webhooks/{webhook_id}/deliveries', of: 200, at: 'data[]' },
  { heading: '### GET /health', method: 'get', path: '/health', of: 200 },
  { heading: '### GET /health/live, GET /health/ready', method: 'get', path: '/health/ready', of: 200 },
  { heading: '#### GET /v1/admin/organization', method: 'get', path: '/v1/admin/organization', of: 200 },
  { heading: '#### GET /v1/admin/organization/plan/preview', method: 'get', path: '/v1/admin/organization/plan/preview', of: 200 },
  { heading: '### Invoices', method: 'get', path: '/v1/admin/invoices/{invoice_id}', of: 200 },
  { heading: '### Invoices', method: 'get', path: '/v1/admin/invoices', of: 200, at: 'data[]' },
  { heading: '### Members', method: 'get', path: '/v1/admin/members/{member_id}', of: 200 },
  { heading: '### Members', method: 'get', path: '/v1/admin/members', of: 200, at: 'data[]' },
  { heading: '#### GET /v1/admin/projects/{project_id}/customers/{customer_id}', method: 'get', path: '/v1/admin/projects/{project_id}/customers/{customer_id}', of: 200 },
  { heading: '#### GET /v1/admin/usage/daily', method: 'get', path: '/v1/admin/usage/daily', of: 200, at: 'data[]' },
  { heading: '#### GET /v1/admin/usage', method: 'get', path: '/v1/admin/usage', of: 200, at: 'data[]' },
  { heading: '#### POST /v1/admin/projects', method: 'post', path: '/v1/admin/projects', of: 'request' },
  { heading: '#### GET /v1/admin/projects/{project_id}/reconcile/{job_id}', method: 'get', path: '/v1/admin/projects/{project_id}/reconcile/{job_id}', of: 200 },
];

let doc: { paths: Record<string, Record<string, JsonSchema & { requestBody?: unknown; responses?: unknown }>>; components: { schemas: Record<string, JsonSchema> } };

beforeAll(() => {
  doc = openApiDocument() as typeof doc;
});

function deref(s: JsonSchema): JsonSchema {
  return s.$ref ? deref(doc.components.schemas[s.$ref.replace('#/components/schemas/', '')]) : s;
}

/** The non-null alternatives of a schema, and whether null is one. */
function alternatives(s: JsonSchema): { members: JsonSchema[]; nullable: boolean } {
  s = deref(s);
  const union = s.anyOf ?? s.oneOf;
  if (union) {
    const parts = union.map(alternatives);
    return { members: parts.flatMap((p) => p.members), nullable: parts.some((p) => p.nullable) };
  }
  if (s.allOf) return { members: [Object.assign({}, ...s.allOf.map(deref)) as JsonSchema], nullable: false };
  const types = s.type === undefined ? [] : Array.isArray(s.type) ? s.type : [s.type];
  if (types.includes('null')) {
    const rest = types.filter((t) => t !== 'null');
    return { members: rest.length ? [{ ...s, type: rest }] : [], nullable: true };
  }
  return { members: [s], nullable: false };
}

const typeOf = (s: JsonSchema): string[] => (s.type === undefined ? (s.properties ? ['object'] : ['any']) : Array.isArray(s.type) ? s.type : [s.type]);

/** Every field of a schema by its path (see the rule above). */
function fieldsOf(schema: JsonSchema, prefix = '', out = new Map<string, Field>()): Map<string, Field> {
  const { members } = alternatives(schema);
  for (const m of members) {
    for (const [name, sub] of Object.entries(m.properties ?? {})) {
      const path = prefix + name;
      const alt = alternatives(sub);
      const field = out.get(path) ?? { types: new Set<string>(), nullable: false, required: true };
      for (const a of alt.members) for (const t of typeOf(a)) field.types.add(t);
      if (alt.members.length === 0) field.types.add('any');
      field.nullable ||= alt.nullable;
      field.required &&= (m.required ?? []).includes(name);
      out.set(path, field);
      children(sub, path, out);
    }
  }
  return out;
}

function children(s: JsonSchema, path: string, out: Map<string, Field>): void {
  for (const a of alternatives(s).members) {
    if (a.properties) fieldsOf(a, `${path}.`, out);
    if (a.items) children(a.items, `${path}[]`, out);
    if (typeof a.additionalProperties === 'object') {
      const values = alternatives(a.additionalProperties).members;
      if (values.some((v) => v.properties)) fieldsOf(a.additionalProperties, `${path}.*.`, out);
    }
  }
}

/** The schema a table describes. */
function schemaOf(t: Table): JsonSchema {
  const op = doc.paths[t.path]?.[t.method] as { requestBody?: { content: Record<string, { schema: JsonSchema }> }; responses: Record<string, { content: Record<string, { schema: JsonSchema }> }> };
  if (!op) throw new Error(`no operation ${t.method} ${t.path} in the document`);
  let s = t.of === 'request' ? op.requestBody!.content['application/json'].schema : op.responses[String(t.of)].content['application/json'].schema;
  for (const step of t.at?.split('.') ?? []) {
    s = deref(s);
    s = step.endsWith('[]') ? deref(s.properties![step.slice(0, -2)]).items! : s.properties![step];
  }
  return s;
}

interface Row {
  names: string[];
  type: string;
  required: string | null;
  line: string;
}

/** The rows of the `index`th table of the section under `heading`. */
function tableRows(markdown: string, heading: string, index = 0): Row[] {
  const lines = markdown.split('\n');
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`no heading ${heading}`);
  const end = lines.findIndex((l, i) => i > start && /^#{1,6} /.test(l));
  const section = lines.slice(start + 1, end < 0 ? undefined : end);
  const found: string[][] = [];
  section.forEach((l, i) => {
    if (l.startsWith('|') && !section[i - 1]?.startsWith('|')) found.push([]);
    if (l.startsWith('|')) found.at(-1)!.push(l);
  });
  const table = found[index];
  if (!table) throw new Error(`no table ${index} under ${heading}`);
  const cells = (l: string) => l.split(/(?<!\\)\|/).slice(1, -1).map((c) => c.trim());
  const header = cells(table[0]);
  const typeCol = header.indexOf('type');
  // A request table's third column, headed by nothing, says required or optional.
  const requiredCol = header[2] === '' ? 2 : null;
  return table.slice(2).map((l) => {
    const c = cells(l);
    return { names: [...c[0].matchAll(/`([^`]+)`/g)].map((m) => m[1]), type: c[typeCol], required: requiredCol === null ? null : c[requiredCol], line: l };
  });
}

describe('the field tables of docs/API.md', () => {
  it.each(tables.map((t) => [`${t.heading} (${t.method.toUpperCase()} ${t.path} ${t.of}${t.at ? ` ${t.at}` : ''})`, t] as const))(
    '%s lists every field with its type',
    (_, t) => {
      const fields = fieldsOf(schemaOf(t));
      const rows = tableRows(api_md, t.heading, t.index);
      const named = rows.flatMap((r) => r.names);
      expect(named.filter((n) => !fields.has(n)), 'named in the table, not in the schema').toEqual([]);
      expect([...fields.keys()].filter((f) => !named.includes(f)), 'in the schema, missing from the table').toEqual([]);
      expect(new Set(named).size, 'a field named twice').toBe(named.length);
      const wrong: string[] = [];
      for (const r of rows) {
        for (const n of r.names) {
          const f = fields.get(n)!;
          for (const type of f.types) if (!r.type.includes(type)) wrong.push(`${n}: the schema's type is ${type}, the table says "${r.type}"`);
          if (f.nullable !== r.type.includes('null')) wrong.push(`${n}: ${f.nullable ? 'may be null' : 'is never null'}, the table says "${r.type}"`);
          if (r.required !== null && f.required !== r.required.startsWith('required')) wrong.push(`${n}: ${f.required ? 'required' : 'optional'}, the table says "${r.required}"`);
        }
      }
      expect(wrong).toEqual([]);
    },
  );
});

describe('tableRows and fieldsOf', () => {
  it('reads the rows of the right table, several fields to a row', () => {
    const md = '## A\n| field | type | | meaning |\n|---|---|---|---|\n| `x`, `y.z` | integer or null | required | n |\n\n| field | type |\n|---|---|\n| `w` | string |\n## B\n';
    expect(tableRows(md, '## A').map((r) => [r.names, r.type, r.required])).toEqual([[['x', 'y.z'], 'integer or null', 'required']]);
    expect(tableRows(md, '## A', 1).map((r) => r.names)).toEqual([['w']]);
  });

  it('names nested fields by their paths, with their types, nullability and requiredness', () => {
    const fields = fieldsOf({
      type: 'object',
      required: ['a', 'list'],
      properties: {
        a: { type: ['integer', 'null'] },
        list: { type: 'array', items: { type: 'object', required: ['b'], properties: { b: { type: 'string' } } } },
        map: { type: 'object', additionalProperties: { type: 'object', properties: { c: { type: 'boolean' } } } },
        either: { anyOf: [{ type: 'object', properties: { s: { type: 'string' } } }, { type: 'null' }] },
      },
    });
    expect(Object.fromEntries([...fields].map(([k, f]) => [k, [[...f.types].join('|'), f.nullable, f.required]]))).toEqual({
      a: ['integer', true, true],
      list: ['array', false, true],
      'list[].b': ['string', false, true],
      map: ['object', false, false],
      'map.*.c': ['boolean', false, false],
      either: ['object', true, false],
      'either.s': ['string', false, false],
    });
  });
});
