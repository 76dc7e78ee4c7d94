/**
 * source.expired with an EXPIRE ledger entry (lua/includes/customer.lua, retire and
 * expire_sources; workers/sweep.ts, the expiring index): a source that expires with
 * credits left writes one EXPIRE entry and one source.expired event, by whichever script
 * sees it first (an operation on the customer, or the sweeper's expire), never twice;
 * a source used up or with nothing left writes none; credits frozen at the expiry wait
 * for the freeze's end; the credits that left run the balance alerts; reconcile agrees.
 */
import { describe, expect, it } from 'vitest';
import { sweep } from '../../workers/sweep.js';
import { active_mark_window_ms } from '../../src/ledger/marks.js';
import { customerKeys, expiringKeyOf } from '../../src/redis/keys.js';
import { reconcileOverApi, waitFor, type Json } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

const call = (method: string, path: string, body?: unknown) => svc.call(method, path, { key: p.projectKey, body });

/** The service clock (tests move it with the clock offset). */
const now = () => Date.now() + svc.rt.clock.offsetMs();

async function deposit(customer: string, amount: number, expiresInMs: number | null): Promise<string> {
  const body: Record<string, unknown> = { customer_id: customer, amount };
  if (expiresInMs !== null) body.expires_at = new Date(now() + expiresInMs).toISOString();
  const r = await call('POST', '/v1/customers/deposit', body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.account_id as string;
}

async function sweepNow(): Promise<void> {
  const t = await svc.rt.redis.time();
  await sweep(svc.rt.redis, svc.rt.scripts, svc.rt.config.REDIS_PREFIX, svc.rt.ledger, Number(t[0]) * 1000 + Math.floor(Number(t[1]) / 1000) + svc.rt.clock.offsetMs());
}

async function expireEntries(customer: string): Promise<Json[]> {
  await svc.drained();
  const r = await call('GET', `/v1/customers/${customer}/ledger?type=EXPIRE`);
  expect(r.status).toBe(200);
  return r.body.data as Json[];
}

async function events(customer: string, type: string): Promise<Json[]> {
  await svc.drained();
  const r = await call('GET', `/v1/events?customer_id=${customer}&type=${type}`);
  expect(r.status).toBe(200);
  return r.body.data as Json[];
}

describe('an expiring source with credits left', () => {
  it('is expired by the customer operation that first sees it: one EXPIRE entry and one source.expired event', async () => {
    const a = await deposit('ex-op', 1000, 60_000);
    await deposit('ex-op', 500, null);
    expect((await call('POST', '/v1/billing/deduct', { customer_id: 'ex-op', transaction_id: 'ex-op-1', amount: 300 })).status).toBe(200);
    svc.rt.clock.advance(61_000);
    // The deduct finds the source expired: it draws from the other one and writes the EXPIRE.
    const d = await call('POST', '/v1/billing/deduct', { customer_id: 'ex-op', transaction_id: 'ex-op-2', amount: 10 });
    expect(d.status).toBe(200);
    expect(d.body.deduct_details).toEqual([expect.objectContaining({ amount: 10 })]);
    expect(d.body.deduct_details[0].account_id).not.toBe(a);
    // The sweeper (and any later script) finds nothing more to do.
    await sweepNow();
    expect((await call('GET', '/v1/customers/ex-op/balance')).body).toMatchObject({ available: 490 });
    const entries = await expireEntries('ex-op');
    expect(entries).toEqual([expect.objectContaining({
      type: 'EXPIRE', transaction_id: a, amount: 700, wallet: 'credits', details: [{ account_id: a, credit_type: 'credits', amount: 700 }],
    })]);
    const [e, ...more] = await events('ex-op', 'source.expired');
    expect(more).toEqual([]);
    expect(e.data).toMatchObject({ customer_id: 'ex-op', account_id: a, wallet: 'credits', amount: 700, entry_id: entries[0].id });
    expect(typeof e.data.expires_at).toBe('string');
    // The listing (newest first) shows it just before the deduct that found it.
    const all = (await call('GET', '/v1/customers/ex-op/ledger')).body.data as Json[];
    expect(all.map((x) => x.type)).toEqual(['DEDUCT', 'EXPIRE', 'DEDUCT', 'DEPOSIT', 'DEPOSIT']);
  });

  it('is expired by the sweeper when nothing touches the customer, once however many sweeps and reads run', async () => {
    const a = await deposit('ex-idle', 800, 30_000);
    await deposit('ex-idle', 100, null);
    const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'ex-idle');
    expect(Number(await svc.rt.redis.zscore(expiringKeyOf(svc.rt.config.REDIS_PREFIX, k.base), k.base))).toBeGreaterThan(now());
    svc.rt.clock.advance(31_000);
    // Several sweepers, a read and a deduct at once: the source dies, and writes its entry, once.
    const [, , , d] = await Promise.all([
      sweepNow(), sweepNow(), call('GET', '/v1/customers/ex-idle'),
      call('POST', '/v1/billing/deduct', { customer_id: 'ex-idle', transaction_id: 'ex-idle-1', amount: 5 }), sweepNow(),
    ]);
    expect(d.status).toBe(200);
    await sweepNow();
    const entries = await expireEntries('ex-idle');
    expect(entries).toEqual([expect.objectContaining({ type: 'EXPIRE', transaction_id: a, amount: 800 })]);
    expect(await events('ex-idle', 'source.expired')).toHaveLength(1);
    // The customer left the expiring index: no source of it expires any more.
    expect(await svc.rt.redis.zscore(expiringKeyOf(svc.rt.config.REDIS_PREFIX, k.base), k.base)).toBeNull();
  });

  it('moves the customer in the expiring index to its next source expiry', async () => {
    await deposit('ex-next', 100, 20_000);
    const later = await deposit('ex-next', 200, 120_000);
    const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'ex-next');
    const key = expiringKeyOf(svc.rt.config.REDIS_PREFIX, k.base);
    svc.rt.clock.advance(21_000);
    await sweepNow();
    expect((await expireEntries('ex-next')).map((e) => e.amount)).toEqual([100]);
    const listed = Number(await svc.rt.redis.zscore(key, k.base));
    expect(listed).toBeGreaterThan(now());
    svc.rt.clock.advance(100_000);
    await sweepNow();
    expect((await expireEntries('ex-next')).map((e) => [e.transaction_id, e.amount])).toEqual([[later, 200], [expect.any(String), 100]]);
  });

  it('a customer whose listing was lost is listed again by the sweep of the active index', async () => {
    const expiresIn = 60_000;
    await deposit('ex-heal', 70, expiresIn);
    const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'ex-heal');
    const key = expiringKeyOf(svc.rt.config.REDIS_PREFIX, k.base);
    const listed = await svc.rt.redis.zscore(key, k.base);
    await svc.rt.redis.zrem(key, k.base);
    // Once the deposit's active mark is over, the sweeper looks at the customer.
    svc.rt.clock.advance(active_mark_window_ms + 1_000);
    await sweepNow();
    expect(await svc.rt.redis.zscore(key, k.base)).toBe(listed);
    svc.rt.clock.advance(expiresIn);
    await sweepNow();
    expect(await expireEntries('ex-heal')).toEqual([expect.objectContaining({ amount: 70 })]);
  });

  it('writes nothing for a source used up before its expiry', async () => {
    await deposit('ex-used', 100, 20_000);
    expect((await call('POST', '/v1/billing/deduct', { customer_id: 'ex-used', transaction_id: 'ex-used-1', amount: 100 })).status).toBe(200);
    svc.rt.clock.advance(21_000);
    await sweepNow();
    expect((await call('GET', '/v1/customers/ex-used')).status).toBe(200);
    expect(await expireEntries('ex-used')).toEqual([]);
    expect(await events('ex-used', 'source.expired')).toEqual([]);
  });

  it('with credits frozen at its expiry, waits for the freeze to end and expires what is left then', async () => {
    const a = await deposit('ex-frozen', 1000, 20_000);
    expect((await call('POST', '/v1/billing/freeze', { customer_id: 'ex-frozen', transaction_id: 'ex-fz', amount: 200 })).status).toBe(200);
    svc.rt.clock.advance(21_000);
    await sweepNow();
    expect(await expireEntries('ex-frozen')).toEqual([]);
    // Frozen credits stay consumable; 50 used, 150 return to the expired source and leave with the rest.
    const c = await call('POST', '/v1/billing/consume', { transaction_id: 'ex-fz', amount: 50 });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(await expireEntries('ex-frozen')).toEqual([expect.objectContaining({ transaction_id: a, amount: 950 })]);
    await sweepNow();
    expect(await expireEntries('ex-frozen')).toHaveLength(1);
  });

  it('runs the balance alerts with the expired credits', async () => {
    await deposit('ex-alert', 1000, 20_000);
    await deposit('ex-alert', 100, null);
    expect((await call('PATCH', '/v1/customers/ex-alert', { low_balance_threshold: 500 })).status).toBe(200);
    svc.rt.clock.advance(21_000 + active_mark_window_ms);
    await sweepNow();
    const [low, ...more] = await events('ex-alert', 'balance.low');
    expect(more).toEqual([]);
    expect(low.data).toMatchObject({ customer_id: 'ex-alert', available: 100, threshold: 500 });
  });

  it('fires balance.depleted when the expiry takes the last credits', async () => {
    await deposit('ex-empty', 300, 20_000);
    expect((await call('PATCH', '/v1/customers/ex-empty', { low_balance_threshold: 10 })).status).toBe(200);
    svc.rt.clock.advance(21_000);
    expect((await call('GET', '/v1/customers/ex-empty/balance')).body).toMatchObject({ available: 0 });
    await sweepNow();
    expect(await events('ex-empty', 'balance.depleted')).toEqual([expect.objectContaining({ data: expect.objectContaining({ available: 0 }) })]);
    expect(await events('ex-empty', 'balance.low')).toHaveLength(1);
    expect(await expireEntries('ex-empty')).toHaveLength(1);
  });

  it('a repair keeps an expired source awaiting its entry live, and lists its customer in the expiring index again', async () => {
    await deposit('ex-rep', 600, 10_000);
    const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'ex-rep');
    const key = expiringKeyOf(svc.rt.config.REDIS_PREFIX, k.base);
    svc.rt.clock.advance(11_000);
    await svc.drained();
    // Redis forgot the listing and a profile field: the repair rewrites the customer.
    await svc.rt.redis.zrem(key, k.base);
    await svc.rt.redis.hset(k.meta, 'name', 'Mallory');
    const repaired = await reconcileOverApi(svc, p, true);
    expect(repaired.drift).toEqual(expect.arrayContaining([expect.objectContaining({ customer_id: 'ex-rep', field: 'meta.name' })]));
    expect(await svc.rt.redis.zcard(k.live)).toBe(1);
    expect(await svc.rt.redis.zscore(key, k.base)).not.toBeNull();
    await sweepNow();
    expect(await expireEntries('ex-rep')).toEqual([expect.objectContaining({ amount: 600 })]);
  });

  it('leaves reconcile without drift: the EXPIRE entry is not counted against the source again', async () => {
    // A source expired but not yet seen by any script stays live in Redis: not drift either.
    await deposit('ex-rec', 400, 10_000);
    svc.rt.clock.advance(11_000);
    await svc.drained();
    const before = await reconcileOverApi(svc, p);
    expect(before.drift ?? []).toEqual([]);
    await sweepNow();
    expect(await expireEntries('ex-rec')).toHaveLength(1);
    const after = await reconcileOverApi(svc, p);
    expect(after.drift ?? []).toEqual([]);
    expect(after.anomalies ?? []).toEqual([]);
  });
});

describe('the bound', () => {
  it('an untouched customer gets its EXPIRE entry within 10 s of the expiry, by the scheduled sweep', async () => {
    // The file's service sweeps once a minute; this one at the default 5 s.
    const { startTestService } = await import('../helpers.js');
    const fast = await startTestService({ workers: true, config: { SWEEP_INTERVAL_MS: 5_000 } });
    try {
      const q = await fast.project();
      const expiresAt = Date.now() + fast.rt.clock.offsetMs() + 2_000;
      const r = await fast.call('POST', '/v1/customers/deposit', { key: q.projectKey, body: { customer_id: 'ex-bound', amount: 50, expires_at: new Date(expiresAt).toISOString() } });
      expect(r.status).toBe(200);
      const [e] = await waitFor(async () => {
        const l = await fast.call('GET', '/v1/customers/ex-bound/ledger?type=EXPIRE', { key: q.projectKey });
        return (l.body.data as Json[]).length > 0 ? l.body.data as Json[] : null;
      }, 15_000, 'the EXPIRE entry');
      expect(e).toMatchObject({ type: 'EXPIRE', amount: 50 });
      expect(Date.parse(e.created_at) - expiresAt).toBeLessThanOrEqual(10_000);
      expect(Date.parse(e.created_at)).toBeGreaterThanOrEqual(expiresAt);
    } finally {
      await fast.close();
    }
  });
});
