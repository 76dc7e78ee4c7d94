/**
 * A money command whose reply is lost (docs/ARCHITECTURE.md, "When a store fails"). The
 * service reaches Redis through a TCP proxy. The proxy lets a money script reach Redis,
 * swallows its reply, then cuts every connection. The service learns the outcome itself
 * for OUTCOME_WAIT_MS: when Redis answers again within it, the answer is the operation's
 * result, applied once (learned as applied, or applied by the new send when the lost one
 * never ran); when the proxy refuses connections all along, the answer is 503
 * outcome_unknown, never service_unavailable ("nothing was applied"), and the retry with
 * the same id is the replay, with one ledger entry. A request made while Redis is already
 * refused never reaches it, and that one does say nothing was applied.
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
import type { OutcomePath } from '../../src/metrics/metrics.js';

const redisUrl = testConfig().REDIS_URL;
const proxy = TcpProxy.to(redisUrl, 6379);
let env: GatewayEnv;
/** Straight to Redis, past the proxy: sees what a script applied while its reply is lost. */
let direct: Redis;
/** Cut connections must not leave an error unheard (an emitter without an `error` listener). */
let consoleErrors: ConsoleErrors;

const nothing_applied = /nothing was applied/;
const outcome_unknown = /may have been applied: retry it with the same/;
/** Shorter than the default: several cases wait all of it. Redis comes back well within it. */
const outcome_wait_ms = 1_500;

beforeAll(async () => {
  consoleErrors = captureConsoleErrors();
  await proxy.start();
  direct = new Redis(redisUrl);
  env = await startGatewayEnv({ config: { REDIS_URL: proxy.via(redisUrl), OUTCOME_WAIT_MS: outcome_wait_ms } });
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
 * loses its reply, then cuts every connection: `back` lets the service reconnect at once,
 * else new connections are refused. Returns the answer.
 */
async function withLostReply(
  script: string,
  marker: string,
  customerId: string,
  request: () => Promise<ApiResponse>,
  back = false,
): Promise<ApiResponse> {
  const { fn } = scriptSource(script);
  const before = await sourcesOf(customerId);
  proxy.dropRepliesWhen((sent) => sent.includes(fn) && sent.includes(marker));
  const answer = request();
  await waitFor(() => proxy.droppingReplies, 10_000, `the ${script} script to be sent`);
  await waitFor(async () => (await sourcesOf(customerId)) !== before, 10_000, `the ${script} script to apply in Redis`);
  if (back) proxy.forward();
  else await proxy.refuse();
  proxy.cut();
  return answer;
}

/** How often the service took each path of learning a lost reply's outcome. */
async function learned(): Promise<Record<OutcomePath, number>> {
  const m = await env.svc.rt.metrics.outcomeLearning.get();
  return Object.fromEntries(m.values.map((v) => [v.labels.path, v.value])) as Record<OutcomePath, number>;
}

/** The paths counted while `run` ran. */
async function pathsDuring(run: () => Promise<void>): Promise<Partial<Record<OutcomePath, number>>> {
  const before = await learned();
  await run();
  const after = await learned();
  return Object.fromEntries(Object.entries(after).filter(([k, v]) => v !== before[k as OutcomePath]).map(([k, v]) => [k, v - before[k as OutcomePath]]));
}

function expectOutcomeUnknown(res: ApiResponse): void {
  expectError(res, 503, 'outcome_unknown');
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
describe('a money script whose reply is lost and Redis does not come back in time answers 503 outcome_unknown, and its retry is the replay', () => {
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

  it('a gateway call whose hold reply is lost: 503 service_unavailable, the call never goes upstream and its hold is released', async () => {
    await env.fund('c-gateway', 10_000_000);
    const calls = env.mock.requests.length;
    // The hold's transaction id is the service's own: the script is recognised by its
    // function's name, and the customer id it carries. On a single Redis the hold and the
    // receipt index entry are one script (bound_gateway_hold).
    const res = await withLostReply('bound_gateway_hold', 'c-gateway', 'c-gateway', () => chat('c-gateway'));
    expectError(res, 503, 'service_unavailable');
    expect(res.body.error.message).toMatch(nothing_applied);
    expect(env.mock.requests.length).toBe(calls);
    await restore();
    await waitFor(async () => (await balance('c-gateway')).frozen === 0, 10_000, 'the hold to be released');
    expect(await entries('c-gateway', 'type=GATEWAY')).toEqual([]);
    expect((await chat('c-gateway')).status).toBe(200);
  });
});

async function balance(customerId: string): Promise<{ available: number; frozen: number }> {
  const r = await env.svc.call('GET', `/v1/customers/${customerId}/balance`, { key: env.p.projectKey });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

describe('a money script whose reply is lost and Redis comes back in time answers its result, applied once', () => {
  it('deduct that applied: its result, not a replay; a retry with the same id is the replay of the same result', async () => {
    await env.fund('l-deduct', 1_000);
    const body = { customer_id: 'l-deduct', transaction_id: 'learned-deduct', amount: 10 };
    let res: ApiResponse | undefined;
    const paths = await pathsDuring(async () => {
      res = await withLostReply('bound_deduct', 'learned-deduct', 'l-deduct', () => post('/v1/billing/deduct', body), true);
    });
    expect([res!.status, res!.body.is_idempotent_replay], JSON.stringify(res!.body)).toEqual([200, false]);
    expect(paths).toEqual({ learned_applied: 1 });
    const retry = await post('/v1/billing/deduct', body);
    expect(retry.body).toEqual({ ...res!.body, is_idempotent_replay: true });
    expect((await entries('l-deduct', 'transaction_id=learned-deduct')).map((e) => e.type)).toEqual(['DEDUCT']);
    expect((await balance('l-deduct')).available).toBe(990);
  });

  it('deduct whose script never ran: applied by the new send', async () => {
    await env.fund('l-unsent', 1_000);
    const body = { customer_id: 'l-unsent', transaction_id: 'learned-unsent', amount: 10 };
    const { fn } = scriptSource('bound_deduct');
    let res: ApiResponse | undefined;
    const paths = await pathsDuring(async () => {
      proxy.loseRequestsWhen((sent) => sent.includes(fn) && sent.includes('learned-unsent'));
      const answer = post('/v1/billing/deduct', body);
      await waitFor(() => proxy.droppingReplies, 10_000, 'the deduct script to be written');
      proxy.forward();
      proxy.cut();
      res = await answer;
    });
    expect([res!.status, res!.body.is_idempotent_replay], JSON.stringify(res!.body)).toEqual([200, false]);
    expect(paths).toEqual({ learned_not_applied_then_applied: 1 });
    expect((await entries('l-unsent', 'transaction_id=learned-unsent')).map((e) => e.type)).toEqual(['DEDUCT']);
    expect((await balance('l-unsent')).available).toBe(990);
  });

  it('the binding read of a consume naming no customer: read again, and the consume applies once', async () => {
    await env.fund('l-read', 1_000);
    expect((await post('/v1/billing/freeze', { customer_id: 'l-read', transaction_id: 'learned-read', amount: 10 })).status).toBe(200);
    const { fn } = scriptSource('bind');
    proxy.dropRepliesWhen((sent) => sent.includes(fn) && sent.includes('learned-read'));
    const answer = post('/v1/billing/consume', { transaction_id: 'learned-read' });
    await waitFor(() => proxy.droppingReplies, 10_000, 'the binding read to be sent');
    proxy.forward();
    proxy.cut();
    const res = await answer;
    expect([res.status, res.body.is_idempotent_replay, res.body.consumed_amount], JSON.stringify(res.body)).toEqual([200, false, 10]);
    expect((await entries('l-read', 'transaction_id=learned-read&type=CONSUME')).length).toBe(1);
  });

  it('deposit with an idempotency key', async () => {
    const body = { customer_id: 'l-deposit', amount: 100, idempotency_key: 'learned-deposit' };
    const res = await withLostReply('bound_deposit', 'learned-deposit', 'l-deposit', () => post('/v1/customers/deposit', body), true);
    expect([res.status, res.body.is_idempotent_replay, res.body.total_amount], JSON.stringify(res.body)).toEqual([200, false, 100]);
    const retry = await post('/v1/customers/deposit', body);
    expect(retry.body).toEqual({ ...res.body, is_idempotent_replay: true });
    expect((await entries('l-deposit', 'type=DEPOSIT')).length).toBe(1);
  });

  it('a gateway hold: the call goes on, billed once, nothing left frozen', async () => {
    await env.fund('l-hold', 10_000_000);
    let res: ApiResponse | undefined;
    const paths = await pathsDuring(async () => {
      res = await withLostReply('bound_gateway_hold', 'l-hold', 'l-hold', () => chat('l-hold'), true);
    });
    expect(res!.status, JSON.stringify(res!.body)).toBe(200);
    expect(paths).toEqual({ learned_applied: 1 });
    const cost = Number(res!.headers.get('x-service-cost-credits'));
    expect(await entries('l-hold', 'type=GATEWAY')).toHaveLength(1);
    expect(await balance('l-hold')).toMatchObject({ frozen: 0, available: 10_000_000 - cost });
  });

  it('a gateway settlement: billed once', async () => {
    await env.fund('l-settle', 10_000_000);
    const res = await withLostReply('gateway_settle', 'l-settle', 'l-settle', () => chat('l-settle'), true);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const cost = Number(res.headers.get('x-service-cost-credits'));
    expect(cost).toBeGreaterThan(0);
    expect(await entries('l-settle', 'type=GATEWAY')).toHaveLength(1);
    expect(await balance('l-settle')).toMatchObject({ frozen: 0, available: 10_000_000 - cost });
  });
});

describe('a gateway call whose hold applied, and Redis is gone before its settlement', () => {
  it('answers 503 outcome_unknown naming the call, and the settlement in the background bills it once', async () => {
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
    const res = await answer;
    expectOutcomeUnknown(res);
    expect(res.body.error.transaction_id).toMatch(/^gw_/);
    await restore();
    await waitFor(async () => (await entries('c-settle', 'type=GATEWAY')).length === 1, 10_000, 'the background settlement');
    expect((await entries('c-settle', 'type=GATEWAY'))[0].transaction_id).toBe(res.body.error.transaction_id);
    expect((await balance('c-settle')).frozen).toBe(0);
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
