/**
 * The customer's alert settings (PATCH /v1/customers/{id}) and the events the scripts
 * write from them (lua/includes/alerts.lua): balance.low once per crossing, re-armed by a
 * deposit; balance.depleted; balance.top_up_requested with one open request per customer,
 * closed by the deposit naming it or after an hour, within the monthly limit.
 */
import { describe, expect, it } from 'vitest';
import { customerKeys } from '../../src/redis/keys.js';
import { reconcileOverApi, type Json } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

const call = (method: string, path: string, body?: unknown) => svc.call(method, path, { key: p.projectKey, body });

async function ok(method: string, path: string, body?: unknown): Promise<Json> {
  const r = await call(method, path, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

const deposit = (customer: string, amount: number, extra: Record<string, unknown> = {}) => ok('POST', '/v1/customers/deposit', { customer_id: customer, amount, ...extra });
let n = 0;
const deduct = (customer: string, amount: number) => ok('POST', '/v1/billing/deduct', { customer_id: customer, amount, transaction_id: `tx-${customer}-${++n}` });

/** The customer's events of `type`, oldest first, once every outbox is persisted. */
async function eventsOf(customer: string, type: string): Promise<Json[]> {
  await svc.drained();
  const r = await call('GET', `/v1/events?customer_id=${customer}&type=${type}&limit=100`);
  expect(r.status).toBe(200);
  return (r.body.data as Json[]).reverse();
}

describe('alert settings', () => {
  it('PATCH sets, merges and clears them; GET shows them; bad values change nothing', async () => {
    await deposit('al-set', 100);
    const set = await ok('PATCH', '/v1/customers/al-set', { low_balance_threshold: 50 });
    expect(set).toMatchObject({ low_balance_threshold: 50, auto_top_up: null });
    const both = await ok('PATCH', '/v1/customers/al-set', { auto_top_up: { below: 20, amount: 500 } });
    expect(both).toMatchObject({ low_balance_threshold: 50, auto_top_up: { below: 20, amount: 500, monthly_limit: null } });
    expect(await ok('GET', '/v1/customers/al-set')).toMatchObject({ low_balance_threshold: 50, auto_top_up: { below: 20, amount: 500, monthly_limit: null } });
    for (const [bad, param] of [
      [{ low_balance_threshold: 0 }, 'low_balance_threshold'],
      [{ low_balance_threshold: 1.5 }, 'low_balance_threshold'],
      [{ auto_top_up: { below: 10 } }, 'auto_top_up.amount'],
      [{ auto_top_up: { below: 10, amount: 100, monthly_limit: 50 } }, 'auto_top_up.monthly_limit'],
      [{ auto_top_up: { below: 10, amount: 100, extra: 1 } }, 'auto_top_up'],
    ] as const) {
      const r = await call('PATCH', '/v1/customers/al-set', bad);
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body.error, JSON.stringify(bad)).toMatchObject({ code: 'invalid_request', param });
    }
    expect(await ok('GET', '/v1/customers/al-set')).toMatchObject({ low_balance_threshold: 50, auto_top_up: { below: 20, amount: 500 } });
    const cleared = await ok('PATCH', '/v1/customers/al-set', { low_balance_threshold: null, auto_top_up: null, name: 'n' });
    expect(cleared).toMatchObject({ name: 'n', low_balance_threshold: null, auto_top_up: null });
    expect((await call('PATCH', '/v1/customers/nobody-here', { low_balance_threshold: 5 })).status).toBe(404);
  });

  it('a customer without settings gets no balance event', async () => {
    await deposit('al-none', 100);
    await deduct('al-none', 100);
    expect(await eventsOf('al-none', 'balance.depleted')).toEqual([]);
    expect(await eventsOf('al-none', 'balance.low')).toEqual([]);
  });
});

describe('balance.low and balance.depleted', () => {
  it('fire once per crossing across many deducts; a deposit re-arms', async () => {
    await deposit('al-low', 1000);
    await ok('PATCH', '/v1/customers/al-low', { low_balance_threshold: 500 });
    for (let i = 0; i < 8; i++) await deduct('al-low', 100);
    let low = await eventsOf('al-low', 'balance.low');
    expect(low).toHaveLength(1);
    expect(low[0].data).toEqual({ customer_id: 'al-low', available: 400, threshold: 500 });
    // Back above the threshold, then below again: a second crossing.
    await deposit('al-low', 500);
    await deduct('al-low', 200);
    await deduct('al-low', 200);
    low = await eventsOf('al-low', 'balance.low');
    expect(low.map((e) => e.data.available)).toEqual([400, 300]);
    expect(await eventsOf('al-low', 'balance.depleted')).toEqual([]);
    await deduct('al-low', 300);
    const depleted = await eventsOf('al-low', 'balance.depleted');
    expect(depleted).toHaveLength(1);
    expect(depleted[0].data).toEqual({ customer_id: 'al-low', available: 0 });
  });

  it('concurrent deducts fire each event once', async () => {
    await deposit('al-conc', 1000);
    await ok('PATCH', '/v1/customers/al-conc', { low_balance_threshold: 500 });
    await Promise.all(Array.from({ length: 20 }, () => deduct('al-conc', 50)));
    expect(await eventsOf('al-conc', 'balance.low')).toHaveLength(1);
    expect(await eventsOf('al-conc', 'balance.depleted')).toHaveLength(1);
  });

  it('a freeze takes from available too', async () => {
    await deposit('al-frz', 100);
    await ok('PATCH', '/v1/customers/al-frz', { low_balance_threshold: 60 });
    await ok('POST', '/v1/billing/freeze', { customer_id: 'al-frz', amount: 50, transaction_id: 'al-frz-1' });
    expect((await eventsOf('al-frz', 'balance.low')).map((e) => e.data.available)).toEqual([50]);
  });
});

describe('balance.top_up_requested', () => {
  it('one open request, closed by the deposit that names it, within the monthly limit', async () => {
    await deposit('al-tu', 1000);
    await ok('PATCH', '/v1/customers/al-tu', { auto_top_up: { below: 500, amount: 1000, monthly_limit: 2000 } });
    await deduct('al-tu', 600);
    await deduct('al-tu', 10);
    let req = await eventsOf('al-tu', 'balance.top_up_requested');
    expect(req).toHaveLength(1);
    expect(req[0].data).toMatchObject({ customer_id: 'al-tu', amount: 1000, available: 400, below: 500, monthly_limit: 2000, requested_this_month: 1000 });
    // A deposit under another key leaves it open.
    await deposit('al-tu', 1, { idempotency_key: 'not-the-event' });
    await deduct('al-tu', 1);
    expect(await eventsOf('al-tu', 'balance.top_up_requested')).toHaveLength(1);
    // The deposit that names it closes it (still below: the next deduct asks again).
    await deposit('al-tu', 10, { idempotency_key: req[0].id });
    await deduct('al-tu', 1);
    req = await eventsOf('al-tu', 'balance.top_up_requested');
    expect(req.map((e) => e.data.requested_this_month)).toEqual([1000, 2000]);
    // The month's limit is reached: closed again, no third request.
    await deposit('al-tu', 10, { idempotency_key: req[1].id });
    await deduct('al-tu', 1);
    expect(await eventsOf('al-tu', 'balance.top_up_requested')).toHaveLength(2);
    // The next calendar month starts from zero.
    svc.rt.clock.advance(32 * 86_400_000);
    await deduct('al-tu', 1);
    req = await eventsOf('al-tu', 'balance.top_up_requested');
    expect(req.map((e) => e.data.requested_this_month)).toEqual([1000, 2000, 1000]);
  });

  it('an open request lapses after an hour', async () => {
    await deposit('al-hour', 100);
    await ok('PATCH', '/v1/customers/al-hour', { auto_top_up: { below: 80, amount: 50 } });
    await deduct('al-hour', 30);
    svc.rt.clock.advance(59 * 60_000);
    await deduct('al-hour', 1);
    expect(await eventsOf('al-hour', 'balance.top_up_requested')).toHaveLength(1);
    svc.rt.clock.advance(2 * 60_000);
    await deduct('al-hour', 1);
    const req = await eventsOf('al-hour', 'balance.top_up_requested');
    expect(req.map((e) => e.data.available)).toEqual([70, 68]);
    expect(req[0].data.monthly_limit).toBeNull();
  });
});

describe('reconcile', () => {
  it('reports no drift for customers with settings and top-up state, and a repair writes a lost `al` back from PostgreSQL', async () => {
    expect((await reconcileOverApi(svc, p)).drift).toEqual([]);
    const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'al-tu');
    const before = await svc.rt.redis.hgetall(k.meta);
    expect(before.al).toBeDefined();
    expect(before.tu_s).toBeDefined();
    await svc.rt.redis.hdel(k.meta, 'al');
    const report = await reconcileOverApi(svc, p, true);
    expect(report.drift).toEqual([expect.objectContaining({ customer_id: 'al-tu', field: 'meta.al', redis: null, expected: before.al })]);
    const after = await svc.rt.redis.hgetall(k.meta);
    expect(after.al).toBe(before.al);
    // The top-up state is Redis's own: kept by the rewrite.
    expect([after.tu_o, after.tu_t, after.tu_m, after.tu_s]).toEqual([before.tu_o, before.tu_t, before.tu_m, before.tu_s]);
  });
});
