/**
 * A Redis that comes back with nothing (no persistence, a new instance): the recovery
 * window (REDIS_RECOVERY_WINDOW_MS) bounds how far back a Redis that kept its data is
 * checked, but a Redis that lost everything has no recovery baseline, so every customer of
 * the prefix is rebuilt, however long ago its last operation was. Here the window is 1 ms,
 * so every entry is older than the window by the time Redis restarts.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recoveryBaselineKey } from '../../src/reconcile/recovery.js';
import { startTestService, waitFor, type ApiResponse, type TestProject, type TestService } from '../helpers.js';
import { ownRedis, type OwnRedis } from '../support/own-redis.js';

let redis: OwnRedis;
let svc: TestService;
let p: TestProject;

beforeAll(async () => {
  redis = await ownRedis('svc-recovery-empty-');
  await redis.start();
  svc = await startTestService({ workers: true, config: { REDIS_URL: redis.url, REDIS_RECOVERY_WINDOW_MS: 1 } });
  p = await svc.project('B');
}, 30_000);

afterAll(async () => {
  await svc?.close();
  await redis?.remove();
});

function post(path: string, body: Record<string, unknown>): Promise<ApiResponse> {
  return svc.call('POST', path, { key: p.projectKey, body });
}

describe('Redis restarted empty', () => {
  it('rebuilds every customer of the prefix from PostgreSQL, however old their entries', async () => {
    const dep = await post('/v1/customers/deposit', { customer_id: 'erin', amount: 900, idempotency_key: 'dep-erin' });
    expect(dep.status).toBe(200);
    const ded = await post('/v1/billing/deduct', { customer_id: 'erin', transaction_id: 'e1', amount: 250 });
    expect(ded.status).toBe(200);
    expect((await post('/v1/billing/freeze', { customer_id: 'erin', transaction_id: 'e2', amount: 100 })).status).toBe(200);
    await svc.drained();
    const direct = new Redis(redis.url);
    try {
      expect(await direct.exists(recoveryBaselineKey(svc.rt.config.REDIS_PREFIX))).toBe(1);
    } finally {
      direct.disconnect();
    }

    await redis.kill();
    await redis.start();

    const replay = await waitFor(async () => {
      const res = await post('/v1/billing/deduct', { customer_id: 'erin', transaction_id: 'e1', amount: 250 });
      expect([503, 200]).toContain(res.status);
      return res.status === 200 ? res : null;
    }, 20_000, 'the service to serve again');
    expect(replay.body).toEqual({ ...ded.body, is_idempotent_replay: true });
    const balance = await svc.call('GET', '/v1/customers/erin/balance', { key: p.projectKey });
    expect([balance.status, balance.body.total, balance.body.used, balance.body.frozen, balance.body.available]).toEqual([200, 900, 250, 100, 550]);
    const consume = await post('/v1/billing/consume', { transaction_id: 'e2', amount: 100 });
    expect([consume.status, consume.body.is_idempotent_replay]).toEqual([200, false]);
  }, 60_000);
});
