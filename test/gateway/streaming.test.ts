/**
 * Streamed gateway calls (docs/API.md, "Gateway" and "Reading the cost of a stream"): the
 * events the client gets, the headers sent first and the cost and balance as announced
 * HTTP trailers, exact billing whether or not an OpenAI client asked for usage, the same
 * cost as the same call without streaming, and a client that hangs up mid-stream: the
 * upstream call is aborted and the input plus the output already relayed is charged,
 * marked as estimated.
 */
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Json } from '../helpers.js';
import { countInputTokens, mockDirective, mockOutputText, type MockControls } from '../../src/gateway/mock/controls.js';
import {
  ANTHROPIC_MODEL,
  centsOf,
  expectedCost,
  OPENAI_MODEL,
  rawPost,
  sseData,
  startGatewayEnv,
  startWatchingProxy,
  usdOf,
  type GatewayEnv,
  type RawResponse,
  streamThenHangUp,
  type WatchingProxy,
} from './support.js';

let env: GatewayEnv;
let proxy: WatchingProxy;

beforeAll(async () => {
  env = await startGatewayEnv();
  proxy = await startWatchingProxy(env.mock.port);
  await env.putModel('gpt-watched', { provider: 'openai', upstream_base_url: proxy.url });
  await env.putModel('claude-watched', { provider: 'anthropic', upstream_base_url: proxy.url });
});
afterAll(async () => {
  await env?.close();
  await proxy?.close();
});

const ask = (controls: MockControls, words = 'stream me a few words') => [
  { role: 'user' as const, content: `${words} ${mockDirective(controls)}` },
];

const billingNames = ['x-service-cost-credits', 'x-service-cost-cents', 'x-service-cost-usd', 'x-service-balance-credits', 'x-service-balance-usd'];

/** Headers of a stream: ids and the hold up front; cost and balance only announced, sent as trailers. */
function expectStreamHeaders(res: RawResponse, traceId?: string) {
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
  expect(res.headers['x-service-transaction-id']).toMatch(/^\S+$/);
  expect(Number(res.headers['x-service-reserved-credits'])).toBeGreaterThan(0);
  if (traceId !== undefined) expect(res.headers['x-service-trace-id']).toBe(traceId);
  const announced = String(res.headers.trailer).split(',').map((n) => n.trim().toLowerCase());
  expect(announced.sort()).toEqual([...billingNames].sort());
  for (const name of billingNames) expect(res.headers[name]).toBeUndefined();
}

async function expectTrailers(res: RawResponse, customer: string, cost: number) {
  expect(res.trailers['x-service-cost-credits']).toBe(String(cost));
  expect(res.trailers['x-service-cost-cents']).toBe(centsOf(cost));
  expect(res.trailers['x-service-cost-usd']).toBe(usdOf(cost));
  const available = (await env.balance(customer)).wallets.credits!.available;
  expect(res.trailers['x-service-balance-credits']).toBe(String(available));
  expect(res.trailers['x-service-balance-usd']).toBe(usdOf(available));
}

async function gatewayEntries(customer: string, transactionId: string) {
  return (await env.ledger(customer)).filter((e) => e.transaction_id === transactionId);
}

const post = (path: string, customer: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  rawPost(env.svc.url, path, { key: env.p.projectKey, headers: { 'x-service-customer': customer, ...headers }, body });

describe('OpenAI streams', () => {
  it('without include_usage: no usage reaches the client, the upstream is asked for it, and the call is billed exactly', async () => {
    await env.fund('os1', 1_000_000);
    const from = env.mock.requests.length;
    const messages = ask({ output_tokens: 9, cache_read_tokens: 2 });
    const res = await post('/v1/chat/completions', 'os1', { model: OPENAI_MODEL, stream: true, messages, stream_options: { x_keep: 1 } }, { 'x-service-trace-id': 'trace-os1' });
    expectStreamHeaders(res, 'trace-os1');

    const events = sseData(res.text);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1) as Record<string, Json>[];
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(mockOutputText(9));
    // Byte-level: not one chunk carries a usage field, not even `"usage":null`.
    expect(res.text).not.toContain('"usage"');
    for (const c of chunks) expect(c.choices).toHaveLength(1);
    const sent = env.mock.requests[from]!.body as Record<string, Json>;
    expect(sent.stream_options).toEqual({ x_keep: 1, include_usage: true });

    const input = countInputTokens('openai', { messages });
    const cost = expectedCost({ input, output: 9, cacheRead: 2 });
    await expectTrailers(res, 'os1', cost);
    const txid = String(res.headers['x-service-transaction-id']);
    const entries = await gatewayEntries('os1', txid);
    expect(entries.map((e) => [e.type, e.amount])).toEqual([['GATEWAY', cost]]);
    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    const reserved = Number(res.headers['x-service-reserved-credits']);
    expect(receipt.body).toMatchObject({
      transaction_id: txid, trace_id: 'trace-os1', stream: true, status: 'settled', usage_estimated: false, endpoint: 'chat.completions',
      input_tokens: input, output_tokens: 9, cache_read_tokens: 2, cost_credits: cost,
      reserved_credits: reserved, returned_credits: reserved - cost, balance_after_credits: Number(res.trailers['x-service-balance-credits']),
    });
    expect(await env.balance('os1')).toMatchObject({ used: cost, frozen: 0, available: 1_000_000 - cost });
  });

  it('with include_usage the client gets the usage chunk; through the SDK the headers come first', async () => {
    await env.fund('os2', 1_000_000);
    const messages = ask({ output_tokens: 6, cache_read_tokens: 1 });
    const { data: stream, response } = await env
      .openai({ customer: 'os2', headers: { 'X-Service-Trace-Id': 'trace-os2' } })
      .chat.completions.create({ model: OPENAI_MODEL, stream: true, stream_options: { include_usage: true }, messages })
      .withResponse();
    expect(response.headers.get('x-service-transaction-id')).toMatch(/^\S+$/);
    expect(response.headers.get('x-service-trace-id')).toBe('trace-os2');
    expect(Number(response.headers.get('x-service-reserved-credits'))).toBeGreaterThan(0);
    let text = '';
    const usages = [];
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usages.push(chunk.usage);
    }
    expect(text).toBe(mockOutputText(6));
    const input = countInputTokens('openai', { messages });
    expect(usages).toEqual([expect.objectContaining({ prompt_tokens: input + 1, completion_tokens: 6, prompt_tokens_details: expect.objectContaining({ cached_tokens: 1 }) })]);
    const cost = expectedCost({ input: usages[0]!.prompt_tokens - 1, output: 6, cacheRead: 1 });
    const entries = await gatewayEntries('os2', response.headers.get('x-service-transaction-id')!);
    expect(entries.map((e) => e.amount)).toEqual([cost]);
  });
});

describe('Anthropic streams', () => {
  it('relays every event, bills the message_delta usage at each price, and sends cost and balance as trailers', async () => {
    await env.fund('as1', 1_000_000);
    const messages = ask({ output_tokens: 11, cache_read_tokens: 5, cache_write_tokens: 3 });
    const res = await post('/v1/messages', 'as1', { model: ANTHROPIC_MODEL, max_tokens: 64, stream: true, messages });
    expectStreamHeaders(res);
    expect(res.headers['x-service-max-tokens']).toBe('64');
    const events = sseData(res.text) as Record<string, Json>[];
    expect(events.map((e) => e.type)).toEqual([
      'message_start', 'content_block_start', 'ping', ...Array(11).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop',
    ]);
    expect(events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join('')).toBe(mockOutputText(11));
    const input = countInputTokens('anthropic', { messages });
    expect(events.at(-2)!.usage).toEqual({ input_tokens: input, cache_creation_input_tokens: 3, cache_read_input_tokens: 5, output_tokens: 11 });
    const cost = expectedCost({ input, output: 11, cacheRead: 5, cacheWrite: 3 });
    await expectTrailers(res, 'as1', cost);
    expect((await gatewayEntries('as1', String(res.headers['x-service-transaction-id']))).map((e) => e.amount)).toEqual([cost]);
  });

  it('works through the SDK stream helper', async () => {
    await env.fund('as2', 1_000_000);
    const messages = ask({ output_tokens: 4 });
    const stream = env.anthropic({ customer: 'as2' }).messages.stream({ model: ANTHROPIC_MODEL, max_tokens: 32, messages });
    const final = await stream.finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: mockOutputText(4) }]);
    expect(final.usage.output_tokens).toBe(4);
    const cost = expectedCost({ input: countInputTokens('anthropic', { messages }), output: 4 });
    expect((await env.ledger('as2', 'GATEWAY')).map((e) => e.amount)).toEqual([cost]);
  });
});

describe('streaming and not streaming', () => {
  it('cost the same for the same usage, in both formats', async () => {
    await env.fund('same', 1_000_000);
    const oMessages = ask({ output_tokens: 13, cache_read_tokens: 4 }, 'one two three four five');
    const aMessages = ask({ output_tokens: 13, cache_read_tokens: 4, cache_write_tokens: 1 }, 'one two three four five');
    const costs: Record<string, string | undefined> = {};
    const whole = await post('/v1/chat/completions', 'same', { model: OPENAI_MODEL, messages: oMessages });
    costs.openaiWhole = whole.headers['x-service-cost-credits'] as string;
    costs.openaiStream = (await post('/v1/chat/completions', 'same', { model: OPENAI_MODEL, stream: true, messages: oMessages })).trailers['x-service-cost-credits'];
    costs.openaiStreamUsage = (
      await post('/v1/chat/completions', 'same', { model: OPENAI_MODEL, stream: true, stream_options: { include_usage: true }, messages: oMessages })
    ).trailers['x-service-cost-credits'];
    costs.anthropicWhole = (await post('/v1/messages', 'same', { model: ANTHROPIC_MODEL, max_tokens: 100, messages: aMessages })).headers['x-service-cost-credits'] as string;
    costs.anthropicStream = (await post('/v1/messages', 'same', { model: ANTHROPIC_MODEL, max_tokens: 100, stream: true, messages: aMessages })).trailers['x-service-cost-credits'];

    const o = String(expectedCost({ input: countInputTokens('openai', { messages: oMessages }), output: 13, cacheRead: 4 }));
    const a = String(expectedCost({ input: countInputTokens('anthropic', { messages: aMessages }), output: 13, cacheRead: 4, cacheWrite: 1 }));
    expect(costs).toEqual({ openaiWhole: o, openaiStream: o, openaiStreamUsage: o, anthropicWhole: a, anthropicStream: a });
    const entries = await env.ledger('same', 'GATEWAY');
    expect(entries.map((e) => String(e.amount)).sort()).toEqual([o, o, o, a, a].sort());
  });
});

describe('one keep-alive connection', () => {
  it('carries streamed answers, sent at once or event by event, and the calls after them: a stream leaves nothing held in it', async () => {
    await env.fund('kept', 1_000_000);
    // A Client is one connection, made again only when the server closed it.
    const client = new Client(env.svc.url, { pipelining: 1 });
    let connects = 0;
    client.on('connect', () => connects++);
    try {
      const send = async (body: Record<string, unknown>) => {
        const res = await client.request({
          method: 'POST',
          path: '/v1/chat/completions',
          headers: { authorization: `Bearer ${env.p.projectKey}`, 'x-service-customer': 'kept', 'content-type': 'application/json' },
          body: JSON.stringify({ model: OPENAI_MODEL, ...body }),
          headersTimeout: 5_000,
          bodyTimeout: 5_000,
        });
        return { status: res.statusCode, text: await res.body.text(), trailers: res.trailers };
      };
      for (const controls of [{ output_tokens: 4 }, { output_tokens: 4, chunk_delay_ms: 5 }, { output_tokens: 3 }]) {
        const streamed = await send({ stream: true, messages: ask(controls) });
        expect(streamed.status).toBe(200);
        expect(sseData(streamed.text).at(-1)).toBe('[DONE]');
        expect(Number(streamed.trailers['x-service-cost-credits'])).toBeGreaterThan(0);
        const whole = await send({ messages: ask({ output_tokens: 2 }) });
        expect(whole.status).toBe(200);
        expect(JSON.parse(whole.text).choices[0].message.content).toBe(mockOutputText(2));
      }
      expect(connects).toBe(1);
    } finally {
      await client.close();
    }
  });
});

async function settledEntry(customer: string, transactionId: string) {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const entries = await gatewayEntries(customer, transactionId);
    if (entries.length > 0) return entries;
    if (Date.now() > deadline) throw new Error('the aborted call was never settled');
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('a client that hangs up mid-stream', () => {
  const total = 100;
  const delay = 30;

  for (const format of ['anthropic', 'openai'] as const) {
    it(`${format}: aborts the upstream call and charges input plus the output relayed, estimated`, async () => {
      const customer = `gone-${format}`;
      await env.fund(customer, 1_000_000);
      const messages = ask({ output_tokens: total, chunk_delay_ms: delay });
      const path = format === 'anthropic' ? '/v1/messages' : '/v1/chat/completions';
      const model = format === 'anthropic' ? 'claude-watched' : 'gpt-watched';
      const body = format === 'anthropic' ? { model, max_tokens: 500, stream: true, messages } : { model, stream: true, messages };
      const closed = proxy.nextClose();
      const { headers, received, hungUpAt } = await streamThenHangUp(env.svc.url, env.p.projectKey, path, customer, body, 3);
      expect(received).not.toContain(`tok${total}`);
      // A connection the gateway keeps for reuse would never close: this one closes as soon
      // as the client hangs up, long before the answer (total x delay = 3 s) would end.
      const upstreamClosedAt = await Promise.race([closed, new Promise<null>((r) => setTimeout(() => r(null), total * delay))]);
      expect(upstreamClosedAt, 'the upstream connection stayed open').not.toBeNull();
      expect(upstreamClosedAt! - hungUpAt).toBeLessThan(1_000);

      const txid = String(headers['x-service-transaction-id']);
      const [entry, ...more] = await settledEntry(customer, txid);
      expect(more).toEqual([]);
      await env.svc.drained();
      const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
      expect(receipt.status).toBe(200);
      const r = receipt.body;
      expect(r).toMatchObject({ status: 'client_aborted', usage_estimated: true, stream: true, customer_id: customer, cache_read_tokens: 0, cache_write_tokens: 0 });
      // Input: exact from message_start for Anthropic; estimated from the request for OpenAI.
      if (format === 'anthropic') expect(r.input_tokens).toBe(countInputTokens('anthropic', { messages }));
      else expect(r.input_tokens).toBeGreaterThan(0);
      expect(r.output_tokens).toBeGreaterThanOrEqual(3);
      expect(r.output_tokens).toBeLessThan(total);
      const cost = expectedCost({ input: r.input_tokens, output: r.output_tokens });
      expect(r.cost_credits).toBe(cost);
      expect(entry).toMatchObject({ type: 'GATEWAY', amount: cost });
      expect(r.returned_credits).toBe(Number(headers['x-service-reserved-credits']) - cost);
      const usage = await env.svc.call('GET', `/v1/usage?customer_id=${customer}`, { key: env.p.projectKey });
      expect(usage.body.data).toEqual([expect.objectContaining({ transaction_id: txid, status: 'client_aborted', usage_estimated: true, cost_credits: cost })]);
      expect(await env.balance(customer)).toMatchObject({ total: 1_000_000, used: cost, frozen: 0, available: 1_000_000 - cost });
    });
  }
});
