/**
 * Plan counting from in-process leases: operations served from a lease cost no Redis
 * command on the organization's keys; two API processes that take leases while far from
 * the limit, then reserve one by one near it, admit exactly what the limit leaves; a lease
 * whose process died counts whole at its deadline; and what a lease served reaches the
 * count read by another process within the report interval.
 */
import type { Command } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { periodAt } from '../../src/plans/catalogue.js';
import { lease_idle_ms, lease_ops_max, lease_report_ms } from '../../src/plans/leases.js';
import { scriptSource } from '../../src/redis/scripts.js';
import { startTestService, waitFor, type TestProject, type TestService } from '../helpers.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ variants: [] });

const ops = async (p: TestProject) => (await svc.rt.plans.organization(p.organizationId)).billable_ops;

async function fund2(s: TestService, p: TestProject, customer: string) {
  const r = await s.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount: 10_000_000 } });
  expect(r.status).toBe(200);
}

const fund = (p: TestProject, customer: string) => fund2(svc, p, customer);

async function periodKeys(p: TestProject, s: TestService = svc) {
  await s.rt.plans.organization(p.organizationId); // seeds the counter
  const period = periodAt(await s.rt.plans.organizationAnchor(p.organizationId), Date.now() + s.rt.clock.offsetMs());
  const tag = `${s.rt.config.REDIS_PREFIX}o:{${p.organizationId}}`;
  return { plan: `${tag}:plan`, counter: `${tag}:ops:${period.startMs}`, pending: `${tag}:ops:${period.startMs}:pending`, endMs: period.endMs };
}

/** The leases and reservations pending in a period (`<weight>:<name>`), and its count. */
async function periodState(k: { counter: string; pending: string }, s: TestService = svc) {
  return { pending: await s.rt.redis.zrange(k.pending, 0, -1), used: Number(await s.rt.redis.get(k.counter)) };
}

/**
 * A lease holding the unused rest of its grant after one operation: one member weighing
 * the whole grant, or the grant less the one once a report counted it.
 */
function expectLeaseHeld(state: { pending: string[] }) {
  expect(state.pending).toHaveLength(1);
  expect(Number(state.pending[0].split(':')[0])).toBeGreaterThanOrEqual(lease_ops_max - 1);
}

const deduct = (url: string, p: TestProject, customer: string, id: string) =>
  fetch(`${url}/v1/billing/deduct`, {
    method: 'POST',
    headers: { authorization: `Bearer ${p.projectKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ customer_id: customer, transaction_id: id, amount: 1 }),
  }).then(async (r) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), body: (await r.json()) as { error?: { code: string } } }));

describe('plan leases', () => {
  it('serve operations without a Redis command on the organization keys, and count each once', async () => {
    const p = await svc.project();
    await fund(p, 'c1');
    const marker = `o:{${p.organizationId}}:ops`;
    const redis = svc.rt.redis;
    const send = redis.sendCommand.bind(redis);
    let orgCommands = 0;
    redis.sendCommand = ((command: Command, ...rest: unknown[]) => {
      if (command.args.some((a) => String(a).includes(marker))) orgCommands++;
      return (send as (...a: unknown[]) => unknown)(command, ...rest);
    }) as typeof redis.sendCommand;
    const n = 40;
    const started = performance.now();
    try {
      for (let i = 0; i < n; i++) expect((await deduct(svc.url, p, 'c1', `d${i}`)).status).toBe(200);
    } finally {
      redis.sendCommand = send;
    }
    // The first lease, a top-up at half of it, and the timer's reports: at most one per
    // report interval while the deducts ran (a loaded machine makes the run longer, not
    // the count per operation), and a last one. 40 operations, one command each, would
    // be far more on a quick run.
    const reports = Math.ceil((performance.now() - started) / lease_report_ms) + 1;
    expect(orgCommands).toBeLessThanOrEqual(3 + reports);
    expect(orgCommands).toBeLessThan(n);
    expect(await ops(p)).toBe(n);
  });

  it('admit exactly what the limit leaves across two processes, from leases far from it to one by one near it', async () => {
    const p = await svc.project();
    for (const c of ['r1', 'r2', 'r3']) await fund(p, c);
    const k = await periodKeys(p);
    const left = 300;
    await svc.rt.redis.set(k.counter, 50_000 - left);
    const env = {
      REDIS_PREFIX: svc.rt.config.REDIS_PREFIX,
      QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX,
      DATABASE_URL: process.env.TEST_DATABASE_URL!,
      SVC_CLOCK_CONTROL: '0',
    };
    const apis: ServiceProcess[] = await Promise.all([spawnService('src/web.ts', env), spawnService('src/web.ts', env)]);
    try {
      let admitted = 0;
      let sawLease = false;
      let definitive = false;
      for (let round = 0; round < 30 && !definitive; round++) {
        const results = await Promise.all(
          Array.from({ length: 40 }, (_, i) => deduct(apis[i % 2].url, p, `r${(i % 3) + 1}`, `race-${round}-${i}`)),
        );
        sawLease ||= (await svc.rt.redis.zrange(k.pending, 0, -1)).some((m) => Number(m.split(':')[0]) > 1);
        admitted += results.filter((r) => r.status === 200).length;
        for (const r of results.filter((x) => x.status !== 200)) expectError(r, 429, 'usage_limit_exceeded');
        // Refused without Retry-After: the limit is reached, not just held by leases.
        definitive = results.some((r) => r.status === 429 && r.retryAfter === null);
        expect(admitted).toBeLessThanOrEqual(left);
      }
      expect(sawLease).toBe(true);
      expect(definitive).toBe(true);
      expect(admitted).toBe(left);
      await waitFor(async () => Number(await svc.rt.redis.get(k.counter)) === 50_000, 5_000, 'both processes to report their leases');
      expect(await ops(p)).toBe(50_000);
    } finally {
      await Promise.all(apis.map((a) => a.kill()));
    }
  });

  it('survive a top-up report that fails: no unhandled rejection, which would end an API process', async () => {
    const p = await svc.project();
    await fund(p, 'c3');
    const scripts = svc.rt.scripts;
    const runOther = scripts.runOther;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    let failed = 0;
    let failure: Promise<never> | undefined;
    try {
      // The top-up that a serve sends in the background once half of the lease is used
      // (it keeps what is left and wants more) fails the way a Redis that went away fails
      // it. No request waits for that call: its failure is nobody's answer.
      scripts.runOther = ((name: string, keys: string[], args: (string | number)[]) => {
        const [keep, want] = [Number(args[5]), Number(args[6])];
        if (name === 'plan_lease' && keep > 0 && want > 0) {
          failed++;
          failure = Promise.reject(new Error('Connection is closed.'));
          return failure;
        }
        return runOther(name as never, keys, args);
      }) as typeof scripts.runOther;
      for (let i = 0; i < lease_ops_max && failed === 0; i++) expect((await deduct(svc.url, p, 'c3', `f${i}`)).status).toBe(200);
      // The failed call settled (the lease's own catch ran); Node reports a rejection left
      // unhandled once the turn's microtasks are done, so one more turn shows it.
      await failure?.catch(() => undefined);
      await new Promise((r) => setImmediate(r));
      // The lease starts over; the next operation is served and counted.
      expect((await deduct(svc.url, p, 'c3', 'after')).status).toBe(200);
    } finally {
      scripts.runOther = runOther;
      process.off('unhandledRejection', onUnhandled);
    }
    expect(failed).toBeGreaterThan(0);
    expect(unhandled.map(String)).toEqual([]);
  });

  it('count a dead process lease whole at its deadline: never too few', async () => {
    const p = await svc.project();
    const k = await periodKeys(p);
    const before = await ops(p);
    const now = Date.now() + svc.rt.clock.offsetMs();
    // A lease of a process that died 200 ms from now, never reported.
    const [status, weight] = await svc.rt.redis.eval(scriptSource('plan_lease').lua, 3, k.plan, k.counter, k.pending,
      now, 'dead-process:0', 0, 0, 0, 0, lease_ops_max, 16, 4, now + 200) as [number, number];
    expect([status, weight]).toEqual([0, lease_ops_max]);
    expect(await ops(p)).toBe(before);
    await new Promise((r) => setTimeout(r, 300));
    expect(await ops(p)).toBe(before + lease_ops_max);
    expect(await svc.rt.redis.zcard(k.pending)).toBe(0);
  });

  it('report what they served within the report interval, to readers in other processes', async () => {
    const p = await svc.project();
    await fund(p, 'c2');
    const k = await periodKeys(p);
    for (let i = 0; i < 5; i++) expect((await deduct(svc.url, p, 'c2', `s${i}`)).status).toBe(200);
    // Read the counter itself, as another process would (no flush of this one's lease).
    await waitFor(async () => Number(await svc.rt.redis.get(k.counter)) === 5, lease_report_ms * 4 + 500, 'the lease to report');
  });

  describe('give back their unused operations', () => {
    // Each test takes a lease with one deduct: its member holds the whole grant, one of
    // which applied. Given back, the member is gone and the count is what applied.

    it('after lease_idle_ms without use', async () => {
      const p = await svc.project();
      await fund(p, 'i1');
      const k = await periodKeys(p);
      expect((await deduct(svc.url, p, 'i1', 'idle-1')).status).toBe(200);
      expectLeaseHeld(await periodState(k));
      const usedAt = Date.now();
      await waitFor(async () => (await periodState(k)).pending.length === 0, lease_idle_ms + lease_report_ms * 4 + 2_000, 'the idle lease to go back');
      expect(Date.now() - usedAt).toBeGreaterThanOrEqual(lease_idle_ms);
      expect(await periodState(k)).toEqual({ pending: [], used: 1 });
    });

    it('at the end of its period, in the period it was taken in', async () => {
      const p = await svc.project();
      await fund(p, 'e1');
      const now = async () => Date.now() + svc.rt.clock.offsetMs();
      const old = await periodKeys(p);
      // Close to the period's end, but well within a lease's deadline of it: a lease past
      // its deadline is counted whole instead.
      svc.rt.clock.advance(old.endMs - 2_000 - (await now()));
      expect((await deduct(svc.url, p, 'e1', 'end-1')).status).toBe(200);
      const usedAt = Date.now();
      expectLeaseHeld(await periodState(old));
      svc.rt.clock.advance(old.endMs + 1_000 - (await now()));
      // The first operation of the new period takes a lease there; the old one goes back
      // at the next report, not lease_idle_ms after its last use as an idle lease would.
      expect((await deduct(svc.url, p, 'e1', 'end-2')).status).toBe(200);
      const next = await periodKeys(p);
      expect(next.counter).not.toBe(old.counter);
      await waitFor(async () => (await periodState(old)).pending.length === 0, lease_idle_ms, 'the old period lease to go back');
      expect(Date.now() - usedAt).toBeLessThan(lease_idle_ms - 200);
      expect(await periodState(old)).toEqual({ pending: [], used: 1 });
      expectLeaseHeld(await periodState(next));
    });

    it('when the process stops', async () => {
      const other = await startTestService();
      try {
        const p = await other.project('B');
        await fund2(other, p, 's1');
        const k = await periodKeys(p, other);
        expect((await deduct(other.url, p, 's1', 'stop-1')).status).toBe(200);
        expectLeaseHeld(await periodState(k, other));
        // What the runtime's close does first: no wait for the idle timer.
        await other.rt.plans.close();
        expect(await periodState(k, other)).toEqual({ pending: [], used: 1 });
      } finally {
        await other.close();
      }
    });
  });
});
