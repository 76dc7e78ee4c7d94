/**
 * The dashboard's lists: a project's customers with their balances (search by id, name or
 * email, cursor pages) and usage per day (operations, credits, cost, and gateway calls by
 * model), through the admin key and through a session alike.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import type { TestProject } from '../helpers.js';
import { ANTHROPIC_MODEL, OPENAI_MODEL, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { addMember, dash, signIn } from './dashboard-support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;
let p: TestProject;

beforeAll(async () => {
  env = await startGatewayEnv();
  p = env.p;
});
afterAll(() => env?.close());

const admin = (path: string) => env.svc.call('GET', `/v1/admin${path}`, { key: p.adminKey });

async function deposit(customer: string, amount: number, profile: { name?: string; email?: string } = {}, project = p) {
  const r = await env.svc.call('POST', '/v1/customers/deposit', { key: project.projectKey, body: { customer_id: customer, amount, ...profile } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

let serial = 0;
async function deduct(customer: string, amount: number) {
  const r = await env.svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: customer, transaction_id: `t${++serial}`, amount } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

describe('customers', () => {
  beforeAll(async () => {
    await deposit('alpha-1', 5_000_000, { name: 'Alice Smith', email: 'alice@corp.example' });
    await deposit('alpha-2', 7_000, { name: 'Bob Jones', email: 'bob@home.example' });
    await deposit('beta_1', 300, { name: '50% Off Ltd', email: 'sales@discount.example' });
    await deposit('gamma', 10);
    await deduct('alpha-1', 1_250_000);
    await env.svc.drained();
  });

  it('lists the project\'s customers newest first with the balance the API reports', async () => {
    const r = await admin(`/projects/${p.projectId}/customers`);
    expect(r.status).toBe(200);
    expect(r.body.data.map((c: { id: string }) => c.id)).toEqual(['gamma', 'beta_1', 'alpha-2', 'alpha-1']);
    const alice = r.body.data[3];
    const balance = await env.balance('alpha-1');
    expect(alice).toMatchObject({ id: 'alpha-1', project_id: p.projectId, name: 'Alice Smith', email: 'alice@corp.example' });
    expect(alice.balance).toEqual({ total: balance.total, used: balance.used, frozen: balance.frozen, available: balance.available, available_usd: '3.75' });
    expect(alice.balance.available).toBe(3_750_000);
    expect(alice.wallets).toEqual({ credits: { total: 5_000_000, used: 1_250_000, frozen: 0, available: 3_750_000 } });
    // One customer: the listed entry and every source with its window.
    const one = await admin(`/projects/${p.projectId}/customers/alpha-1`);
    const { sources, budget, low_balance_threshold, auto_top_up, metadata, ...entry } = one.body;
    expect(entry).toEqual(alice);
    expect([budget, low_balance_threshold, auto_top_up, metadata]).toEqual([null, null, null, {}]);
    expect(sources).toEqual([
      expect.objectContaining({ credit_type: 'credits', total: 5_000_000, used: 1_250_000, frozen: 0, available: 3_750_000, active: true, starts_at: null, expires_at: null }),
    ]);
    expectError(await admin(`/projects/${p.projectId}/customers/nobody`), 404, 'customer_not_found');
  });

  it('searches by id prefix, or name or email in any case; wildcards are literal', async () => {
    const search = async (q: string) =>
      (await admin(`/projects/${p.projectId}/customers?search=${encodeURIComponent(q)}`)).body.data.map((c: { id: string }) => c.id).sort();
    expect(await search('alpha')).toEqual(['alpha-1', 'alpha-2']);
    expect(await search('SMITH')).toEqual(['alpha-1']);
    expect(await search('Home.Example')).toEqual(['alpha-2']);
    expect(await search('gamma')).toEqual(['gamma']);
    expect(await search('%')).toEqual(['beta_1']);
    // As a wildcard '_' would match every id; as itself, no id starts with it.
    expect(await search('_')).toEqual([]);
    expect(await search('beta_')).toEqual(['beta_1']);
    expect(await search('lpha')).toEqual([]);
    expectError(await admin(`/projects/${p.projectId}/customers?q=alpha`), 400, 'invalid_request');
  });

  it('pages with a cursor, and a session sees the same', async () => {
    const ids: string[] = [];
    let cursor: string | null = null;
    do {
      const r = await admin(`/projects/${p.projectId}/customers?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      ids.push(...r.body.data.map((c: { id: string }) => c.id));
      cursor = r.body.next_cursor;
      expect(r.body.has_more).toBe(cursor !== null);
    } while (cursor);
    expect(ids).toEqual(['gamma', 'beta_1', 'alpha-2', 'alpha-1']);
    const viewer = await addMember(env.svc, p, 'owner');
    const s = await signIn(env.svc, viewer.email, viewer.password);
    expect((await dash(env.svc, s, 'GET', `/projects/${p.projectId}/customers?search=alpha`)).body).toEqual(
      (await admin(`/projects/${p.projectId}/customers?search=alpha`)).body,
    );
  });
});

describe('usage per day', () => {
  it('sums billable operations and their credits per UTC day, with the gateway calls per model, newest day first', async () => {
    const q = await env.svc.project();
    await env.putModel(OPENAI_MODEL, { provider: 'openai' }, q);
    await env.putModel(ANTHROPIC_MODEL, { provider: 'anthropic' }, q);
    await deposit('u1', 100_000_000, {}, q);
    const day = 86_400_000;
    const deductQ = async (amount: number) => {
      const r = await env.svc.call('POST', '/v1/billing/deduct', { key: q.projectKey, body: { customer_id: 'u1', transaction_id: `q${++serial}`, amount } });
      expect(r.status).toBe(200);
    };
    const ask = [{ role: 'user' as const, content: `hello ${mockDirective({ output_tokens: 5 })}` }];
    const chat = () => env.openai({ key: q.projectKey, customer: 'u1' }).chat.completions.create({ model: OPENAI_MODEL, messages: ask }).withResponse();
    const message = () => env.anthropic({ key: q.projectKey, customer: 'u1' }).messages.create({ model: ANTHROPIC_MODEL, max_tokens: 20, messages: ask }).withResponse();
    const cost = (r: { response: Response }) => Number(r.response.headers.get('x-service-cost-credits'));

    // Day 1: two deducts and two gateway calls; day 2 (a day later): one gateway call; day 3: one deduct.
    await deductQ(1_000);
    await deductQ(2_000);
    const c1 = cost(await chat());
    const m1 = cost(await message());
    env.svc.rt.clock.advance(day);
    const c2 = cost(await chat());
    env.svc.rt.clock.advance(day);
    await deductQ(500);
    await env.svc.drained();

    const r = await env.svc.call('GET', `/v1/admin/usage/daily?project_id=${q.projectId}`, { key: q.adminKey });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const today = new Date(env.svc.rt.plans.nowMs()).toISOString().slice(0, 10);
    const dates = r.body.data.map((d: { date: string }) => d.date);
    expect(dates).toHaveLength(3);
    expect(dates[0]).toBe(today);
    expect([...dates].sort().reverse()).toEqual(dates);
    const [d3, d2, d1] = r.body.data;
    expect(d3).toEqual({ date: dates[0], operations: 1, credits: 500, cost_usd: '0.0005', by_model: [] });
    expect(d2).toMatchObject({ operations: 1, credits: c2, by_model: [{ model: OPENAI_MODEL, calls: 1, cost_credits: c2 }] });
    expect(d1).toMatchObject({ operations: 4, credits: 3_000 + c1 + m1 });
    expect(d1.by_model.map((m: { model: string; calls: number; cost_credits: number }) => [m.model, m.calls, m.cost_credits]).sort()).toEqual(
      [[ANTHROPIC_MODEL, 1, m1], [OPENAI_MODEL, 1, c1]].sort(),
    );
    expect(d1.by_model[0].input_tokens).toBeGreaterThan(0);
    expect(d1.by_model.find((m: { model: string }) => m.model === OPENAI_MODEL).output_tokens).toBe(5);

    // Cursor pages of one day, and the organization-wide answer (q's organization has only q).
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page = await env.svc.call('GET', `/v1/admin/usage/daily?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { key: q.adminKey });
      expect(page.body.data.length).toBeLessThanOrEqual(1);
      paged.push(...page.body.data.map((d: { date: string }) => d.date));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(paged).toEqual(dates);
    // from / to bound the days.
    const from = `${dates[1]}T00:00:00Z`;
    const to = `${dates[0]}T00:00:00Z`;
    const window = await env.svc.call('GET', `/v1/admin/usage/daily?from=${from}&to=${to}`, { key: q.adminKey });
    expect(window.body.data.map((d: { date: string }) => d.date)).toEqual([dates[1]]);
    // Another organization's project is not found.
    expectError(await env.svc.call('GET', `/v1/admin/usage/daily?project_id=${p.projectId}`, { key: q.adminKey }), 404, 'not_found');
    expectError(await env.svc.call('GET', '/v1/admin/usage/daily?cursor=bad', { key: q.adminKey }), 400, 'invalid_request');
  });
});
