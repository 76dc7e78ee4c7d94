/**
 * reconcile against a real service: the state folded from PostgreSQL equals what the Lua
 * scripts built in Redis; tampering shows up as exactly the drift made; --repair (through
 * the CLI) restores balances, replays and pending TTL freezes, also for a customer whose
 * keys are all gone.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { beforeEach, describe, expect, it } from 'vitest';
import { bindingKeys, customerKeys } from '../../src/redis/keys.js';
import { FoldError, foldCustomer } from '../../src/reconcile/fold.js';
import { reconcile } from '../../src/reconcile/walk.js';
import type { ApiResponse, TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

const run = promisify(execFile);

/** The project of the running test: each makes its own (fixture). */
let p: TestProject;
/** Responses of the first applications, to compare replays with. */
const firsts: Record<string, { path: string; body: Record<string, unknown>; response: Record<string, unknown> }> = {};

function post(path: string, body: Record<string, unknown>): Promise<ApiResponse> {
  return svc.call('POST', path, { key: p.projectKey, body });
}

/** Applies an operation, expects 200, and keeps it for the replay checks. */
async function apply(name: string, path: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await post(path, body);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body.is_idempotent_replay).toBe(false);
  firsts[name] = { path, body, response: res.body };
  return res.body;
}

async function balances(...ids: string[]): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const id of ids) {
    const res = await svc.call('GET', `/v1/customers/${id}`, { key: p.projectKey });
    expect(res.status).toBe(200);
    out[id] = res.body;
  }
  return out;
}

async function expectReplays(names: string[]): Promise<void> {
  for (const name of names) {
    const { path, body, response } = firsts[name];
    const res = await post(path, body);
    expect([name, res.status, res.body]).toEqual([name, 200, { ...response, is_idempotent_replay: true }]);
  }
}

async function cli(...args: string[]): Promise<{ code: number; stdout: string }> {
  const env = {
    ...process.env,
    DATABASE_URL: process.env.TEST_DATABASE_URL,
    REDIS_PREFIX: svc.rt.config.REDIS_PREFIX,
    QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX,
    LOG_LEVEL: 'warn',
  };
  try {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'src/cli/reconcile.ts', ...args], { env });
    return { code: 0, stdout };
  } catch (err) {
    const e = err as { code: number; stdout: string };
    return { code: e.code, stdout: e.stdout };
  }
}

const keysOf = (customerId: string) => customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customerId);

useTestService({ workers: true, variants: [] });

/**
 * The customers every test starts from, in a project of its own: tests tamper with them,
 * repair them and count the project's customers, so none may see another's leftovers.
 */
async function fixture(): Promise<void> {
  p = await svc.project('B');
  for (const name of Object.keys(firsts)) delete firsts[name];

  // c2: TTL freezes that settle on their own, one released and one consumed.
  await apply('dep-c2', '/v1/customers/deposit', { customer_id: 'c2', amount: 2000, idempotency_key: 'k-c2' });
  await apply('ded-c2', '/v1/billing/deduct', { customer_id: 'c2', transaction_id: 'c2-d1', amount: 70, wallet: 'credits', business_type: 'TASK', description: 'first' });
  await apply('frz-c2-rel', '/v1/billing/freeze', { customer_id: 'c2', transaction_id: 'c2-f1', amount: 100, release_after_seconds: 5 });
  await apply('frz-c2-con', '/v1/billing/freeze', { customer_id: 'c2', transaction_id: 'c2-f2', amount: 120, consume_after_seconds: 5 });
  svc.rt.clock.advance(10_000);
  expect((await svc.call('GET', '/v1/customers/c2/balance', { key: p.projectKey })).body).toMatchObject({ used: 190, frozen: 0 });

  // c1: two wallets and sources, every settlement kind, and TTL freezes still pending.
  const far = new Date(Date.now() + svc.rt.clock.offsetMs() + 30 * 86_400_000).toISOString();
  await apply('dep-c1', '/v1/customers/deposit', {
    customer_id: 'c1', amount: 1000, idempotency_key: 'k-c1', name: 'Ada', email: 'ada@example.com', metadata: { tier: 'gold', a: [1, 2] },
  });
  await apply('dep-c1-bonus', '/v1/customers/deposit', { customer_id: 'c1', amount: 500, wallet: 'bonus', expires_at: far, idempotency_key: 'k-c1-b' });
  await apply('dep-c1-plain', '/v1/customers/deposit', { customer_id: 'c1', amount: 5 });
  // Spans both wallets (so the transaction names no single wallet), then returns most of it.
  await apply('frz-c1-a', '/v1/billing/freeze', { customer_id: 'c1', transaction_id: 'c1-f1', amount: 700, business_type: 'ORDER' });
  await apply('con-c1-a', '/v1/billing/consume', { transaction_id: 'c1-f1', amount: 120 });
  await apply('ded-c1', '/v1/billing/deduct', { customer_id: 'c1', transaction_id: 'c1-d1', amount: 600 });
  await apply('frz-c1-b', '/v1/billing/freeze', { customer_id: 'c1', transaction_id: 'c1-f2', amount: 200, wallet: 'credits' });
  await apply('unf-c1-b', '/v1/billing/unfreeze', { transaction_id: 'c1-f2' });
  await apply('frz-c1-ttl-rel', '/v1/billing/freeze', { customer_id: 'c1', transaction_id: 'c1-f3', amount: 50, release_after_seconds: 60 });
  await apply('frz-c1-ttl-con', '/v1/billing/freeze', { customer_id: 'c1', transaction_id: 'c1-f4', amount: 40, consume_after_seconds: 60 });
  await svc.drained();
}

describe('reconcile', () => {
  beforeEach(fixture);

  it('finds no drift between Redis and the state folded from PostgreSQL', async () => {
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: false });
    expect(report).toEqual({
      customers_checked: 2, customers_with_drift: 0, customers_repaired: 0,
      drift_total: 0, drift: [], errors_total: 0, errors: [], anomalies_total: 0, anomalies: [], quarantined_total: 0, quarantined: [], items_max: 1000,
    });
  });

  it('reports exactly the drift made in Redis, and --repair restores balances and replays', async () => {
    const before = await balances('c1', 'c2');
    const redis = svc.rt.redis;
    const c1 = keysOf('c1');
    const sourceId = firsts['dep-c1'].response.account_id as string;
    const source = { u: (await redis.hget(c1.src, `${sourceId}:u`))! };
    await redis.hincrby(c1.src, `${sourceId}:u`, 7);
    const deduct = JSON.parse((await redis.hget(c1.tx, 'c1-d1'))!) as Record<string, unknown>;
    await redis.hdel(c1.tx, 'c1-d1');
    await redis.hdel(bindingKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 't', 'c1-f1').ids, 'c1-f1');
    const c2 = keysOf('c2');
    await redis.del(c2.meta, c2.src, c2.tx, c2.dep, c2.ttl, c2.outbox, c2.live, c2.dead, c2.spent);

    const found = await cli('--project', p.projectId, '--json');
    expect(found.code).toBe(1);
    const report = JSON.parse(found.stdout);
    // The request's compared fields (`q`, src/ledger/conflicts.ts) are kept in Redis only: the fold has none.
    const { q: _fields, ...folded } = deduct;
    const expectedTx = { ...folded, r: JSON.parse(deduct.r as string) };
    expect(report.customers_checked).toBe(2);
    expect(report.customers_with_drift).toBe(2);
    expect(report.errors).toEqual([]);
    const base = { project_id: p.projectId };
    expect(report.drift).toHaveLength(4);
    expect(report.drift).toEqual(
      expect.arrayContaining([
        { ...base, customer_id: 'c1', field: 'source.used', source: sourceId, redis: Number(source.u) + 7, expected: Number(source.u) },
        { ...base, customer_id: 'c1', field: 'transaction', transaction_id: 'c1-d1', redis: null, expected: expectedTx },
        { ...base, customer_id: 'c1', field: 'txidx', transaction_id: 'c1-f1', redis: null, expected: 'c1' },
        { ...base, customer_id: 'c2', field: 'customer', redis: null, expected: 'present' },
      ]),
    );
    expect((await svc.call('GET', '/v1/customers/c2', { key: p.projectKey })).status).toBe(404);

    const repaired = await cli('--project', p.projectId, '--repair');
    expect(repaired.code, repaired.stdout).toBe(0);
    expect(repaired.stdout).toContain('repaired 2 customers');

    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });
    expect(await balances('c1', 'c2')).toEqual(before);
    await expectReplays(['dep-c1', 'dep-c1-bonus', 'ded-c1', 'frz-c1-a', 'con-c1-a', 'frz-c1-b', 'unf-c1-b', 'frz-c1-ttl-rel', 'dep-c2', 'ded-c2', 'frz-c2-rel']);
    // Bindings and states came back too: a reused id conflicts, a settled freeze stays settled.
    expectError(await post('/v1/billing/deduct', { customer_id: 'c2', transaction_id: 'c1-f1', amount: 1 }), 409, 'transaction_conflict');
    expectError(await post('/v1/billing/consume', { transaction_id: 'c1-f2' }), 400, 'no_consumable_freeze_records');
    expectError(await post('/v1/billing/consume', { transaction_id: 'c2-f2', amount: 1 }), 400, 'freeze_records_already_consumed');
  });

  /**
   * One case per thing reconcile compares (src/reconcile/compare.ts, compare and
   * compareSources): each plants drift in that one place of c1's Redis state, expects
   * exactly that drift item, and expects --repair to leave no drift and the balances as
   * they were. `S` is c1's first source (credits, no expiry, live), `B` its bonus source
   * (expires, spent: dead).
   */
  type Tamper = (c1: ReturnType<typeof keysOf>, S: string, B: string) => Promise<Record<string, unknown>[]>;
  const staticOf = async (key: string, id: string) => JSON.parse((await svc.rt.redis.hget(key, id))!) as Record<string, string>;
  /** Rewrites one field of a source's static part; returns the old value. */
  const setStatic = async (key: string, id: string, field: string, value: string): Promise<string> => {
    const st = await staticOf(key, id);
    const old = st[field];
    await svc.rt.redis.hset(key, id, JSON.stringify({ ...st, [field]: value }));
    return old;
  };
  const jsonField = async (key: string, id: string, field: string, value: unknown): Promise<unknown> => {
    const v = JSON.parse((await svc.rt.redis.hget(key, id))!) as Record<string, unknown>;
    const old = v[field];
    await svc.rt.redis.hset(key, id, JSON.stringify({ ...v, [field]: value }));
    return old;
  };
  const drift_cases: [string, Tamper][] = [
    ['source.used', async (k, S) => {
      const u = Number(await svc.rt.redis.hget(k.src, `${S}:u`));
      await svc.rt.redis.hincrby(k.src, `${S}:u`, 7);
      return [{ field: 'source.used', source: S, redis: u + 7, expected: u }];
    }],
    ['source.frozen', async (k, S) => {
      const f = Number(await svc.rt.redis.hget(k.src, `${S}:f`));
      await svc.rt.redis.hincrby(k.src, `${S}:f`, 3);
      return [{ field: 'source.frozen', source: S, redis: f + 3, expected: f }];
    }],
    ['source.total', async (k, S) => {
      const t = Number(await setStatic(k.src, S, 't', '999'));
      return [{ field: 'source.total', source: S, redis: 999, expected: t }];
    }],
    ['source.wallet', async (k, S) => {
      const w = await setStatic(k.src, S, 'w', 'other');
      return [{ field: 'source.wallet', source: S, redis: 'other', expected: w }];
    }],
    ['source.label', async (k, S) => {
      const l = await setStatic(k.src, S, 'l', 'relabelled');
      return [{ field: 'source.label', source: S, redis: 'relabelled', expected: l }];
    }],
    ['source.seq', async (k, S) => {
      const q = Number(await setStatic(k.src, S, 'q', '77'));
      return [{ field: 'source.seq', source: S, redis: 77, expected: q }];
    }],
    ['source.starts_at', async (k, S) => {
      await setStatic(k.src, S, 's', '1000');
      return [{ field: 'source.starts_at', source: S, redis: 1000, expected: null }];
    }],
    ['source.expires_at', async (k, _S, B) => {
      const e = Number(await setStatic(k.src, B, 'e', '4102444800000'));
      return [{ field: 'source.expires_at', source: B, redis: 4102444800000, expected: e }];
    }],
    ['source (a whole source gone)', async (k, S) => {
      const whole = await staticOf(k.src, S);
      const [u, f] = [await svc.rt.redis.hget(k.src, `${S}:u`), await svc.rt.redis.hget(k.src, `${S}:f`)];
      await svc.rt.redis.hdel(k.src, S, `${S}:u`, `${S}:f`);
      return [{ field: 'source', source: S, redis: null, expected: { id: S, ...whole, u, f } }];
    }],
    ['source.live', async (k, S) => {
      const member = (await svc.rt.redis.zrange(k.live, 0, -1)).find((m) => m.endsWith(`:${S}`))!;
      const score = await svc.rt.redis.zscore(k.live, member);
      await svc.rt.redis.zadd(k.live, 5, member);
      return [{ field: 'source.live', source: S, redis: '5', expected: score }];
    }],
    ['source.dead', async (k, S) => {
      await svc.rt.redis.zadd(k.dead, 1, S);
      return [{ field: 'source.dead', source: S, redis: 'dead', expected: null }];
    }],
    ['source.spent', async (k, S) => {
      const at = Date.now() + svc.rt.clock.offsetMs() + 86_400_000;
      await svc.rt.redis.zadd(k.spent, at, `${S}|1|1|credits`);
      // A spent member counts in its wallet's totals: the counters as Redis now reads them differ too.
      return [
        { field: 'source.spent', source: S, redis: at, expected: null },
      ];
    }],
    ['meta.wt (a wallet total)', async (k) => {
      const wt = Number(await svc.rt.redis.hget(k.meta, 'wt:bonus'));
      await svc.rt.redis.hincrby(k.meta, 'wt:bonus', 11);
      return [{ field: 'meta.wt:bonus', redis: wt + 11, expected: wt }];
    }],
    ['meta.wu (a wallet used)', async (k) => {
      const wu = Number(await svc.rt.redis.hget(k.meta, 'wu:credits'));
      await svc.rt.redis.hincrby(k.meta, 'wu:credits', 13);
      return [{ field: 'meta.wu:credits', redis: wu + 13, expected: wu }];
    }],
    ['meta.src_total', async (k) => {
      const t = await svc.rt.redis.hget(k.meta, 'src_total');
      await svc.rt.redis.hset(k.meta, 'src_total', '1');
      return [{ field: 'meta.src_total', redis: '1', expected: t }];
    }],
    ['meta.name', async (k) => {
      await svc.rt.redis.hset(k.meta, 'name', 'Eve');
      return [{ field: 'meta.name', redis: 'Eve', expected: 'Ada' }];
    }],
    ['meta.seq', async (k) => {
      const seq = await svc.rt.redis.hget(k.meta, 'seq');
      await svc.rt.redis.hset(k.meta, 'seq', '3');
      return [{ field: 'meta.seq', redis: '3', expected: seq }];
    }],
    ['transaction.st', async (k) => {
      await jsonField(k.tx, 'c1-f2', 'st', 'frozen');
      return [{ field: 'transaction.st', transaction_id: 'c1-f2', redis: 'frozen', expected: 'unfrozen' }];
    }],
    ['transaction.a', async (k) => {
      const a = await jsonField(k.tx, 'c1-d1', 'a', '1');
      return [{ field: 'transaction.a', transaction_id: 'c1-d1', redis: '1', expected: a }];
    }],
    ['deposit.h', async (k) => {
      const h = await jsonField(k.dep, 'k-c1-b', 'h', 'tampered');
      return [{ field: 'deposit.h', idempotency_key: 'k-c1-b', redis: 'tampered', expected: h }];
    }],
    ['ttl', async (k) => {
      const at = Number(await svc.rt.redis.zscore(k.ttl, 'c1-f3'));
      await svc.rt.redis.zadd(k.ttl, at + 1_000, 'c1-f3');
      return [{ field: 'ttl', transaction_id: 'c1-f3', redis: at + 1_000, expected: at }];
    }],
    ['txidx', async () => {
      await svc.rt.redis.hset(bindingKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 't', 'c1-d1').ids, 'c1-d1', `c2|${Date.now()}`);
      return [{ field: 'txidx', transaction_id: 'c1-d1', redis: 'c2', expected: 'c1' }];
    }],
    ['depidx', async () => {
      await svc.rt.redis.hdel(bindingKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'd', 'k-c1-b').ids, 'k-c1-b');
      return [{ field: 'depidx', idempotency_key: 'k-c1-b', redis: null, expected: 'c1' }];
    }],
  ];

  it.each(drift_cases)('reports drift planted in %s, and --repair restores it', async (_name, tamper) => {
    const before = await balances('c1', 'c2');
    const S = firsts['dep-c1'].response.account_id as string;
    const B = firsts['dep-c1-bonus'].response.account_id as string;
    const expected = await tamper(keysOf('c1'), S, B);
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
    expect(report.errors).toEqual([]);
    expect(report.drift).toEqual(expected.map((d) => ({ project_id: p.projectId, customer_id: 'c1', ...d })));
    expect(report).toMatchObject({ customers_with_drift: 1, customers_repaired: 1 });
    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });
    expect(await balances('c1', 'c2')).toEqual(before);
  });

  it('folds settled gateway calls from their entries and keeps calls in flight through a repair', async () => {
    await apply('dep-c3', '/v1/customers/deposit', { customer_id: 'c3', amount: 10_000, idempotency_key: 'k-c3' });
    const scope = { projectId: p.projectId, organizationId: p.organizationId };
    const usage = (id: string, status: 'settled' | 'failed', cost: number) =>
      JSON.stringify({
        id: `usage_${randomBytes(8).toString('hex')}`, customer_id: 'c3', trace_id: null, wallet: 'credits', model: 'm', endpoint: 'chat.completions', stream: false,
        status, input_tokens: 1, output_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, usage_estimated: false,
        cost_credits: cost, latency_ms: 1, prices: { input_price_per_million_credits: 1 }, upstream_status: status === 'failed' ? 500 : 200,
      });
    // Each hold is 100 of input bound plus 500 output tokens at one credit each; the
    // project index entry is the one the gateway service adds after its hold.
    const hold = async (id: string) => {
      const reply = await svc.rt.ledger.run('gateway_hold', scope, 'c3', {
        transactionId: id, wallet: 'credits', inputCostBound: 100, outputPrice: 1_000_000, outputTokens: 500, explicitMax: '1', holdTtlSeconds: 3_600,
        admitted: '1', answers: 1, idempotencyKey: '', keyBudget: '',
      });
      expect(reply[0]).toBe(0);
      await svc.rt.redis.hset(bindingKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 't', id).ids, id, `c3|${Date.now()}`);
    };
    await hold('gw-billed');
    expect((await svc.rt.ledger.run('gateway_settle', scope, 'c3', { transactionId: 'gw-billed', cost: 250, usageRecord: usage('gw-billed', 'settled', 250), modelId: 'm' }))[0]).toBe(0);
    await hold('gw-free');
    expect((await svc.rt.ledger.run('gateway_settle', scope, 'c3', { transactionId: 'gw-free', cost: 0, usageRecord: usage('gw-free', 'settled', 0), modelId: 'm' }))[0]).toBe(0);
    await hold('gw-failed');
    expect((await svc.rt.ledger.run('gateway_release', scope, 'c3', { transactionId: 'gw-failed', usageRecord: usage('gw-failed', 'failed', 0) }))[0]).toBe(0);
    await hold('gw-in-flight');
    await svc.drained();

    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });
    const before = await balances('c3');
    expect(before.c3).toMatchObject({ wallets: { credits: { used: 250, frozen: 600 } } });

    const c3 = keysOf('c3');
    await svc.rt.redis.hdel(c3.tx, 'gw-billed');
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
    expect(report.drift).toEqual([
      { project_id: p.projectId, customer_id: 'c3', field: 'transaction', transaction_id: 'gw-billed', redis: null, expected: expect.objectContaining({ k: 'gateway', st: 'settled', a: '600' }) },
    ]);
    expect(await balances('c3')).toEqual(before);
    // The id of a settled call stays taken; the call in flight still settles.
    expectError(await post('/v1/billing/deduct', { customer_id: 'c3', transaction_id: 'gw-billed', amount: 1 }), 409, 'transaction_conflict');
    expect((await svc.rt.ledger.run('gateway_settle', scope, 'c3', { transactionId: 'gw-in-flight', cost: 100, usageRecord: usage('gw-in-flight', 'settled', 100), modelId: 'm' }))[0]).toBe(0);
    expect((await svc.call('GET', '/v1/customers/c3/balance', { key: p.projectKey })).body).toMatchObject({ total: 10_000, used: 350, frozen: 0 });
    await svc.drained();
    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, errors: [] });
  });

  it('never rolls back an operation that runs while it repairs the same customer', async () => {
    await apply('dep-c4', '/v1/customers/deposit', { customer_id: 'c4', amount: 1_000_000, name: 'Busy' });
    const c4 = keysOf('c4');
    let acknowledged = 0;
    let loading = true;
    const load = async (loop: number) => {
      for (let i = 0; loading; i++) {
        const res = await post('/v1/billing/deduct', { customer_id: 'c4', transaction_id: `c4-${loop}-${i}`, amount: 1 + (i % 50) });
        expect(res.status).toBe(200);
        acknowledged += 1 + (i % 50);
        // Short pauses leave the quiet moments a repair needs (an empty outbox).
        await new Promise((r) => setTimeout(r, 2));
      }
    };
    const repairs = async () => {
      let rewritesUnderLoad = 0;
      for (let i = 0; i < 10; i++) {
        // Drift that needs a rewrite of the whole customer while deducts keep coming.
        await svc.rt.redis.hset(c4.meta, 'name', `tampered ${i}`);
        const report = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
        if (report.drift.some((d) => d.customer_id === 'c4')) rewritesUnderLoad++;
      }
      loading = false;
      return rewritesUnderLoad;
    };
    const [rewritesUnderLoad] = await Promise.all([repairs(), load(0), load(1)]);
    expect(rewritesUnderLoad).toBeGreaterThan(0);
    // Undo the last tamper by hand: a repair now would hide a rollback made earlier.
    await svc.rt.redis.hset(c4.meta, 'name', 'Busy');
    await svc.drained();
    expect((await svc.call('GET', '/v1/customers/c4/balance', { key: p.projectKey })).body).toMatchObject({ total: 1_000_000, used: acknowledged });
    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, errors: [] });
  });

  it('settles TTL freezes that were pending when a lost customer was restored', async () => {
    const c1 = keysOf('c1');
    const redis = svc.rt.redis;
    // A Redis loss takes the customer's keys and the delayed expire jobs of its freezes.
    for (const tx of ['c1-f3', 'c1-f4']) await svc.rt.ledgerQueue.remove(`expire|${p.projectId}|c1|${tx}`);
    const pending = await redis.zrange(c1.ttl, 0, -1);
    expect(pending.sort()).toEqual(['c1-f3', 'c1-f4']);
    await redis.del(c1.meta, c1.src, c1.tx, c1.dep, c1.ttl, c1.live, c1.dead, c1.spent);
    svc.rt.clock.advance(61_000);

    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
    expect(report).toMatchObject({ customers_with_drift: 1, customers_repaired: 1, drift: [{ customer_id: 'c1', field: 'customer' }] });

    // The ledger read runs no script: only the rescheduled expire jobs can settle them.
    let ttlEntries: { transaction_id: string; type: string; reason: string }[] = [];
    const deadline = Date.now() + 10_000;
    while (ttlEntries.length < 2 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      const ledger = await svc.call('GET', '/v1/customers/c1/ledger', { key: p.projectKey });
      ttlEntries = ledger.body.data.filter((e: { reason: string | null }) => e.reason !== null);
    }
    expect(ttlEntries.map(({ transaction_id, type, reason }) => ({ transaction_id, type, reason })).sort((a, b) => a.transaction_id.localeCompare(b.transaction_id))).toEqual([
      { transaction_id: 'c1-f3', type: 'UNFREEZE', reason: 'ttl_release' },
      { transaction_id: 'c1-f4', type: 'CONSUME', reason: 'ttl_consume' },
    ]);
    const balance = await svc.call('GET', '/v1/customers/c1/balance', { key: p.projectKey });
    // 1505 deposited; 600 deducted, 120 consumed, 40 auto-consumed; nothing frozen.
    expect(balance.body).toMatchObject({ total: 1505, used: 760, frozen: 0, available: 745 });
    await svc.drained();
    expect(await reconcile(svc.rt, { projectId: p.projectId, repair: false })).toMatchObject({ customers_with_drift: 0, errors: [] });
  });

  it('does not take a binding the trim archived after the customer was read for drift', async () => {
    // Where the trim's first step leaves a record (src/ledger/retention.ts): its binding
    // gone (and its id in the bucket's Bloom filter), the record listed in `arch` until
    // its deletion, while the record is not yet due by the retention reconcile reads
    // with. That is the state of a record that became due while reconcile checked the
    // customer's bindings, after it had read the customer's keys.
    const k = keysOf('c1');
    await svc.rt.ledger.bindings.archive(p.projectId, 't', 'c1', ['c1-d1']);
    await svc.rt.ledger.bindings.archive(p.projectId, 'd', 'c1', ['k-c1']);
    for (const member of ['t:c1-d1', 'd:k-c1']) {
      await svc.rt.redis.zrem(k.fin, member);
      await svc.rt.redis.zadd(k.arch, Date.now() + 5_000, member);
    }
    expect(await svc.rt.redis.hget(bindingKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 't', 'c1-d1').ids, 'c1-d1')).toBeNull();
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: false });
    expect(report).toMatchObject({ customers_checked: 2, customers_with_drift: 0, drift: [] });
  });

  it('reports Redis state that PostgreSQL does not know, and --repair leaves it alone', async () => {
    const ghost = keysOf('ghost');
    await svc.rt.redis.hset(ghost.meta, { created_at: '1', seq: '1' });
    try {
      // Customers come from PostgreSQL (here one per page); only the explicit scan finds the ghost.
      const fromPostgres = await reconcile(svc.rt, { projectId: p.projectId, repair: true, pageSize: 1 });
      expect(fromPostgres).toMatchObject({ customers_checked: 2, customers_with_drift: 0, drift: [] });
      const report = await reconcile(svc.rt, { projectId: p.projectId, repair: true, redisOnly: true });
      expect(report).toMatchObject({
        // The fixture's c1 and c2, and the ghost.
        customers_checked: 3,
        customers_with_drift: 1,
        customers_repaired: 0,
        drift: [{ customer_id: 'ghost', field: 'customer', redis: 'present', expected: null }],
      });
      expect(await svc.rt.redis.hgetall(ghost.meta)).toEqual({ created_at: '1', seq: '1' });
    } finally {
      await svc.rt.redis.del(ghost.meta);
    }
  });
});

describe('fold', () => {
  it('refuses a ledger it cannot fold instead of guessing', () => {
    const row = { name: null, email: null, metadata: null, created_at: 1 };
    const entry = { seq: 1, transaction_id: 't', amount: 5, wallet: null, details: [], reason: null, business_type: null, result: {}, extra: null };
    expect(() => foldCustomer(row, [{ ...entry, type: 'GATEWAY' }])).toThrow(FoldError);
    // A consume of a transaction the ledger never froze.
    expect(() => foldCustomer(row, [{ ...entry, type: 'CONSUME' }])).toThrow(FoldError);
  });
});
