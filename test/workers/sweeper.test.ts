/**
 * The scheduled sweeper (workers/sweep.ts, a BullMQ job scheduler) is the only thing that
 * persists an outbox nobody marked dirty (an API killed between its script and its SADD)
 * and that settles an overdue TTL freeze whose expire job was lost. Each test breaks the
 * normal path first (removes the dirty mark, removes the expire job), then starts the
 * workers with a short sweep interval and waits for the sweeper to do the work.
 */
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { activeKeyOf, dirtyKeyOf } from '../../src/redis/keys.js';
import { PersistLoop } from '../../workers/persist.js';
import { sweep } from '../../workers/sweep.js';
import { active_mark_window_ms } from '../../src/ledger/marks.js';
import { startWorkers } from '../../workers/index.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { waitFor } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

const sweep_interval_ms = 200;
const sweep_timeout_ms = 15_000;

// No workers here: each test starts them once its outbox or freeze is in the state to sweep.
useTestService({ config: { SWEEP_INTERVAL_MS: sweep_interval_ms } });

const scope = () => ({ projectId: p.projectId, organizationId: p.organizationId });

async function post(path: string, body: Record<string, unknown>) {
  const res = await svc.call('POST', path, { key: p.projectKey, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

/** Starts workers for the duration of `fn`. */
async function withWorkers(fn: () => Promise<void>): Promise<void> {
  const workers = await startWorkers(svc.rt);
  try {
    await fn();
  } finally {
    await workers.stop();
  }
}

describe('the sweeper', () => {
  it('persists the entries of an outbox that nobody marked dirty', async () => {
    const customer = 'unmarked';
    const keys = svc.rt.ledger.keys(scope(), customer);
    const dirty = dirtyKeyOf(svc.rt.config.REDIS_PREFIX, keys.base);
    await post('/v1/customers/deposit', { customer_id: customer, amount: 1_000 });
    await post('/v1/billing/freeze', { customer_id: customer, transaction_id: 'unmarked-1', amount: 300 });
    // The API marks the outbox dirty in the same round trip as its script; take the mark away.
    await waitFor(async () => (await svc.rt.redis.sismember(dirty, keys.base)) === 1, 5_000, 'the dirty mark');
    await svc.rt.redis.srem(dirty, keys.base);
    // The deposit's entry, its deposit.created event, the freeze's entry.
    expect(await svc.rt.redis.xlen(keys.outbox)).toBe(3);
    // The sweeper looks at a customer once the API's active mark on it is over (as after the API died).
    svc.rt.clock.advance(active_mark_window_ms + 1_000);

    await withWorkers(async () => {
      // The persist loop only drains marked outboxes: the entries reach PostgreSQL only when the sweeper marks this one again.
      await waitFor(async () => (await svc.rt.redis.xlen(keys.outbox)) === 0, sweep_timeout_ms, 'the sweeper to persist the outbox');
    });
    const rows = await svc.rt.db.any(
      sql.unsafe`SELECT type, amount::text AS amount FROM ledger_entries WHERE project_id = ${p.projectId} AND customer_id = ${customer} ORDER BY seq`,
    );
    expect(rows.map((r) => [r.type, r.amount])).toEqual([['DEPOSIT', '1000'], ['FREEZE', '300']]);
  });

  it('settles an overdue TTL freeze whose expire job is missing', async () => {
    const customer = 'lost-expiry';
    const keys = svc.rt.ledger.keys(scope(), customer);
    await post('/v1/customers/deposit', { customer_id: customer, amount: 1_000 });
    await post('/v1/billing/freeze', { customer_id: customer, transaction_id: 'lost-expiry-1', amount: 400, release_after_seconds: 60 });
    const jobs = (await svc.rt.ledgerQueue.getJobs(['delayed', 'waiting'])).filter((j) => j.name === 'expire' && j.data.customerId === customer);
    expect(jobs).toHaveLength(1);
    await jobs[0].remove();
    // Past the TTL, and nobody touches the customer (any script would settle it lazily).
    svc.rt.clock.advance(61_000);
    expect(await svc.rt.redis.zcard(keys.ttl)).toBe(1);

    await withWorkers(async () => {
      await waitFor(async () => (await svc.rt.redis.zcard(keys.ttl)) === 0, sweep_timeout_ms, 'the sweeper to settle the freeze');
      await waitFor(async () => (await svc.rt.redis.xlen(keys.outbox)) === 0, sweep_timeout_ms, 'the workers to persist the outbox');
    });
    const ledger = await svc.call('GET', `/v1/customers/${customer}/ledger?limit=10`, { key: p.projectKey });
    expect(ledger.body.data.map((e: { type: string; amount: number; reason: string | null }) => [e.type, e.amount, e.reason])).toEqual([
      ['UNFREEZE', 400, 'ttl_release'],
      ['FREEZE', 400, null],
      ['DEPOSIT', 1_000, null],
    ]);
    const balance = await svc.call('GET', `/v1/customers/${customer}/balance`, { key: p.projectKey });
    expect(balance.body).toMatchObject({ total: 1_000, used: 0, frozen: 0, available: 1_000 });
  });
  it('settles a TTL freeze that a reconcile repair wrote back, though its expire job is lost again', async () => {
    const customer = 'repaired-ttl';
    const prefix = svc.rt.config.REDIS_PREFIX;
    const keys = svc.rt.ledger.keys(scope(), customer);
    const active = activeKeyOf(prefix, keys.base);
    await post('/v1/customers/deposit', { customer_id: customer, amount: 1_000 });
    await post('/v1/billing/freeze', { customer_id: customer, transaction_id: 'repaired-ttl-1', amount: 300, release_after_seconds: 60 });
    await new PersistLoop(svc.rt.redis, svc.rt.ledgerQueries, prefix, 0, svc.rt.logger).outbox.drain(keys.base);
    const [, ttlDue] = await svc.rt.redis.zrange(keys.ttl, 0, 0, 'WITHSCORES');
    // Redis forgets the customer, its active mark and the expiry job; a repair writes it back.
    await svc.rt.redis.del(keys.meta, keys.src, keys.tx, keys.dep, keys.ttl, keys.live, keys.dead, keys.spent, keys.fin, keys.arch, keys.outbox);
    await svc.rt.redis.zrem(active, keys.base);
    const expiryJobs = async () => (await svc.rt.ledgerQueue.getJobs(['delayed', 'waiting'])).filter((j) => j.name === 'expire' && j.data.customerId === customer);
    for (const job of await expiryJobs()) await job.remove();
    const report = await reconcile(svc.rt, { repair: true, customers: [{ projectId: p.projectId, customerId: customer }] });
    expect(report.customers_repaired).toBe(1);
    expect(await svc.rt.redis.zscore(keys.ttl, 'repaired-ttl-1')).toBe(ttlDue);
    // The repair queued the job again; it is lost again (a queue emptied later), and
    // nobody touches the customer: only the sweeper can settle it, through the index.
    const requeued = await expiryJobs();
    expect(requeued).toHaveLength(1);
    await requeued[0].remove();
    expect(await svc.rt.redis.zscore(active, keys.base)).toBe(ttlDue);
    svc.rt.clock.advance(61_000);

    await withWorkers(async () => {
      await waitFor(async () => (await svc.rt.redis.zcard(keys.ttl)) === 0, sweep_timeout_ms, 'the sweeper to settle the freeze');
    });
    const balance = await svc.call('GET', `/v1/customers/${customer}/balance`, { key: p.projectKey });
    expect(balance.body).toMatchObject({ total: 1_000, used: 0, frozen: 0, available: 1_000 });
  });

  it('keeps a customer in the active index while its outbox or a TTL needs it, and then lets it go', async () => {
    const customer = 'indexed';
    const prefix = svc.rt.config.REDIS_PREFIX;
    const keys = svc.rt.ledger.keys(scope(), customer);
    const active = activeKeyOf(prefix, keys.base);
    const outbox = new PersistLoop(svc.rt.redis, svc.rt.ledgerQueries, prefix, 0, svc.rt.logger).outbox;
    const sweepNow = async () => {
      const t = await svc.rt.redis.time();
      return sweep(svc.rt.redis, svc.rt.scripts, prefix, svc.rt.ledger, Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000) + svc.rt.clock.offsetMs());
    };
    await post('/v1/customers/deposit', { customer_id: customer, amount: 1_000 });
    await post('/v1/billing/freeze', { customer_id: customer, transaction_id: 'indexed-1', amount: 100, release_after_seconds: 3_600 });
    // Marked before its scripts ran, for the window.
    expect(await svc.rt.redis.zscore(active, keys.base)).not.toBeNull();

    // Window over, entries waiting: marked dirty, and it stays due.
    svc.rt.clock.advance(active_mark_window_ms + 1_000);
    const first = await sweepNow();
    expect(first.outboxes).toBeGreaterThanOrEqual(1);
    expect(await svc.rt.redis.sismember(dirtyKeyOf(prefix, keys.base), keys.base)).toBe(1);
    const stillDue = Number(await svc.rt.redis.zscore(active, keys.base));

    // Persisted, a TTL pending: the member waits for the TTL's due time.
    await outbox.drain(keys.base);
    await sweepNow();
    const [ttlDue] = (await svc.rt.redis.zrange(keys.ttl, 0, 0, 'WITHSCORES')).slice(1);
    expect(Number(await svc.rt.redis.zscore(active, keys.base))).toBe(Number(ttlDue));
    expect(Number(ttlDue)).toBeGreaterThan(stillDue);

    // Nothing pending and nothing waiting: it leaves the index.
    await post('/v1/billing/unfreeze', { transaction_id: 'indexed-1' });
    await outbox.drain(keys.base);
    svc.rt.clock.advance(3_600_000);
    const last = await sweepNow();
    expect(last.released).toBeGreaterThanOrEqual(1);
    expect(await svc.rt.redis.zscore(active, keys.base)).toBeNull();
  });
});
