/**
 * Spending budgets on the gateway (docs/API.md, "Budgets"): a settled call counts its cost,
 * a hold counts as held until it ends, a released hold gives it back; the remaining budget
 * in a header (whole) or a trailer (streamed); the output limit lowered to fit the budget
 * and said so; 402 budget_exceeded; customer-scoped key budgets set on POST and PATCH of
 * the key, shown in the listing and enforced for calls with that key; a project key's
 * budget for one customer (`key_budgets`), enforced for that key's calls for that customer.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective, type MockControls } from '../../src/gateway/mock/controls.js';
import { expectError } from '../support/errors.js';
import { waitFor } from '../helpers.js';
import { expectedCost, MAX_OUTPUT_TOKENS, OPENAI_MODEL, rawPost, sseData, startGatewayEnv, type GatewayEnv } from './support.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env?.close());

const ask = (controls: MockControls) => [{ role: 'user' as const, content: `please say something short ${mockDirective(controls)}` }];

type BudgetState = { limit: number; period: string; spent: number; held: number; remaining: number; resets_at: string | null };

async function setBudget(customer: string, budget: { limit: number; period: string } | null) {
  const r = await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: env.p.projectKey, body: { budget } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

async function budgetOf(customer: string): Promise<BudgetState | null> {
  return (await env.svc.call('GET', `/v1/customers/${customer}`, { key: env.p.projectKey })).body.budget as BudgetState | null;
}

const chat = (customer: string | null, body: Record<string, unknown>, key = env.p.projectKey) =>
  rawPost(env.svc.url, '/v1/chat/completions', { key, headers: customer === null ? {} : { 'x-service-customer': customer }, body: { model: OPENAI_MODEL, ...body } });

describe('customer budget on the gateway', () => {
  it('counts a settled call at its cost and says what is left in a header; no header without a budget', async () => {
    await env.fund('gb1', 1_000_000);
    const plain = await chat('gb1', { max_tokens: 20, messages: ask({ output_tokens: 5 }) });
    expect(plain.status).toBe(200);
    expect(plain.headers['x-service-budget-remaining-credits']).toBeUndefined();

    await setBudget('gb1', { limit: 100_000, period: 'month' });
    const res = await chat('gb1', { max_tokens: 20, messages: ask({ output_tokens: 5 }) });
    expect(res.status).toBe(200);
    const cost = Number(res.headers['x-service-cost-credits']);
    expect(cost).toBe(expectedCost({ input: res.json().usage.prompt_tokens, output: 5 }));
    expect(res.headers['x-service-budget-remaining-credits']).toBe(String(100_000 - cost));
    expect(res.headers['x-service-max-tokens-limited-by']).toBeUndefined();
    expect(await budgetOf('gb1')).toMatchObject({ spent: cost, held: 0, remaining: 100_000 - cost });
  });

  it('sends the remaining budget as a trailer when streamed', async () => {
    await env.fund('gb2', 1_000_000);
    await setBudget('gb2', { limit: 50_000, period: 'day' });
    const res = await chat('gb2', { max_tokens: 20, stream: true, messages: ask({ output_tokens: 3 }) });
    expect(res.status).toBe(200);
    expect(String(res.headers.trailer)).toContain('X-Service-Budget-Remaining-Credits');
    const cost = Number(res.trailers['x-service-cost-credits']);
    expect(cost).toBeGreaterThan(0);
    expect(res.trailers['x-service-budget-remaining-credits']).toBe(String(50_000 - cost));
    expect(sseData(res.text).length).toBeGreaterThan(1);
    expect(await budgetOf('gb2')).toMatchObject({ spent: cost, held: 0 });
  });

  it('lowers the output limit to fit the budget and says so; refuses a client limit that does not fit with 402 budget_exceeded', async () => {
    await env.fund('gb3', 1_000_000);
    await setBudget('gb3', { limit: 3_000, period: 'week' });
    const res = await chat('gb3', { messages: ask({ output_tokens: 4 }) });
    expect(res.status, res.text).toBe(200);
    const maxTokens = Number(res.headers['x-service-max-tokens']);
    expect(maxTokens).toBeLessThan(MAX_OUTPUT_TOKENS);
    expect(maxTokens).toBeGreaterThan(0);
    expect(res.headers['x-service-max-tokens-limited-by']).toBe('budget');
    // The hold fitted the budget: what was reserved is at most the limit.
    expect(Number(res.headers['x-service-reserved-credits'])).toBeLessThanOrEqual(3_000);
    const spent = Number(res.headers['x-service-cost-credits']);

    const refused = await chat('gb3', { max_tokens: 4_000, messages: ask({ output_tokens: 4 }) });
    expectError({ status: refused.status, body: refused.json() }, 402, 'budget_exceeded', {
      message: /budget of 3000 credits this week/,
      fields: { details: expect.objectContaining({ scope: 'customer', budget_credits: 3_000, spent_credits: spent, held_credits: 0 }) },
    });
    expect(refused.json().error.type).toBe('bad_request');
    expect(await budgetOf('gb3')).toMatchObject({ spent, held: 0 });
  });

  it('counts a call in flight as held, then as spent at its cost when it settles', async () => {
    await env.fund('gb5', 1_000_000);
    await setBudget('gb5', { limit: 100_000, period: 'day' });
    const sent = env.mock.requests.length;
    const call = chat('gb5', { max_tokens: 20, messages: ask({ output_tokens: 5, latency_ms: 400 }) });
    await waitFor(() => env.mock.requests.length > sent, 5_000, 'the call to reach the upstream');
    const during = await budgetOf('gb5');
    const res = await call;
    expect(res.status).toBe(200);
    expect(during).toMatchObject({ spent: 0, held: Number(res.headers['x-service-reserved-credits']) });
    expect(during!.held).toBeGreaterThan(0);
    const cost = Number(res.headers['x-service-cost-credits']);
    expect(await budgetOf('gb5')).toMatchObject({ spent: cost, held: 0, remaining: 100_000 - cost });
  });

  it('a released hold (upstream failure) gives its held part back and spends nothing', async () => {
    await env.fund('gb4', 1_000_000);
    await setBudget('gb4', { limit: 100_000, period: 'total' });
    const res = await chat('gb4', { max_tokens: 20, messages: ask({ fail: 500 } as MockControls) });
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(await budgetOf('gb4')).toEqual({ limit: 100_000, period: 'total', spent: 0, held: 0, remaining: 100_000, resets_at: null });
  });
});

describe('key budgets', () => {
  const keysPath = () => `/v1/admin/projects/${env.p.projectId}/keys`;

  it('are set on POST and PATCH of a customer-scoped key, shown in the listing, and enforced for calls with that key', async () => {
    await env.fund('kb1', 1_000_000);
    const created = await env.svc.call('POST', keysPath(), { key: env.p.adminKey, body: { type: 'customer', customer_id: 'kb1', budget: { limit: 40_000, period: 'day' } } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body.budget).toMatchObject({ limit: 40_000, period: 'day', spent: 0, held: 0, remaining: 40_000 });
    const key = created.body.key as string;
    const keyId = created.body.id as string;

    const ok = await chat(null, { max_tokens: 20, messages: ask({ output_tokens: 5 }) }, key);
    expect(ok.status, ok.text).toBe(200);
    const cost = Number(ok.headers['x-service-cost-credits']);
    expect(ok.headers['x-service-budget-remaining-credits']).toBe(String(40_000 - cost));
    const listed = await env.svc.call('GET', `${keysPath()}?limit=100`, { key: env.p.adminKey });
    const entry = (listed.body.data as { id: string; budget: BudgetState | null }[]).find((k) => k.id === keyId)!;
    expect(entry.budget).toMatchObject({ limit: 40_000, spent: cost, held: 0, remaining: 40_000 - cost });
    // The project key's calls for the same customer do not count in the key's budget.
    expect((await chat('kb1', { max_tokens: 20, messages: ask({ output_tokens: 5 }) })).status).toBe(200);

    // Lowered below what it spent: the next call is refused, naming the key's budget.
    const patched = await env.svc.call('PATCH', `${keysPath()}/${keyId}`, { key: env.p.adminKey, body: { budget: { limit: cost + 10, period: 'day' } } });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect(patched.body.budget).toMatchObject({ limit: cost + 10, spent: cost, remaining: 10 });
    const refused = await chat(null, { max_tokens: 20, messages: ask({ output_tokens: 5 }) }, key);
    expectError({ status: refused.status, body: refused.json() }, 402, 'budget_exceeded', {
      message: /this key's budget/,
      fields: { details: expect.objectContaining({ scope: 'key', budget_credits: cost + 10, spent_credits: cost }) },
    });

    const cleared = await env.svc.call('PATCH', `${keysPath()}/${keyId}`, { key: env.p.adminKey, body: { budget: null } });
    expect(cleared.body.budget).toBeNull();
    expect((await chat(null, { max_tokens: 20, messages: ask({ output_tokens: 5 }) }, key)).status).toBe(200);
  });

  it('are refused on a key that is not customer-scoped, with a clear validation error, changing nothing', async () => {
    const bad = await env.svc.call('POST', keysPath(), { key: env.p.adminKey, body: { type: 'project', budget: { limit: 5, period: 'day' } } });
    expectError(bad, 400, 'invalid_request', { param: 'budget', message: /only for customer-scoped keys/ });
    const listed = await env.svc.call('GET', `${keysPath()}?limit=100`, { key: env.p.adminKey });
    const project = (listed.body.data as { id: string; type: string; budget: unknown }[]).find((k) => k.type === 'project')!;
    expect(project.budget).toBeNull();
    const patch = await env.svc.call('PATCH', `${keysPath()}/${project.id}`, { key: env.p.adminKey, body: { budget: { limit: 5, period: 'day' } } });
    expectError(patch, 400, 'invalid_request', { param: 'budget' });
    const unknown = await env.svc.call('PATCH', `${keysPath()}/key_nope`, { key: env.p.adminKey, body: { budget: null } });
    expectError(unknown, 404, 'not_found');
    const invalid = await env.svc.call('PATCH', `${keysPath()}/${project.id}`, { key: env.p.adminKey, body: { budget: { limit: -1, period: 'day' } } });
    expectError(invalid, 400, 'invalid_request');
  });
});

describe('project key budgets for one customer', () => {
  it("are enforced for the gateway calls that project key makes for that customer; the header says the tightest; other keys and customers are not limited", async () => {
    // The free plan allows two keys per project; this test makes more.
    expect((await env.svc.call('PUT', '/v1/admin/organization/plan', { key: env.p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
    const made = await env.svc.call('POST', `/v1/admin/projects/${env.p.projectId}/keys`, { key: env.p.adminKey, body: { type: 'project' } });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const key = made.body.key as string;
    const keyId = made.body.id as string;
    await env.fund('pkb1', 1_000_000);
    await env.fund('pkb2', 1_000_000);
    const set = await env.svc.call('PATCH', '/v1/customers/pkb1', {
      key: env.p.projectKey, body: { budget: { limit: 500_000, period: 'month' }, key_budgets: { [keyId]: { limit: 40_000, period: 'day' } } },
    });
    expect(set.status, JSON.stringify(set.body)).toBe(200);

    const ok = await chat('pkb1', { max_tokens: 20, messages: ask({ output_tokens: 5 }) }, key);
    expect(ok.status, ok.text).toBe(200);
    const cost = Number(ok.headers['x-service-cost-credits']);
    // Under both budgets: what is left is the key's, the smaller.
    expect(ok.headers['x-service-budget-remaining-credits']).toBe(String(40_000 - cost));
    const view = (await env.svc.call('GET', '/v1/customers/pkb1', { key: env.p.projectKey })).body;
    expect(view.key_budgets[keyId]).toMatchObject({ limit: 40_000, spent: cost, held: 0, remaining: 40_000 - cost });
    expect(view.budget).toMatchObject({ spent: cost });

    // Lowered below what it spent: the key's next call for pkb1 is refused, naming the key.
    expect((await env.svc.call('PATCH', '/v1/customers/pkb1', { key: env.p.projectKey, body: { key_budgets: { [keyId]: { limit: cost + 10, period: 'day' } } } })).status).toBe(200);
    const refused = await chat('pkb1', { max_tokens: 20, messages: ask({ output_tokens: 5 }) }, key);
    expectError({ status: refused.status, body: refused.json() }, 402, 'budget_exceeded', {
      message: /this key's budget/,
      fields: { details: expect.objectContaining({ scope: 'key', key_id: keyId, budget_credits: cost + 10, spent_credits: cost }) },
    });
    // The project's other key for pkb1, and this key for another customer, are not limited by it.
    const other = await chat('pkb1', { max_tokens: 20, messages: ask({ output_tokens: 5 }) });
    expect(other.status).toBe(200);
    expect(other.headers['x-service-budget-remaining-credits']).toBe(String(500_000 - cost - Number(other.headers['x-service-cost-credits'])));
    const elsewhere = await chat('pkb2', { max_tokens: 20, messages: ask({ output_tokens: 5 }) }, key);
    expect(elsewhere.status).toBe(200);
    expect(elsewhere.headers['x-service-budget-remaining-credits']).toBeUndefined();
  });
});
