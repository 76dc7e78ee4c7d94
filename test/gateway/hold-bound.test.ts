/**
 * What bytes do not bound (docs/API.md, "What bytes do not bound"): each image and file
 * part of a call adds its model's per-part token bound to the hold, in both wire formats,
 * so that the review's scenario (many concurrent image calls whose upstream reports far
 * more input than the request's bytes, on a small wallet) bills every answered call in
 * full and refuses the rest with 402. A shortfall that still happens (the upstream reports
 * more than any bound) is recorded as `uncovered_credits` on the receipt and the usage
 * record, counted in /metrics, and not taken from a later deposit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { expectError } from '../support/errors.js';
import { reconcileOverApi } from '../helpers.js';
import { rawPost, startGatewayEnv, type GatewayEnv, type RawResponse } from './support.js';

let env: GatewayEnv;

/** Credits per million tokens: 0.1 credit a token, cache prices 0, so the input bound is at the input price. */
const PRICE = 100_000;
/** The bounds published by the providers that docs/API.md cites: the largest per image (Anthropic's high-resolution rule). */
const IMAGE_BOUND = 4_784;
const FILE_BOUND = 100 * (3_000 + IMAGE_BOUND);
const VISION = { openai: 'vision-openai', anthropic: 'vision-anthropic' } as const;
type Format = keyof typeof VISION;
const formats: Format[] = ['openai', 'anthropic'];

beforeAll(async () => {
  env = await startGatewayEnv();
  for (const provider of formats) {
    await env.putModel(VISION[provider], {
      provider,
      input_price_per_million_credits: PRICE,
      output_price_per_million_credits: PRICE,
      cache_read_price_per_million_credits: 0,
      cache_write_price_per_million_credits: 0,
    });
  }
}, 60_000);
afterAll(async () => {
  try {
    await env.svc.drained();
    const report = await reconcileOverApi(env.svc, env.p);
    expect(report.errors).toEqual([]);
    expect(report.drift).toEqual([]);
  } finally {
    await env.close();
  }
});

/** ceil(tokens x price / 10^6), as docs/API.md rounds a call. */
const creditsOf = (tokens: number) => Math.ceil((tokens * PRICE) / 1_000_000);

/** A user message with a text part (carrying the mock's directive) and an image part, in the format's own shape. */
function imageCall(format: Format, directive: string, extra: { images?: number; files?: number; model?: string } = {}) {
  const images = extra.images ?? 1;
  const files = extra.files ?? 0;
  const content: unknown[] = [{ type: 'text', text: `what is in the picture? ${directive}` }];
  for (let i = 0; i < images; i++) {
    content.push(format === 'openai' ? { type: 'image_url', image_url: { url: `https://images.example/${i}.png` } } : { type: 'image', source: { type: 'url', url: `https://images.example/${i}.png` } });
  }
  for (let i = 0; i < files; i++) {
    content.push(format === 'openai' ? { type: 'file', file: { file_id: `file-${i}` } } : { type: 'document', source: { type: 'file', file_id: `file_${i}` } });
  }
  return { model: extra.model ?? VISION[format], messages: [{ role: 'user', content }], max_tokens: 1 };
}

function post(format: Format, customer: string, body: unknown): Promise<RawResponse> {
  return rawPost(env.svc.url, format === 'openai' ? '/v1/chat/completions' : '/v1/messages', { key: env.p.projectKey, headers: { 'x-service-customer': customer }, body });
}

async function receipt(txid: string) {
  const r = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as { cost_credits: number; uncovered_credits: number; reserved_credits: number };
}

async function usageOf(customer: string) {
  const r = await env.svc.call('GET', `/v1/usage?customer_id=${customer}`, { key: env.p.projectKey });
  expect(r.status).toBe(200);
  return r.body.data as { transaction_id: string; cost_credits: number; uncovered_credits: number }[];
}

/** The unlabelled counters of /metrics (the API port serves them when METRICS_PORT is unset). */
async function uncoveredCounters(): Promise<{ calls: number; credits: number }> {
  const text = await (await fetch(`${env.svc.url}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { calls: read('svc_gateway_uncovered_calls_total'), credits: read('svc_gateway_uncovered_credits_total') };
}

describe.each(formats)('%s: image calls on a small wallet (the review\'s scenario)', (format) => {
  it('holds enough per call: the calls answered 200 are billed in full, the rest get 402, the wallet never goes below 0', async () => {
    const customer = `burst-${format}`;
    await env.fund(customer, 2_000);
    const body = imageCall(format, mockDirective({ input_tokens: 4_000, output_tokens: 1 }));
    const cost = creditsOf(4_000 + 1);
    const bytes = Buffer.byteLength(JSON.stringify(body));
    const results = await Promise.all(Array.from({ length: 20 }, () => post(format, customer, body)));

    const answered = results.filter((r) => r.status === 200);
    for (const r of results) if (r.status !== 200) expectError(r, 402, 'insufficient_balance');
    expect(answered.length).toBeGreaterThan(0);
    expect(answered.length).toBeLessThan(20);
    for (const r of answered) {
      // The hold: the body's bytes and one image's bound, at the input price, and the one output token.
      expect(Number(r.headers['x-service-reserved-credits'])).toBe(creditsOf(bytes + IMAGE_BOUND) + creditsOf(1));
      expect(Number(r.headers['x-service-cost-credits'])).toBe(cost);
    }
    const balance = await env.balance(customer);
    expect(balance).toMatchObject({ total: 2_000, used: cost * answered.length, frozen: 0 });
    expect(balance.available).toBeGreaterThanOrEqual(0);

    await env.svc.drained();
    const records = await usageOf(customer);
    expect(records).toHaveLength(answered.length);
    for (const u of records) expect(u).toMatchObject({ cost_credits: cost, uncovered_credits: 0 });
  });
});

describe.each(formats)('%s: an upstream that reports more than any bound', (format) => {
  it('records uncovered_credits on the receipt and the usage record and counts it; the next deposit does not pay it', async () => {
    const customer = `uncovered-${format}`;
    await env.fund(customer, 1_000);
    expect((await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: env.p.projectKey, body: { low_balance_threshold: 500 } })).status).toBe(200);
    const before = await uncoveredCounters();
    const res = await post(format, customer, imageCall(format, mockDirective({ input_tokens: 50_000, output_tokens: 1 })));
    expect(res.status).toBe(200);
    const cost = creditsOf(50_000 + 1);
    expect(Number(res.headers['x-service-cost-credits'])).toBe(1_000);
    expect(res.headers['x-service-balance-credits']).toBe('0');
    const txid = String(res.headers['x-service-transaction-id']);

    // From the outbox right away, then from PostgreSQL once persisted.
    expect(await receipt(txid)).toMatchObject({ cost_credits: 1_000, uncovered_credits: cost - 1_000 });
    await env.svc.drained();
    expect(await receipt(txid)).toMatchObject({ cost_credits: 1_000, uncovered_credits: cost - 1_000 });
    expect(await usageOf(customer)).toEqual([expect.objectContaining({ transaction_id: txid, cost_credits: 1_000, uncovered_credits: cost - 1_000 })]);
    const after = await uncoveredCounters();
    expect(after.calls - before.calls).toBe(1);
    expect(after.credits - before.credits).toBe(cost - 1_000);
    // The events of the call (lua/includes/events.lua, alerts.lua): the shortfall, and the
    // hold and settlement taking the wallet below the threshold and to 0, each once.
    const events = async (type: string) => (await env.svc.call('GET', `/v1/events?customer_id=${customer}&type=${type}`, { key: env.p.projectKey })).body.data;
    expect(await events('charge.uncovered')).toEqual([
      expect.objectContaining({ data: expect.objectContaining({ customer_id: customer, transaction_id: txid, cost, charged: 1_000, uncovered: cost - 1_000 }) }),
    ]);
    expect(await events('balance.low')).toHaveLength(1);
    expect(await events('balance.depleted')).toHaveLength(1);

    // A deposit is the customer's: the shortfall stays recorded, and is not drawn from it.
    await env.fund(customer, 10_000);
    expect(await env.balance(customer)).toMatchObject({ total: 11_000, used: 1_000, frozen: 0, available: 10_000 });
    const next = await post(format, customer, imageCall(format, mockDirective({ input_tokens: 10, output_tokens: 1 })));
    expect(next.status).toBe(200);
    expect(Number(next.headers['x-service-cost-credits'])).toBe(creditsOf(11));
    expect(await env.balance(customer)).toMatchObject({ used: 1_000 + creditsOf(11), available: 10_000 - creditsOf(11) });
    expect(await receipt(String(next.headers['x-service-transaction-id']))).toMatchObject({ uncovered_credits: 0 });
  });
});

describe('per-model part bounds', () => {
  it('are shown in the model entry (the defaults when unset) and set by PUT and PATCH', async () => {
    const path = `/v1/admin/projects/${env.p.projectId}/models/${VISION.openai}`;
    const got = await env.svc.call('GET', '/v1/models', { key: env.p.projectKey });
    expect(got.body.data.find((m: { id: string }) => m.id === VISION.openai)).toMatchObject({ image_token_bound: IMAGE_BOUND, file_token_bound: FILE_BOUND });

    await env.putModel('vision-small', { provider: 'anthropic', image_token_bound: 10, file_token_bound: 0 });
    const listed = await env.svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models`, { key: env.p.adminKey });
    expect(listed.body.data.find((m: { id: string }) => m.id === 'vision-small')).toMatchObject({ image_token_bound: 10, file_token_bound: 0 });

    const patched = await env.svc.call('PATCH', path, { key: env.p.adminKey, body: { file_token_bound: 1_000 } });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ image_token_bound: IMAGE_BOUND, file_token_bound: 1_000 });
    const reset = await env.svc.call('PATCH', path, { key: env.p.adminKey, body: { file_token_bound: null } });
    expect(reset.body).toMatchObject({ file_token_bound: FILE_BOUND });

    const refused = await env.svc.call('PATCH', path, { key: env.p.adminKey, body: { image_token_bound: -1 } });
    expectError(refused, 400, 'invalid_request', { param: 'image_token_bound' });
  });

  it.each(formats)('%s: add one bound per image part and per file part, also inside an Anthropic tool_result', async (format) => {
    const model = `parts-${format}`;
    await env.putModel(model, {
      provider: format,
      input_price_per_million_credits: PRICE,
      output_price_per_million_credits: PRICE,
      cache_read_price_per_million_credits: 0,
      cache_write_price_per_million_credits: 0,
      image_token_bound: 1_000,
      file_token_bound: 7_000,
    });
    const customer = `parts-${format}`;
    await env.fund(customer, 1_000_000);
    const body = imageCall(format, mockDirective({ output_tokens: 1 }), { images: 3, files: 2, model });
    if (format === 'anthropic') {
      body.messages.unshift(
        { role: 'user', content: [{ type: 'text', text: 'look it up' }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'fetch', input: {} }] },
      );
      (body.messages[2].content as unknown[]).unshift({ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'image', source: { type: 'url', url: 'https://images.example/t.png' } }] });
    }
    const images = format === 'anthropic' ? 4 : 3;
    const res = await post(format, customer, body);
    expect(res.status, res.text).toBe(200);
    const bytes = Buffer.byteLength(JSON.stringify(body));
    expect(Number(res.headers['x-service-reserved-credits'])).toBe(creditsOf(bytes + images * 1_000 + 2 * 7_000) + creditsOf(1));
  });

  it('bound all parts together by the context window', async () => {
    await env.putModel('parts-window', {
      provider: 'openai',
      input_price_per_million_credits: PRICE,
      output_price_per_million_credits: PRICE,
      cache_read_price_per_million_credits: 0,
      cache_write_price_per_million_credits: 0,
      context_window: 8_000,
      max_output_tokens: 100,
    });
    await env.fund('parts-window', 1_000_000);
    const body = imageCall('openai', mockDirective({ output_tokens: 1 }), { images: 1, files: 3, model: 'parts-window' });
    const res = await post('openai', 'parts-window', body);
    expect(res.status, res.text).toBe(200);
    const bytes = Buffer.byteLength(JSON.stringify(body));
    expect(Number(res.headers['x-service-reserved-credits'])).toBe(creditsOf(bytes + 8_000) + creditsOf(1));
  });

  it('leave a call without parts held by its bytes alone, and billed with uncovered_credits 0', async () => {
    await env.fund('text-only', 1_000_000);
    const body = { model: VISION.openai, messages: [{ role: 'user', content: `hello ${mockDirective({ output_tokens: 1 })}` }], max_tokens: 1 };
    const res = await post('openai', 'text-only', body);
    expect(res.status).toBe(200);
    expect(Number(res.headers['x-service-reserved-credits'])).toBe(creditsOf(Buffer.byteLength(JSON.stringify(body))) + creditsOf(1));
    expect(await receipt(String(res.headers['x-service-transaction-id']))).toMatchObject({ uncovered_credits: 0 });
  });
});
