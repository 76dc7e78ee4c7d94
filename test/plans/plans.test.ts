/**
 * Plan accounting: which operations count, the Free hard limit (exact under concurrency
 * across two API processes), what keeps working past it, period rollover and downgrades.
 */
import { describe, expect, it } from 'vitest';
import { periodAt } from '../../src/plans/catalogue.js';
import { startTestService, type TestProject } from '../helpers.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ workers: true, variants: [] });

const ops = async (p: TestProject) => (await svc.rt.plans.organization(p.organizationId)).billable_ops;

async function fund(p: TestProject, customer: string, amount = 1_000_000, s = svc) {
  const r = await s.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount } });
  expect(r.status).toBe(200);
}

/**
 * Sets the current period's count, as if that many operations had happened. Leased
 * operations go back first: no lease could be held past a count the limit allows.
 */
async function setCount(p: TestProject, n: number, s = svc) {
  await s.rt.plans.giveBackLeases(p.organizationId);
  await s.rt.plans.organization(p.organizationId); // seeds the counter
  const period = periodAt((await s.rt.plans.organizationAnchor(p.organizationId)), Date.now() + s.rt.clock.offsetMs());
  const key = `${s.rt.config.REDIS_PREFIX}o:{${p.organizationId}}:ops:${period.startMs}`;
  await s.rt.redis.set(key, n);
}

describe('billable operations', () => {
  it('counts successful deducts, consumes and TTL auto-consumes; nothing else', async () => {
    const p = await svc.project();
    await fund(p, 'b1');
    const k = p.projectKey;
    const call = (path: string, body: object) => svc.call('POST', path, { key: k, body: { customer_id: 'b1', ...body } });
    expect(await ops(p)).toBe(0);
    expect((await call('/v1/billing/deduct', { transaction_id: 'd1', amount: 10 })).status).toBe(200);
    expect(await ops(p)).toBe(1);
    expect((await call('/v1/billing/deduct', { transaction_id: 'd1', amount: 10 })).body.is_idempotent_replay).toBe(true);
    expect((await call('/v1/billing/deduct', { transaction_id: 'd2', amount: 10 ** 12 })).status).toBe(400);
    expect((await call('/v1/billing/freeze', { transaction_id: 'f1', amount: 10 })).status).toBe(200);
    expect((await call('/v1/billing/freeze', { transaction_id: 'f2', amount: 10 })).status).toBe(200);
    expect((await call('/v1/billing/unfreeze', { transaction_id: 'f2' })).status).toBe(200);
    expect(await ops(p)).toBe(1);
    expect((await call('/v1/billing/consume', { transaction_id: 'f1', amount: 5 })).status).toBe(200);
    expect((await call('/v1/billing/consume', { transaction_id: 'f1', amount: 5 })).body.is_idempotent_replay).toBe(true);
    expect(await ops(p)).toBe(2);
    expect((await call('/v1/billing/freeze', { transaction_id: 'f3', amount: 10, consume_after_seconds: 5 })).status).toBe(200);
    svc.rt.clock.advance(6_000);
    expect((await svc.call('GET', '/v1/customers/b1/balance', { key: k })).body.used).toBe(10 + 5 + 10);
    expect(await ops(p)).toBe(3);
  });
});

describe('the Free plan hard limit', () => {
  it('admits exactly the remaining operations when two API processes race at the limit, failing operations among them', async () => {
    const p = await svc.project();
    for (const c of ['r1', 'r2', 'r3', 'r4']) await fund(p, c);
    // r5 cannot pay: its deducts reserve a place, fail, and must not take one of the 7.
    await fund(p, 'r5', 1);
    await setCount(p, 50_000 - 7);
    const env = {
      REDIS_PREFIX: svc.rt.config.REDIS_PREFIX,
      QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX,
      DATABASE_URL: process.env.TEST_DATABASE_URL!,
      SVC_CLOCK_CONTROL: '0',
    };
    const apis: ServiceProcess[] = await Promise.all([spawnService('src/web.ts', env), spawnService('src/web.ts', env)]);
    try {
      // Five operations of a third process are in flight when the race starts, and fail
      // 300 ms into it; every third request is r5's, which fails too. Neither may take one
      // of the 7 places: requests that only fit if they fail wait for them.
      const inFlight = await Promise.all(Array.from({ length: 5 }, () => svc.rt.plans.reserve(p.organizationId)));
      expect(inFlight.every((r) => r.admitted)).toBe(true);
      setTimeout(() => void Promise.all(inFlight.map((r) => svc.rt.plans.release(r))), 300);
      const results = await Promise.all(
        Array.from({ length: 45 }, (_, i) => {
          const failing = i % 3 === 0;
          return fetch(`${apis[i % 2].url}/v1/billing/deduct`, {
            method: 'POST',
            headers: { authorization: `Bearer ${p.projectKey}`, 'content-type': 'application/json' },
            body: JSON.stringify({ customer_id: failing ? 'r5' : `r${(i % 4) + 1}`, transaction_id: `race-${i}`, amount: failing ? 1_000 : 1 }),
          }).then(async (r) => ({ failing, status: r.status, body: (await r.json()) as { error?: { code: string; type: string } } }));
        }),
      );
      expect(results.filter((r) => r.status === 200)).toHaveLength(7);
      for (const r of results.filter((x) => x.failing)) expect(r.status).not.toBe(200);
      const refused = results.filter((r) => !r.failing && r.status !== 200);
      expect(refused).toHaveLength(30 - 7);
      for (const r of refused) expectError(r, 429, 'usage_limit_exceeded');
      expect(await ops(p)).toBe(50_000);
    } finally {
      await Promise.all(apis.map((a) => a.kill()));
    }
  });

  it('past the limit refuses deducts and consumes but serves deposits, freezes, unfreezes, reads and replays', async () => {
    const p = await svc.project();
    await fund(p, 'l1');
    const k = p.projectKey;
    const call = (path: string, body: object) => svc.call('POST', path, { key: k, body: { customer_id: 'l1', ...body } });
    expect((await call('/v1/billing/deduct', { transaction_id: 'before', amount: 3 })).status).toBe(200);
    expect((await call('/v1/billing/freeze', { transaction_id: 'fz', amount: 4 })).status).toBe(200);
    await setCount(p, 50_000);
    const refused = await call('/v1/billing/deduct', { transaction_id: 'after', amount: 3 });
    expectError(refused, 429, 'usage_limit_exceeded');
    expect(refused.body.error.message).toMatch(/monthly transaction limit/);
    const consume = await call('/v1/billing/consume', { transaction_id: 'fz', amount: 4 });
    expectError(consume, 429, 'usage_limit_exceeded');
    const replay = await call('/v1/billing/deduct', { transaction_id: 'before', amount: 3 });
    expect([replay.status, replay.body.is_idempotent_replay]).toEqual([200, true]);
    expect((await call('/v1/customers/deposit', { amount: 100 })).status).toBe(200);
    expect((await call('/v1/billing/freeze', { transaction_id: 'fz2', amount: 5 })).status).toBe(200);
    expect((await call('/v1/billing/unfreeze', { transaction_id: 'fz' })).status).toBe(200);
    const bal = await svc.call('GET', '/v1/customers/l1/balance', { key: k });
    expect(bal.body).toMatchObject({ used: 3, frozen: 5, available: 1_000_000 + 100 - 3 - 5 });
    expect(await ops(p)).toBe(50_000);
  });

  it('opens again in the next period, and a downgrade waits for it', async () => {
    // A service of its own: moving its clock to the next period must not move the other
    // tests there (the two-process race runs its children in the real current period).
    const own = await startTestService();
    try {
      const p = await own.project();
      await fund(p, 'n1', 1_000_000, own);
      await setCount(p, 50_000, own);
      const deduct = (id: string) => own.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'n1', transaction_id: id, amount: 1 } });
      expect((await deduct('p1')).status).toBe(429);
      await own.rt.plans.setPlan(p.organizationId, 'pro_500k');
      expect((await deduct('p2')).status).toBe(200);
      await own.rt.plans.setPlan(p.organizationId, 'free');
      const org = await own.rt.plans.organization(p.organizationId);
      expect(org).toMatchObject({ plan: 'pro_500k', pending_plan: 'free', billable_ops: 50_001, overage_ops: 0 });
      expect(org.pending_plan_from).toBe(org.period_end);
      expect((await deduct('p3')).status).toBe(200);
      own.rt.clock.advance(Date.parse(org.period_end) - Date.now() - own.rt.clock.offsetMs() + 1_000);
      const next = await own.rt.plans.organization(p.organizationId);
      expect(next).toMatchObject({ plan: 'free', pending_plan: null, billable_ops: 0, period_start: org.period_end });
      expect((await deduct('p4')).status).toBe(200);
      expect((await own.rt.plans.organization(p.organizationId)).billable_ops).toBe(1);
    } finally {
      await own.close();
    }
  });

  it('computes Pro overage exactly', async () => {
    const p = await svc.project();
    await svc.rt.plans.setPlan(p.organizationId, 'pro_500k');
    await setCount(p, 512_345);
    expect(await svc.rt.plans.organization(p.organizationId)).toMatchObject({
      plan: 'pro_500k', included_ops: 500_000, overage_ops: 12_345, overage_cost_usd: 0.61725,
    });
  });
});

describe('billing periods', () => {
  it('are calendar months from the anchor, clamped to short months', () => {
    const anchor = Date.UTC(2026, 0, 31, 10, 0, 0);
    expect(periodAt(anchor, Date.UTC(2026, 1, 15))).toEqual({ startMs: anchor, endMs: Date.UTC(2026, 1, 28, 10) });
    expect(periodAt(anchor, Date.UTC(2026, 1, 28, 10))).toEqual({ startMs: Date.UTC(2026, 1, 28, 10), endMs: Date.UTC(2026, 2, 31, 10) });
    expect(periodAt(anchor, Date.UTC(2027, 0, 31, 9, 59))).toEqual({ startMs: Date.UTC(2026, 11, 31, 10), endMs: Date.UTC(2027, 0, 31, 10) });
  });
});
