/**
 * Gateway calls that bill nothing (docs/API.md, "Gateway" and "Errors"): refusals before the
 * upstream is called, upstream HTTP errors relayed untouched, an unreachable, slow or
 * garbled upstream, Idempotency-Key reuse, and the Free plan's limit. Each case leaves the
 * balance, the ledger and the organization's plan count as they were.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective, type MockControls } from '../../src/gateway/mock/controls.js';
import { gatewayBindings } from '../../src/ledger/bindings.js';
import { periodAt } from '../../src/plans/catalogue.js';
import { waitFor, type TestProject } from '../helpers.js';
import { ANTHROPIC_MODEL, closedPort, OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv, type RawResponse } from './support.js';
import { expectError } from '../support/errors.js';
import type { ErrorCode } from '../../src/errors/catalogue.js';

const UPSTREAM_TIMEOUT_MS = 1_000;

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv({ config: { UPSTREAM_TIMEOUT_MS } });
  await env.putModel('gpt-retired', { provider: 'openai', active: false });
  await env.putModel('gpt-no-key', { provider: 'openai', upstream_api_key: null });
  await env.putModel('gpt-no-stream', { provider: 'openai', supports_streaming: false });
  await env.putModel('gpt-closed', { provider: 'openai', upstream_base_url: `http://127.0.0.1:${await closedPort()}/v1` });
  await env.fund('payer', 1_000_000);
});
afterAll(() => env?.close());

/** JSON text of `levels` nested arrays (JSON.stringify itself cannot write it). */
const deepJson = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;

const ask = (controls: MockControls = {}) => [{ role: 'user', content: `a question ${mockDirective({ output_tokens: 5, ...controls })}` }];

const openaiBody = (controls: MockControls = {}, extra: Record<string, unknown> = {}) => ({ model: OPENAI_MODEL, messages: ask(controls), ...extra });
const anthropicBody = (controls: MockControls = {}, extra: Record<string, unknown> = {}) => ({
  model: ANTHROPIC_MODEL,
  max_tokens: 50,
  messages: ask(controls),
  ...extra,
});

function call(path: string, body: unknown, o: { key?: string; customer?: string | null; headers?: Record<string, string> } = {}) {
  const customer = o.customer === undefined ? 'payer' : o.customer;
  return rawPost(env.svc.url, path, {
    key: o.key ?? env.p.projectKey,
    headers: { ...(customer === null ? {} : { 'x-service-customer': customer }), ...o.headers },
    body,
  });
}

/** What a failed call must leave unchanged. */
async function state(customer = 'payer', project?: TestProject) {
  const { as_of: _asOf, ...balance } = (await env.balance(customer, project)) as unknown as Record<string, unknown>;
  return { balance, ledger: await env.ledger(customer, undefined, project), ops: await env.ops(project) };
}

describe('refused before the upstream is called', () => {
  const cases: { name: string; status: number; code: ErrorCode; param?: string; run: () => Promise<RawResponse> }[] = [
    { name: 'a project key without X-Service-Customer', status: 400, code: 'customer_required', run: () => call('/v1/chat/completions', openaiBody(), { customer: null }) },
    { name: 'an unknown customer', status: 404, code: 'customer_not_found', run: () => call('/v1/messages', anthropicBody(), { customer: 'nobody' }) },
    { name: 'an unknown model', status: 404, code: 'model_not_found', param: 'model', run: () => call('/v1/chat/completions', openaiBody({}, { model: 'gpt-none' })) },
    { name: 'an inactive model', status: 404, code: 'model_not_found', param: 'model', run: () => call('/v1/chat/completions', openaiBody({}, { model: 'gpt-retired' })) },
    {
      name: 'a model outside the key allowed_models',
      status: 403,
      code: 'model_not_allowed',
      param: 'model',
      run: async () => call('/v1/chat/completions', openaiBody(), { key: await env.p.customerKey('payer', { allowedModels: [ANTHROPIC_MODEL] }), customer: null }),
    },
    { name: 'a model without an upstream key', status: 402, code: 'byok_key_required', run: () => call('/v1/chat/completions', openaiBody({}, { model: 'gpt-no-key' })) },
    {
      name: 'stream: true on a model that does not stream',
      status: 400,
      code: 'invalid_request',
      param: 'stream',
      run: () => call('/v1/chat/completions', openaiBody({}, { model: 'gpt-no-stream', stream: true })),
    },
    { name: 'an admin key', status: 403, code: 'permission_denied', run: () => call('/v1/messages', anthropicBody(), { key: env.p.adminKey }) },
    {
      name: 'an invalid X-Service-Wallet',
      status: 400,
      code: 'invalid_request',
      param: 'X-Service-Wallet',
      run: () => call('/v1/chat/completions', openaiBody(), { headers: { 'x-service-wallet': 'not a wallet!' } }),
    },
    {
      name: 'an X-Service-Trace-Id over 256 characters',
      status: 400,
      code: 'invalid_request',
      param: 'X-Service-Trace-Id',
      run: () => call('/v1/messages', anthropicBody(), { headers: { 'x-service-trace-id': 't'.repeat(257) } }),
    },
    { name: 'a body without messages', status: 400, code: 'invalid_request', param: 'messages', run: () => call('/v1/messages', { model: ANTHROPIC_MODEL }) },
    {
      name: 'a chat body nested 10,000 deep (before the hold, not a 500 or 502)',
      status: 400,
      code: 'invalid_request',
      param: 'messages',
      run: () => call('/v1/chat/completions', `{"model":"${OPENAI_MODEL}","messages":[{"role":"user","content":${deepJson(10_000)}}]}`),
    },
    {
      name: 'a messages body nested 10,000 deep (before the hold, not a 500 or 502)',
      status: 400,
      code: 'invalid_request',
      param: 'messages',
      run: () => call('/v1/messages', `{"model":"${ANTHROPIC_MODEL}","max_tokens":50,"messages":[{"role":"user","content":${deepJson(10_000)}}]}`),
    },
    {
      name: 'an output limit that is not a positive integer',
      status: 400,
      code: 'invalid_request',
      param: 'max_tokens',
      run: () => call('/v1/chat/completions', openaiBody({}, { max_completion_tokens: 10, max_tokens: -1 })),
    },
  ];

  for (const c of cases) {
    it(`${c.name}: ${c.status} ${c.code}`, async () => {
      const before = await state();
      const sent = env.mock.requests.length;
      expectError(await c.run(), c.status, c.code, { param: c.param });
      expect(env.mock.requests.length).toBe(sent);
      expect(await state()).toEqual(before);
    });
  }

  it('a customer-scoped key with allowed_models may still call an allowed model', async () => {
    const key = await env.p.customerKey('payer', { allowedModels: [ANTHROPIC_MODEL] });
    expect((await call('/v1/messages', anthropicBody(), { key, customer: null })).status).toBe(200);
  });
});

describe('upstream HTTP errors', () => {
  const cases = [
    { path: '/v1/chat/completions', fail: 500, stream: false },
    { path: '/v1/chat/completions', fail: 429, stream: true },
    { path: '/v1/chat/completions', fail: 400, stream: false },
    { path: '/v1/messages', fail: 500, stream: true },
    { path: '/v1/messages', fail: 429, stream: false },
    { path: '/v1/messages', fail: 400, stream: false },
  ] as const;

  for (const c of cases) {
    it(`${c.path} ${c.stream ? 'streamed' : 'whole'}, upstream ${c.fail}: relayed with its status and body, nothing charged`, async () => {
      const trace = `fail-${c.path.slice(4)}-${c.fail}-${c.stream}`;
      const controls = { fail: c.fail } as MockControls;
      const body = c.path === '/v1/messages' ? anthropicBody(controls, { stream: c.stream }) : openaiBody(controls, { stream: c.stream });
      const before = await state();
      const relayed = await call(c.path, body, { headers: { 'x-service-trace-id': trace } });
      expect(relayed.status).toBe(c.fail);
      expect(relayed.headers['content-type']).toMatch(/^application\/json/);
      for (const name of ['x-service-cost-credits', 'x-service-balance-credits']) expect(relayed.headers[name]).toBeUndefined();

      // The same request straight to the mock: the relayed body is byte for byte its answer
      // (Anthropic bodies name their request id, which differs per request).
      const sent = env.mock.requests.at(-1)!;
      const direct = await rawPost(env.mock.url.replace(/\/v1$/, ''), c.path, { key: env.upstreamKey, body: sent.body, headers: { 'x-api-key': env.upstreamKey } });
      expect(direct.status).toBe(c.fail);
      const directId = direct.json().request_id as string | undefined;
      const relayedId = relayed.json().request_id as string | undefined;
      expect(relayed.text).toBe(directId === undefined ? direct.text : direct.text.replace(directId, relayedId!));

      expect(await state()).toEqual(before);
      await env.svc.drained();
      const usage = await env.svc.call('GET', `/v1/usage?trace_id=${trace}`, { key: env.p.projectKey });
      expect(usage.body.data).toEqual([expect.objectContaining({ status: 'failed', cost_credits: 0, stream: c.stream, customer_id: 'payer' })]);
    });
  }
});

describe('an upstream that cannot be used', () => {
  const cases = [
    { name: 'unreachable (nothing listens on its port)', status: 502, code: 'upstream_error', path: '/v1/chat/completions', body: () => openaiBody({}, { model: 'gpt-closed' }) },
    { name: 'unreachable, streamed', status: 502, code: 'upstream_error', path: '/v1/chat/completions', body: () => openaiBody({}, { model: 'gpt-closed', stream: true }) },
    { name: 'too slow to answer', status: 504, code: 'upstream_timeout', path: '/v1/messages', body: () => anthropicBody({ fail: 'timeout' }) },
    { name: 'answering a body that is not JSON', status: 502, code: 'upstream_error', path: '/v1/chat/completions', body: () => openaiBody({ fail: 'invalid' }) },
    { name: 'answering a stream that is not JSON', status: 502, code: 'upstream_error', path: '/v1/messages', body: () => anthropicBody({ fail: 'invalid' }, { stream: true }) },
    { name: 'hanging up without an answer', status: 502, code: 'upstream_error', path: '/v1/messages', body: () => anthropicBody({ fail: 'reset' }) },
  ] as const;

  for (const c of cases) {
    it(`${c.name}: ${c.status} ${c.code}, nothing charged`, async () => {
      const before = await state();
      const trace = `bad-upstream-${cases.indexOf(c)}`;
      const startedAt = Date.now();
      const res = await call(c.path, c.body(), { headers: { 'x-service-trace-id': trace } });
      expectError(res, c.status, c.code);
      if (c.code === 'upstream_timeout') {
        expect(Date.now() - startedAt).toBeGreaterThanOrEqual(UPSTREAM_TIMEOUT_MS - 50);
      }
      expect(await state()).toEqual(before);
      await env.svc.drained();
      const usage = await env.svc.call('GET', `/v1/usage?trace_id=${trace}`, { key: env.p.projectKey });
      expect(usage.body.data).toEqual([expect.objectContaining({ status: 'failed', cost_credits: 0 })]);
    });
  }
});

describe('an upstream that breaks off a stream', () => {
  it('gives the client the events that came and charges them as estimated (the upstream sent no usage)', async () => {
    const before = await state();
    const res = await call('/v1/chat/completions', openaiBody({ fail: 'midstream', output_tokens: 10 }, { stream: true }), {
      headers: { 'x-service-trace-id': 'midstream' },
    });
    // The status went out with the first event, before the upstream failed.
    expect(res.status).toBe(200);
    expect(res.text).toContain('tok3');
    expect(res.text).not.toContain('[DONE]');
    const cost = Number(res.trailers['x-service-cost-credits']);
    expect(cost).toBeGreaterThan(0);
    const after = await state();
    expect(after.balance.used).toBe(Number(before.balance.used) + cost);
    expect(after.balance.frozen).toBe(before.balance.frozen);
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?trace_id=midstream', { key: env.p.projectKey });
    expect(usage.body.data).toEqual([expect.objectContaining({ status: 'settled', usage_estimated: true, cost_credits: cost, stream: true })]);
    expect(usage.body.data[0].output_tokens).toBeGreaterThanOrEqual(3);
  });

  it('charges nothing when it broke off before any answer reached the client', async () => {
    const before = await state();
    const res = await call('/v1/chat/completions', openaiBody({ fail: 'midstream', output_tokens: 1 }, { stream: true }), {
      headers: { 'x-service-trace-id': 'midstream-0' },
    });
    expect(res.status).toBe(200);
    expect(res.text).not.toContain('tok1');
    expect(res.trailers['x-service-cost-credits']).toBeUndefined();
    expect(await state()).toEqual(before);
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?trace_id=midstream-0', { key: env.p.projectKey });
    expect(usage.body.data).toEqual([expect.objectContaining({ status: 'failed', cost_credits: 0, stream: true })]);
  });
});

describe('Idempotency-Key', () => {
  it('a second call with the same key is 409 idempotency_key_reused naming the first transaction; charged once', async () => {
    await env.fund('idem1', 100_000);
    const headers = { 'idempotency-key': 'order-1' };
    const first = await call('/v1/chat/completions', openaiBody(), { customer: 'idem1', headers });
    expect(first.status).toBe(200);
    const after = await state('idem1');
    const second = await call('/v1/chat/completions', openaiBody(), { customer: 'idem1', headers });
    expectError(second, 409, 'idempotency_key_reused');
    expect(second.json().error.transaction_id).toBe(first.headers['x-service-transaction-id']);
    expect(await state('idem1')).toEqual(after);
    const gateway = after.ledger.filter((e) => e.type === 'GATEWAY');
    expect(gateway.map((e) => [e.transaction_id, e.amount])).toEqual([[first.headers['x-service-transaction-id'], Number(first.headers['x-service-cost-credits'])]]);
    // The key is the customer's: another customer of the project may use the same one.
    await env.fund('idem1b', 100_000);
    const other = await call('/v1/messages', anthropicBody(), { customer: 'idem1b', headers });
    expect(other.status).toBe(200);
    expect(other.headers['x-service-transaction-id']).not.toBe(first.headers['x-service-transaction-id']);
  });

  it('two concurrent calls with the same key: one is served, the other 409', async () => {
    await env.fund('idem2', 100_000);
    const headers = { 'idempotency-key': 'order-2' };
    const both = await Promise.all([0, 1].map(() => call('/v1/messages', anthropicBody({ latency_ms: 150 }), { customer: 'idem2', headers })));
    const served = both.filter((r) => r.status === 200);
    const refused = both.filter((r) => r.status === 409);
    expect([served.length, refused.length]).toEqual([1, 1]);
    expect(refused[0]!.json().error).toMatchObject({ code: 'idempotency_key_reused', transaction_id: served[0]!.headers['x-service-transaction-id'] });
    const gateway = await env.ledger('idem2', 'GATEWAY');
    expect(gateway.map((e) => e.amount)).toEqual([Number(served[0]!.headers['x-service-cost-credits'])]);
  });

  it('may be used again after a call that billed nothing: upstream error, refusal, unusable upstream', async () => {
    await env.fund('idem3', 100_000);
    const headers = { 'idempotency-key': 'order-3' };
    const opsBefore = await env.ops();
    expect((await call('/v1/chat/completions', openaiBody({ fail: 500 }), { customer: 'idem3', headers })).status).toBe(500);
    expect((await call('/v1/messages', anthropicBody({ fail: 'invalid' }, { stream: true }), { customer: 'idem3', headers })).status).toBe(502);
    expect((await call('/v1/chat/completions', openaiBody({}, { max_tokens: 10_000_000 }), { customer: 'idem3', headers })).status).toBe(402);
    expect((await call('/v1/messages', anthropicBody({ fail: 'midstream', output_tokens: 1 }, { stream: true }), { customer: 'idem3', headers })).status).toBe(200);
    expect(await env.ledger('idem3', 'GATEWAY')).toEqual([]);
    const retried = await call('/v1/chat/completions', openaiBody(), { customer: 'idem3', headers });
    expect(retried.status, retried.text).toBe(200);
    const gateway = await env.ledger('idem3', 'GATEWAY');
    expect(gateway.map((e) => [e.transaction_id, e.amount])).toEqual([[retried.headers['x-service-transaction-id'], Number(retried.headers['x-service-cost-credits'])]]);
    expect(await env.ops()).toBe(opsBefore + 1);
    expectError(await call('/v1/chat/completions', openaiBody(), { customer: 'idem3', headers }), 409, 'idempotency_key_reused');
  });
});

describe('Idempotency-Key freed late', () => {
  it('is freed in the background when Redis did not answer the first free: the retry is served, not 409', async () => {
    await env.fund('idem4', 100_000);
    const headers = { 'idempotency-key': 'order-4' };
    const bindings = env.svc.rt.ledger.bindings;
    const dropIfOwner = bindings.dropIfOwner;
    let refused = 0;
    // The first free of the claim fails the way a Redis (the bucket's cluster master)
    // that went away fails it; the call billed nothing (an upstream error).
    bindings.dropIfOwner = (...args: Parameters<typeof dropIfOwner>) => {
      if (refused === 0) {
        refused++;
        return Promise.reject(new Error('Connection is closed.'));
      }
      return dropIfOwner.apply(bindings, args);
    };
    try {
      expect((await call('/v1/chat/completions', openaiBody({ fail: 500 }), { customer: 'idem4', headers })).status).toBe(500);
    } finally {
      bindings.dropIfOwner = dropIfOwner;
    }
    expect(refused).toBe(1);
    let retried: RawResponse | undefined;
    await waitFor(async () => {
      retried = await call('/v1/chat/completions', openaiBody(), { customer: 'idem4', headers });
      return retried.status !== 409;
    }, 5_000, 'the key to be freed in the background');
    expect(retried!.status, retried!.text).toBe(200);
    expect((await env.ledger('idem4', 'GATEWAY')).map((e) => e.transaction_id)).toEqual([retried!.headers['x-service-transaction-id']]);
  });

  it('a late free of a call that billed nothing leaves the claim of the call that holds the key now', async () => {
    await env.fund('idem5', 100_000);
    const headers = { 'idempotency-key': 'order-5' };
    const failed = await call('/v1/chat/completions', openaiBody({ fail: 500 }), { customer: 'idem5', headers });
    expect(failed.status).toBe(500);
    const served = await call('/v1/chat/completions', openaiBody(), { customer: 'idem5', headers });
    expect(served.status, served.text).toBe(200);
    const keys = gatewayBindings(env.svc.rt.ledger.bindings, env.p.projectId);
    // The failed call's free, sent again late (in the background): the key is another call's now.
    expect(await keys.freeKey('idem5', 'order-5', failed.headers['x-service-transaction-id'] as string)).toBe(false);
    const again = await call('/v1/chat/completions', openaiBody(), { customer: 'idem5', headers });
    expectError(again, 409, 'idempotency_key_reused');
    expect(again.json().error.transaction_id).toBe(served.headers['x-service-transaction-id']);
  });
});

describe('the Free plan limit', () => {
  it('answers 429 usage_limit_exceeded before relaying when the count is at the limit', async () => {
    const q = await env.svc.project('B');
    await env.putModel(OPENAI_MODEL, { provider: 'openai' }, q);
    await env.putModel(ANTHROPIC_MODEL, { provider: 'anthropic' }, q);
    await env.fund('limited', 100_000, { project: q });
    const ok = await rawPost(env.svc.url, '/v1/chat/completions', { key: q.projectKey, headers: { 'x-service-customer': 'limited' }, body: openaiBody() });
    expect(ok.status).toBe(200);
    expect(await env.ops(q)).toBe(1);

    // Sets the period's count in Redis, as if the Free plan's 50,000 operations had happened.
    // This process's lease goes back first: no lease can exist beyond a count at the limit.
    await env.svc.rt.plans.giveBackLeases(q.organizationId);
    await env.svc.rt.plans.organization(q.organizationId);
    const period = periodAt(await env.svc.rt.plans.organizationAnchor(q.organizationId), Date.now() + env.svc.rt.clock.offsetMs());
    await env.svc.rt.redis.set(`${env.svc.rt.config.REDIS_PREFIX}o:{${q.organizationId}}:ops:${period.startMs}`, 50_000);

    const before = await state('limited', q);
    const sent = env.mock.requests.length;
    for (const [path, body] of [['/v1/chat/completions', openaiBody()], ['/v1/messages', anthropicBody({}, { stream: true })]] as const) {
      const refused = await rawPost(env.svc.url, path, { key: q.projectKey, headers: { 'x-service-customer': 'limited' }, body });
      expectError(refused, 429, 'usage_limit_exceeded');
      expect(refused.json().error.message).toMatch(/monthly transaction limit/);
    }
    expect(env.mock.requests.length).toBe(sent);
    expect(await state('limited', q)).toEqual(before);
    expect(before.ops).toBe(50_000);
    // Reads go on past the limit.
    expect((await env.svc.call('GET', '/v1/models', { key: q.projectKey })).status).toBe(200);
  });
});
