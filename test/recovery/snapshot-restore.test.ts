/**
 * Redis comes back from an older snapshot (issue 8, item 3): the operations it forgot
 * were acknowledged and persisted to PostgreSQL. The service must restore them before it
 * serves money again: replays of the forgotten ids answer as replays with their original
 * results (nothing applied or spent twice), balances equal the ledger, new operations
 * work, the outbox drains and reconcile finds no drift.
 *
 * The service runs against a redis-server of its own (no AOF, no automatic saves), which
 * the test saves (SAVE, then a copy of dump.rdb), kills with -9 after more operations,
 * and starts again from the old dump.rdb on the same port.
 */
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcile } from '../../src/reconcile/walk.js';
import { recoveredMarkerKey, recoveryLockKey } from '../../src/redis/generation.js';
import { bindingKeys } from '../../src/redis/keys.js';
import { startTestService, waitFor, type ApiResponse, type TestProject, type TestService } from '../helpers.js';
import { ownRedis, type OwnRedis } from '../support/own-redis.js';
import { expectError } from '../support/errors.js';

let redis: OwnRedis;
let svc: TestService;
let p: TestProject;

beforeAll(async () => {
  redis = await ownRedis('svc-recovery-snapshot-');
  await redis.start();
  svc = await startTestService({ workers: true, config: { REDIS_URL: redis.url } });
  p = await svc.project('B');
}, 30_000);

afterAll(async () => {
  await svc?.close();
  await redis?.remove();
});

function post(path: string, body: Record<string, unknown>): Promise<ApiResponse> {
  return svc.call('POST', path, { key: p.projectKey, body });
}

const applied: Record<string, { path: string; body: Record<string, unknown>; response: Record<string, unknown> }> = {};

async function apply(name: string, path: string, body: Record<string, unknown>): Promise<void> {
  const res = await post(path, body);
  expect([name, res.status, res.body.is_idempotent_replay]).toEqual([name, 200, false]);
  applied[name] = { path, body, response: res.body };
}

async function balance(customer: string): Promise<Record<string, unknown>> {
  const res = await svc.call('GET', `/v1/customers/${customer}/balance`, { key: p.projectKey });
  expect(res.status).toBe(200);
  const { total, used, frozen, available } = res.body;
  return { total, used, frozen, available };
}

describe('Redis restarted from an older snapshot', () => {
  it('restores the forgotten operations from PostgreSQL before serving: replays, balances, new operations, no drift', async () => {
    await apply('deposit alice', '/v1/customers/deposit', { customer_id: 'alice', amount: 1000, idempotency_key: 'dep1' });
    await apply('deposit bob', '/v1/customers/deposit', { customer_id: 'bob', amount: 500, idempotency_key: 'dep-bob' });
    await apply('freeze f1', '/v1/billing/freeze', { customer_id: 'alice', transaction_id: 'f1', amount: 100 });
    await apply('deduct d1', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd1', amount: 50 });
    await svc.drained();

    const direct = new Redis(redis.url, { lazyConnect: true });
    await direct.connect();
    await direct.save();
    const oldRunId = /run_id:([0-9a-f]+)/.exec(await direct.info('server'))![1];
    direct.disconnect();
    copyFileSync(join(redis.dir, 'dump.rdb'), join(redis.dir, 'old.rdb'));

    // Acknowledged and persisted after the snapshot: what the restarted Redis forgets.
    await apply('deposit dep2', '/v1/customers/deposit', { customer_id: 'alice', amount: 200, idempotency_key: 'dep2' });
    await apply('deduct d2', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd2', amount: 30 });
    await apply('freeze f2 (TTL)', '/v1/billing/freeze', { customer_id: 'alice', transaction_id: 'f2', amount: 40, consume_after_seconds: 3600 });
    await apply('consume f1', '/v1/billing/consume', { transaction_id: 'f1', amount: 60 });
    await apply('deduct b1', '/v1/billing/deduct', { customer_id: 'bob', transaction_id: 'b1', amount: 20 });
    await apply('deposit carol (new customer)', '/v1/customers/deposit', { customer_id: 'carol', amount: 70, idempotency_key: 'dep-carol' });
    await svc.drained();

    await redis.kill();
    copyFileSync(join(redis.dir, 'old.rdb'), join(redis.dir, 'dump.rdb'));
    await redis.start();

    // The first answer after the restart is either 503 (recovering, nothing applied) or
    // the replay: never a second application.
    const first = await waitFor(async () => {
      const { path, body } = applied['deduct d2'];
      const res = await post(path, body);
      expect([503, 200]).toContain(res.status);
      if (res.status === 503) expectError(res, 503, 'service_unavailable');
      return res.status === 200 ? res : null;
    }, 20_000, 'the service to serve again');
    expect(first.body).toEqual({ ...applied['deduct d2'].response, is_idempotent_replay: true });

    for (const [name, { path, body, response }] of Object.entries(applied)) {
      const res = await post(path, body);
      expect([name, res.status, res.body]).toEqual([name, 200, { ...response, is_idempotent_replay: true }]);
    }
    expect(await balance('alice')).toEqual({ total: 1200, used: 140, frozen: 40, available: 1020 });
    expect(await balance('bob')).toEqual({ total: 500, used: 20, frozen: 0, available: 480 });
    expect(await balance('carol')).toEqual({ total: 70, used: 0, frozen: 0, available: 70 });

    const health = await svc.call('GET', '/health');
    expect(health.body.checks.redis.generation).toBe('verified');
    expect(health.body.checks.redis.run_id).not.toBe(oldRunId);
    expect(await svc.rt.redis.exists(recoveredMarkerKey(svc.rt.config.REDIS_PREFIX, health.body.checks.redis.run_id))).toBe(1);

    // New operations take the next numbers: nothing clashes with the ledger.
    await apply('deduct d3', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd3', amount: 10 });
    await apply('unfreeze f2', '/v1/billing/unfreeze', { transaction_id: 'f2' });
    await apply('deduct c1', '/v1/billing/deduct', { customer_id: 'carol', transaction_id: 'c1', amount: 7 });
    await svc.drained();
    expect(await balance('alice')).toEqual({ total: 1200, used: 150, frozen: 0, available: 1050 });

    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: false });
    expect(report).toMatchObject({ customers_checked: 3, customers_with_drift: 0, drift: [], errors: [], anomalies: [] });
  }, 60_000);

  it('sends nothing for money while the new generation is unverified, and serves once it is', async () => {
    await apply('deposit dave', '/v1/customers/deposit', { customer_id: 'dave', amount: 100, idempotency_key: 'dep-dave' });
    const prefix = svc.rt.config.REDIS_PREFIX;
    const direct = new Redis(redis.url);
    try {
      // Another process holds the recovery and has not finished: this one must wait.
      const runId = svc.rt.generation.runId!;
      await direct.set(recoveryLockKey(prefix), 'another process', 'PX', 60_000);
      await direct.del(recoveredMarkerKey(prefix, runId));
      await direct.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      await waitFor(async () => (await svc.call('GET', '/health')).body.checks?.redis?.generation === 'recovering', 10_000, 'the guard to drop');

      const refused = await post('/v1/billing/deduct', { customer_id: 'dave', transaction_id: 'dv1', amount: 10 });
      expectError(refused, 503, 'service_unavailable', { message: /nothing was applied/ });
      // Nothing reached Redis: not even the transaction's binding.
      expect(await direct.hexists(bindingKeys(prefix, p.projectId, 't', 'dv1').ids, 'dv1')).toBe(0);
      const health = await svc.call('GET', '/health');
      expect([health.body.status, health.body.checks.redis.verified]).toEqual(['degraded', false]);

      // A read waits for the guard like the money operations do, instead of a 503 at once:
      // it is answered once the recovery below completes.
      // So does the organization's read, whose plan count is a script.
      const reading = svc.call('GET', '/v1/customers/dave/balance', { key: p.projectKey });
      const readingOrg = svc.call('GET', '/v1/admin/organization', { key: p.adminKey });
      await direct.del(recoveryLockKey(prefix));
      const read = await reading;
      expect([read.status, read.body.available]).toEqual([200, 100]);
      const org = await readingOrg;
      expect([org.status, typeof org.body.billable_ops]).toEqual([200, 'number']);
      await waitFor(async () => (await svc.call('GET', '/health')).body.checks?.redis?.generation === 'verified', 10_000, 'the guard to verify');
      expect(await direct.exists(recoveredMarkerKey(prefix, runId))).toBe(1);
      await apply('deduct dv1', '/v1/billing/deduct', { customer_id: 'dave', transaction_id: 'dv1', amount: 10 });
      expect(await balance('dave')).toEqual({ total: 100, used: 10, frozen: 0, available: 90 });
    } finally {
      direct.disconnect();
    }
  }, 60_000);
});
