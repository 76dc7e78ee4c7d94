/**
 * Operations in flight near the Free limit: a reservation is pending until its operation
 * commits or gives it back, so an operation that fits is admitted once the ones in flight
 * have failed, refused once they have applied, and told to retry when they take too long.
 * A reservation whose process died counts at its deadline (never too few) and stops
 * blocking. Operations counted without a reservation (TTL auto-consumes) are counted once
 * even when Redis fails the first tries, and never turn the answer into an error.
 */
import type { Command } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { periodAt } from '../../src/plans/catalogue.js';
import { pending_wait_ms } from '../../src/plans/service.js';
import { customerKeys } from '../../src/redis/keys.js';
import type { TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ variants: [] });

const limit = 50_000;
const ops = async (p: TestProject) => (await svc.rt.plans.organization(p.organizationId)).billable_ops;

async function project(customer: string): Promise<TestProject> {
  const p = await svc.project();
  const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount: 1_000_000 } });
  expect(r.status).toBe(200);
  return p;
}

/**
 * Sets the current period's committed count, as if that many operations had happened.
 * Leased operations go back first: no lease could be held past a count the limit allows.
 */
async function setCount(p: TestProject, n: number) {
  await svc.rt.plans.giveBackLeases(p.organizationId);
  await svc.rt.plans.organization(p.organizationId);
  const period = periodAt(await svc.rt.plans.organizationAnchor(p.organizationId), Date.now() + svc.rt.clock.offsetMs());
  await svc.rt.redis.set(`${svc.rt.config.REDIS_PREFIX}o:{${p.organizationId}}:ops:${period.startMs}`, n);
}

const deduct = (p: TestProject, customer: string, id: string) =>
  svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: customer, transaction_id: id, amount: 1 } });

const later = <T>(ms: number, f: () => Promise<T>) => new Promise<T>((resolve, reject) => setTimeout(() => f().then(resolve, reject), ms));

describe('an operation in flight at the limit', () => {
  it('does not refuse one that fits: once it fails, the other is admitted', async () => {
    const p = await project('w1');
    await setCount(p, limit - 1);
    const inFlight = await svc.rt.plans.reserve(p.organizationId);
    expect(inFlight.admitted).toBe(true);
    const [res] = await Promise.all([deduct(p, 'w1', 'fits'), later(300, () => svc.rt.plans.release(inFlight))]);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await ops(p)).toBe(limit);
  });

  it('refuses the other once it applied (limit reached)', async () => {
    const p = await project('w2');
    await setCount(p, limit - 1);
    const inFlight = await svc.rt.plans.reserve(p.organizationId);
    const [res] = await Promise.all([deduct(p, 'w2', 'late'), later(300, () => svc.rt.plans.commit(inFlight))]);
    expectError(res, 429, 'usage_limit_exceeded');
    expect(res.body.error.message).toMatch(/monthly transaction limit/);
    expect(res.headers.get('retry-after')).toBeNull();
    expect(await ops(p)).toBe(limit);
  });

  it('answers 429 with Retry-After when it is still undecided after the wait; a retry after it finished goes through', async () => {
    const p = await project('w3');
    await setCount(p, limit - 1);
    const inFlight = await svc.rt.plans.reserve(p.organizationId);
    const started = Date.now();
    const res = await deduct(p, 'w3', 'undecided');
    expect(Date.now() - started).toBeGreaterThanOrEqual(pending_wait_ms - 50);
    expectError(res, 429, 'usage_limit_exceeded');
    expect(res.body.error.message).toMatch(/in flight.*retrying shortly may succeed/);
    expect(res.headers.get('retry-after')).toBe('1');
    await svc.rt.plans.release(inFlight);
    expect((await deduct(p, 'w3', 'undecided')).status).toBe(200);
    expect(await ops(p)).toBe(limit);
  });

  it('counts when its process died (its deadline passed), and blocks no longer than that', async () => {
    const p = await project('w4');
    await setCount(p, limit - 1);
    await svc.rt.plans.reserve(p.organizationId, 400); // never committed nor given back
    const started = Date.now();
    const res = await deduct(p, 'w4', 'after-leak');
    expect(Date.now() - started).toBeLessThan(pending_wait_ms - 500);
    expectError(res, 429, 'usage_limit_exceeded');
    expect(res.headers.get('retry-after')).toBeNull();
    expect(await ops(p)).toBe(limit);
  });
});

describe('TTL auto-consumes counted without a reservation', () => {
  it('count once, and the answer stays a success, when Redis fails the count the first times', async () => {
    const p = await project('a1');
    const k = p.projectKey;
    const freeze = await svc.call('POST', '/v1/billing/freeze', { key: k, body: { customer_id: 'a1', transaction_id: 'f1', amount: 10, consume_after_seconds: 5 } });
    expect(freeze.status).toBe(200);
    // A freeze made before freezes were counted when accepted: no `pc` mark, so its TTL
    // consume is the operation that counts.
    const txKey = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'a1').tx;
    const { pc, ...legacy } = JSON.parse((await svc.rt.redis.hget(txKey, 'f1'))!) as Record<string, unknown>;
    expect(pc).toBe('1');
    await svc.rt.redis.hset(txKey, 'f1', JSON.stringify(legacy));
    const before = await ops(p);
    svc.rt.clock.advance(6_000);

    // The first three commands on the organization's count fail in Redis (renamed to a
    // command Redis does not know, so Redis answers an error and nothing applies).
    const redis = svc.rt.redis;
    const send = redis.sendCommand.bind(redis);
    const marker = `o:{${p.organizationId}}:ops`;
    let failures = 0;
    // The count runs in the background of the read that auto-consumed: its promise is
    // the event to wait for.
    const plans = svc.rt.plans;
    const record = plans.record.bind(plans);
    const recorded: Promise<void>[] = [];
    plans.record = (orgId: string, n: number) => {
      const r = record(orgId, n);
      recorded.push(r);
      return r;
    };
    redis.sendCommand = ((command: Command, ...rest: unknown[]) => {
      if (failures < 3 && command.args.some((a) => String(a).includes(marker))) {
        failures++;
        command.name = 'svc_injected_failure';
      }
      return (send as (...a: unknown[]) => unknown)(command, ...rest);
    }) as typeof redis.sendCommand;
    try {
      const balance = await svc.call('GET', '/v1/customers/a1/balance', { key: k });
      expect(balance.status).toBe(200);
      expect(balance.body.used).toBe(10);
      expect(recorded).toHaveLength(1);
      await recorded[0];
      expect(failures).toBe(3);
    } finally {
      redis.sendCommand = send;
      plans.record = record;
    }
    // Counted once: the one count finished, after its failed tries.
    expect(await ops(p)).toBe(before + 1);
  });
});
