/**
 * Redis memory stays flat (REDIS_RETENTION_SECONDS=2): 20,000 operations on one customer,
 * concurrent through the HTTP API (deposits, deducts, freezes consumed or unfrozen), leave
 * its keys and the project's binding buckets no larger than the first 2,000 did, once the
 * trim has run; the very first id still replays with its original body (from PostgreSQL),
 * and reconcile finds no drift.
 *
 * What is measured: the customer's meta, tx, dep, ttl, outbox, fin and arch keys and every
 * binding bucket of the project (ids and Bloom filter). Not measured: the customer's
 * sources (`src`), which nothing removes yet. The deposits here are spent within their
 * round, so once spent sources leave Redis after the retention as well (the source layout
 * of hot path v2), the source keys belong in `measuredKeys` too and must stay flat with
 * the rest.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcile } from '../../src/reconcile/reconcile.js';
import { binding_buckets, bindingKeysOfBucket, customerKeys } from '../../src/redis/keys.js';
import { startTestService, waitFor, type ApiResponse, type TestProject, type TestService } from '../helpers.js';

let svc: TestService;
let p: TestProject;

const customer = 'mem-1';
const ops_per_round = 10;
const clients = 16;

function post(path: string, body: Record<string, unknown>): Promise<ApiResponse> {
  return svc.call('POST', path, { key: p.projectKey, body });
}

async function ok(path: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await post(path, body);
  if (res.status !== 200) throw new Error(`${path} ${JSON.stringify(body)} answered ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Ten operations: a deposit, five deducts, a freeze consumed in part, a freeze unfrozen. */
async function round(n: number): Promise<void> {
  await ok('/v1/customers/deposit', { customer_id: customer, amount: 20, idempotency_key: `mk-${n}` });
  for (let i = 0; i < 5; i++) await ok('/v1/billing/deduct', { customer_id: customer, transaction_id: `md-${n}-${i}`, amount: 1 });
  await ok('/v1/billing/freeze', { customer_id: customer, transaction_id: `mf-${n}-c`, amount: 5 });
  await ok('/v1/billing/consume', { transaction_id: `mf-${n}-c`, amount: 3 });
  await ok('/v1/billing/freeze', { customer_id: customer, transaction_id: `mf-${n}-u`, amount: 5 });
  await ok('/v1/billing/unfreeze', { transaction_id: `mf-${n}-u` });
}

/** Rounds [from, to), `clients` at a time. */
async function rounds(from: number, to: number): Promise<void> {
  let next = from;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (next < to) await round(next++);
    }),
  );
}

function measuredKeys(): string[] {
  const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customer);
  const buckets = (['t', 'd'] as const).flatMap((kind) =>
    Array.from({ length: binding_buckets }, (_, b) => Object.values(bindingKeysOfBucket(svc.rt.config.REDIS_PREFIX, p.projectId, kind, b))).flat(),
  );
  return [k.meta, k.tx, k.dep, k.ttl, k.outbox, k.fin, k.arch, ...buckets];
}

/** Bytes Redis uses for the measured keys (MEMORY USAGE, every element counted). */
async function memory(): Promise<number> {
  let total = 0;
  for (const key of measuredKeys()) total += Number((await svc.rt.redis.memory('USAGE', key, 'SAMPLES', 0)) ?? 0);
  return total;
}

/** The trim is done: no record, listing or binding is left but the live ones (none here). */
async function trimmed(): Promise<boolean> {
  const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customer);
  const r = svc.rt.redis;
  const counts = [await r.hlen(k.tx), await r.hlen(k.dep), await r.zcard(k.fin), await r.zcard(k.arch), await r.xlen(k.outbox)];
  for (const kind of ['t', 'd'] as const) {
    for (let b = 0; b < binding_buckets; b++) counts.push(await r.hlen(bindingKeysOfBucket(svc.rt.config.REDIS_PREFIX, p.projectId, kind, b).ids));
  }
  return counts.every((c) => c === 0);
}

beforeAll(async () => {
  svc = await startTestService({ workers: true, config: { REDIS_RETENTION_SECONDS: 2 } });
  p = await svc.project('B');
});
afterAll(() => svc.close());

describe('bounded Redis state', () => {
  it('keeps a customer flat over 20,000 operations, and replays the first one', async () => {
    const first = await ok('/v1/customers/deposit', { customer_id: customer, amount: 20, idempotency_key: 'mk-first' });
    const firstDeduct = await ok('/v1/billing/deduct', { customer_id: customer, transaction_id: 'md-first', amount: 1 });
    await rounds(0, 2_000 / ops_per_round);
    await waitFor(trimmed, 60_000, 'the first 2,000 operations to be trimmed');
    const after2k = await memory();

    await rounds(2_000 / ops_per_round, 20_000 / ops_per_round);
    // The last retention's records are still there: the measure sees them.
    const endOfRun = await memory();
    await waitFor(trimmed, 60_000, 'the 20,000 operations to be trimmed');
    const after20k = await memory();
    const sizes = `after 2,000: ${after2k} bytes; at the end of the run: ${endOfRun}; after 20,000: ${after20k}`;
    expect(after20k, sizes).toBeLessThanOrEqual(after2k);
    expect(endOfRun, sizes).toBeGreaterThan(after20k);

    expect((await post('/v1/customers/deposit', { customer_id: customer, amount: 20, idempotency_key: 'mk-first' })).body).toEqual({ ...first, is_idempotent_replay: true });
    expect((await post('/v1/billing/deduct', { customer_id: customer, transaction_id: 'md-first', amount: 1 })).body).toEqual({ ...firstDeduct, is_idempotent_replay: true });

    await svc.drained();
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: false });
    expect([report.customers_checked, report.drift, report.errors]).toEqual([1, [], []]);
  }, 300_000);
});
