/**
 * A money command whose reply is lost (docs/ARCHITECTURE.md, "When a store fails"). The
 * service reaches Redis through a TCP proxy. The proxy lets a money script reach Redis,
 * swallows its reply, then cuts every connection and refuses new ones, so the client
 * gives the written command up after its failed reconnects (MaxRetriesPerRequestError).
 * The script applied: the answer must be 503 "the outcome is unknown; retry with the same
 * id", never "nothing was applied", and the retry with the same id must be the replay,
 * with one ledger entry. A request made while Redis is already refused never reaches it,
 * and that one does say nothing was applied.
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { customerKeys } from '../../src/redis/keys.js';
import { scriptSource } from '../../src/redis/scripts.js';
import { testConfig, waitFor, type ApiResponse } from '../helpers.js';
import { OPENAI_MODEL, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { captureConsoleErrors, type ConsoleErrors } from '../support/console-errors.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { expectError } from '../support/errors.js';

const redisUrl = testConfig().REDIS_URL;
const proxy = TcpProxy.to(redisUrl, 6379);
let env: GatewayEnv;
/** Straight to Redis, past the proxy: sees what a script applied while its reply is lost. */
let direct: Redis;
/** Cut connections must not leave an error unheard (an emitter without an `error` listener). */
let consoleErrors: ConsoleErrors;

const nothing_applied = /nothing was applied/;
const outcome_unknown = /may have been applied: retry it with the same/;

beforeAll(async () => {
  consoleErrors = captureConsoleErrors();
  await proxy.start();
  direct = new Redis(redisUrl);
  env = await startGatewayEnv({ config: { REDIS_URL: proxy.via(redisUrl) } });
  // Every script runs once, so Redis has all their functions loaded: the call the proxy
  // watches for is then answered by the function itself, never by "Function not found".
  await env.fund('warm', 1_000_000);
  for (const [path, body] of [
    ['/v1/customers/deposit', { customer_id: 'warm', amount: 1, idempotency_key: 'warm-k' }],
    ['/v1/billing/deduct', { customer_id: 'warm', transaction_id: 'warm-d', amount: 1 }],
    ['/v1/billing/freeze', { customer_id: 'warm', transaction_id: 'warm-f1', amount: 1 }],
    ['/v1/billing/freeze', { customer_id: 'warm', transaction_id: 'warm-f2', amount: 1 }],
    ['/v1/billing/freeze', { customer_id: 'warm', transaction_id: 'warm-f3', amount: 1 }],
    ['/v1/billing/freeze', { customer_id: 'warm', transaction_id: 'warm-f4', amount: 1 }],
    ['/v1/billing/consume', { transaction_id: 'warm-f1' }],
    ['/v1/billing/unfreeze', { transaction_id: 'warm-f2' }],
    ['/v1/billing/consume', { transaction_id: 'warm-f3', customer_id: 'warm' }],
    ['/v1/billing/unfreeze', { transaction_id: 'warm-f4', customer_id: 'warm' }],
  ] as const) {
    const r = await post(path, body);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
  expect((await chat('warm')).status).toBe(200);
});

afterAll(async () => {
  proxy.forward();
  await proxy.start();
  await env?.close();
  direct?.disconnect();
  await proxy.close();
  consoleErrors?.restore();
});

afterEach(() => {
  expect(consoleErrors.lines).toEqual([]);
});

function post(path: string, body: unknown): Promise<ApiResponse> {
  return env.svc.call('POST', path, { key: env.p.projectKey, body });
}

function chat(customerId: string): Promise<ApiResponse> {
  return env.svc.call('POST', '/v1/chat/completions', {
    key: env.p.projectKey,
    headers: { 'x-service-customer': customerId },
    body: { model: OPENAI_MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 },
  });
}

/** The customer's sources as Redis holds them: every money script changes them. */
async function sourcesOf(customerId: string): Promise<string> {
  const k = customerKeys(env.svc.rt.config.REDIS_PREFIX, env.p.projectId, customerId);
  return JSON.stringify(await direct.hgetall(k.src));
}

/** Redis reachable through the proxy again, and the service serving. */
async function restore(): Promise<void> {
  proxy.forward();
  await proxy.start();
  await waitFor(async () => (await env.svc.call('GET', '/health')).status === 200, 10_000, 'the service to reach Redis again');
}

/**
 * Sends `request`, lets the call of `script` that carries `marker` reach Redis and apply,
 * loses its reply, then cuts and refuses every connection. Returns the answer.
 */
async function withLostReply(script: string, marker: string, customerId: string, request: () => Promise<ApiResponse>): Promise<ApiResponse> {
  const { fn } = scriptSource(script);
  const before = await sourcesOf(customerId);
  proxy.dropRepliesWhen((sent) => sent.includes(fn) && sent.includes(marker));
  const answer = request();
  await waitFor(() => proxy.droppingReplies, 10_000, `the ${script} script to be sent`);
  await waitFor(async () => (await sourcesOf(customerId)) !== before, 10_000, `the ${script} script to apply in Redis`);
  await proxy.refuse();
  proxy.cut();
  return answer;
}

function expectOutcomeUnknown(res: ApiResponse): void {
  expectError(res, 503, 'service_unavailable');
  expect(res.body.error.message).toMatch(outcome_unknown);
  expect(res.body.error.message).not.toMatch(nothing_applied);
}

async function entries(customerId: string, query: string): Promise<{ type: string; transaction_id: string }[]> {
  const r = await env.svc.call('GET', `/v1/customers/${customerId}/ledger?${query}`, { key: env.p.projectKey });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data;
}

// On this single Redis, deduct, freeze, a deposit with a key, and consume or unfreeze naming
// their customer bind in their own script (lua/bound_*-12.lua): that script is the one
// whose reply is lost.
describe('a money script whose reply is lost answers 503 "outcome unknown", and its retry is the replay', () => {
  it('deduct', async () => {
    await env.fund('c-deduct', 1_000);
    const body = { customer_id: 'c-deduct', transaction_id: 'lost-deduct', amount: 10 };
    expectOutcomeUnknown(await withLostReply('bound_deduct', 'lost-deduct', 'c-deduct', () => post('/v1/billing/deduct', body)));
    await restore();
    const retry = await post('/v1/billing/deduct', body);
    expect([retry.status, retry.body.is_idempotent_replay]).toEqual([200, true]);
    expect((await entries('c-deduct', 'transaction_id=lost-deduct')).map((e) => e.type)).toEqual(['DEDUCT']);
  });

  it('freeze', async () => {
    await env.fund('c-freeze', 1_000);
    const body = { customer_id: 'c-freeze', transaction_id: 'lost-freeze', amount: 10 };
    expectOutcomeUnknown(await withLostReply('bound_freeze', 'lost-freeze', 'c-freeze', () => post('/v1/billing/freeze', body)));
    await restore();
    const retry = await post('/v1/billing/freeze', body);
    expect([retry.status, retry.body.is_idempotent_replay]).toEqual([200, true]);
    expect((await entries('c-freeze', 'transaction_id=lost-freeze')).map((e) => e.type)).toEqual(['FREEZE']);
  });

  it('consume', async () => {
    await env.fund('c-consume', 1_000);
    expect((await post('/v1/billing/freeze', { customer_id: 'c-consume', transaction_id: 'lost-consume', amount: 10 })).status).toBe(200);
    const body = { transaction_id: 'lost-consume' };
    expectOutcomeUnknown(await withLostReply('consume', 'lost-consume', 'c-consume', () => post('/v1/billing/consume', body)));
    await restore();
    const retry = await post('/v1/billing/consume', body);
    expect([retry.status, retry.body.is_idempotent_replay]).toEqual([200, true]);
    expect((await entries('c-consume', 'transaction_id=lost-consume&type=CONSUME')).length).toBe(1);
  });

  it('unfreeze', async () => {
    await env.fund('c-unfreeze', 1_000);
    expect((await post('/v1/billing/freeze', { customer_id: 'c-unfreeze', transaction_id: 'lost-unfreeze', amount: 10 })).status).toBe(200);
    const body = { transaction_id: 'lost-unfreeze' };
    expectOutcomeUnknown(await withLostReply('unfreeze', 'lost-unfreeze', 'c-unfreeze', () => post('/v1/billing/unfreeze', body)));
    await restore();
    const retry = await post('/v1/billing/unfreeze', body);
    expect([retry.status, retry.body.is_idempotent_replay]).toEqual([200, true]);
    expect((await entries('c-unfreeze', 'transaction_id=lost-unfreeze&type=UNFREEZE')).length).toBe(1);
  });

  it.each(['consume', 'unfreeze'] as const)('%s naming its customer', async (op) => {
    const customer = `c-${op}-named`;
    const txid = `lost-${op}-named`;
    await env.fund(customer, 1_000);
    expect((await post('/v1/billing/freeze', { customer_id: customer, transaction_id: txid, amount: 10 })).status).toBe(200);
    const body = { transaction_id: txid, customer_id: customer };
    expectOutcomeUnknown(await withLostReply(`bound_${op}`, txid, customer, () => post(`/v1/billing/${op}`, body)));
    await restore();
    const retry = await post(`/v1/billing/${op}`, body);
    expect([retry.status, retry.body.is_idempotent_replay]).toEqual([200, true]);
    expect((await entries(customer, `transaction_id=${txid}&type=${op.toUpperCase()}`)).length).toBe(1);
  });

  it('deposit', async () => {
    const body = { customer_id: 'c-deposit', amount: 100, idempotency_key: 'lost-deposit' };
    expectOutcomeUnknown(await withLostReply('bound_deposit', 'lost-deposit', 'c-deposit', () => post('/v1/customers/deposit', body)));
    await restore();
    const retry = await post('/v1/customers/deposit', body);
    expect([retry.status, retry.body.is_idempotent_replay, retry.body.total_amount]).toEqual([200, true, 100]);
    expect((await entries('c-deposit', 'type=DEPOSIT')).length).toBe(1);
  });

  it('a gateway call whose hold reply is lost', async () => {
    await env.fund('c-gateway', 10_000_000);
    // The hold's transaction id is the service's own: the script is recognised by its
    // function's name, and the customer id it carries. On a single Redis the hold and the
    // receipt index entry are one script (bound_gateway_hold).
    expectOutcomeUnknown(await withLostReply('bound_gateway_hold', 'c-gateway', 'c-gateway', () => chat('c-gateway')));
    await restore();
    expect((await chat('c-gateway')).status).toBe(200);
  });
});

describe('a gateway call whose hold applied, and Redis is gone before its settlement', () => {
  it('answers 503 "outcome unknown": the settlement was never sent, but the hold was', async () => {
    await env.fund('c-settle', 10_000_000);
    const answer = env.svc.call('POST', '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'c-settle' },
      body: { model: OPENAI_MODEL, messages: [{ role: 'user', content: 'slow [[mock latency_ms=300]]' }], max_tokens: 5 },
    });
    // The upstream has the call: the hold applied and its reply came back.
    await waitFor(() => env.mock.requests.some((r) => JSON.stringify(r.body).includes('latency_ms=300')), 10_000, 'the upstream call');
    await proxy.refuse();
    proxy.cut();
    expectOutcomeUnknown(await answer);
    await restore();
  });
});

describe('a request made while Redis refuses connections', () => {
  it('answers 503 "nothing was applied", and nothing was', async () => {
    await env.fund('c-refused', 1_000);
    await proxy.refuse();
    proxy.cut();
    const body = { customer_id: 'c-refused', transaction_id: 'refused-deduct', amount: 10 };
    const res = await post('/v1/billing/deduct', body);
    expectError(res, 503, 'service_unavailable');
    expect(res.body.error.message).toMatch(nothing_applied);
    await restore();
    expect(await entries('c-refused', 'transaction_id=refused-deduct')).toEqual([]);
    const retry = await post('/v1/billing/deduct', body);
    expect([retry.status, retry.body.is_idempotent_replay]).toEqual([200, false]);
  });
});
