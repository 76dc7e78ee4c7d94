/**
 * What a gateway refusal tells its caller (issue 12, sections 2 to 4): the 402
 * insufficient_balance says the hold it needed, what the wallet has, which wallet, the
 * output limit that would fit, and the other wallets that hold credits (with the header
 * that picks one); a wallet that never had a source says so. On /v1/messages every error
 * of the gateway's own carries Anthropic's envelope as well, so that @anthropic-ai/sdk's
 * `err.message` is the service's message; the OpenAI SDK reads the service's envelope as
 * it is.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/server.js';
import { hashSecret } from '../../src/keys/secrets.js';
import { periodAt } from '../../src/plans/catalogue.js';
import { inputCostBound } from '../../src/gateway/pricing.js';
import type { TestProject } from '../helpers.js';
import { ANTHROPIC_MODEL, closedPort, MAX_OUTPUT_TOKENS, OPENAI_MODEL, PRICES, rawPost, rawRequest, startGatewayEnv, type GatewayEnv } from './support.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv({ config: { UPSTREAM_TIMEOUT_MS: 1_000 } });
  await env.putModel('claude-no-key', { provider: 'anthropic', upstream_api_key: null });
  await env.putModel('claude-no-stream', { provider: 'anthropic', supports_streaming: false });
  await env.putModel('claude-closed', { provider: 'anthropic', upstream_base_url: `http://127.0.0.1:${await closedPort()}/v1` });
  await env.fund('rich', 1_000_000);
  await env.fund('sdk-poor', 5);
});
afterAll(() => env?.close());

const ask = (output_tokens = 1) => [{ role: 'user', content: `a question ${mockDirective({ output_tokens })}` }];

function post(path: string, customer: string, body: Record<string, unknown>, headers: Record<string, string> = {}) {
  return rawPost(env.svc.url, path, { key: env.p.projectKey, headers: { 'x-service-customer': customer, ...headers }, body });
}

describe('402 insufficient_balance on the gateway', () => {
  it('says the hold, the wallet and its credits, and the max_tokens that would fit; that limit passes and one more does not', async () => {
    await env.fund('mt', 5_000);
    const body = { model: ANTHROPIC_MODEL, max_tokens: 4_000, messages: ask() };
    const res = await post('/v1/messages', 'mt', body);
    expect(res.status, res.text).toBe(402);
    const input = inputCostBound(Buffer.byteLength(JSON.stringify(body)), PRICES);
    const output = Math.ceil((4_000 * PRICES.output) / 1e6);
    const fits = Math.floor(((5_000 - input) * 1e6) / PRICES.output);
    const error = res.json().error;
    expect(error).toMatchObject({
      code: 'insufficient_balance',
      type: 'bad_request',
      message:
        `insufficient balance: this call needs a hold of ${input + output} credits (input bound ${input}, output bound ${output} for 4000 output tokens) ` +
        `and wallet credits has 5000 credits available. Lower max_tokens to ${fits} or less to fit.`,
      details: {
        wallet: 'credits',
        required_credits: input + output,
        available_credits: 5_000,
        input_bound_credits: input,
        output_bound_credits: output,
        output_tokens: 4_000,
        max_tokens_that_fit: fits,
        available_credits_by_wallet: { credits: 5_000 },
        wallets_without_sources: [],
      },
    });
    // The advice is exact: the same call with the limit it names is held; one more token is not.
    // (The hold depends on the body's length: 4000 and the limits below have as many digits.)
    expect(String(fits).length).toBe(4);
    const over = await post('/v1/messages', 'mt', { ...body, max_tokens: fits + 1 });
    expect(over.status, over.text).toBe(402);
    const fitted = await post('/v1/messages', 'mt', { ...body, max_tokens: fits, messages: ask() });
    expect(fitted.status, fitted.text).toBe(200);
  });

  it('names OpenAI max_completion_tokens when the client set it', async () => {
    await env.fund('mct', 900);
    const res = await post('/v1/chat/completions', 'mct', { model: OPENAI_MODEL, max_completion_tokens: 4_000, messages: ask() });
    expect(res.status, res.text).toBe(402);
    expect(res.json().error.message).toMatch(/ Lower max_completion_tokens to \d+ or less to fit\.$/);
  });

  it('does not suggest a lower max_tokens when not even the input bound fits', async () => {
    await env.fund('tiny', 10);
    const body = { model: OPENAI_MODEL, messages: ask() };
    const res = await post('/v1/chat/completions', 'tiny', body);
    expect(res.status, res.text).toBe(402);
    const input = inputCostBound(Buffer.byteLength(JSON.stringify(body)), PRICES);
    const one = Math.ceil(PRICES.output / 1e6);
    expect(res.json().error.message).toBe(
      `insufficient balance: this call needs a hold of at least ${input + one} credits (its input bound ${input} and one output token ${one}) and wallet credits has 10 credits available.`,
    );
    expect(res.json().error.details).toMatchObject({ required_credits: input + one, available_credits: 10, output_tokens: 1, max_tokens_that_fit: null });
    expect(res.json().error.message).not.toContain('max_tokens');
  });

  it('says when the wallet never had a source, and points to X-Service-Wallet where the credits are (deposits of contract A land in default)', async () => {
    await env.fund('trap', 8_999_942, { wallet: 'default' });
    const body = { model: ANTHROPIC_MODEL, max_tokens: 100, messages: ask() };
    const res = await post('/v1/messages', 'trap', body);
    expect(res.status, res.text).toBe(402);
    const input = inputCostBound(Buffer.byteLength(JSON.stringify(body)), PRICES);
    const output = Math.ceil((100 * PRICES.output) / 1e6);
    expect(res.json().error).toMatchObject({
      code: 'insufficient_balance',
      message:
        `wallet credits has no sources: nothing was ever deposited to it; this call needs a hold of ${input + output} credits (input bound ${input}, output bound ${output} for 100 output tokens). ` +
        'Other wallets of this customer hold credits: default (8999942 available); to draw from one, send the header X-Service-Wallet: default.',
      details: { wallet: 'credits', available_credits: 0, available_credits_by_wallet: { default: 8_999_942 }, wallets_without_sources: ['credits'] },
    });
    // What the message says to do works.
    const followed = await post('/v1/messages', 'trap', body, { 'x-service-wallet': 'default' });
    expect(followed.status, followed.text).toBe(200);
  });

  it('points to another wallet that holds credits when the billed one is spent', async () => {
    await env.fund('spent', 3, { wallet: 'credits' });
    await env.fund('spent', 5_000_000, { wallet: 'promo' });
    const res = await post('/v1/chat/completions', 'spent', { model: OPENAI_MODEL, messages: ask() });
    expect(res.status, res.text).toBe(402);
    expect(res.json().error.message).toMatch(
      /^insufficient balance: this call needs a hold of at least \d+ credits \(.*\) and wallet credits has 3 credits available\. Other wallets of this customer hold credits: promo \(5000000 available\); to draw from one, send the header X-Service-Wallet: promo\.$/,
    );
    expect(res.json().error.details).toMatchObject({ wallet: 'credits', available_credits: 3, available_credits_by_wallet: { credits: 3, promo: 5_000_000 } });
  });
});

/**
 * Every error of the gateway's own that /v1/messages can answer, through the Anthropic
 * SDK: its message is `<status> <the service's message>`, never the body as JSON.
 */
describe('/v1/messages errors through @anthropic-ai/sdk', () => {
  let limited: TestProject;
  let full: TestProject;
  beforeAll(async () => {
    // A project whose organization used the Free plan's 50,000 operations (set in Redis,
    // as test/gateway/errors.test.ts does).
    full = await env.svc.project('B');
    await env.putModel(ANTHROPIC_MODEL, { provider: 'anthropic' }, full);
    await env.fund('rich', 1_000_000, { project: full });
    const rt = env.svc.rt;
    await rt.plans.giveBackLeases(full.organizationId);
    await rt.plans.organization(full.organizationId);
    const period = periodAt(await rt.plans.organizationAnchor(full.organizationId), Date.now() + rt.clock.offsetMs());
    await rt.redis.set(`${rt.config.REDIS_PREFIX}o:{${full.organizationId}}:ops:${period.startMs}`, 50_000);
    // A project of its own, limited to one request a minute.
    limited = await env.svc.project('B');
    await env.putModel(ANTHROPIC_MODEL, { provider: 'anthropic' }, limited);
    const patched = await env.svc.call('PATCH', `/v1/admin/projects/${limited.projectId}`, { key: limited.adminKey, body: { rate_limit_per_minute: 1 } });
    expect(patched.status).toBe(200);
  });

  const request = (o: Partial<Anthropic.MessageCreateParamsNonStreaming> = {}) => ({ model: ANTHROPIC_MODEL, max_tokens: 20, messages: ask(), ...o }) as Anthropic.MessageCreateParamsNonStreaming;

  const cases: { name: string; status: number; code: string; run: () => Promise<unknown> }[] = [
    { name: 'an invalid key', status: 401, code: 'invalid_api_key', run: () => env.anthropic({ key: `svc_live_${'x'.repeat(40)}`, customer: 'rich' }).messages.create(request()) },
    {
      name: 'a revoked key',
      status: 401,
      code: 'api_key_revoked',
      run: async () => {
        const key = await env.p.customerKey('rich');
        await env.svc.rt.db.query(sql.unsafe`UPDATE api_keys SET revoked_at = now() WHERE secret_hash = ${sql.binary(hashSecret(key))}`);
        return env.anthropic({ key }).messages.create(request());
      },
    },
    { name: 'an admin key', status: 403, code: 'permission_denied', run: () => env.anthropic({ key: env.p.adminKey, customer: 'rich' }).messages.create(request()) },
    { name: 'no customer', status: 400, code: 'customer_required', run: () => env.anthropic().messages.create(request()) },
    { name: 'an invalid max_tokens', status: 400, code: 'invalid_request', run: () => env.anthropic({ customer: 'rich' }).messages.create(request({ max_tokens: -1 })) },
    { name: 'an invalid X-Service-Wallet', status: 400, code: 'invalid_request', run: () => env.anthropic({ customer: 'rich', headers: { 'X-Service-Wallet': 'no spaces' } }).messages.create(request()) },
    { name: 'an unknown model', status: 404, code: 'model_not_found', run: () => env.anthropic({ customer: 'rich' }).messages.create(request({ model: 'claude-none' })) },
    { name: 'a model of the other format', status: 400, code: 'invalid_request', run: () => env.anthropic({ customer: 'rich' }).messages.create(request({ model: OPENAI_MODEL })) },
    {
      name: 'a model outside allowed_models',
      status: 403,
      code: 'model_not_allowed',
      run: async () => env.anthropic({ key: await env.p.customerKey('rich', { allowedModels: [OPENAI_MODEL] }) }).messages.create(request()),
    },
    { name: 'a model without an upstream key', status: 402, code: 'byok_key_required', run: () => env.anthropic({ customer: 'rich' }).messages.create(request({ model: 'claude-no-key' })) },
    {
      name: 'a stream on a model that does not stream',
      status: 400,
      code: 'invalid_request',
      run: () => env.anthropic({ customer: 'rich' }).messages.create({ ...request({ model: 'claude-no-stream' }), stream: true }),
    },
    { name: 'an unknown customer', status: 404, code: 'customer_not_found', run: () => env.anthropic({ customer: 'nobody' }).messages.create(request()) },
    { name: 'a wallet that cannot pay', status: 402, code: 'insufficient_balance', run: () => env.anthropic({ customer: 'sdk-poor' }).messages.create(request()) },
    {
      name: 'a reused Idempotency-Key',
      status: 409,
      code: 'idempotency_key_reused',
      run: async () => {
        const client = env.anthropic({ customer: 'rich', headers: { 'Idempotency-Key': `ik-${Date.now()}` } });
        await client.messages.create(request());
        return client.messages.create(request());
      },
    },
    {
      name: 'a body over 8 MiB',
      status: 413,
      code: 'payload_too_large',
      run: () => env.anthropic({ customer: 'rich' }).messages.create(request({ messages: [{ role: 'user', content: 'x'.repeat(8 * 1024 * 1024) }] })),
    },
    { name: 'an unreachable upstream', status: 502, code: 'upstream_error', run: () => env.anthropic({ customer: 'rich' }).messages.create(request({ model: 'claude-closed' })) },
    {
      name: 'an upstream too slow to answer',
      status: 504,
      code: 'upstream_timeout',
      run: () => env.anthropic({ customer: 'rich' }).messages.create(request({ messages: [{ role: 'user', content: `slow ${mockDirective({ fail: 'timeout' })}` }] })),
    },
    { name: 'the Free plan limit', status: 429, code: 'usage_limit_exceeded', run: () => env.anthropic({ key: full.projectKey, customer: 'rich' }).messages.create(request()) },
    {
      name: 'the rate limit',
      status: 429,
      code: 'rate_limited',
      run: async () => {
        const client = env.anthropic({ key: limited.projectKey, customer: 'nobody' });
        await client.messages.create(request()).catch(() => undefined);
        return client.messages.create(request());
      },
    },
  ];

  it.each(cases)('$name: err.message is the service message', async ({ status, code, run }) => {
    const err = await run().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Anthropic.APIError);
    const e = err as InstanceType<typeof Anthropic.APIError>;
    const body = e.error as { type: string; message: string; error: { code: string; message: string; type: string } };
    expect(e.status).toBe(status);
    // The service's envelope, with Anthropic's beside it.
    expect(body.type).toBe('error');
    expect(body.error.code).toBe(code);
    expect(body.message).toBe(body.error.message);
    expect(e.message).toBe(`${status} ${body.error.message}`);
    expect(e.message).not.toContain('{');
  });

  it('has the same envelope on what the SDK cannot send: no key, a body that is not JSON', async () => {
    const noKey = await rawRequest(env.svc.url, 'POST', '/v1/messages', { body: request() });
    const notJson = await rawRequest(env.svc.url, 'POST', '/v1/messages', { key: env.p.projectKey, headers: { 'x-service-customer': 'rich' }, body: '{"model": ' });
    for (const [res, status, code] of [[noKey, 401, 'missing_api_key'], [notJson, 400, 'invalid_json']] as const) {
      expect(res.status).toBe(status);
      const body = res.json();
      expect(body).toEqual({ type: 'error', message: body.error.message, error: expect.objectContaining({ code, message: expect.any(String) }) });
    }
  });

  it('leaves the chat completions envelope without the Anthropic fields', async () => {
    const res = await post('/v1/chat/completions', 'rich', { model: 'gpt-none', messages: ask() });
    expect(res.status).toBe(404);
    expect(Object.keys(res.json())).toEqual(['error']);
  });
});

describe('/v1/chat/completions errors through the OpenAI SDK', () => {
  const cases: { name: string; status: number; code: string; run: () => Promise<unknown> }[] = [
    { name: 'an invalid key', status: 401, code: 'invalid_api_key', run: () => env.openai({ key: `svc_live_${'x'.repeat(40)}`, customer: 'rich' }).chat.completions.create({ model: OPENAI_MODEL, messages: [{ role: 'user', content: 'hi' }] }) },
    { name: 'an unknown model', status: 404, code: 'model_not_found', run: () => env.openai({ customer: 'rich' }).chat.completions.create({ model: 'gpt-none', messages: [{ role: 'user', content: 'hi' }] }) },
    {
      name: 'a wallet that cannot pay',
      status: 402,
      code: 'insufficient_balance',
      run: () => env.openai({ customer: 'sdk-poor' }).chat.completions.create({ model: OPENAI_MODEL, max_tokens: MAX_OUTPUT_TOKENS, messages: [{ role: 'user', content: 'hi' }] }),
    },
  ];

  it.each(cases)('$name: err.message is the service message', async ({ status, code, run }) => {
    const err = await run().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.APIError);
    const e = err as InstanceType<typeof OpenAI.APIError>;
    expect(e.status).toBe(status);
    expect(e.code).toBe(code);
    const message = (e.error as { message: string }).message;
    expect(e.message).toBe(`${status} ${message}`);
    expect(e.message).not.toContain('{');
  });
});
