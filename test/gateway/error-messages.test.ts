/**
 * What a gateway refusal tells its caller (issue 12, sections 2 to 4): the 402
 * insufficient_balance says the hold it needed, what the wallet has, which wallet, the
 * output limit that would fit, and the other wallets that hold credits (with the header
 * that picks one); a wallet that never had a source says so. A bad call lists every
 * invalid header and body field in `error.errors`. On /v1/messages every error of the
 * gateway's own carries Anthropic's envelope as well, so that @anthropic-ai/sdk's
 * `err.message` is the service's message; the OpenAI SDK reads the service's envelope as
 * it is. Both are shown on every error the gateway documents.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { hashSecret } from '../../src/keys/secrets.js';
import { readSources } from '../../src/ledger/sources.js';
import { codeOf, describedRoutes, routeErrors } from '../../src/openapi/registry.js';
import { periodAt } from '../../src/plans/catalogue.js';
import { customerKeys } from '../../src/redis/keys.js';
import { inputCostBound } from '../../src/gateway/pricing.js';
import { startTestService, waitFor, type TestProject, type TestService } from '../helpers.js';
import { ANTHROPIC_MODEL, closedPort, modelBody, OPENAI_MODEL, PRICES, rawPost, rawRequest, startGatewayEnv, type GatewayEnv } from './support.js';
import { expectError } from '../support/errors.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { ownRedis, type OwnRedis } from '../support/own-redis.js';

let env: GatewayEnv;

type Sdk = 'anthropic' | 'openai';
const sdks: readonly Sdk[] = ['anthropic', 'openai'];

/** A model of the SDK's format made in beforeAll: `claude-<what>` or `gpt-<what>`. */
const modelOf = (sdk: Sdk, what: string) => `${sdk === 'anthropic' ? 'claude' : 'gpt'}-${what}`;

beforeAll(async () => {
  env = await startGatewayEnv({ config: { UPSTREAM_TIMEOUT_MS: 1_000 } });
  const closed = `http://127.0.0.1:${await closedPort()}/v1`;
  for (const sdk of sdks) {
    await env.putModel(modelOf(sdk, 'no-key'), { provider: sdk, upstream_api_key: null });
    await env.putModel(modelOf(sdk, 'no-stream'), { provider: sdk, supports_streaming: false });
    await env.putModel(modelOf(sdk, 'closed'), { provider: sdk, upstream_base_url: closed });
    await env.putModel(modelOf(sdk, 'bad-key'), { provider: sdk });
    // The ciphertext of another model's upstream key: it does not decrypt on this row (as
    // after a change of SVC_MASTER_KEY), an error of the service's own.
    await env.svc.rt.db.query(sql.unsafe`
      UPDATE models SET upstream_key_ciphertext = (SELECT upstream_key_ciphertext FROM models WHERE project_id = ${env.p.projectId} AND id = ${modelOf(sdk, 'closed')})
      WHERE project_id = ${env.p.projectId} AND id = ${modelOf(sdk, 'bad-key')}`);
  }
  await env.fund('rich', 1_000_000);
  await env.fund('sdk-poor', 5);
  await env.fund('sdk-budget', 1_000_000);
  const budget = await env.svc.call('PATCH', '/v1/customers/sdk-budget', { key: env.p.projectKey, body: { budget: { limit: 5, period: 'day' } } });
  expect(budget.status).toBe(200);
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
    const input = inputCostBound(Buffer.byteLength(JSON.stringify(body)), PRICES);
    const output = Math.ceil((4_000 * PRICES.output) / 1e6);
    const fits = Math.floor(((5_000 - input) * 1e6) / PRICES.output);
    expectError(res, 402, 'insufficient_balance', {
      message:
        `insufficient balance: this call needs a hold of ${input + output} credits (input bound ${input}, output bound ${output} for 4000 output tokens) ` +
        `and wallet credits has 5000 credits available. Lower max_tokens to ${fits} or less to fit.`,
      fields: {
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

describe('every invalid header and body field at once', () => {
  const badHeaders = {
    'x-service-api-variant': 'C',
    'x-service-wallet': 'no spaces',
    'x-service-trace-id': 't'.repeat(257),
    'idempotency-key': 'k'.repeat(257),
    'x-service-stream-billing': 'sometimes',
    'x-service-hold': 'lazy',
  };
  const invalid = (param: string | null, message: string | RegExp, code = 'invalid_request') => ({ param, code, message: typeof message === 'string' ? message : expect.stringMatching(message) });
  const variant = invalid('X-Service-Api-Variant', 'X-Service-Api-Variant must be A or B');
  const headerErrors = [
    invalid('X-Service-Wallet', 'X-Service-Wallet is not a valid wallet name'),
    invalid('X-Service-Trace-Id', 'X-Service-Trace-Id must be 1-256 characters'),
    invalid('Idempotency-Key', 'Idempotency-Key must be 1-256 characters, as transaction ids are'),
    invalid('X-Service-Stream-Billing', /^X-Service-Stream-Billing must be inline /),
    invalid('X-Service-Hold', /^X-Service-Hold must be incremental /),
  ];

  it('/v1/chat/completions: the first error as before, every invalid header and body field in error.errors, nothing relayed', async () => {
    const sent = env.mock.requests.length;
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: badHeaders,
      body: { model: '', messages: 'hi', stream: 'yes', max_completion_tokens: 0, max_tokens: 1.5, n: 129 },
    });
    expectError(res, 400, 'invalid_request', { param: 'X-Service-Api-Variant', message: 'X-Service-Api-Variant must be A or B', onlyFields: ['errors'] });
    expect(res.json().error.errors).toEqual([
      variant,
      invalid('model', 'model is required'),
      invalid('messages', 'messages must be an array'),
      invalid('stream', 'stream must be a boolean'),
      invalid('max_completion_tokens', 'max_completion_tokens must be a positive integer'),
      invalid('max_tokens', 'max_tokens must be a positive integer'),
      invalid('n', 'n must be an integer from 1 to 128'),
      // A project key without X-Service-Customer.
      invalid(null, 'a customer is required: send X-Service-Customer or use a customer-scoped key', 'customer_required'),
      ...headerErrors,
    ]);
    expect(env.mock.requests.length).toBe(sent);
  });

  it('/v1/messages: the same list in the Anthropic envelope, with the fields its format reads', async () => {
    const sent = env.mock.requests.length;
    const res = await post('/v1/messages', 'rich', { model: 7, messages: {}, stream: 1, max_tokens: '20', n: 0 }, badHeaders);
    expectError(res, 400, 'invalid_request', { param: 'X-Service-Api-Variant', message: 'X-Service-Api-Variant must be A or B' });
    const body = res.json();
    expect(body).toEqual({ type: 'error', message: body.error.message, error: expect.any(Object) });
    // Anthropic's format has no `n`, so it is relayed as sent, not refused.
    expect(body.error.errors).toEqual([
      variant,
      invalid('model', 'model is required'),
      invalid('messages', 'messages must be an array'),
      invalid('stream', 'stream must be a boolean'),
      invalid('max_tokens', 'max_tokens must be a positive integer'),
      ...headerErrors,
    ]);
    expect(env.mock.requests.length).toBe(sent);
  });

  it('a single invalid field or header answers as before, listed alone', async () => {
    const field = await post('/v1/chat/completions', 'rich', { model: OPENAI_MODEL, messages: ask(), n: 0 });
    expectError(field, 400, 'invalid_request', { param: 'n', message: 'n must be an integer from 1 to 128', onlyFields: ['errors'] });
    expect(field.json().error.errors).toEqual([invalid('n', 'n must be an integer from 1 to 128')]);
    const header = await post('/v1/messages', 'rich', { model: ANTHROPIC_MODEL, max_tokens: 20, messages: ask() }, { 'x-service-api-variant': 'b' });
    expectError(header, 400, 'invalid_request', { param: 'X-Service-Api-Variant', message: 'X-Service-Api-Variant must be A or B' });
    expect(header.json().error.errors).toEqual([variant]);
    const customer = await rawPost(env.svc.url, '/v1/messages', { key: env.p.projectKey, body: { model: ANTHROPIC_MODEL, max_tokens: 20, messages: ask() } });
    expectError(customer, 400, 'customer_required', { param: null });
  });

  it('a customer-scoped key naming another customer is a 403 of its own, not in the list of a 400', async () => {
    const key = await env.p.customerKey('rich');
    const headers = { 'x-service-customer': 'someone-else' };
    const bad = await rawPost(env.svc.url, '/v1/chat/completions', { key, headers: { ...headers, 'x-service-trace-id': '' }, body: { model: OPENAI_MODEL, messages: ask(), max_tokens: 0 } });
    expectError(bad, 400, 'invalid_request', { param: 'max_tokens' });
    expect(bad.json().error.errors.map((e: { param: string }) => e.param)).toEqual(['max_tokens', 'X-Service-Trace-Id']);
    const valid = await rawPost(env.svc.url, '/v1/chat/completions', { key, headers: { ...headers, 'x-service-trace-id': '' }, body: { model: OPENAI_MODEL, messages: ask() } });
    expectError(valid, 403, 'permission_denied', { param: 'X-Service-Customer' });
    expect(valid.json().error.errors).toBeUndefined();
  });
});

interface Caller {
  /** The service called (default: the file's). */
  url?: string;
  key?: string;
  customer?: string;
  headers?: Record<string, string>;
}

interface Call {
  model?: string;
  max_tokens?: number;
  content?: string;
  stream?: boolean;
  /** `n: 2`, which the other format has no counterpart for (Anthropic has no `n`; chat none above 1). */
  untranslatable?: boolean;
}

const untranslatable: Record<string, unknown> = { n: 2 };

/** One call through the official SDK of `sdk`, without retries; its body is the SDK's usual one. */
function sdkCall(sdk: Sdk, caller: Caller = {}, o: Call = {}): Promise<unknown> {
  const baseURL = caller.url ?? env.svc.url;
  const apiKey = caller.key ?? env.p.projectKey;
  const defaultHeaders = { ...(caller.customer ? { 'X-Service-Customer': caller.customer } : {}), ...caller.headers };
  const messages = [{ role: 'user' as const, content: o.content ?? `a question ${mockDirective({ output_tokens: 1 })}` }];
  const stream = o.stream ?? false;
  if (sdk === 'anthropic') {
    const client = new Anthropic({ baseURL, apiKey, defaultHeaders, maxRetries: 0 });
    return client.messages.create({ model: o.model ?? ANTHROPIC_MODEL, max_tokens: o.max_tokens ?? 20, messages, stream, ...(o.untranslatable ? untranslatable : {}) });
  }
  const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, defaultHeaders, maxRetries: 0 });
  return client.chat.completions.create({ model: o.model ?? OPENAI_MODEL, max_tokens: o.max_tokens, messages, stream, ...(o.untranslatable ? untranslatable : {}) });
}

interface SdkCase {
  name: string;
  status: number;
  code: string;
  /** `error.param`, when the error names one. */
  param?: string;
  run: (sdk: Sdk) => Promise<unknown>;
}

/**
 * Every error of the gateway's own, through both SDKs: on /v1/messages the Anthropic SDK's
 * message is `<status> <the service's message>`, never the body as JSON, and the OpenAI
 * SDK's the same on /v1/chat/completions.
 */
describe('gateway errors through the official SDKs', () => {
  let limited: TestProject;
  let full: TestProject;
  /** A service of its own whose Redis is behind `redisProxy`, which a case cuts. */
  let down: TestService;
  let downProject: TestProject;
  let redisProxy: TcpProxy;
  let ownedRedis: OwnRedis;
  beforeAll(async () => {
    // A project whose organization used the Free plan's 50,000 operations (set in Redis,
    // as test/gateway/errors.test.ts does).
    full = await env.svc.project('B');
    for (const sdk of sdks) await env.putModel(sdk === 'anthropic' ? ANTHROPIC_MODEL : OPENAI_MODEL, { provider: sdk }, full);
    await env.fund('rich', 1_000_000, { project: full });
    const rt = env.svc.rt;
    await rt.plans.giveBackLeases(full.organizationId);
    await rt.plans.organization(full.organizationId);
    const period = periodAt(await rt.plans.organizationAnchor(full.organizationId), Date.now() + rt.clock.offsetMs());
    await rt.redis.set(`${rt.config.REDIS_PREFIX}o:{${full.organizationId}}:ops:${period.startMs}`, 50_000);
    // A project of its own, limited to one request a minute.
    limited = await env.svc.project('B');
    for (const sdk of sdks) await env.putModel(sdk === 'anthropic' ? ANTHROPIC_MODEL : OPENAI_MODEL, { provider: sdk }, limited);
    const patched = await env.svc.call('PATCH', `/v1/admin/projects/${limited.projectId}`, { key: limited.adminKey, body: { rate_limit_per_minute: 1 } });
    expect(patched.status).toBe(200);
    // Funded, for the settlement that finds its source gone.
    for (const sdk of sdks) await env.fund(`vanishing-${sdk}`, 1_000_000);

    // A single Redis of its own, also when the suite runs on a Redis Cluster: a cluster
    // client would reach the nodes it learns of directly, around the proxy.
    ownedRedis = await ownRedis('svc-sdk-errors-');
    await ownedRedis.start();
    redisProxy = TcpProxy.to(ownedRedis.url, ownedRedis.port);
    await redisProxy.start();
    down = await startTestService({ config: { REDIS_URL: redisProxy.via(ownedRedis.url), SVC_MASTER_KEY: env.svc.rt.config.SVC_MASTER_KEY } });
    downProject = await down.project('B');
    for (const [id, provider] of [[ANTHROPIC_MODEL, 'anthropic'], [OPENAI_MODEL, 'openai']] as const) {
      const r = await down.call('PUT', `/v1/admin/projects/${downProject.projectId}/models/${encodeURIComponent(id)}`, {
        key: downProject.adminKey,
        body: modelBody(env.mock, env.upstreamKey, provider),
      });
      expect(r.status).toBeLessThan(300);
    }
    expect((await down.call('POST', '/v1/customers/deposit', { key: downProject.projectKey, body: { customer_id: 'c', amount: 1_000_000 } })).status).toBe(200);
  });
  afterAll(async () => {
    // Its close clears its keys, which needs its Redis.
    await redisProxy?.start();
    await down?.close();
    await redisProxy?.close();
    await ownedRedis?.remove();
  });

  const rich = { customer: 'rich' };
  const cases: SdkCase[] = [
    { name: 'an invalid key', status: 401, code: 'invalid_api_key', run: (sdk) => sdkCall(sdk, { key: `svc_live_${'x'.repeat(40)}`, customer: 'rich' }) },
    {
      name: 'a revoked key',
      status: 401,
      code: 'api_key_revoked',
      run: async (sdk) => {
        const key = await env.p.customerKey('rich');
        await env.svc.rt.db.query(sql.unsafe`UPDATE api_keys SET revoked_at = now() WHERE secret_hash = ${sql.binary(hashSecret(key))}`);
        return sdkCall(sdk, { key });
      },
    },
    { name: 'an expired key', status: 401, code: 'api_key_expired', run: async (sdk) => sdkCall(sdk, { key: await env.p.customerKey('rich', { expiresAtMs: Date.now() - 1_000 }) }) },
    { name: 'an admin key', status: 403, code: 'permission_denied', run: (sdk) => sdkCall(sdk, { key: env.p.adminKey, customer: 'rich' }) },
    {
      name: 'a customer-scoped key naming another customer',
      status: 403,
      code: 'permission_denied',
      param: 'X-Service-Customer',
      run: async (sdk) => sdkCall(sdk, { key: await env.p.customerKey('rich'), customer: 'someone-else' }),
    },
    { name: 'no customer', status: 400, code: 'customer_required', run: (sdk) => sdkCall(sdk) },
    { name: 'an invalid max_tokens', status: 400, code: 'invalid_request', param: 'max_tokens', run: (sdk) => sdkCall(sdk, rich, { max_tokens: -1 }) },
    {
      name: 'an invalid X-Service-Api-Variant',
      status: 400,
      code: 'invalid_request',
      param: 'X-Service-Api-Variant',
      run: (sdk) => sdkCall(sdk, { ...rich, headers: { 'X-Service-Api-Variant': 'C' } }),
    },
    { name: 'an invalid X-Service-Wallet', status: 400, code: 'invalid_request', param: 'X-Service-Wallet', run: (sdk) => sdkCall(sdk, { ...rich, headers: { 'X-Service-Wallet': 'no spaces' } }) },
    {
      name: 'an X-Service-Trace-Id over 256 characters',
      status: 400,
      code: 'invalid_request',
      param: 'X-Service-Trace-Id',
      run: (sdk) => sdkCall(sdk, { ...rich, headers: { 'X-Service-Trace-Id': 't'.repeat(257) } }),
    },
    {
      name: 'an Idempotency-Key over 256 characters',
      status: 400,
      code: 'invalid_request',
      param: 'Idempotency-Key',
      run: (sdk) => sdkCall(sdk, { ...rich, headers: { 'Idempotency-Key': 'k'.repeat(257) } }),
    },
    {
      name: 'an unknown X-Service-Stream-Billing',
      status: 400,
      code: 'invalid_request',
      param: 'X-Service-Stream-Billing',
      run: (sdk) => sdkCall(sdk, { ...rich, headers: { 'X-Service-Stream-Billing': 'sometimes' } }),
    },
    { name: 'an unknown model', status: 404, code: 'model_not_found', param: 'model', run: (sdk) => sdkCall(sdk, rich, { model: modelOf(sdk, 'none') }) },
    {
      // A model of the other format is translated; a field without counterpart in it is refused.
      name: 'a field a model of the other format has no counterpart for',
      status: 400,
      code: 'invalid_request',
      param: 'n',
      run: (sdk) => sdkCall(sdk, rich, { model: sdk === 'anthropic' ? OPENAI_MODEL : ANTHROPIC_MODEL, untranslatable: true }),
    },
    {
      name: 'a model outside allowed_models',
      status: 403,
      code: 'model_not_allowed',
      param: 'model',
      run: async (sdk) => sdkCall(sdk, { key: await env.p.customerKey('rich', { allowedModels: [modelOf(sdk, 'closed')] }) }),
    },
    { name: 'a model without an upstream key', status: 402, code: 'byok_key_required', run: (sdk) => sdkCall(sdk, rich, { model: modelOf(sdk, 'no-key') }) },
    {
      name: 'a stream on a model that does not stream',
      status: 400,
      code: 'invalid_request',
      param: 'stream',
      run: (sdk) => sdkCall(sdk, rich, { model: modelOf(sdk, 'no-stream'), stream: true }),
    },
    { name: 'an unknown customer', status: 404, code: 'customer_not_found', run: (sdk) => sdkCall(sdk, { customer: 'nobody' }) },
    { name: 'a wallet that cannot pay', status: 402, code: 'insufficient_balance', run: (sdk) => sdkCall(sdk, { customer: 'sdk-poor' }) },
    { name: 'a spending budget that cannot hold the call', status: 402, code: 'budget_exceeded', run: (sdk) => sdkCall(sdk, { customer: 'sdk-budget' }) },
    {
      name: 'a reused Idempotency-Key',
      status: 409,
      code: 'idempotency_key_reused',
      run: async (sdk) => {
        const caller = { ...rich, headers: { 'Idempotency-Key': `ik-${sdk}-${Date.now()}` } };
        await sdkCall(sdk, caller);
        return sdkCall(sdk, caller);
      },
    },
    { name: 'a body over 8 MiB', status: 413, code: 'payload_too_large', run: (sdk) => sdkCall(sdk, rich, { content: 'x'.repeat(8 * 1024 * 1024) }) },
    { name: 'an unreachable upstream', status: 502, code: 'upstream_error', run: (sdk) => sdkCall(sdk, rich, { model: modelOf(sdk, 'closed') }) },
    {
      name: 'an upstream too slow to answer',
      status: 504,
      code: 'upstream_timeout',
      run: (sdk) => sdkCall(sdk, rich, { content: `slow ${mockDirective({ fail: 'timeout' })}` }),
    },
    { name: 'the Free plan limit', status: 429, code: 'usage_limit_exceeded', run: (sdk) => sdkCall(sdk, { key: full.projectKey, customer: 'rich' }) },
    {
      name: 'the rate limit',
      status: 429,
      code: 'rate_limited',
      run: async (sdk) => {
        const caller = { key: limited.projectKey, customer: 'nobody' };
        await sdkCall(sdk, caller).catch(() => undefined);
        return sdkCall(sdk, caller);
      },
    },
    {
      name: 'Redis unreachable',
      status: 503,
      code: 'service_unavailable',
      run: async (sdk) => {
        await redisProxy.refuse();
        redisProxy.cut();
        try {
          return await sdkCall(sdk, { url: down.url, key: downProject.projectKey, customer: 'c' });
        } finally {
          await redisProxy.start();
          await waitFor(async () => (await down.call('GET', '/health/ready')).status === 200, 10_000, 'the service to reach its Redis again');
        }
      },
    },
    { name: 'a model whose upstream key does not decrypt', status: 500, code: 'server_error', run: (sdk) => sdkCall(sdk, rich, { model: modelOf(sdk, 'bad-key') }) },
    {
      name: 'a settlement that finds the source of its hold gone',
      status: 500,
      code: 'billing_account_not_found',
      run: async (sdk) => {
        // Corruption only can make it: the source is deleted while the upstream answers
        // (its 600 ms are within the file's UPSTREAM_TIMEOUT_MS).
        const customer = `vanishing-${sdk}`;
        const sent = env.mock.requests.length;
        const call = sdkCall(sdk, { customer }, { content: `slow ${mockDirective({ output_tokens: 1, latency_ms: 600 })}` });
        call.catch(() => undefined);
        await waitFor(() => env.mock.requests.length > sent, 5_000, 'the call to reach the upstream');
        const k = customerKeys(env.svc.rt.config.REDIS_PREFIX, env.p.projectId, customer);
        for (const { id } of await readSources(env.svc.rt.redis, k)) await env.svc.rt.redis.hdel(k.src, id, `${id}:u`, `${id}:f`);
        return call;
      },
    },
  ];

  it('cover every error the document lists for the gateway, with the two the SDKs cannot send below', () => {
    // outcome_unknown needs a Redis reply lost after the settlement was sent and not learned in
    // time: test/resilience/redis-lost-reply.test.ts makes it through a proxy that drops replies.
    const covered = new Set([...cases.map((c) => c.code), 'missing_api_key', 'invalid_json', 'outcome_unknown']);
    for (const path of ['/v1/messages', '/v1/chat/completions']) {
      const doc = describedRoutes().find((r) => r.method === 'POST' && r.path === path)!;
      const documented = new Set([...(doc.errors ?? []), ...routeErrors(doc)].map(codeOf));
      expect([...documented].filter((code) => !covered.has(code)), path).toEqual([]);
    }
  });

  describe.each(cases)('$name', ({ status, code, param, run }) => {
    it('@anthropic-ai/sdk on /v1/messages: err.message is the service message', async () => {
      const err = await run('anthropic').then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(Anthropic.APIError);
      const e = err as InstanceType<typeof Anthropic.APIError>;
      const body = e.error as { type: string; message: string; error: { code: string; message: string; type: string; param?: string } };
      expect(e.status, JSON.stringify(body)).toBe(status);
      // The service's envelope, with Anthropic's beside it.
      expect(body.type).toBe('error');
      expect(body.error.code).toBe(code);
      expect(body.error.param).toBe(param);
      expect(body.message).toBe(body.error.message);
      expect(e.message).toBe(`${status} ${body.error.message}`);
      expect(e.message).not.toContain('{');
    });

    it('the OpenAI SDK on /v1/chat/completions: err.message is the service message', async () => {
      const err = await run('openai').then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(OpenAI.APIError);
      const e = err as InstanceType<typeof OpenAI.APIError>;
      expect(e.status, JSON.stringify(e.error)).toBe(status);
      expect(e.code).toBe(code);
      expect(e.param ?? undefined).toBe(param);
      const message = (e.error as { message: string }).message;
      expect(e.message).toBe(`${status} ${message}`);
      expect(e.message).not.toContain('{');
    });
  });

  it('has the same envelope on what the SDK cannot send: no key, a body that is not JSON', async () => {
    const request = { model: ANTHROPIC_MODEL, max_tokens: 20, messages: ask() };
    const noKey = await rawRequest(env.svc.url, 'POST', '/v1/messages', { body: request });
    const notJson = await rawRequest(env.svc.url, 'POST', '/v1/messages', { key: env.p.projectKey, headers: { 'x-service-customer': 'rich' }, body: '{"model": ' });
    for (const [res, status, code] of [[noKey, 401, 'missing_api_key'], [notJson, 400, 'invalid_json']] as const) {
      expect(res.status).toBe(status);
      const body = res.json();
      expect(body).toEqual({ type: 'error', message: body.error.message, error: expect.objectContaining({ code, message: expect.any(String) }) });
    }
  });

  it('has it on the paths under /v1/messages that the Anthropic SDK calls and the service does not serve', async () => {
    const client = new Anthropic({ baseURL: env.svc.url, apiKey: env.p.projectKey, maxRetries: 0 });
    // count_tokens is served (relayed, unbilled); message batches are not.
    const err = await client.messages.batches.list().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect((err as Error).message).toBe('404 no route for GET /v1/messages/batches');
  });

  it('leaves the chat completions envelope without the Anthropic fields', async () => {
    const res = await post('/v1/chat/completions', 'rich', { model: 'gpt-none', messages: ask() });
    expect(res.status).toBe(404);
    expect(Object.keys(res.json())).toEqual(['error']);
  });
});
