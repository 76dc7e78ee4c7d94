/**
 * `X-Service-Hold: incremental` (docs/API.md, "Incremental holds"): a streamed call holds
 * its input bound and one slice of output, the relay extends the hold slice by slice
 * (lua/gateway_extend-10.lua; a smaller one when the wallet cannot cover a slice) and
 * forwards output only up to what is held; when the wallet cannot pay for one more output
 * token, the gateway ends the stream itself, in its format, and bills what was relayed. Read with the official `openai` and `@anthropic-ai/sdk`
 * clients (the cut stream parses, with its finish reason), and raw for the trailers.
 *
 * The models here cost 1 credit per input and output token, and nothing for the cache
 * kinds, so the input bound of a call is its body's bytes (the dearest kind's price) and a
 * slice (1024 tokens) holds 1024 credits. The mock sends one token per delta, as
 * `" tokN"`: its known token count is the number of words relayed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';
import { StreamRelay } from '../../src/gateway/adapters.js';
import { hold_slice_tokens } from '../../src/gateway/incremental.js';
import { bindingKeys } from '../../src/redis/keys.js';
import { expectError } from '../support/errors.js';
import { reconcileOverApi } from '../helpers.js';
import { rawPost, sseData, startGatewayEnv, startWatchingProxy, type GatewayEnv, type WatchingProxy } from './support.js';

let env: GatewayEnv;
let proxy: WatchingProxy;
const MODEL = { openai: 'inc-openai', anthropic: 'inc-anthropic' } as const;
type Format = keyof typeof MODEL;
const SLICE = hold_slice_tokens;
const incremental = { 'X-Service-Hold': 'incremental' };

beforeAll(async () => {
  env = await startGatewayEnv();
  for (const provider of ['openai', 'anthropic'] as const) {
    await env.putModel(MODEL[provider], {
      provider,
      max_output_tokens: 100_000,
      input_price_per_million_credits: 1_000_000,
      output_price_per_million_credits: 1_000_000,
      cache_read_price_per_million_credits: 0,
      cache_write_price_per_million_credits: 0,
    });
  }
  proxy = await startWatchingProxy(env.mock.port);
  await env.putModel('inc-watched', {
    provider: 'anthropic', upstream_base_url: proxy.url, max_output_tokens: 100_000,
    input_price_per_million_credits: 1_000_000, output_price_per_million_credits: 1_000_000, cache_read_price_per_million_credits: 0, cache_write_price_per_million_credits: 0,
  });
}, 60_000);
afterAll(async () => {
  await proxy?.close();
  try {
    await env.svc.drained();
    const report = await reconcileOverApi(env.svc, env.p);
    expect(report.errors).toEqual([]);
    expect(report.drift).toEqual([]);
  } finally {
    await env.close();
  }
});

const ask = (outputTokens: number) => [{ role: 'user' as const, content: `write at length ${mockDirective({ output_tokens: outputTokens })}` }];

function bodyOf(format: Format, outputTokens: number, extra: Record<string, unknown> = {}) {
  return { model: MODEL[format], stream: true, messages: ask(outputTokens), ...(format === 'anthropic' ? { max_tokens: 100_000 } : {}), ...extra };
}

/** A raw streamed call; `body` is sent as this exact text, so its bytes (the input bound) are known. */
function post(format: Format, customer: string, body: string, headers: Record<string, string> = incremental) {
  return rawPost(env.svc.url, format === 'openai' ? '/v1/chat/completions' : '/v1/messages', { key: env.p.projectKey, headers: { 'x-service-customer': customer, ...headers }, body });
}

/** The text relayed in a stream's deltas (both formats). */
function relayedText(events: unknown[]): string {
  let text = '';
  for (const e of events as { choices?: { delta?: { content?: string } }[]; type?: string; delta?: { text?: string } }[]) {
    if (typeof e !== 'object') continue;
    text += e.choices?.[0]?.delta?.content ?? '';
    if (e.type === 'content_block_delta') text += e.delta?.text ?? '';
  }
  return text;
}

/** The documented output estimate of relayed text: max(ceil(chars / 4), deltas). */
const estimateOf = (text: string) => Math.max(Math.ceil(text.length / 4), text.split(' ').filter(Boolean).length);

async function receipt(txid: string) {
  const r = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as { cost_credits: number; reserved_credits: number; returned_credits: number; balance_after_credits: number; hold_exhausted: boolean };
}

async function usageOf(customer: string) {
  await env.svc.drained();
  const r = await env.svc.call('GET', `/v1/usage?customer_id=${customer}`, { key: env.p.projectKey });
  expect(r.status).toBe(200);
  return r.body.data as { transaction_id: string; status: string; output_tokens: number; input_tokens: number; usage_estimated: boolean; cost_credits: number; hold_exhausted: boolean }[];
}

describe('StreamRelay with an allowance', () => {
  const delta = (text: string) => `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}\n\n`;
  const start = 'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n';

  it('stops mid-chunk at the allowance, forwards nothing past it, and resumes byte for byte when it grows', () => {
    const relay = new StreamRelay('anthropic', true, { allowance: 3 });
    // Four deltas of one token each (4 characters) in one chunk: three fit.
    const events = [start, delta('abcd'), delta('efgh'), delta('ijkl'), delta('mnop')];
    const out = Buffer.from(relay.push(Buffer.from(events.join('')))).toString();
    expect(out).toBe(events.slice(0, 4).join(''));
    expect(relay.gated()).toBe(true);
    expect(relay.relayedOutputEstimate()).toBe(3);
    // More upstream bytes wait behind the gate, unread.
    expect(relay.push(Buffer.from(delta('qrst'))).length).toBe(0);
    expect(Buffer.from(relay.allow(4)).toString()).toBe(events[4]);
    expect(relay.gated()).toBe(true);
    expect(Buffer.from(relay.allow(10)).toString()).toBe(delta('qrst'));
    expect(relay.gated()).toBe(false);
    expect(relay.relayedOutputEstimate()).toBe(5);
  });

  it('closes in its format: the open block stopped, max_tokens, the usage given', () => {
    const relay = new StreamRelay('anthropic', true, { allowance: 1 });
    relay.push(Buffer.from(start + delta('abcd') + delta('efgh')));
    const usage = { input: 7, output: relay.relayedOutputEstimate(), cacheRead: 0, cacheWrite: 0 };
    const closing = sseData(Buffer.from(relay.close(usage, null)).toString()) as { type: string; delta?: { stop_reason: string }; usage?: { output_tokens: number } }[];
    expect(closing.map((e) => e.type)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect(closing[1]).toMatchObject({ delta: { stop_reason: 'max_tokens' }, usage: { input_tokens: 7, output_tokens: 1 } });
  });
});

describe('refusals', () => {
  it('a whole (non-streamed) call with X-Service-Hold: incremental is a 400 naming the header; nothing is held', async () => {
    await env.fund('r1', 100_000);
    const r = await post('openai', 'r1', JSON.stringify(bodyOf('openai', 5, { stream: false })));
    expectError(r, 400, 'invalid_request');
    expect(r.json().error.param).toBe('X-Service-Hold');
    expect((await env.balance('r1')).frozen).toBe(0);
  });

  it('a value other than incremental or upfront is a 400 naming the header', async () => {
    await env.fund('r2', 100_000);
    const r = await post('anthropic', 'r2', JSON.stringify(bodyOf('anthropic', 5)), { 'X-Service-Hold': 'lazy' });
    expectError(r, 400, 'invalid_request');
    expect(r.json().error.param).toBe('X-Service-Hold');
  });

  it('a wallet that cannot cover the input bound and one output token is refused 402', async () => {
    const body = JSON.stringify(bodyOf('openai', 5));
    await env.fund('r3', body.length);
    const r = await post('openai', 'r3', body);
    expectError(r, 402, 'insufficient_balance');
    expect(r.json().error.message).toContain('one output token');
    expect((await env.balance('r3')).frozen).toBe(0);
  });
});

describe.each(['openai', 'anthropic'] as const)('%s: raw', (format) => {
  it('a wallet for the input and two and a half slices: the stream ends cleanly once the whole wallet is held, billed what was relayed, never below zero', async () => {
    const customer = `cut-${format}`;
    const body = JSON.stringify(bodyOf(format, 20_000, format === 'openai' ? { stream_options: { include_usage: true } } : {}));
    const deposit = body.length + 2 * SLICE + SLICE / 2;
    await env.fund(customer, deposit);
    const r = await post(format, customer, body);
    expect(r.status, r.text.slice(0, 300)).toBe(200);
    expect(r.headers['x-service-hold']).toBe('incremental');
    // The output limit went upstream unclamped; the hold is one slice.
    expect(r.headers['x-service-max-tokens']).toBe('100000');
    expect(Number(r.headers['x-service-reserved-credits'])).toBe(body.length + SLICE);
    expect(r.trailers['x-service-hold-exhausted']).toBe('true');

    const events = sseData(r.text);
    const text = relayedText(events);
    const delivered = text.split(' ').filter(Boolean).length;
    expect(mockOutputText(20_000).startsWith(text)).toBe(true);
    // The over-service bound: what was delivered (the mock's own tokens) is within what was
    // paid plus one slice; with one token per delta it is within what was held.
    const cost = Number(r.trailers['x-service-cost-credits']);
    expect(delivered).toBeLessThanOrEqual(cost - body.length / 4 + SLICE);
    // The last extension took the half slice the wallet had left: output up to it.
    expect(estimateOf(text)).toBeLessThanOrEqual(2.5 * SLICE);
    expect(estimateOf(text)).toBeGreaterThan(2 * SLICE);

    if (format === 'openai') {
      expect(events.at(-1)).toBe('[DONE]');
      const finish = events.at(-3) as { choices: { finish_reason: string }[] };
      expect(finish.choices[0]!.finish_reason).toBe('length');
      expect((events.at(-2) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(estimateOf(text));
    } else {
      const types = (events as { type: string }[]).slice(-3).map((e) => e.type);
      expect(types).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
      const delta = events.at(-2) as { delta: { stop_reason: string }; usage: { output_tokens: number } };
      expect(delta.delta.stop_reason).toBe('max_tokens');
      expect(delta.usage.output_tokens).toBe(estimateOf(text));
    }

    // Billed: the relayed output as estimated, the input exact (Anthropic's message_start)
    // or from the body's size (OpenAI, bytes / 4); the hold covered it all.
    const txid = String(r.headers['x-service-transaction-id']);
    const [record] = (await usageOf(customer)).filter((u) => u.transaction_id === txid);
    expect(record).toMatchObject({ status: 'settled', usage_estimated: true, output_tokens: estimateOf(text), cost_credits: cost, hold_exhausted: true });
    expect(cost).toBe(record!.input_tokens + estimateOf(text));
    const rec = await receipt(txid);
    expect(rec.cost_credits).toBe(cost);
    // The whole wallet was held: not one more token's price was left.
    expect(rec.reserved_credits).toBe(deposit);
    expect(rec).toMatchObject({ hold_exhausted: true });
    const [entry] = (await env.ledger(customer, 'GATEWAY')).filter((e) => e.transaction_id === txid);
    expect(entry!.amount).toBe(cost);
    const balance = await env.balance(customer);
    expect(balance).toMatchObject({ used: cost, frozen: 0, available: deposit - cost });
    expect(Number(r.trailers['x-service-balance-credits'])).toBe(deposit - cost);
  });

  if (format === 'anthropic') {
    it('the upstream call is aborted when the wallet ends the stream, long before the upstream would have ended', async () => {
      const total = 10_000;
      const body = JSON.stringify({ model: 'inc-watched', stream: true, max_tokens: 100_000, messages: [{ role: 'user', content: `go on ${mockDirective({ output_tokens: total, chunk_delay_ms: 1 })}` }] });
      await env.fund('watched', body.length + SLICE + SLICE / 2);
      const closed = proxy.nextClose();
      const r = await post('anthropic', 'watched', body);
      const endedAt = Date.now();
      expect(r.trailers['x-service-hold-exhausted']).toBe('true');
      // total x 1 ms is at least 10 s: the connection closes when the gateway cuts, not then.
      const closedAt = await Promise.race([closed, new Promise<null>((resolve) => setTimeout(() => resolve(null), 5_000))]);
      expect(closedAt, 'the upstream connection stayed open').not.toBeNull();
      expect(Math.abs(closedAt! - endedAt)).toBeLessThan(1_000);
    });
  }

  it('a long answer on a wallet that suffices is served in full, billed exactly; the hold grew by slices, never more than a slice and a half beyond the output relayed', async () => {
    const customer = `long-${format}`;
    const output = 3 * SLICE + 100;
    const body = JSON.stringify(bodyOf(format, output));
    await env.fund(customer, 1_000_000);
    const r = await post(format, customer, body);
    expect(r.status).toBe(200);
    expect(r.trailers['x-service-hold-exhausted']).toBe('false');
    const events = sseData(r.text);
    expect(relayedText(events)).toBe(mockOutputText(output));
    const txid = String(r.headers['x-service-transaction-id']);
    const [record] = (await usageOf(customer)).filter((u) => u.transaction_id === txid);
    expect(record).toMatchObject({ status: 'settled', usage_estimated: false, output_tokens: output, hold_exhausted: false });
    const cost = record!.input_tokens + output;
    expect(Number(r.trailers['x-service-cost-credits'])).toBe(cost);
    const rec = await receipt(txid);
    // Extensions happened (the first hold was one slice), and what was held exceeds the
    // input bound and the output relayed (as the relay estimates it: the mock's words are
    // two tokens by ceil(chars / 4)) by at most one and a half slices; the settlement
    // returned the rest.
    expect(rec.reserved_credits).toBeGreaterThan(body.length + SLICE);
    expect(rec.reserved_credits - (body.length + estimateOf(mockOutputText(output)))).toBeLessThanOrEqual(1.5 * SLICE);
    expect(rec.returned_credits).toBe(rec.reserved_credits - cost);
    expect(rec.cost_credits).toBe(cost);
    expect(rec).toMatchObject({ hold_exhausted: false });
  });

  it('a wallet short of the input bound and one slice (the trial user\'s 10,000 credits) is served what it affords, billed within it', async () => {
    const customer = `small-${format}`;
    const body = JSON.stringify(bodyOf(format, 5_000));
    const deposit = body.length + 964;
    await env.fund(customer, deposit);
    const r = await post(format, customer, body);
    expect(r.status, r.text.slice(0, 300)).toBe(200);
    // The first hold took the whole wallet: the input bound and 964 tokens.
    expect(Number(r.headers['x-service-reserved-credits'])).toBe(deposit);
    expect(r.headers['x-service-max-tokens-limited-by']).toBeUndefined();
    expect(r.trailers['x-service-hold-exhausted']).toBe('true');
    const text = relayedText(sseData(r.text));
    expect(estimateOf(text)).toBeGreaterThan(900);
    expect(estimateOf(text)).toBeLessThanOrEqual(964);
    const cost = Number(r.trailers['x-service-cost-credits']);
    expect(cost).toBeLessThanOrEqual(deposit);
    expect(await env.balance(customer)).toMatchObject({ used: cost, frozen: 0, available: deposit - cost });
  });
});

describe('with the official SDKs', () => {
  it('openai: chat.completions.stream parses the cut stream: finish_reason length, its usage', async () => {
    await env.fund('sdk-o', 3_000);
    const stream = env
      .openai({ customer: 'sdk-o', headers: incremental })
      .chat.completions.stream({ model: MODEL.openai, messages: ask(20_000), stream_options: { include_usage: true } });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0]!.finish_reason).toBe('length');
    const text = final.choices[0]!.message.content!;
    expect(mockOutputText(20_000).startsWith(text)).toBe(true);
    expect(final.usage!.completion_tokens).toBe(estimateOf(text));
    expect((await env.balance('sdk-o')).available).toBeGreaterThanOrEqual(0);
  });

  it('openai: create({stream: true}) without include_usage: the last chunk finishes with length, no usage chunk', async () => {
    await env.fund('sdk-o2', 3_000);
    const stream = await env.openai({ customer: 'sdk-o2', headers: incremental }).chat.completions.create({ model: MODEL.openai, messages: ask(20_000), stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('length');
    expect(chunks.every((c) => !c.usage)).toBe(true);
  });

  it('anthropic: messages.stream().finalMessage() parses the cut stream: stop_reason max_tokens, its usage', async () => {
    await env.fund('sdk-a', 3_000);
    const message = await env
      .anthropic({ customer: 'sdk-a', headers: incremental })
      .messages.stream({ model: MODEL.anthropic, max_tokens: 100_000, messages: ask(20_000) })
      .finalMessage();
    expect(message.stop_reason).toBe('max_tokens');
    const block = message.content[0]!;
    expect(block.type).toBe('text');
    const text = block.type === 'text' ? block.text : '';
    expect(mockOutputText(20_000).startsWith(text)).toBe(true);
    expect(message.usage.output_tokens).toBe(estimateOf(text));
    expect((await env.balance('sdk-a')).available).toBeGreaterThanOrEqual(0);
  });

  it('openai n: 2: an answer that ended upstream keeps its reason, the one cut finishes with length', async () => {
    const body = bodyOf('openai', 700, { n: 2 });
    // One slice of two answers (2 x 1024 tokens as counted), and a quarter slice more: the
    // second answer is cut once the wallet is held to its last token.
    await env.fund('sdk-n', JSON.stringify(body).length + 2 * SLICE + SLICE / 4);
    const final = await env
      .openai({ customer: 'sdk-n', headers: incremental })
      .chat.completions.stream({ ...body, messages: ask(700), stream: true })
      .finalChatCompletion();
    expect(final.choices.map((c) => c.finish_reason)).toEqual(['stop', 'length']);
    expect(final.choices[0]!.message.content).toBe(mockOutputText(700));
    expect(mockOutputText(700).startsWith(final.choices[1]!.message.content!)).toBe(true);
    expect((await env.balance('sdk-n')).available).toBeGreaterThanOrEqual(0);
  });

  it('inline billing: the closing usage event carries service_billing, the receipt\'s figures', async () => {
    await env.fund('sdk-i', 3_000);
    const { data: stream, response } = await env
      .anthropic({ customer: 'sdk-i', headers: { ...incremental, 'X-Service-Stream-Billing': 'inline' } })
      .messages.create({ model: MODEL.anthropic, max_tokens: 100_000, stream: true, messages: ask(20_000) })
      .withResponse();
    let billing: { cost_credits: number; usage_estimated: boolean; hold_exhausted: boolean } | undefined;
    for await (const event of stream) if (event.type === 'message_delta') billing = (event as unknown as { service_billing: typeof billing }).service_billing;
    const rec = await receipt(response.headers.get('x-service-transaction-id')!);
    expect(billing).toMatchObject({ cost_credits: rec.cost_credits, usage_estimated: true, hold_exhausted: true });
    expect(rec).toMatchObject({ hold_exhausted: true });
  });

  it('inline billing of a stream that ended on its own: hold_exhausted false', async () => {
    await env.fund('sdk-j', 100_000);
    const { data: stream } = await env
      .openai({ customer: 'sdk-j', headers: { ...incremental, 'X-Service-Stream-Billing': 'inline' } })
      .chat.completions.create({ model: MODEL.openai, stream: true, messages: ask(50) })
      .withResponse();
    let billing: { usage_estimated: boolean; hold_exhausted: boolean } | undefined;
    for await (const chunk of stream) {
      const b = (chunk as unknown as { service_billing?: typeof billing }).service_billing;
      if (b !== undefined) billing = b;
    }
    expect(billing).toMatchObject({ usage_estimated: false, hold_exhausted: false });
  });
});

describe('extensions', () => {
  it('an extension sent twice with the same number holds once', async () => {
    await env.fund('ext', 10_000);
    const scope = { projectId: env.p.projectId, organizationId: env.p.organizationId };
    const ledger = env.svc.rt.ledger;
    const hold = await ledger.run('gateway_hold', scope, 'ext', {
      transactionId: 'gw-ext', wallet: 'credits', inputCostBound: 100, outputPrice: 1_000_000, outputTokens: 500, explicitMax: '1', holdTtlSeconds: 3_600,
      admitted: '1', answers: 1, idempotencyKey: '', keyBudget: '',
    });
    expect(hold[0]).toBe(0);
    // The receipt index entry the gateway writes with its hold.
    await env.svc.rt.redis.hset(bindingKeys(env.svc.rt.config.REDIS_PREFIX, env.p.projectId, 't', 'gw-ext').ids, 'gw-ext', `ext|${Date.now()}`);
    const extend = (extension: number, outputTokens = 500) =>
      ledger.run('gateway_extend', scope, 'ext', { transactionId: 'gw-ext', extension, outputPrice: 1_000_000, outputTokens, answers: 1, keyBudget: '' });
    expect((await extend(1))[0]).toBe(0);
    const again = await extend(1);
    expect(again[0]).not.toBe(0);
    expect(JSON.parse(again[1])).toMatchObject({ hold: '1100' });
    expect((await env.balance('ext')).frozen).toBe(1_100);
    expect((await extend(2))[0]).toBe(0);
    expect((await env.balance('ext')).frozen).toBe(1_600);
    // Past the wallet: what it affords (8,400 of 9,000 tokens), the record's tokens say so.
    const partial = await extend(3, 9_000);
    expect(partial[0]).toBe(0);
    expect(JSON.parse(partial[1])).toMatchObject({ hold: '10000', output_tokens: '9900' });
    expect(await env.balance('ext')).toMatchObject({ frozen: 10_000, available: 0 });
    // Not one more token: refused, nothing changes; sent again, the partial one holds nothing twice.
    expect((await extend(4, 1))[0]).not.toBe(0);
    expect(JSON.parse((await extend(3, 9_000))[1])).toMatchObject({ hold: '10000', output_tokens: '9900' });
    expect((await env.balance('ext')).frozen).toBe(10_000);
    const usage = JSON.stringify({
      id: 'usage_ext0000000000000', customer_id: 'ext', trace_id: null, wallet: 'credits', model: 'm', endpoint: 'chat.completions', stream: true,
      status: 'settled', input_tokens: 1, output_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, usage_estimated: false,
      cost_credits: 1_200, latency_ms: 1, prices: { input_price_per_million_credits: 1 }, upstream_status: 200,
    });
    expect((await ledger.run('gateway_settle', scope, 'ext', { transactionId: 'gw-ext', cost: 1_200, usageRecord: usage, modelId: 'm' }))[0]).toBe(0);
    expect(await env.balance('ext')).toMatchObject({ used: 1_200, frozen: 0, available: 8_800 });
    // A settled call is not extended.
    expect((await extend(5))[0]).not.toBe(0);
    expect((await env.balance('ext')).frozen).toBe(0);
  });

  it('a wallet with less than a slice left is held down to below one output token\'s price (3 credits a token)', async () => {
    await env.fund('ext3', 1_001);
    const scope = { projectId: env.p.projectId, organizationId: env.p.organizationId };
    const ledger = env.svc.rt.ledger;
    const hold = await ledger.run('gateway_hold', scope, 'ext3', {
      transactionId: 'gw-ext3', wallet: 'credits', inputCostBound: 100, outputPrice: 3_000_000, outputTokens: 100, explicitMax: '0', holdTtlSeconds: 3_600,
      admitted: '1', answers: 1, idempotencyKey: '', keyBudget: '',
    });
    expect(hold[0]).toBe(0);
    await env.svc.rt.redis.hset(bindingKeys(env.svc.rt.config.REDIS_PREFIX, env.p.projectId, 't', 'gw-ext3').ids, 'gw-ext3', `ext3|${Date.now()}`);
    const extend = (extension: number) =>
      ledger.run('gateway_extend', scope, 'ext3', { transactionId: 'gw-ext3', extension, outputPrice: 3_000_000, outputTokens: SLICE, answers: 1, keyBudget: '' });
    // 601 credits left: 200 tokens (600 credits) of the 1024 asked.
    const partial = await extend(1);
    expect(partial[0]).toBe(0);
    expect(JSON.parse(partial[1])).toMatchObject({ hold: '1000', output_tokens: '300' });
    expect(await env.balance('ext3')).toMatchObject({ frozen: 1_000, available: 1 });
    // 1 credit is less than one token's price: refused, nothing held.
    expect((await extend(2))[0]).not.toBe(0);
    expect(await env.balance('ext3')).toMatchObject({ frozen: 1_000, available: 1 });
    const usage = JSON.stringify({
      id: 'usage_ext3000000000000', customer_id: 'ext3', trace_id: null, wallet: 'credits', model: 'm', endpoint: 'chat.completions', stream: true,
      status: 'settled', input_tokens: 1, output_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, usage_estimated: true,
      cost_credits: 1_000, latency_ms: 1, prices: { input_price_per_million_credits: 1 }, upstream_status: 200, hold_exhausted: true,
    });
    expect((await ledger.run('gateway_settle', scope, 'ext3', { transactionId: 'gw-ext3', cost: 1_000, usageRecord: usage, modelId: 'm' }))[0]).toBe(0);
    expect(await env.balance('ext3')).toMatchObject({ used: 1_000, frozen: 0, available: 1 });
    expect(await receipt('gw-ext3')).toMatchObject({ hold_exhausted: true });
  });

  it('a budget that cannot hold one more slice ends the stream as a wallet does; the budget holds nothing after', async () => {
    await env.fund('bud', 1_000_000);
    const body = JSON.stringify(bodyOf('anthropic', 20_000));
    const limit = body.length + SLICE + SLICE / 2;
    const set = await env.svc.call('PATCH', '/v1/customers/bud', { key: env.p.projectKey, body: { budget: { limit, period: 'day' } } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    const r = await post('anthropic', 'bud', body);
    expect(r.status).toBe(200);
    expect(r.trailers['x-service-hold-exhausted']).toBe('true');
    const cost = Number(r.trailers['x-service-cost-credits']);
    expect(cost).toBeLessThanOrEqual(limit);
    expect(r.trailers['x-service-budget-remaining-credits']).toBe(String(limit - cost));
    const customer = (await env.svc.call('GET', '/v1/customers/bud', { key: env.p.projectKey })).body;
    expect(customer.budget).toMatchObject({ spent: cost, held: 0 });
  });

  it('ten concurrent incremental streams on one small wallet never overspend', async () => {
    const deposit = 8_000;
    await env.fund('many', deposit);
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) => post(i % 2 === 0 ? 'openai' : 'anthropic', 'many', JSON.stringify(bodyOf(i % 2 === 0 ? 'openai' : 'anthropic', 5_000)))),
    );
    let charged = 0;
    for (const r of results) {
      if (r.status === 402) continue;
      expect(r.status).toBe(200);
      charged += Number(r.trailers['x-service-cost-credits']);
      expect(Number(r.trailers['x-service-balance-credits'])).toBeGreaterThanOrEqual(0);
    }
    expect(results.some((r) => r.status === 200)).toBe(true);
    // The wallet, not the upstream, ended some: the last ones were served down to its last token.
    expect(results.some((r) => r.trailers['x-service-hold-exhausted'] === 'true')).toBe(true);
    const balance = await env.balance('many');
    expect(balance).toMatchObject({ used: charged, frozen: 0, available: deposit - charged });
    expect(balance.available).toBeGreaterThanOrEqual(0);
  });
});
