/**
 * Body size limits (docs/API.md, "Limits": 413 payload_too_large over 1 MiB on billing,
 * over 8 MiB on the gateway). A body of exactly the limit is served; one byte more is
 * refused whether its length is declared or it comes chunked, and nothing is charged,
 * relayed or bound: the balance, the ledger and the plan count stay as they were, and
 * the refused request's identifiers are free for a later request.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANTHROPIC_MODEL, OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv, type RawResponse } from '../gateway/support.js';
import { expectError } from '../support/errors.js';

const body_bytes_max_billing = 1024 * 1024;
const body_bytes_max_gateway = 8 * 1024 * 1024;

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
  // Enough for the hold of an 8 MiB prompt: a token is at least one byte, held at the
  // dearest input-side price (cache write, 3.75 credits per token).
  await env.fund('big', 40_000_000);
});
afterAll(() => env?.close());

async function state(customer = 'big') {
  const { as_of: _asOf, ...balance } = (await env.balance(customer)) as unknown as Record<string, unknown>;
  return { balance, ledger: await env.ledger(customer), ops: await env.ops() };
}

/**
 * A JSON body of exactly `bytes` bytes: `make(padding)` with the padding sized to fit. A
 * string from `make` is the body as it is.
 */
function sized(bytes: number, make: (padding: string) => unknown): string {
  const render = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));
  const overhead = Buffer.byteLength(render(make('')));
  const body = render(make('x'.repeat(bytes - overhead)));
  expect(Buffer.byteLength(body)).toBe(bytes);
  return body;
}

/** POST without Content-Length (chunked), so the limit is found while reading, not from a header. */
function postChunked(path: string, headers: Record<string, string>, body: string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${env.svc.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } });
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, trailers: res.trailers, text, json: () => JSON.parse(text) });
      });
    });
    const step = 256 * 1024;
    for (let i = 0; i < body.length; i += step) req.write(body.slice(i, i + step));
    req.end();
  });
}

describe('gateway: 8 MiB', () => {
  const openai = (padding: string) => ({ model: OPENAI_MODEL, max_tokens: 5, messages: [{ role: 'user', content: padding }] });
  const anthropic = (padding: string) => ({ model: ANTHROPIC_MODEL, max_tokens: 5, messages: [{ role: 'user', content: padding }] });
  const headers = { 'x-service-customer': 'big' };

  it('refuses a body one byte over the limit on both endpoints, declared or chunked, charging and relaying nothing', async () => {
    const before = await state();
    const sent = env.mock.requests.length;
    const cases: [string, () => Promise<RawResponse>][] = [
      ['chat.completions', () => rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers, body: sized(body_bytes_max_gateway + 1, openai) })],
      ['messages', () => rawPost(env.svc.url, '/v1/messages', { key: env.p.projectKey, headers, body: sized(body_bytes_max_gateway + 1, anthropic) })],
      ['chat.completions, chunked', () => postChunked('/v1/chat/completions', { authorization: `Bearer ${env.p.projectKey}`, ...headers }, sized(body_bytes_max_gateway + 1, openai))],
      [
        'chat.completions, customer key, with an Idempotency-Key',
        async () => rawPost(env.svc.url, '/v1/chat/completions', { key: await env.p.customerKey('big'), headers: { 'idempotency-key': 'big-1' }, body: sized(body_bytes_max_gateway + 1, openai) }),
      ],
    ];
    for (const [label, run] of cases) expectError(await run(), 413, 'payload_too_large', { label });
    expect(env.mock.requests.length).toBe(sent);
    expect(await state()).toEqual(before);

    // The refused call claimed nothing: its Idempotency-Key still serves a first call.
    const small = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers: { ...headers, 'idempotency-key': 'big-1' }, body: openai('hi') });
    expect(small.status, small.text).toBe(200);
  });

  it('serves a body of exactly the limit', async () => {
    const before = await state();
    const res = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers, body: sized(body_bytes_max_gateway, openai) });
    expect(res.status, res.text.slice(0, 300)).toBe(200);
    expect((await env.ledger('big', 'GATEWAY')).length).toBe(before.ledger.filter((e) => e.type === 'GATEWAY').length + 1);
  });
});

describe('billing: 1 MiB', () => {
  // Padded with whitespace after the object: billing endpoints refuse an unknown field.
  const deduct = (transactionId: string) => (padding: string) =>
    JSON.stringify({ customer_id: 'big', transaction_id: transactionId, amount: 5 }) + ' '.repeat(padding.length);

  it('refuses a deduct one byte over the limit, declared or chunked, applying nothing and leaving its transaction id free', async () => {
    const before = await state();
    const key = env.p.projectKey;
    expectError(await rawPost(env.svc.url, '/v1/billing/deduct', { key, body: sized(body_bytes_max_billing + 1, deduct('too-big')) }), 413, 'payload_too_large', { label: 'deduct' });
    expectError(await postChunked('/v1/billing/deduct', { authorization: `Bearer ${key}` }, sized(body_bytes_max_billing + 1, deduct('too-big'))), 413, 'payload_too_large', { label: 'deduct, chunked' });
    expect(await state()).toEqual(before);

    const retry = await rawPost(env.svc.url, '/v1/billing/deduct', { key, body: deduct('too-big')('') });
    expect(retry.status, retry.text).toBe(200);
    expect(retry.json()).toMatchObject({ is_idempotent_replay: false });
  });

  it('applies a deduct of exactly the limit', async () => {
    const before = await state();
    const res = await rawPost(env.svc.url, '/v1/billing/deduct', { key: env.p.projectKey, body: sized(body_bytes_max_billing, deduct('at-limit')) });
    expect(res.status, res.text.slice(0, 300)).toBe(200);
    expect((await state()).balance.available).toBe((before.balance.available as number) - 5);
  });
});
