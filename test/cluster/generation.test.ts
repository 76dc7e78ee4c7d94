/**
 * The Redis generation guard on a Redis Cluster (src/redis/generation.ts): a master that
 * restarts empty (its run_id changes) is verified again on its own. Money waits until
 * the customers of its slots whose ledger is ahead are rebuilt from PostgreSQL; its
 * marker lives on it; the other masters' customers are not part of its recovery.
 *
 * The service runs against a 3-master cluster of the test's own, nothing persisted, and
 * the test restarts one master with kill -9.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isCluster } from '../../src/redis/client.js';
import { nodeRecoveredMarkerKey } from '../../src/redis/generation.js';
import { bindingKeys, customerKeys } from '../../src/redis/keys.js';
import { keySlot, tagIn } from '../../src/redis/slots.js';
import { startTestService, waitFor, type ApiResponse, type TestProject, type TestService } from '../helpers.js';
import { ownCluster, type OwnCluster, type OwnClusterNode } from '../support/own-cluster.js';

let cluster: OwnCluster;
let svc: TestService;
let p: TestProject;

beforeAll(async () => {
  cluster = await ownCluster(3);
  svc = await startTestService({ workers: true, config: { REDIS_URL: cluster.url } });
  p = await svc.project('B');
}, 60_000);

afterAll(async () => {
  await svc?.close();
  await cluster?.remove();
});

function post(path: string, body: Record<string, unknown>): Promise<ApiResponse> {
  return svc.call('POST', path, { key: p.projectKey, body });
}

async function available(customer: string): Promise<string> {
  const res = await svc.call('GET', `/v1/customers/${customer}/balance`, { key: p.projectKey });
  expect(res.status).toBe(200);
  return String(res.body.available);
}

/** A customer id whose keys live on `node`. */
function customerOn(node: OwnClusterNode, name: string): string {
  for (;;) {
    const id = `${name}-${randomBytes(3).toString('hex')}`;
    const slot = keySlot(customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, id).meta);
    if (slot >= node.slots[0] && slot <= node.slots[1]) return id;
  }
}

describe('Redis Cluster: the generation guard per master', () => {
  it('a master that restarts empty is recovered from PostgreSQL for its own slots before money is served again', async () => {
    expect(isCluster(svc.rt.redis)).toBe(true);
    const prefix = svc.rt.config.REDIS_PREFIX;
    // The master restarted holds neither one of the project's binding buckets nor the other customer.
    const indexNode = cluster.nodeOf(keySlot(bindingKeys(prefix, p.projectId, 't', 'probe').ids));
    const restarted = cluster.nodes.find((n) => n !== indexNode)!;
    const other = cluster.nodes.find((n) => n !== indexNode && n !== restarted) ?? indexNode;
    const lost = customerOn(restarted, 'lost');
    const kept = customerOn(other, 'kept');

    const deposits = [
      await post('/v1/customers/deposit', { customer_id: lost, amount: 500, idempotency_key: `dep-${lost}` }),
      await post('/v1/customers/deposit', { customer_id: kept, amount: 1000, idempotency_key: `dep-${kept}` }),
    ];
    expect(deposits.map((r) => r.status)).toEqual([200, 200]);
    const deduct = await post('/v1/billing/deduct', { customer_id: lost, transaction_id: `d-${lost}`, amount: 50 });
    expect(deduct.status).toBe(200);
    await svc.drained();
    expect(await available(lost)).toBe('450');

    // The other master's customer looks behind the ledger (its Redis seq cleared): a
    // recovery of the restarted master must not touch it, it is not in its slots.
    const keptMeta = customerKeys(prefix, p.projectId, kept).meta;
    const keptSeq = await svc.rt.redis.hget(keptMeta, 'seq');
    await svc.rt.redis.hset(keptMeta, 'seq', '0');

    await restarted.restart();
    const admin = new Redis(restarted.port, '127.0.0.1');
    try {
      const runId = /run_id:([0-9a-f]+)/.exec(await admin.info('server'))![1];
      await waitFor(() => svc.rt.generation.runId?.includes(`${restarted.key}=${runId}`), 20_000, 'the restarted master to be verified');
      const health = await svc.call('GET', '/health');
      expect(health.body.checks.redis.verified).toBe(true);

      // Its customer is back from PostgreSQL: balance, and the deduct answers as a replay.
      expect(await available(lost)).toBe('450');
      const replay = await post('/v1/billing/deduct', { customer_id: lost, transaction_id: `d-${lost}`, amount: 50 });
      expect([replay.status, replay.body.is_idempotent_replay]).toEqual([200, true]);
      // Its marker is on it, under a hash tag of its own slots.
      const slots = new Set<number>();
      for (let s = restarted.slots[0]; s <= restarted.slots[1]; s++) slots.add(s);
      expect(await admin.exists(nodeRecoveredMarkerKey(prefix, tagIn(slots), runId))).toBe(1);
      // The other master's customer was not part of that recovery.
      expect(await svc.rt.redis.hget(keptMeta, 'seq')).toBe('0');
      await svc.rt.redis.hset(keptMeta, 'seq', keptSeq!);
      expect(await available(kept)).toBe('1000');

      // New money works on both.
      const more = await post('/v1/billing/deduct', { customer_id: lost, transaction_id: `d2-${lost}`, amount: 25 });
      expect(more.status).toBe(200);
      expect(await available(lost)).toBe('425');
      await svc.drained();
    } finally {
      admin.disconnect();
    }
  });
});
