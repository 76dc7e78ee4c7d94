/**
 * GET /v1/admin/usage: gateway usage and cost totals from PostgreSQL, grouped by any of
 * day, project, customer and model, filtered, paged, and scoped to the caller's
 * organization. Expected totals are summed here from the receipts of the calls made.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANTHROPIC_MODEL, OPENAI_MODEL, startGatewayEnv, usdOf, type GatewayEnv } from '../gateway/support.js';
import type { TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;
let second: TestProject;
/** Each call made: project, customer, model, cost and tokens from its receipt. */
const calls: { project: string; customer: string; model: string; cost: number; input: number; output: number }[] = [];

async function call(project: TestProject, customer: string, model: string): Promise<void> {
  const anthropic = model === ANTHROPIC_MODEL;
  const r = await env.svc.call('POST', anthropic ? '/v1/messages' : '/v1/chat/completions', {
    key: project.projectKey,
    headers: { 'X-Service-Customer': customer },
    body: { model, messages: [{ role: 'user', content: `hello ${customer}` }], max_tokens: 20 },
  });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  const receipt = await env.svc.call('GET', `/v1/billing/receipts/${r.headers.get('x-service-transaction-id')}`, { key: project.projectKey });
  calls.push({ project: project.projectId, customer, model, cost: receipt.body.cost_credits, input: receipt.body.input_tokens, output: receipt.body.output_tokens });
}

beforeAll(async () => {
  env = await startGatewayEnv();
  // A second project of the same organization (Free allows one: upgrade first).
  await env.svc.call('PUT', '/v1/admin/organization/plan', { key: env.p.adminKey, body: { plan: 'pro_500k' } });
  const made = await env.svc.call('POST', '/v1/admin/projects', { key: env.p.adminKey, body: { name: 'second' } });
  const key = await env.svc.call('POST', `/v1/admin/projects/${made.body.id}/keys`, { key: env.p.adminKey, body: { type: 'project' } });
  second = { ...env.p, projectId: made.body.id, projectKey: key.body.key };
  await env.putModel(OPENAI_MODEL, {}, second);
  for (const [project, customer] of [[env.p, 'ann'], [env.p, 'bob'], [second, 'ann']] as const) await env.fund(customer, 10_000_000, { project });
  await call(env.p, 'ann', OPENAI_MODEL);
  await call(env.p, 'ann', OPENAI_MODEL);
  await call(env.p, 'ann', ANTHROPIC_MODEL);
  await call(env.p, 'bob', OPENAI_MODEL);
  await call(second, 'ann', OPENAI_MODEL);
  await env.svc.drained();
}, 60_000);
afterAll(() => env?.close());

const usage = (query: string, key = env.p.adminKey) => env.svc.call('GET', `/v1/admin/usage${query}`, { key });
const today = () => new Date().toISOString().slice(0, 10);

function totals(of: typeof calls) {
  const cost = of.reduce((s, c) => s + c.cost, 0);
  return {
    calls: of.length,
    billed_calls: of.length,
    input_tokens: of.reduce((s, c) => s + c.input, 0),
    output_tokens: of.reduce((s, c) => s + c.output, 0),
    cost_credits: cost,
    cost_usd: usdOf(cost),
  };
}

describe('GET /v1/admin/usage', () => {
  it('groups by day, project, customer and model by default, sorted by day then project, customer, model', async () => {
    const r = await usage('');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ object: 'list', group_by: ['day', 'project', 'customer', 'model'], has_more: false, next_cursor: null });
    const key = (c: (typeof calls)[number]) => `${c.project}|${c.customer}|${c.model}`;
    const groups = [...new Set(calls.map(key))].sort();
    expect(r.body.data).toEqual(
      groups.map((g) => {
        const of = calls.filter((c) => key(c) === g);
        return {
          date: today(),
          project_id: of[0].project,
          customer_id: of[0].customer,
          model: of[0].model,
          ...totals(of),
          cache_read_tokens: 0,
          cache_write_tokens: 0,
          uncovered_credits: 0,
        };
      }),
    );
  });

  it('narrows to the dimensions asked, or one total, and filters by project, customer, model and time', async () => {
    // The groups come in the order they are sorted by, whatever order they were asked in.
    expect((await usage('?group_by=model,customer')).body.group_by).toEqual(['customer', 'model']);
    const byCustomer = await usage('?group_by=customer');
    expect(byCustomer.body.data.map((g: { customer_id: string; calls: number; project_id: null; date: null }) => [g.customer_id, g.calls, g.project_id, g.date])).toEqual([
      ['ann', 4, null, null],
      ['bob', 1, null, null],
    ]);
    const total = await usage('?group_by=');
    expect(total.body.data).toEqual([{ date: null, project_id: null, customer_id: null, model: null, ...totals(calls), cache_read_tokens: 0, cache_write_tokens: 0, uncovered_credits: 0 }]);
    const filtered = await usage(`?group_by=model&project_id=${env.p.projectId}&customer_id=ann`);
    expect(filtered.body.data.map((g: { model: string; calls: number }) => [g.model, g.calls])).toEqual([
      [ANTHROPIC_MODEL, 1],
      [OPENAI_MODEL, 2],
    ]);
    const oneModel = await usage(`?group_by=project&model=${encodeURIComponent(OPENAI_MODEL)}`);
    expect(oneModel.body.data.map((g: { calls: number }) => g.calls).sort()).toEqual([1, 3]);
    const future = new Date(Date.now() + 3_600_000).toISOString();
    expect((await usage(`?group_by=&from=${future}`)).body.data[0].calls).toBe(0);
    const past = new Date(Date.now() - 3_600_000).toISOString();
    expect((await usage(`?group_by=&from=${past}&to=${future}`)).body.data[0].calls).toBe(calls.length);
  });

  it('pages with a cursor that belongs to its grouping', async () => {
    const all = (await usage('?group_by=project,customer,model')).body.data;
    const seen = [];
    let cursor: string | null = null;
    do {
      const r: { body: { data: unknown[]; next_cursor: string | null; has_more: boolean } } = await usage(`?group_by=project,customer,model&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.body.data.length).toBe(1);
      seen.push(...r.body.data);
      cursor = r.body.next_cursor;
      expect(r.body.has_more).toBe(cursor !== null);
    } while (cursor);
    expect(seen).toEqual(all);
    const first = await usage('?group_by=project,customer,model&limit=1');
    const misused = await usage(`?group_by=customer&cursor=${first.body.next_cursor}`);
    expectError(misused, 400, 'invalid_request', { param: 'cursor' });
  });

  it("answers only the caller's organization: another one's project is 404, its calls are not counted", async () => {
    const other = await env.svc.project('B');
    const own = await usage('?group_by=', other.adminKey);
    expect(own.body.data[0].calls).toBe(0);
    const foreign = await usage(`?project_id=${env.p.projectId}`, other.adminKey);
    expectError(foreign, 404, 'not_found');
    const projectKey = await usage('', env.p.projectKey);
    expectError(projectKey, 403, 'permission_denied');
  });

  it('refuses bad parameters with the param', async () => {
    const cases: [string, string][] = [
      ['?group_by=week', 'group_by'],
      ['?group_by=day,week', 'group_by'],
      ['?limit=0', 'limit'],
      ['?limit=501', 'limit'],
      ['?from=yesterday', 'from'],
      [`?from=${new Date().toISOString()}&to=${new Date(Date.now() - 1000).toISOString()}`, 'to'],
      ['?cursor=nonsense', 'cursor'],
      ['?customer=ann', 'customer'],
    ];
    for (const [query, param] of cases) {
      const r = await usage(query);
      expectError(r, 400, 'invalid_request', { param, label: query });
    }
  });
});
