/**
 * The gateway without streaming, driven by the official clients: what the client gets,
 * what it is billed (docs/API.md, "Gateway": the hold, the cost rule) and how the bill
 * shows in headers, ledger, usage records and receipts ("GET /v1/usage", "GET
 * /v1/billing/receipts/{transaction_id}"); a faithful relay both ways; the hold
 * and the output limit; who is billed (customer-scoped key, X-Service-Wallet, Variant A);
 * and GET /v1/models.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Json } from '../helpers.js';
import { countInputTokens, mockDirective, mockOutputText, type MockControls } from '../../src/gateway/mock/controls.js';
import { expectError } from '../support/errors.js';
import {
  ANTHROPIC_MODEL,
  ANTHROPIC_UPSTREAM_MODEL,
  centsOf,
  expectedCost,
  MAX_OUTPUT_TOKENS,
  OPENAI_MODEL,
  OPENAI_UPSTREAM_MODEL,
  PRICES,
  rawPost,
  startGatewayEnv,
  usdOf,
  type Balance,
  type GatewayEnv,
} from './support.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env?.close());

const ask = (controls: MockControls, words = 'please say something short') => [
  { role: 'user' as const, content: `${words} ${mockDirective(controls)}` },
];

/** The mock's requests since `from` (an index into mock.requests). */
const sentSince = (from: number) => env.mock.requests.slice(from);

/** Checks every billing header of a settled call against its cost and the wallet after it. */
async function expectBillingHeaders(h: Headers, customer: string, wallet: string, cost: number) {
  expect(h.get('x-service-cost-credits')).toBe(String(cost));
  expect(h.get('x-service-cost-cents')).toBe(centsOf(cost));
  expect(h.get('x-service-cost-usd')).toBe(usdOf(cost));
  const available = (await env.balance(customer)).wallets[wallet]!.available;
  expect(h.get('x-service-balance-credits')).toBe(String(available));
  expect(h.get('x-service-balance-usd')).toBe(usdOf(available));
  expect(h.get('x-service-transaction-id')).toMatch(/^\S+$/);
}

async function gatewayEntry(customer: string, transactionId: string) {
  const entries = (await env.ledger(customer)).filter((e) => e.transaction_id === transactionId);
  expect(entries).toHaveLength(1);
  return entries[0]!;
}

describe('OpenAI chat completions', () => {
  it('relays the answer and bills input = prompt - cached, output and cache reads, rounded up once', async () => {
    await env.fund('oa1', 1_000_000);
    const messages = ask({ output_tokens: 30, cache_read_tokens: 3 });
    const { data, response } = await env
      .openai({ customer: 'oa1', headers: { 'X-Service-Trace-Id': 'trace-oa1' } })
      .chat.completions.create({ model: OPENAI_MODEL, messages })
      .withResponse();

    expect(data.choices[0]!.message.content).toBe(mockOutputText(30));
    expect(data.choices[0]!.finish_reason).toBe('stop');
    const input = countInputTokens('openai', { messages });
    expect(data.usage).toMatchObject({ prompt_tokens: input + 3, completion_tokens: 30, prompt_tokens_details: { cached_tokens: 3 } });

    const cost = expectedCost({ input: data.usage!.prompt_tokens - 3, output: 30, cacheRead: 3 });
    // 7 x 1.5 + 30 x 2.5 + 3 x 0.3 = 86.4: the fraction must round up, once.
    expect(cost).toBe(87);
    await expectBillingHeaders(response.headers, 'oa1', 'credits', cost);
    expect(response.headers.get('x-service-trace-id')).toBe('trace-oa1');
    expect(response.headers.get('x-service-max-tokens')).toBe(String(MAX_OUTPUT_TOKENS));
    const reserved = Number(response.headers.get('x-service-reserved-credits'));
    expect(reserved).toBeGreaterThanOrEqual(cost);

    const txid = response.headers.get('x-service-transaction-id')!;
    const entry = await gatewayEntry('oa1', txid);
    expect(entry).toMatchObject({ type: 'GATEWAY', amount: cost, wallet: 'credits', description: OPENAI_MODEL });
    expect(entry.details).toEqual([{ account_id: expect.any(String), credit_type: 'credits', amount: cost }]);
    expect(await env.balance('oa1')).toMatchObject({ total: 1_000_000, used: cost, frozen: 0, available: 1_000_000 - cost });
  });

  it('bills every kind at its price: cache writes reported by the upstream cost the cache-write price', async () => {
    await env.fund('an1', 1_000_000);
    const messages = ask({ output_tokens: 30, cache_read_tokens: 3, cache_write_tokens: 2 });
    const { data, response } = await env
      .anthropic({ customer: 'an1' })
      .messages.create({ model: ANTHROPIC_MODEL, max_tokens: 100, messages })
      .withResponse();

    expect(data.content).toEqual([{ type: 'text', text: mockOutputText(30) }]);
    const input = countInputTokens('anthropic', { messages });
    expect(data.usage).toMatchObject({ input_tokens: input, output_tokens: 30, cache_read_input_tokens: 3, cache_creation_input_tokens: 2 });
    const cost = expectedCost({ input, output: 30, cacheRead: 3, cacheWrite: 2 });
    // 7 x 1.5 + 30 x 2.5 + 3 x 0.3 + 2 x 3.75 = 93.9 -> 94; rounding each kind would give 95.
    expect(cost).toBe(94);
    await expectBillingHeaders(response.headers, 'an1', 'credits', cost);
    expect(response.headers.get('x-service-max-tokens')).toBe('100');
    const entry = await gatewayEntry('an1', response.headers.get('x-service-transaction-id')!);
    expect(entry).toMatchObject({ type: 'GATEWAY', amount: cost, description: ANTHROPIC_MODEL });
  });
});

describe('a faithful relay', () => {
  it('passes unknown request and response fields, and gives the upstream its model name and key', async () => {
    await env.fund('fr1', 1_000_000);
    const from = env.mock.requests.length;
    const extra = { user: 'end-user-7', x_vendor_option: { nested: [1, 'two'] }, logit_bias: { '50256': -100 }, seed: 42 };
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'fr1' },
      body: { model: OPENAI_MODEL, messages: ask({ output_tokens: 4 }), ...extra },
    });
    expect(res.status).toBe(200);
    const [sent] = sentSince(from);
    expect(sent!.path).toBe('/v1/chat/completions');
    expect(sent!.headers.authorization).toBe(`Bearer ${env.upstreamKey}`);
    expect(sent!.body).toMatchObject({ ...extra, model: OPENAI_UPSTREAM_MODEL, messages: ask({ output_tokens: 4 }) });
    // Fields of the answer the gateway does not know reach the client as the upstream sent them.
    const body = res.json();
    expect(body).toMatchObject({ model: OPENAI_UPSTREAM_MODEL, system_fingerprint: 'fp_mock0a1b2c3', service_tier: 'default' });
    expect(body.usage.completion_tokens_details).toEqual({ reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 });
  });

  it('sends Anthropic upstreams x-api-key and the client anthropic-version, 2023-06-01 when it sent none', async () => {
    await env.fund('fr2', 1_000_000);
    const from = env.mock.requests.length;
    let clientVersion: string | null = null;
    const recording: typeof fetch = (url, init) => {
      clientVersion = new Headers(init?.headers).get('anthropic-version');
      return fetch(url, init);
    };
    const viaSdk = await env
      .anthropic({ customer: 'fr2', fetch: recording })
      .messages.create({ model: ANTHROPIC_MODEL, max_tokens: 10, messages: ask({ output_tokens: 2 }), metadata: { user_id: 'u-9' } })
      .withResponse();
    expect(viaSdk.response.status).toBe(200);
    const raw = await rawPost(env.svc.url, '/v1/messages', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'fr2' },
      body: { model: ANTHROPIC_MODEL, max_tokens: 10, messages: ask({ output_tokens: 2 }), top_k: 3, x_beta: true },
    });
    expect(raw.status).toBe(200);
    expect(raw.json()).toMatchObject({ stop_details: null, diagnostics: null, usage: { service_tier: 'standard', cache_creation: { ephemeral_1h_input_tokens: 0 } } });
    const [a, b] = sentSince(from);
    expect(a!.headers['x-api-key']).toBe(env.upstreamKey);
    expect(clientVersion).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    expect(a!.headers['anthropic-version']).toBe(clientVersion);
    expect(a!.body).toMatchObject({ model: ANTHROPIC_UPSTREAM_MODEL, max_tokens: 10, metadata: { user_id: 'u-9' } });
    expect(b!.headers['anthropic-version']).toBe('2023-06-01');
    expect(b!.body).toMatchObject({ model: ANTHROPIC_UPSTREAM_MODEL, top_k: 3, x_beta: true });
  });
});

describe('the hold and the output limit', () => {
  it("sends the client's own limit unchanged", async () => {
    await env.fund('h1', 1_000_000);
    const from = env.mock.requests.length;
    const { data, response } = await env
      .openai({ customer: 'h1' })
      .chat.completions.create({ model: OPENAI_MODEL, max_tokens: 20, messages: ask({ output_tokens: 50 }) })
      .withResponse();
    expect(data.usage!.completion_tokens).toBe(20);
    expect(data.choices[0]!.finish_reason).toBe('length');
    expect(response.headers.get('x-service-max-tokens')).toBe('20');
    const sent = sentSince(from)[0]!.body as Record<string, unknown>;
    expect(sent.max_tokens).toBe(20);
    expect(sent).not.toHaveProperty('max_completion_tokens');
  });

  it("without a limit sends the model's max_output_tokens when the wallet affords it", async () => {
    await env.fund('h2', 1_000_000);
    const from = env.mock.requests.length;
    const res = await rawPost(env.svc.url, '/v1/messages', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'h2' },
      body: { model: ANTHROPIC_MODEL, messages: ask({ output_tokens: 3 }) },
    });
    expect(res.status).toBe(200);
    expect(res.headers['x-service-max-tokens']).toBe(String(MAX_OUTPUT_TOKENS));
    expect((sentSince(from)[0]!.body as Record<string, unknown>).max_tokens).toBe(MAX_OUTPUT_TOKENS);
  });

  it('lowers the default limit to what the wallet can afford, and the call settles within it', async () => {
    const wallet = 900;
    await env.fund('h3', wallet);
    const from = env.mock.requests.length;
    const messages = ask({ output_tokens: 1_000 });
    const { data, response } = await env.openai({ customer: 'h3' }).chat.completions.create({ model: OPENAI_MODEL, messages }).withResponse();
    const limit = Number(response.headers.get('x-service-max-tokens'));
    const reserved = Number(response.headers.get('x-service-reserved-credits'));
    expect(limit).toBeGreaterThan(0);
    expect(limit).toBeLessThan(MAX_OUTPUT_TOKENS);
    expect((sentSince(from)[0]!.body as Record<string, unknown>).max_completion_tokens).toBe(limit);
    // Affordable, and as high as affordable: one more token would not fit in the wallet.
    expect(reserved).toBeLessThanOrEqual(wallet);
    const perToken = (n: number) => Math.ceil((n * PRICES.output) / 1e6);
    expect(wallet - reserved).toBeLessThan(perToken(limit + 1) - perToken(limit));
    expect(data.usage!.completion_tokens).toBe(limit);
    const cost = expectedCost({ input: countInputTokens('openai', { messages }), output: limit });
    expect(response.headers.get('x-service-cost-credits')).toBe(String(cost));
    expect(await env.balance('h3')).toMatchObject({ used: cost, frozen: 0, available: wallet - cost });
  });

  it('answers 402 insufficient_balance when not even the input bound or the client limit fits, and changes nothing', async () => {
    await env.fund('h4', 10);
    await env.fund('h5', 900);
    const before = { h4: await env.balance('h4'), h5: await env.balance('h5'), ops: await env.ops(), sent: env.mock.requests.length };
    const poor = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'h4' },
      body: { model: OPENAI_MODEL, messages: ask({ output_tokens: 1 }) },
    });
    expectError(poor, 402, 'insufficient_balance', {
      message: /^insufficient balance: this call needs a hold of at least \d+ credits .* and wallet credits has 10 credits available\.$/,
      fields: { details: { wallet: 'credits', available_credits: 10 } },
    });
    // The client's own limit is never lowered: 4,000 output tokens cost 10,000 credits.
    const greedy = await rawPost(env.svc.url, '/v1/messages', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'h5' },
      body: { model: ANTHROPIC_MODEL, max_tokens: 4_000, messages: ask({ output_tokens: 1 }) },
    });
    expectError(greedy, 402, 'insufficient_balance', { message: / Lower max_tokens to \d+ or less to fit\.$/ });
    expect(await env.balance('h4')).toEqual({ ...before.h4, as_of: expect.any(String) });
    expect(await env.balance('h5')).toEqual({ ...before.h5, as_of: expect.any(String) });
    expect((await env.ledger('h4')).map((e) => e.type)).toEqual(['DEPOSIT']);
    expect((await env.ledger('h5')).map((e) => e.type)).toEqual(['DEPOSIT']);
    expect(await env.ops()).toBe(before.ops);
    expect(env.mock.requests.length).toBe(before.sent);
  });
});

describe('usage records and receipts', () => {
  const recordFields = [
    'id', 'transaction_id', 'trace_id', 'customer_id', 'wallet', 'model', 'endpoint', 'stream', 'status', 'input_tokens', 'output_tokens',
    'cache_read_tokens', 'cache_write_tokens', 'usage_estimated', 'cost_credits', 'cost_usd', 'uncovered_credits', 'latency_ms', 'created_at', 'upstream', 'attempts', 'hold_exhausted',
  ].sort();

  it('reads a receipt from the outbox before the workers persist it, and the same receipt after', async () => {
    await env.fund('r1', 1_000_000);
    await env.svc.drained();
    const persist = env.svc.workers!.persist;
    await persist.stop();
    let txid: string;
    let pending: Record<string, unknown>;
    const messages = ask({ output_tokens: 7, cache_read_tokens: 1, cache_write_tokens: 4 });
    try {
      const { response } = await env
        .anthropic({ customer: 'r1', headers: { 'X-Service-Trace-Id': 'trace-r1' } })
        .messages.create({ model: ANTHROPIC_MODEL, max_tokens: 64, messages })
        .withResponse();
      txid = response.headers.get('x-service-transaction-id')!;
      const cost = Number(response.headers.get('x-service-cost-credits'));
      const reserved = Number(response.headers.get('x-service-reserved-credits'));
      const input = countInputTokens('anthropic', { messages });
      expect(cost).toBe(expectedCost({ input, output: 7, cacheRead: 1, cacheWrite: 4 }));
      expect(await env.svc.rt.usageQueries.findReceipt(env.p.projectId, txid)).toBeNull();

      const r = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
      expect(r.status).toBe(200);
      pending = r.body;
      const { prices, reserved_credits, returned_credits, details, balance_after_credits, ...record } = r.body;
      expect(Object.keys(record).sort()).toEqual(recordFields);
      expect(record).toMatchObject({
        transaction_id: txid, trace_id: 'trace-r1', customer_id: 'r1', wallet: 'credits', model: ANTHROPIC_MODEL, endpoint: 'messages',
        stream: false, status: 'settled', input_tokens: input, output_tokens: 7, cache_read_tokens: 1, cache_write_tokens: 4,
        usage_estimated: false, cost_credits: cost, cost_usd: usdOf(cost), uncovered_credits: 0,
      });
      expect(record.latency_ms).toBeGreaterThanOrEqual(0);
      expect(Math.abs(Date.parse(record.created_at) - Date.now())).toBeLessThan(60_000);
      expect(prices).toEqual({
        input_price_per_million_credits: PRICES.input, output_price_per_million_credits: PRICES.output,
        cache_read_price_per_million_credits: PRICES.cacheRead, cache_write_price_per_million_credits: PRICES.cacheWrite,
      });
      expect(reserved_credits).toBe(reserved);
      expect(returned_credits).toBe(reserved - cost);
      expect(details).toEqual([{ account_id: expect.any(String), credit_type: 'credits', amount: cost }]);
      expect(balance_after_credits).toBe(Number(response.headers.get('x-service-balance-credits')));
      expect(balance_after_credits).toBe(1_000_000 - cost);
    } finally {
      persist.start();
    }
    await env.svc.drained();
    expect(await env.svc.rt.usageQueries.findReceipt(env.p.projectId, txid)).not.toBeNull();
    const stored = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect(stored.status).toBe(200);
    expect(stored.body).toEqual(pending);
    expect((await env.svc.call('GET', '/v1/billing/receipts/gw_unknown', { key: env.p.projectKey })).status).toBe(404);
  });

  it('lists usage records filtered by trace, customer, model and time, newest first, in cursor pages', async () => {
    await env.fund('u1', 1_000_000);
    await env.fund('u2', 1_000_000);
    const start = new Date(Date.now() - 1).toISOString();
    const txids: string[] = [];
    const costs: number[] = [];
    for (const [i, customer] of ['u1', 'u1', 'u2'].entries()) {
      const { response } = await env
        .openai({ customer, headers: { 'X-Service-Trace-Id': `trace-u-${i}` } })
        .chat.completions.create({ model: OPENAI_MODEL, messages: ask({ output_tokens: 2 + i }) })
        .withResponse();
      txids.push(response.headers.get('x-service-transaction-id')!);
      costs.push(Number(response.headers.get('x-service-cost-credits')));
    }
    const { response: last } = await env
      .anthropic({ customer: 'u1' })
      .messages.create({ model: ANTHROPIC_MODEL, max_tokens: 9, messages: ask({ output_tokens: 2 }) })
      .withResponse();
    txids.push(last.headers.get('x-service-transaction-id')!);
    const end = new Date(Date.now() + 1).toISOString();
    await env.svc.drained();
    const usage = async (q: string) => {
      const r = await env.svc.call('GET', `/v1/usage?${q}`, { key: env.p.projectKey });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body as { object: string; data: Record<string, Json>[]; has_more: boolean; next_cursor: string | null };
    };

    const byTrace = await usage('trace_id=trace-u-1');
    expect(byTrace).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(byTrace.data).toHaveLength(1);
    expect(Object.keys(byTrace.data[0]!).sort()).toEqual(recordFields);
    expect(byTrace.data[0]).toMatchObject({
      transaction_id: txids[1], trace_id: 'trace-u-1', customer_id: 'u1', model: OPENAI_MODEL, endpoint: 'chat.completions',
      stream: false, status: 'settled', output_tokens: 3, usage_estimated: false, cost_credits: costs[1], cost_usd: usdOf(costs[1]!),
    });

    const u1 = await usage('customer_id=u1');
    expect(u1.data.map((r) => r.transaction_id)).toEqual([txids[3], txids[1], txids[0]]);
    const u1Openai = await usage(`customer_id=u1&model=${encodeURIComponent(OPENAI_MODEL)}`);
    expect(u1Openai.data.map((r) => r.transaction_id)).toEqual([txids[1], txids[0]]);
    const anthropicOnly = await usage(`model=${encodeURIComponent(ANTHROPIC_MODEL)}&from=${start}`);
    expect(anthropicOnly.data.map((r) => r.transaction_id)).toEqual([txids[3]]);

    const window = await usage(`from=${start}&to=${end}`);
    expect(window.data.map((r) => r.transaction_id)).toEqual([...txids].reverse());
    expect((await usage(`to=${start}&customer_id=u2`)).data).toEqual([]);
    expect((await usage(`from=${end}`)).data).toEqual([]);

    const first = await usage(`from=${start}&to=${end}&limit=3`);
    expect(first.has_more).toBe(true);
    expect(first.next_cursor).toEqual(expect.any(String));
    const second = await usage(`from=${start}&to=${end}&limit=3&cursor=${first.next_cursor}`);
    expect(second).toMatchObject({ has_more: false, next_cursor: null });
    expect([...first.data, ...second.data]).toEqual(window.data);
  });
});

describe('who is billed', () => {
  it('a customer-scoped key bills its own customer without X-Service-Customer', async () => {
    await env.fund('ck1', 50_000);
    const key = await env.p.customerKey('ck1');
    const { data, response } = await env
      .openai({ key })
      .chat.completions.create({ model: OPENAI_MODEL, messages: ask({ output_tokens: 5 }) })
      .withResponse();
    const cost = expectedCost({ input: data.usage!.prompt_tokens, output: 5 });
    await expectBillingHeaders(response.headers, 'ck1', 'credits', cost);
    expect((await gatewayEntry('ck1', response.headers.get('x-service-transaction-id')!)).amount).toBe(cost);
    // Its own usage and receipts are readable with the same key.
    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${response.headers.get('x-service-transaction-id')}`, { key });
    expect(receipt.body).toMatchObject({ customer_id: 'ck1', cost_credits: cost });
    // Another customer's calls do not exist for it.
    await env.fund('ck2', 50_000);
    const { response: other } = await env.openai({ customer: 'ck2' }).chat.completions.create({ model: OPENAI_MODEL, messages: ask({}) }).withResponse();
    expect((await env.svc.call('GET', `/v1/billing/receipts/${other.headers.get('x-service-transaction-id')}`, { key })).status).toBe(404);
    expectError(await env.svc.call('GET', '/v1/usage?customer_id=ck2', { key }), 404, 'customer_not_found');
    await env.svc.drained();
    const own = await env.svc.call('GET', '/v1/usage', { key });
    expect(own.body.data.map((r: { customer_id: string }) => r.customer_id)).toEqual(['ck1']);
    expect((await env.svc.call('GET', `/v1/billing/receipts/${other.headers.get('x-service-transaction-id')}`, { key })).status).toBe(404);
  });

  it('a customer-scoped key whose X-Service-Customer names another customer is refused, and neither is billed', async () => {
    await env.fund('ck3', 50_000);
    await env.fund('ck4', 50_000);
    const key = await env.p.customerKey('ck3');
    const balance = async (customer: string) => {
      const { as_of: _asOf, ...b } = (await env.balance(customer)) as Balance & { as_of?: string };
      return b;
    };
    const before = { ck3: await balance('ck3'), ck4: await balance('ck4'), ops: await env.ops() };
    const from = env.mock.requests.length;
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key, headers: { 'x-service-customer': 'ck4' }, body: { model: OPENAI_MODEL, messages: ask({ output_tokens: 5 }) },
    });
    expectError({ status: res.status, text: res.text }, 403, 'permission_denied', { param: 'X-Service-Customer' });
    expect(sentSince(from)).toEqual([]);
    await env.svc.drained();
    expect({ ck3: await balance('ck3'), ck4: await balance('ck4'), ops: await env.ops() }).toEqual(before);
    expect([...(await env.ledger('ck3', 'GATEWAY')), ...(await env.ledger('ck4', 'GATEWAY'))]).toEqual([]);
    // The header naming the key's own customer is fine: billed to it.
    const own = await rawPost(env.svc.url, '/v1/chat/completions', {
      key, headers: { 'x-service-customer': 'ck3' }, body: { model: OPENAI_MODEL, messages: ask({ output_tokens: 5 }) },
    });
    expect(own.status, own.text).toBe(200);
    expect((await balance('ck3')).used).toBeGreaterThan(0);
    expect(await balance('ck4')).toEqual(before.ck4);
  });

  it('X-Service-Wallet bills that wallet, and the balance headers are that wallet', async () => {
    await env.fund('w1', 40_000);
    await env.fund('w1', 7_000, { wallet: 'promo' });
    const { data, response } = await env
      .anthropic({ customer: 'w1', headers: { 'X-Service-Wallet': 'promo' } })
      .messages.create({ model: ANTHROPIC_MODEL, max_tokens: 50, messages: ask({ output_tokens: 6 }) })
      .withResponse();
    const cost = expectedCost({ input: data.usage.input_tokens, output: 6 });
    await expectBillingHeaders(response.headers, 'w1', 'promo', cost);
    expect(response.headers.get('x-service-balance-credits')).toBe(String(7_000 - cost));
    const b = await env.balance('w1');
    expect(b.wallets.promo).toEqual({ total: 7_000, used: cost, frozen: 0, available: 7_000 - cost });
    expect(b.wallets.credits).toEqual({ total: 40_000, used: 0, frozen: 0, available: 40_000 });
    const entry = await gatewayEntry('w1', response.headers.get('x-service-transaction-id')!);
    expect(entry).toMatchObject({ wallet: 'promo', amount: cost });
    expect(entry.details).toEqual([{ account_id: expect.any(String), credit_type: 'promo', amount: cost }]);
  });

  it("a Variant A project bills the 'default' wallet", async () => {
    const pa = await env.svc.project('A');
    await env.putModel(OPENAI_MODEL, { provider: 'openai' }, pa);
    const dep = await env.svc.call('POST', '/v1/customers/deposit', { key: pa.projectKey, body: { customer_id: 'va1', amount_usd: 0.05 } });
    expect([dep.status, dep.body.credit_type, dep.body.added_amount]).toEqual([200, 'default', 50_000]);
    const { data, response } = await env
      .openai({ key: pa.projectKey, customer: 'va1' })
      .chat.completions.create({ model: OPENAI_MODEL, messages: ask({ output_tokens: 8 }) })
      .withResponse();
    const cost = expectedCost({ input: data.usage!.prompt_tokens, output: 8 });
    expect(response.headers.get('x-service-cost-credits')).toBe(String(cost));
    expect(response.headers.get('x-service-cost-cents')).toBe(centsOf(cost));
    expect(response.headers.get('x-service-balance-credits')).toBe(String(50_000 - cost));
    const b = await env.balance('va1', pa);
    expect(b.wallets.default).toEqual({ total: 50_000, used: cost, frozen: 0, available: 50_000 - cost });
    expect((await env.ledger('va1', 'GATEWAY', pa)).map((e) => [e.wallet, e.amount])).toEqual([['default', cost]]);
  });
});

describe('GET /v1/models', () => {
  it('lists the active models with their prices, streaming support, and a key whitelist; no customer needed', async () => {
    const q = await env.svc.project('B');
    await env.putModel('openai/gpt-listed', { provider: 'openai', display_name: 'Listed', supports_streaming: false, cache_write_price_per_million_credits: 0 }, q);
    await env.putModel('claude-listed', { provider: 'anthropic', upstream_api_key: null, display_name: null }, q);
    await env.putModel('gpt-retired', { provider: 'openai', active: false }, q);

    const all = await env.svc.call('GET', '/v1/models', { key: q.projectKey });
    expect(all.status).toBe(200);
    expect(all.body.object).toBe('list');
    expect(all.body.data.map((m: { id: string }) => m.id).sort()).toEqual(['claude-listed', 'openai/gpt-listed']);
    const listed = all.body.data.find((m: { id: string }) => m.id === 'openai/gpt-listed');
    expect(listed).toEqual({
      id: 'openai/gpt-listed',
      object: 'model',
      created: expect.any(Number),
      active: true,
      owned_by: 'openai',
      wire_format: 'chat_completions',
      display_name: 'Listed',
      description: 'relayed to the mock upstream',
      context_window: 200_000,
      max_output_tokens: MAX_OUTPUT_TOKENS,
      input_price_per_million_credits: PRICES.input,
      input_price_per_million_usd: 1.5,
      output_price_per_million_credits: PRICES.output,
      output_price_per_million_usd: 2.5,
      cache_read_price_per_million_credits: PRICES.cacheRead,
      cache_read_price_per_million_usd: 0.3,
      cache_write_price_per_million_credits: 0,
      cache_write_price_per_million_usd: 0,
      price_catalogue: null,
      price_sources: { input: 'override', output: 'override', cache_read: 'override', cache_write: 'override' },
      supports_streaming: false,
      image_token_bound: 4_784,
      file_token_bound: 778_400,
    });
    for (const m of all.body.data) {
      for (const kind of ['input', 'output', 'cache_read', 'cache_write']) {
        expect(Number.isInteger(m[`${kind}_price_per_million_credits`])).toBe(true);
        expect(typeof m[`${kind}_price_per_million_usd`]).toBe('number');
      }
      // The upstream and its key stay private.
      expect(m).not.toHaveProperty('upstream_base_url');
      expect(m).not.toHaveProperty('has_upstream_key');
    }
    expect(all.body.data.find((m: { id: string }) => m.id === 'claude-listed')).toMatchObject({ supports_streaming: true, owned_by: 'anthropic', wire_format: 'messages' });

    const whitelisted = await q.customerKey('nobody-yet', { allowedModels: ['claude-listed', 'gpt-retired'] });
    const seen = await env.svc.call('GET', '/v1/models', { key: whitelisted });
    expect(seen.status).toBe(200);
    expect(seen.body.data.map((m: { id: string }) => m.id)).toEqual(['claude-listed']);
    const sdkList = await env.openai({ key: q.projectKey }).models.list();
    expect(sdkList.data.map((m) => m.id).sort()).toEqual(['claude-listed', 'openai/gpt-listed']);
  });
});
