/**
 * POST /v1/embeddings (billed per input token at the model's input price: the hold of the
 * input's bound, the settlement of `usage.prompt_tokens`, the billing headers, ledger entry,
 * receipt and plan operation) and POST /v1/messages/count_tokens (relayed, never billed),
 * driven by the official clients against the mock upstream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APIError } from 'openai';
import { countInputTokens, mockDirective } from '../../src/gateway/mock/controls.js';
import { embedding_dimensions_default, mockVector } from '../../src/gateway/mock/embeddings.js';
import { expectError } from '../support/errors.js';
import { ANTHROPIC_MODEL, ANTHROPIC_UPSTREAM_MODEL, centsOf, expectedCost, OPENAI_MODEL, PRICES, rawPost, startGatewayEnv, usdOf, type Balance, type GatewayEnv } from './support.js';

let env: GatewayEnv;
/** An embedding model: an OpenAI-format model whose output price is 0. */
const EMBED_MODEL = 'embed-test';
const EMBED_PRICES = { input: PRICES.input, output: 0, cacheRead: 0, cacheWrite: 0 };

beforeAll(async () => {
  env = await startGatewayEnv();
  await env.putModel(EMBED_MODEL, {
    provider: 'openai',
    upstream_model: 'text-embedding-upstream',
    output_price_per_million_credits: 0,
    cache_read_price_per_million_credits: 0,
    cache_write_price_per_million_credits: 0,
  });
});
afterAll(() => env?.close());

/** What the customer's wallets and ledger and the plan's operations say now. */
async function moneyOf(customer: string) {
  const { as_of: _asOf, ...balance } = (await env.balance(customer)) as Balance & { as_of?: string };
  return { balance, ledger: await env.ledger(customer), ops: await env.ops() };
}

describe('POST /v1/embeddings', () => {
  it('bills the input tokens at the input price, rounded up once, with headers, ledger entry, receipt and plan operation', async () => {
    await env.fund('e1', 1_000_000);
    const opsBefore = await env.ops();
    const input = 'the quick brown fox jumps over the lazy dog';
    // The SDK asks base64 by default and decodes it into floats.
    const { data, response } = await env
      .openai({ customer: 'e1', headers: { 'X-Service-Trace-Id': 'trace-e1' } })
      .embeddings.create({ model: EMBED_MODEL, input })
      .withResponse();
    expect(data.usage).toEqual({ prompt_tokens: 9, total_tokens: 9 });
    expect(data.data).toHaveLength(1);
    expect(Array.from(data.data[0]!.embedding)).toEqual(mockVector(input, embedding_dimensions_default));

    const cost = expectedCost({ input: 9, output: 0 }, EMBED_PRICES);
    // 9 x 1.5 = 13.5: the fraction rounds up.
    expect(cost).toBe(14);
    const h = response.headers;
    expect(h.get('x-service-cost-credits')).toBe(String(cost));
    expect(h.get('x-service-cost-cents')).toBe(centsOf(cost));
    expect(h.get('x-service-cost-usd')).toBe(usdOf(cost));
    expect(h.get('x-service-balance-credits')).toBe(String(1_000_000 - cost));
    expect(h.get('x-service-balance-usd')).toBe(usdOf(1_000_000 - cost));
    expect(h.get('x-service-trace-id')).toBe('trace-e1');
    expect(h.get('x-service-max-tokens')).toBeNull();
    const reserved = Number(h.get('x-service-reserved-credits'));
    expect(reserved).toBeGreaterThanOrEqual(cost);

    const txid = h.get('x-service-transaction-id')!;
    const entries = (await env.ledger('e1')).filter((e) => e.transaction_id === txid);
    expect(entries).toEqual([expect.objectContaining({ type: 'GATEWAY', amount: cost, wallet: 'credits', description: EMBED_MODEL })]);
    expect(await env.balance('e1')).toMatchObject({ total: 1_000_000, used: cost, frozen: 0, available: 1_000_000 - cost });
    await expect.poll(() => env.ops()).toBe(opsBefore + 1);

    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect(receipt.status).toBe(200);
    expect(receipt.body).toMatchObject({
      transaction_id: txid, trace_id: 'trace-e1', customer_id: 'e1', model: EMBED_MODEL, endpoint: 'embeddings', stream: false, status: 'settled',
      input_tokens: 9, output_tokens: 0, cost_credits: cost, reserved_credits: reserved, returned_credits: reserved - cost,
    });
    // The record reaches PostgreSQL: its endpoint is one the table takes.
    await env.svc.drained();
    expect(await env.svc.rt.usageQueries.findReceipt(env.p.projectId, txid)).not.toBeNull();

    // The upstream got its own model name, the client's input, and base64 asked.
    const sent = env.mock.requests.at(-1)!;
    expect(sent.path).toBe('/v1/embeddings');
    expect(sent.body).toEqual({ model: 'text-embedding-upstream', input, encoding_format: 'base64' });
  });

  it('relays float and base64 answers as the upstream wrote them, one vector per input of an array', async () => {
    await env.fund('e2', 1_000_000);
    const client = env.openai({ customer: 'e2' });
    const inputs = ['one two three', 'four five'];
    const floats = await client.embeddings.create({ model: EMBED_MODEL, input: inputs, encoding_format: 'float', dimensions: 4 }).withResponse();
    expect(floats.data.data.map((d) => d.embedding)).toEqual(inputs.map((i) => mockVector(i, 4)));
    expect(floats.data.usage.prompt_tokens).toBe(5);
    expect(floats.response.headers.get('x-service-cost-credits')).toBe(String(expectedCost({ input: 5, output: 0 }, EMBED_PRICES)));

    const base64 = await client.embeddings.create({ model: EMBED_MODEL, input: inputs, encoding_format: 'base64', dimensions: 4 });
    // Little-endian float32, copied out of Node's shared buffer pool.
    const decoded = base64.data.map((d) => Array.from(new Float32Array(Uint8Array.from(Buffer.from(d.embedding as unknown as string, 'base64')).buffer)));
    expect(decoded).toEqual(inputs.map((i) => mockVector(i, 4)));

    // Token arrays: each token counts one.
    const tokens = await client.embeddings.create({ model: EMBED_MODEL, input: [[1, 2, 3], [4, 5, 6, 7]] }).withResponse();
    expect(tokens.data.usage.prompt_tokens).toBe(7);
    expect(tokens.response.headers.get('x-service-cost-credits')).toBe(String(expectedCost({ input: 7, output: 0 }, EMBED_PRICES)));
  });

  it('relays an upstream error with its status and body and charges nothing', async () => {
    await env.fund('e3', 1_000_000);
    const before = await moneyOf('e3');
    const err = await env
      .openai({ customer: 'e3' })
      .embeddings.create({ model: EMBED_MODEL, input: `hello ${mockDirective({ fail: 429 })}` })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).status).toBe(429);
    expect((err as APIError).code).toBe('rate_limit_exceeded');
    await env.svc.drained();
    expect(await moneyOf('e3')).toEqual(before);
  });

  it('answers 402 insufficient_balance when the wallet cannot hold the input bound, and holds nothing', async () => {
    await env.fund('e4', 10);
    const body = { model: EMBED_MODEL, input: 'word '.repeat(100) };
    const res = await rawPost(env.svc.url, '/v1/embeddings', { key: env.p.projectKey, headers: { 'x-service-customer': 'e4' }, body });
    expectError(res, 402, 'insufficient_balance', { message: /^insufficient balance: this call needs a hold of \d+ credits \(its input bound; it generates no output\) and wallet credits has 10 credits available\./ });
    expect(await env.balance('e4')).toMatchObject({ total: 10, used: 0, frozen: 0, available: 10 });
  });

  it('bills a customer-scoped key its own customer', async () => {
    await env.fund('e5', 1_000_000);
    const key = await env.p.customerKey('e5');
    const { response } = await env.openai({ key }).embeddings.create({ model: EMBED_MODEL, input: 'a b c d' }).withResponse();
    const cost = expectedCost({ input: 4, output: 0 }, EMBED_PRICES);
    expect(response.headers.get('x-service-cost-credits')).toBe(String(cost));
    expect((await env.balance('e5')).used).toBe(cost);
  });

  it('refuses an Anthropic-format model (400 naming model) and an invalid input, listing every field at fault', async () => {
    await env.fund('e6', 1_000_000);
    const post = (body: unknown) => rawPost(env.svc.url, '/v1/embeddings', { key: env.p.projectKey, headers: { 'x-service-customer': 'e6' }, body });
    expectError(await post({ model: ANTHROPIC_MODEL, input: 'hi' }), 400, 'invalid_request', {
      param: 'model',
      message: `model ${ANTHROPIC_MODEL} is an Anthropic-format model: embeddings are served by OpenAI-format models only`,
    });
    const bad = await post({ model: EMBED_MODEL, input: [], encoding_format: 'hex' });
    expectError(bad, 400, 'invalid_request', { param: 'input' });
    expect((bad.json().error.errors as { param: string }[]).map((e) => e.param)).toEqual(['input', 'encoding_format']);
    expect(await env.balance('e6')).toMatchObject({ used: 0, frozen: 0 });
  });

  it('is served by any OpenAI-format model, at its input price only', async () => {
    await env.fund('e7', 1_000_000);
    const { response } = await env.openai({ customer: 'e7' }).embeddings.create({ model: OPENAI_MODEL, input: 'one two' }).withResponse();
    expect(response.headers.get('x-service-cost-credits')).toBe(String(expectedCost({ input: 2, output: 0 })));
  });
});

describe('POST /v1/messages/count_tokens', () => {
  const messages = [{ role: 'user' as const, content: 'how many tokens are these words' }];

  it('relays the upstream count as it is, and bills and counts nothing', async () => {
    await env.fund('c1', 1_000_000);
    const before = await moneyOf('c1');
    const from = env.mock.requests.length;
    const counted = await env.anthropic({ customer: 'c1' }).messages.countTokens({ model: ANTHROPIC_MODEL, messages, system: 'be brief' });
    expect(counted).toEqual({ input_tokens: countInputTokens('anthropic', { messages, system: 'be brief' }) });
    const [sent] = env.mock.requests.slice(from);
    expect(sent!.path).toBe('/v1/messages/count_tokens');
    expect(sent!.headers['x-api-key']).toBe(env.upstreamKey);
    expect(sent!.body).toEqual({ model: ANTHROPIC_UPSTREAM_MODEL, messages, system: 'be brief' });
    await env.svc.drained();
    expect(await moneyOf('c1')).toEqual(before);
  });

  it('relays an upstream error as it is', async () => {
    await env.fund('c2', 1_000_000);
    const res = await rawPost(env.svc.url, '/v1/messages/count_tokens', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'c2' },
      body: { model: ANTHROPIC_MODEL, messages: [{ role: 'user', content: `hi ${mockDirective({ fail: 529 })}` }] },
    });
    expect(res.status).toBe(529);
    expect(res.json()).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });
  });

  it('keeps the key and customer rules of /v1/messages', async () => {
    await env.fund('c3', 1_000_000);
    const post = (o: { key?: string; customer?: string; model?: string }) =>
      rawPost(env.svc.url, '/v1/messages/count_tokens', {
        key: o.key ?? env.p.projectKey,
        headers: o.customer ? { 'x-service-customer': o.customer } : {},
        body: { model: o.model ?? ANTHROPIC_MODEL, messages },
      });
    expect((await post({ key: 'sk_invalid_key' })).status).toBe(401);
    expectError(await post({}), 400, 'customer_required');
    expectError(await post({ customer: 'nobody' }), 404, 'customer_not_found');
    expectError(await post({ customer: 'c3', model: OPENAI_MODEL }), 400, 'invalid_request', { param: 'model' });
    const key = await env.p.customerKey('c3');
    expect((await post({ key })).status).toBe(200);
    expectError(await post({ key, customer: 'c1' }), 403, 'permission_denied', { param: 'X-Service-Customer' });
    // An error of the service's own reads as Anthropic's.
    expect((await post({})).json()).toMatchObject({ type: 'error', message: expect.any(String) });
  });
});
