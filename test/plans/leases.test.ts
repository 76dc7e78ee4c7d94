/**
 * Plan counting from in-process leases: operations served from a lease cost no Redis
 * command on the organization's keys; two API processes that take leases while far from
 * the limit, then reserve one by one near it, admit exactly what the limit leaves; a lease
 * whose process died counts whole at its deadline; and what a lease served reaches the
 * count read by another process within the report interval.
 */
import type { Command } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { periodAt } from '../../src/plans/catalogue.js';
import { lease_ops_max, lease_report_ms } from '../../src/plans/leases.js';
import { scriptSource } from '../../src/redis/scripts.js';
import { startTestService, waitFor, type TestProject, type TestService } from '../helpers.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService();
});
afterAll(() => svc.close());

const ops = async (p: TestProject) => (await svc.rt.plans.organization(p.organizationId)).billable_ops;

async function fund(p: TestProject, customer: string) {
  const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount: 10_000_000 } });
  expect(r.status).toBe(200);
}

async function periodKeys(p: TestProject) {
  await svc.rt.plans.organization(p.organizationId); // seeds the counter
  const period = periodAt(await svc.rt.plans.organizationAnchor(p.organizationId), Date.now() + svc.rt.clock.offsetMs());
  const tag = `${svc.rt.config.REDIS_PREFIX}o:{${p.organizationId}}`;
  return { plan: `${tag}:plan`, counter: `${tag}:ops:${period.startMs}`, pending: `${tag}:ops:${period.startMs}:pending` };
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
        for (const r of results.filter((x) => x.status !== 200)) expect([r.status, r.body.error?.code]).toEqual([429, 'usage_limit_exceeded']);
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
    try {
      // The top-up that a serve sends in the background once half of the lease is used
      // (it keeps what is left and wants more) fails the way a Redis that went away fails
      // it. No request waits for that call: its failure is nobody's answer.
      scripts.runOther = ((name: string, keys: string[], args: (string | number)[]) => {
        const [keep, want] = [Number(args[5]), Number(args[6])];
        if (name === 'plan_lease' && keep > 0 && want > 0) {
          failed++;
          return Promise.reject(new Error('Connection is closed.'));
        }
        return runOther(name as never, keys, args);
      }) as typeof scripts.runOther;
      for (let i = 0; i < lease_ops_max && failed === 0; i++) expect((await deduct(svc.url, p, 'c3', `f${i}`)).status).toBe(200);
      await new Promise((r) => setTimeout(r, 50));
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
});
