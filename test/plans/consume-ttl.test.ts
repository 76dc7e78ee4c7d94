/**
 * A freeze whose TTL consumes it is a billable operation decided when it is accepted: the
 * Free plan at its limit refuses it (429, nothing applied), one accepted under the limit
 * is counted then, and its consume (by TTL or through the API) never fails on the plan and
 * never counts again, also when the count is seeded from PostgreSQL's ledger.
 */
import { describe, expect, it } from 'vitest';
import { periodAt } from '../../src/plans/catalogue.js';
import { reconcileOverApi, type TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ workers: true, variants: [] });

const ops = async (p: TestProject) => (await svc.rt.plans.organization(p.organizationId)).billable_ops;

async function counterKey(p: TestProject): Promise<string> {
  const period = periodAt(await svc.rt.plans.organizationAnchor(p.organizationId), Date.now() + svc.rt.clock.offsetMs());
  return `${svc.rt.config.REDIS_PREFIX}o:{${p.organizationId}}:ops:${period.startMs}`;
}

/** Sets the current period's count, as if that many operations had happened (leases given back first). */
async function setCount(p: TestProject, n: number) {
  await svc.rt.plans.giveBackLeases(p.organizationId);
  await svc.rt.plans.organization(p.organizationId); // seeds the counter
  await svc.rt.redis.set(await counterKey(p), n);
}

async function setUp(customer: string) {
  const p = await svc.project();
  const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount: 1_000 } });
  expect(r.status).toBe(200);
  const call = (path: string, body: object) => svc.call('POST', path, { key: p.projectKey, body: { customer_id: customer, ...body } });
  const balance = async () => (await svc.call('GET', `/v1/customers/${customer}/balance`, { key: p.projectKey })).body;
  return { p, call, balance };
}

describe('a freeze with consume_after_seconds on the Free plan', () => {
  it('is refused at the limit with 429 usage_limit_exceeded and nothing applied; other freezes go on', async () => {
    const { p, call, balance } = await setUp('t1');
    await setCount(p, 50_000);
    const refused = await call('/v1/billing/freeze', { transaction_id: 'ttl-consume', amount: 10, consume_after_seconds: 60 });
    expectError(refused, 429, 'usage_limit_exceeded');
    expect(await balance()).toMatchObject({ frozen: 0, used: 0, available: 1_000 });
    const ledger = await svc.call('GET', '/v1/customers/t1/ledger?type=FREEZE', { key: p.projectKey });
    expect(ledger.body.data).toEqual([]);
    // Not billable: a plain freeze and one released by its TTL are served past the limit.
    expect((await call('/v1/billing/freeze', { transaction_id: 'plain', amount: 10 })).status).toBe(200);
    expect((await call('/v1/billing/freeze', { transaction_id: 'ttl-release', amount: 10, release_after_seconds: 60 })).status).toBe(200);
    expect(await ops(p)).toBe(50_000);
    // Refused, its id was not taken: the same request is refused again, not a replay.
    expectError(await call('/v1/billing/freeze', { transaction_id: 'ttl-consume', amount: 10, consume_after_seconds: 60 }), 429, 'usage_limit_exceeded');
  });

  it('accepted just under the limit counts once; its TTL consume succeeds after the plan is exhausted, counting nothing', async () => {
    const { p, call, balance } = await setUp('t2');
    await setCount(p, 49_999);
    const freeze = await call('/v1/billing/freeze', { transaction_id: 'last', amount: 10, consume_after_seconds: 5 });
    expect(freeze.status, JSON.stringify(freeze.body)).toBe(200);
    expect(await ops(p)).toBe(50_000);
    // The plan is exhausted now: the freeze was its last operation.
    expectError(await call('/v1/billing/deduct', { transaction_id: 'over', amount: 1 }), 429, 'usage_limit_exceeded');
    // A replay of the freeze is no new operation.
    const replay = await call('/v1/billing/freeze', { transaction_id: 'last', amount: 10, consume_after_seconds: 5 });
    expect([replay.status, replay.body.is_idempotent_replay]).toEqual([200, true]);
    svc.rt.clock.advance(6_000);
    expect(await balance()).toMatchObject({ used: 10, frozen: 0, available: 990 });
    const consumed = await svc.call('GET', '/v1/customers/t2/ledger?type=CONSUME', { key: p.projectKey });
    expect(consumed.body.data).toHaveLength(1);
    expect(consumed.body.data[0]).toMatchObject({ transaction_id: 'last', amount: 10, reason: 'ttl_consume' });
    expect(await ops(p)).toBe(50_000);
  });

  it('consumed through the API before its TTL, at the limit: applied, not counted again', async () => {
    const { p, call, balance } = await setUp('t3');
    await setCount(p, 49_999);
    expect((await call('/v1/billing/freeze', { transaction_id: 'early', amount: 10, consume_after_seconds: 60 })).status).toBe(200);
    expect((await call('/v1/billing/freeze', { transaction_id: 'plain', amount: 10 })).status).toBe(200);
    expect(await ops(p)).toBe(50_000);
    const consume = await svc.call('POST', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'early', amount: 4 } });
    expect(consume.status, JSON.stringify(consume.body)).toBe(200);
    expect(consume.body).toMatchObject({ consumed_amount: 4, returned_amount: 6 });
    // A plain freeze was not counted: its consume is a new operation, refused at the limit.
    expectError(await svc.call('POST', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'plain', amount: 4 } }), 429, 'usage_limit_exceeded');
    expect(await balance()).toMatchObject({ used: 4, frozen: 10 });
    expect(await ops(p)).toBe(50_000);
  });

  it('is counted at its freeze, and its consume not, when the count is seeded from PostgreSQL', async () => {
    const { p, call } = await setUp('t4');
    expect((await call('/v1/billing/freeze', { transaction_id: 'by-ttl', amount: 10, consume_after_seconds: 5 })).status).toBe(200);
    expect((await call('/v1/billing/freeze', { transaction_id: 'by-api', amount: 10, consume_after_seconds: 60 })).status).toBe(200);
    expect((await call('/v1/billing/freeze', { transaction_id: 'plain', amount: 10 })).status).toBe(200);
    // Counted already, its TTL still to come.
    expect((await call('/v1/billing/freeze', { transaction_id: 'pending', amount: 10, consume_after_seconds: 3_600 })).status).toBe(200);
    expect((await svc.call('POST', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'by-api' } })).status).toBe(200);
    expect((await svc.call('POST', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'plain' } })).status).toBe(200);
    svc.rt.clock.advance(6_000);
    expect((await svc.call('GET', '/v1/customers/t4/balance', { key: p.projectKey })).body).toMatchObject({ used: 30, frozen: 10 });
    expect(await ops(p)).toBe(4);
    await svc.drained();
    // A Redis that lost the count: it is seeded again from the ledger's entries.
    await svc.rt.plans.giveBackLeases(p.organizationId);
    const key = await counterKey(p);
    await svc.rt.redis.del(key, `${key}:pending`);
    expect(await ops(p)).toBe(4);
    // The usage per day counts as the plan does, and charges what the consumes charged.
    const daily = await svc.call('GET', `/v1/admin/usage/daily?project_id=${p.projectId}`, { key: p.adminKey });
    expect(daily.status).toBe(200);
    expect(daily.body.data.map((d: { operations: number; credits: number }) => [d.operations, d.credits])).toEqual([[4, 30]]);
    // The mark folds from PostgreSQL as Redis holds it: reconcile finds no drift.
    const report = await reconcileOverApi(svc, p);
    expect([report.drift_total, report.errors_total]).toEqual([0, 0]);
  });
});
