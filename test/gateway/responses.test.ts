/**
 * POST /v1/responses (the OpenAI Responses API), driven by the official `openai` client
 * against the gateway and the mock upstream: billed as chat completions are (the hold
 * bounded by max_output_tokens, the exact cost of the upstream's usage, its cached tokens
 * at the cache read price and its reasoning tokens as output, the headers or trailers,
 * ledger entry, receipt and usage record), whole and streamed; and a model's wire_format.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APIError } from 'openai';
import { mockDirective, type MockControls } from '../../src/gateway/mock/controls.js';
import { responsesInputTokens } from '../../src/gateway/mock/responses.js';
import { StreamRelay } from '../../src/gateway/adapters.js';
import { expectError } from '../support/errors.js';
import { centsOf, expectedCost, OPENAI_MODEL, OPENAI_UPSTREAM_MODEL, rawPost, sseData, startGatewayEnv, streamThenHangUp, usdOf, type GatewayEnv } from './support.js';

let env: GatewayEnv;
const MODEL = 'gpt-responses-test';

beforeAll(async () => {
  env = await startGatewayEnv();
  await env.putModel(MODEL, { provider: 'openai', wire_format: 'responses' });
});
afterAll(() => env?.close());

const ask = (controls: MockControls, text = 'tell me a story about a cat') => `${text} ${mockDirective(controls)}`;

async function gatewayEntries(customer: string, txid: string) {
  return (await env.ledger(customer)).filter((e) => e.transaction_id === txid);
}

async function receiptOf(txid: string) {
  await env.svc.drained();
  const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
  expect(receipt.status).toBe(200);
  return receipt.body as Record<string, unknown>;
}

describe('POST /v1/responses, whole', () => {
  it('bills the exact cost of the usage: cached tokens at the cache read price, reasoning tokens as output', async () => {
    await env.fund('r1', 1_000_000);
    const opsBefore = await env.ops();
    const input = ask({ output_tokens: 7, cache_read_tokens: 5, reasoning_tokens: 11 });
    const { data, response } = await env
      .openai({ customer: 'r1', headers: { 'X-Service-Trace-Id': 'trace-r1' } })
      .responses.create({ model: MODEL, input, instructions: 'be brief', max_output_tokens: 100 })
      .withResponse();
    expect(data.output_text).toBe('tok1 tok2 tok3 tok4 tok5 tok6 tok7');
    const uncached = responsesInputTokens({ input, instructions: 'be brief' });
    expect(data.usage).toMatchObject({ input_tokens: uncached + 5, input_tokens_details: { cached_tokens: 5 }, output_tokens: 18, output_tokens_details: { reasoning_tokens: 11 } });

    const cost = expectedCost({ input: uncached, cacheRead: 5, output: 18 });
    const h = response.headers;
    expect(h.get('x-service-cost-credits')).toBe(String(cost));
    expect(h.get('x-service-cost-cents')).toBe(centsOf(cost));
    expect(h.get('x-service-cost-usd')).toBe(usdOf(cost));
    expect(h.get('x-service-balance-credits')).toBe(String(1_000_000 - cost));
    // The hold is bounded by the client's max_output_tokens, which went upstream.
    expect(h.get('x-service-max-tokens')).toBe('100');
    const reserved = Number(h.get('x-service-reserved-credits'));
    expect(reserved).toBeGreaterThanOrEqual(cost);

    const txid = h.get('x-service-transaction-id')!;
    expect(await gatewayEntries('r1', txid)).toEqual([expect.objectContaining({ type: 'GATEWAY', amount: cost, wallet: 'credits', description: MODEL })]);
    expect(await env.balance('r1')).toMatchObject({ total: 1_000_000, used: cost, frozen: 0, available: 1_000_000 - cost });
    // One billable operation.
    await expect.poll(() => env.ops()).toBe(opsBefore + 1);
    expect(await receiptOf(txid)).toMatchObject({
      transaction_id: txid, trace_id: 'trace-r1', model: MODEL, endpoint: 'responses', stream: false, status: 'settled',
      input_tokens: uncached, cache_read_tokens: 5, output_tokens: 18, cost_credits: cost, reserved_credits: reserved,
    });
    // The record reaches PostgreSQL: `responses` is an endpoint the table takes.
    expect(await env.svc.rt.usageQueries.findReceipt(env.p.projectId, txid)).not.toBeNull();

    const sent = env.mock.requests.at(-1)!;
    expect(sent.path).toBe('/v1/responses');
    expect(sent.body).toEqual({ model: OPENAI_UPSTREAM_MODEL, input, instructions: 'be brief', max_output_tokens: 100 });
  });

  it('relays store and previous_response_id as sent, and answers a function tool call', async () => {
    await env.fund('r2', 1_000_000);
    const res = await env.openai({ customer: 'r2' }).responses.create({
      model: MODEL,
      input: [{ role: 'user', content: [{ type: 'input_text', text: ask({ tool_call: 1, output_tokens: 3 }) }] }],
      tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false }],
      store: false,
      previous_response_id: 'resp_earlier',
    });
    expect(res.output).toEqual([expect.objectContaining({ type: 'function_call', name: 'get_weather', arguments: '{"query":"tok1 tok2 tok3"}' })]);
    expect(env.mock.requests.at(-1)!.body).toMatchObject({ store: false, previous_response_id: 'resp_earlier' });
  });

  it('without max_output_tokens, holds the model limit and sends it upstream', async () => {
    await env.fund('r3', 1_000_000);
    const { response } = await env.openai({ customer: 'r3' }).responses.create({ model: MODEL, input: ask({ output_tokens: 2 }) }).withResponse();
    expect(response.headers.get('x-service-max-tokens')).toBe('4096');
    expect(env.mock.requests.at(-1)!.body).toMatchObject({ max_output_tokens: 4096 });
  });

  it('relays an upstream error with its status and charges nothing', async () => {
    await env.fund('r4', 1_000_000);
    const err = await env.openai({ customer: 'r4' }).responses.create({ model: MODEL, input: ask({ fail: 429 }) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).status).toBe(429);
    await env.svc.drained();
    expect(await env.balance('r4')).toMatchObject({ total: 1_000_000, used: 0, frozen: 0, available: 1_000_000 });
    expect(await env.ledger('r4', 'GATEWAY')).toEqual([]);
  });

  it('answers 402 insufficient_balance when the wallet cannot afford the hold, and holds nothing', async () => {
    await env.fund('r5', 10);
    const res = await rawPost(env.svc.url, '/v1/responses', { key: env.p.projectKey, headers: { 'x-service-customer': 'r5' }, body: { model: MODEL, input: 'hello', max_output_tokens: 1000 } });
    expectError(res, 402, 'insufficient_balance');
    expect(await env.balance('r5')).toMatchObject({ total: 10, used: 0, frozen: 0, available: 10 });
  });

  it('refuses invalid fields, naming each, and background (a model of another wire format is translated: translate-matrix.test.ts)', async () => {
    await env.fund('r6', 1_000_000);
    const post = (body: unknown) => rawPost(env.svc.url, '/v1/responses', { key: env.p.projectKey, headers: { 'x-service-customer': 'r6' }, body });
    const bad = await post({ model: MODEL, input: 42, instructions: 7, stream: 'yes', max_output_tokens: 0 });
    expectError(bad, 400, 'invalid_request', { param: 'input' });
    const params = (bad.json().error as { errors: { param: string }[] }).errors.map((e) => e.param);
    expect(params).toEqual(['input', 'instructions', 'stream', 'max_output_tokens']);
    expectError(await post({ model: MODEL, input: 'hi', background: true }), 400, 'invalid_request', { param: 'background' });
    expectError(await post({ input: 'hi' }), 400, 'invalid_request', { param: 'model' });
    expect(await env.balance('r6')).toMatchObject({ used: 0, frozen: 0 });
  });
});

describe('POST /v1/responses, streamed', () => {
  it('the SDK reads the stream; trailers carry the exact cost; the events come as the upstream sent them', async () => {
    await env.fund('s1', 1_000_000);
    const input = ask({ output_tokens: 5, cache_read_tokens: 3, reasoning_tokens: 4 });
    const stream = env.openai({ customer: 's1' }).responses.stream({ model: MODEL, input, max_output_tokens: 64 });
    const deltas: string[] = [];
    stream.on('response.output_text.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe('tok1 tok2 tok3 tok4 tok5');
    expect(deltas.join('')).toBe('tok1 tok2 tok3 tok4 tok5');
    const uncached = responsesInputTokens({ input });
    const cost = expectedCost({ input: uncached, cacheRead: 3, output: 9 });
    expect((await env.balance('s1')).used).toBe(cost);

    // The same call through node:http, which reads trailers.
    const raw = await rawPost(env.svc.url, '/v1/responses', { key: env.p.projectKey, headers: { 'x-service-customer': 's1' }, body: { model: MODEL, input, max_output_tokens: 64, stream: true } });
    expect(raw.status).toBe(200);
    expect(raw.headers['x-service-max-tokens']).toBe('64');
    expect(raw.trailers['x-service-cost-credits']).toBe(String(cost));
    expect(raw.trailers['x-service-balance-credits']).toBe(String(1_000_000 - 2 * cost));
    const events = sseData(raw.text) as { type: string; sequence_number: number }[];
    expect(events.map((e) => e.type)).toEqual([
      'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
      ...Array(5).fill('response.output_text.delta'),
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const txid = String(raw.headers['x-service-transaction-id']);
    expect(await receiptOf(txid)).toMatchObject({ endpoint: 'responses', stream: true, status: 'settled', usage_estimated: false, input_tokens: uncached, cache_read_tokens: 3, output_tokens: 9, cost_credits: cost });
    expect(await gatewayEntries('s1', txid)).toEqual([expect.objectContaining({ type: 'GATEWAY', amount: cost })]);
  });

  it('create({ stream: true }): bills a stream the output limit cut (response.incomplete) exactly', async () => {
    await env.fund('s2', 1_000_000);
    const input = ask({ output_tokens: 50 });
    const stream = await env.openai({ customer: 's2' }).responses.create({ model: MODEL, input, max_output_tokens: 20, stream: true });
    const types: string[] = [];
    let usage: unknown = null;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.incomplete') usage = e.response.usage;
    }
    expect(types.at(-1)).toBe('response.incomplete');
    expect(usage).toMatchObject({ output_tokens: 20 });
    expect((await env.balance('s2')).used).toBe(expectedCost({ input: responsesInputTokens({ input }), output: 20 }));
  });

  it('inline billing adds service_billing to response.completed', async () => {
    await env.fund('s3', 1_000_000);
    const raw = await rawPost(env.svc.url, '/v1/responses', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 's3', 'x-service-stream-billing': 'inline' },
      body: { model: MODEL, input: ask({ output_tokens: 2 }), stream: true },
    });
    const last = sseData(raw.text).at(-1) as { type: string; service_billing: { cost_credits: number } };
    expect(last.type).toBe('response.completed');
    expect(last.service_billing.cost_credits).toBe(Number(raw.trailers['x-service-cost-credits']));
  });

  it('an upstream error before the stream releases the hold; one cut mid-stream bills the estimate', async () => {
    await env.fund('s4', 1_000_000);
    const failed = await rawPost(env.svc.url, '/v1/responses', { key: env.p.projectKey, headers: { 'x-service-customer': 's4' }, body: { model: MODEL, input: ask({ fail: 500 }), stream: true } });
    expect(failed.status).toBe(500);
    await env.svc.drained();
    expect(await env.balance('s4')).toMatchObject({ used: 0, frozen: 0 });

    const cut = await rawPost(env.svc.url, '/v1/responses', { key: env.p.projectKey, headers: { 'x-service-customer': 's4' }, body: { model: MODEL, input: ask({ fail: 'midstream', output_tokens: 10 }), stream: true } });
    expect(cut.status).toBe(200);
    const txid = String(cut.headers['x-service-transaction-id']);
    expect(await receiptOf(txid)).toMatchObject({ status: 'settled', usage_estimated: true });
  });

  it('a client that hangs up mid-stream is billed client_aborted, estimated', async () => {
    await env.fund('s5', 1_000_000);
    const body = { model: MODEL, input: ask({ output_tokens: 100, chunk_delay_ms: 20 }), stream: true };
    const { headers } = await streamThenHangUp(env.svc.url, env.p.projectKey, '/v1/responses', 's5', body, 3, /"delta":"[^"]*tok\d+/g);
    const txid = String(headers['x-service-transaction-id']);
    const deadline = Date.now() + 5_000;
    while ((await gatewayEntries('s5', txid)).length === 0) {
      if (Date.now() > deadline) throw new Error('the aborted call was never settled');
      await new Promise((r) => setTimeout(r, 25));
    }
    const r = await receiptOf(txid);
    expect(r).toMatchObject({ status: 'client_aborted', usage_estimated: true, stream: true, endpoint: 'responses' });
    expect(r.output_tokens).toBeGreaterThanOrEqual(3);
    expect(r.output_tokens).toBeLessThan(100);
    expect(await env.balance('s5')).toMatchObject({ used: r.cost_credits, frozen: 0 });
  });
});

describe('a model wire_format', () => {
  it('defaults from the provider, is shown on the admin API and GET /v1/models, and responses needs openai', async () => {
    const models = await env.svc.call('GET', '/v1/models', { key: env.p.projectKey });
    const byId = Object.fromEntries((models.body.data as { id: string; wire_format: string }[]).map((m) => [m.id, m.wire_format]));
    expect(byId).toMatchObject({ [MODEL]: 'responses', [OPENAI_MODEL]: 'chat_completions', 'anthropic/claude-test': 'messages' });
    const path = `/v1/admin/projects/${env.p.projectId}/models/bad-responses`;
    const put = await env.svc.call('PUT', path, { key: env.p.adminKey, body: { ...modelFields(), provider: 'anthropic', wire_format: 'responses' } });
    expectError(put, 400, 'invalid_request', { param: 'wire_format' });
    // A provider change without a wire_format takes the new provider's.
    const mpath = `/v1/admin/projects/${env.p.projectId}/models/switcher`;
    expect((await env.svc.call('PUT', mpath, { key: env.p.adminKey, body: { ...modelFields(), provider: 'openai', wire_format: 'responses' } })).body).toMatchObject({ wire_format: 'responses' });
    expect((await env.svc.call('PATCH', mpath, { key: env.p.adminKey, body: { provider: 'anthropic' } })).body).toMatchObject({ wire_format: 'messages' });
    expectError(await env.svc.call('PATCH', mpath, { key: env.p.adminKey, body: { wire_format: 'responses' } }), 400, 'invalid_request', { param: 'wire_format' });
  });
});

function modelFields() {
  return { upstream_base_url: env.mock.url, upstream_model: 'm', context_window: 1000, max_output_tokens: 100, supports_streaming: true, input_price_per_million_credits: 1, output_price_per_million_credits: 1 };
}

describe('the Responses stream reading (StreamRelay, no I/O)', () => {
  const event = (type: string, fields: Record<string, unknown>, named = true) => `${named ? `event: ${type}\n` : ''}data: ${JSON.stringify({ type, ...fields })}\n\n`;
  const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 4 }, output_tokens: 7, output_tokens_details: { reasoning_tokens: 2 }, total_tokens: 17 };

  for (const named of [true, false]) {
    it(`reads the usage of response.completed ${named ? 'by its event name' : 'from data lines without names'}, and forwards every byte`, () => {
      const bytes = Buffer.from(
        event('response.created', { response: { usage: null } }, named) +
          event('response.output_text.delta', { delta: 'hello there' }, named) +
          event('response.completed', { response: { usage } }, named),
      );
      const relay = new StreamRelay('responses', true);
      const out = Buffer.concat([relay.push(bytes), relay.end()]);
      expect(out.equals(bytes)).toBe(true);
      expect(relay.usage()).toEqual({ input: 6, cacheRead: 4, output: 7, cacheWrite: 0 });
      expect([relay.usageComplete(), relay.sawTerminal(), relay.error()]).toEqual([true, true, null]);
      expect(relay.relayedOutputEstimate()).toBe(3);
    });
  }

  it('a response.failed ends the stream as an error, with the usage it has; an error event is an error', () => {
    const failed = new StreamRelay('responses', true);
    failed.push(Buffer.from(event('response.created', { response: {} }) + event('response.failed', { response: { usage, error: { code: 'server_error' } } })));
    expect([failed.sawTerminal(), failed.error() !== null, failed.usage()]).toEqual([true, true, { input: 6, cacheRead: 4, output: 7, cacheWrite: 0 }]);
    const errored = new StreamRelay('responses', true);
    errored.push(Buffer.from(event('response.created', { response: {} }) + event('error', { code: 'rate_limit_exceeded', message: 'slow down' })));
    expect([errored.sawTerminal(), errored.error()]).toEqual([false, expect.objectContaining({ type: 'error' })]);
  });
});
