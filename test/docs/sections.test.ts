/**
 * docs/API.md has a section for every operation of the OpenAPI document, and names no
 * operation the document lacks. The rule:
 *
 * - A section is a Markdown heading (any level) whose text is one or more `METHOD /path`
 *   separated by commas: `### POST /v1/billing/deduct`, `#### GET /v1/admin/projects,
 *   GET /v1/admin/projects/{project_id}`. Headings of other text ("Reading the cost of a
 *   stream") name no operation.
 * - A path parameter matches another name at the same place: `/v1/customers/{id}` is the
 *   document's `/v1/customers/{customer_id}`.
 * - A management operation (one the document has at `/v1/admin/<path>` and at
 *   `/dashboard/api/<path>` with the same method) is documented once, at its `/v1/admin`
 *   address: API.md says so in its "Management API" section (the sentence below is
 *   checked). The dashboard's own routes (its session) have sections of their own.
 *
 * A route added to the document without a section fails here, naming it; so does one
 * that no curl example of the page calls (test/docs/examples.ts runs them).
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import '../../src/app.js';
import { admin_prefix, dashboard_api_prefix } from '../../src/openapi/registry.js';
import { openApiDocument } from '../../src/openapi/routes.js';
import { parseExamples } from './examples.js';

const root = resolve(import.meta.dirname, '../..');
const api_md = readFileSync(resolve(root, 'docs/API.md'), 'utf8');

/** What API.md must say for the `/dashboard/api` mirrors to need no section of their own. */
export const mirror_rule = 'each section below names the `/v1/admin` address only, and covers its `/dashboard/api` mirror';

const methods = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'];
const item_re = new RegExp(`^(${methods.join('|')}) (/\\S*)$`);

/** `METHOD path` with every path parameter as `{}`: the key headings and operations are compared by. */
export function sectionKey(method: string, path: string): string {
  return `${method.toUpperCase()} ${path.replace(/\{[^}/]*\}/g, '{}')}`;
}

/** The operations a Markdown page's headings name, with the line of each. */
export function headingOperations(markdown: string): { key: string; text: string; line: number }[] {
  const out: { key: string; text: string; line: number }[] = [];
  let fenced = false;
  markdown.split('\n').forEach((line, i) => {
    if (line.startsWith('```')) fenced = !fenced;
    const m = fenced ? null : /^#{1,6} (.+?)\s*$/.exec(line);
    if (!m) return;
    const items = m[1].split(/,\s*/).map((s) => item_re.exec(s.trim()));
    // A heading names operations only when all of it is `METHOD /path` items.
    if (items.some((x) => x === null)) return;
    for (const x of items) out.push({ key: sectionKey(x![1], x![2]), text: `${x![1]} ${x![2]}`, line: i + 1 });
  });
  return out;
}

/** The method and path a curl command calls; a variable in the path (`$PROJECT_ID`) stands for one segment. */
export function curlCall(command: string): { method: string; path: string } {
  const c = command.replace(/\\\n/g, ' ');
  const x = /(?:^|\s)-X\s+([A-Z]+)/.exec(c)?.[1];
  const method = x ?? (/(?:^|\s)(?:-d|--data\S*|--json)\s/.test(c) ? 'POST' : 'GET');
  const path = /\$BASE_URL(\/[^\s"'?]*)/.exec(c)?.[1] ?? '';
  return { method, path: path.replace(/\$[A-Z_]+/g, 'x') };
}

let operations: { method: string; path: string }[];
let isMirror: (o: { method: string; path: string }) => boolean;

beforeAll(() => {
  const doc = openApiDocument() as { paths: Record<string, Record<string, unknown>> };
  operations = Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((m) => ({ method: m.toUpperCase(), path })));
  const described = new Set(operations.map((o) => `${o.method} ${o.path}`));
  isMirror = (o) => o.path.startsWith(`${dashboard_api_prefix}/`) && described.has(`${o.method} ${admin_prefix}${o.path.slice(dashboard_api_prefix.length)}`);
});

describe('docs/API.md and the OpenAPI document', () => {
  it('has a section for every operation of the document', () => {
    const documented = new Set(headingOperations(api_md).map((h) => h.key));
    const described = new Set(operations.map((o) => `${o.method} ${o.path}`));
    const missing: string[] = [];
    for (const o of operations) {
      // A /dashboard/api mirror of a management operation is covered by the /v1/admin section.
      const mirrorOf = o.path.startsWith(`${dashboard_api_prefix}/`) ? `${admin_prefix}${o.path.slice(dashboard_api_prefix.length)}` : null;
      const path = mirrorOf !== null && described.has(`${o.method} ${mirrorOf}`) ? mirrorOf : o.path;
      if (!documented.has(sectionKey(o.method, path))) missing.push(`${o.method} ${path}`);
    }
    expect(
      [...new Set(missing)],
      `operations of /openapi.json with no section in docs/API.md: add a heading such as "### POST /v1/billing/deduct" (see test/docs/sections.test.ts for the rule)`,
    ).toEqual([]);
  });

  it('names no operation the document does not have', () => {
    const described = new Set(operations.map((o) => sectionKey(o.method, o.path)));
    const stale = headingOperations(api_md).filter((h) => !described.has(h.key));
    expect(stale.map((h) => `docs/API.md:${h.line} ${h.text}`)).toEqual([]);
  });

  it('has a curl example for every operation (a mirror through its /v1/admin address)', () => {
    const calls = parseExamples('docs/API.md', api_md)
      .filter((e) => e.lang === 'bash')
      .map((e) => curlCall(e.command));
    const missing = operations
      .filter((o) => !isMirror(o))
      .filter((o) => {
        const re = new RegExp(`^${o.path.replace(/\{[^}/]*\}/g, '[^/]+')}$`);
        return !calls.some((c) => c.method === o.method && re.test(c.path));
      })
      .map((o) => `${o.method} ${o.path}`);
    expect(missing, 'add an example that calls it (see "Examples on this page" in docs/API.md)').toEqual([]);
  });

  it('states the rule for the /dashboard/api mirrors', () => {
    const said = api_md.replace(/\s+/g, ' ').toLowerCase().includes(mirror_rule.toLowerCase());
    expect(said, `docs/API.md must say "${mirror_rule}" (the rule this test applies)`).toBe(true);
  });
});

describe('curlCall', () => {
  it('reads the method and path of a curl command', () => {
    expect(curlCall('curl -s "$BASE_URL/v1/usage?trace_id=x" -H "Authorization: Bearer $API_KEY"')).toEqual({ method: 'GET', path: '/v1/usage' });
    expect(curlCall("curl -s $BASE_URL/v1/customers -H 'Content-Type: application/json' \\\n  -d '{}'")).toEqual({ method: 'POST', path: '/v1/customers' });
    expect(curlCall('curl -s -X DELETE $BASE_URL/v1/admin/projects/$NEW_PROJECT_ID')).toEqual({ method: 'DELETE', path: '/v1/admin/projects/x' });
  });
});

describe('headingOperations', () => {
  it('reads a heading of several operations, and skips other headings and code blocks', () => {
    const md = '## Gateway\n### POST /v1/chat/completions, POST /v1/messages\n### Reading the cost of a stream\n```\n# GET /not-a-heading\n```\n#### GET /v1/customers/{id}\n';
    expect(headingOperations(md).map((h) => h.key)).toEqual(['POST /v1/chat/completions', 'POST /v1/messages', 'GET /v1/customers/{}']);
  });

  it('compares paths with their parameters named differently', () => {
    expect(sectionKey('get', '/v1/customers/{customer_id}/ledger')).toBe(sectionKey('GET', '/v1/customers/{id}/ledger'));
    expect(sectionKey('GET', '/v1/customers/{id}')).not.toBe(sectionKey('GET', '/v1/customers/{id}/ledger'));
  });
});
