/**
 * How a process finds and uses a Redis Cluster (src/redis/client.ts, src/runtime.ts), on
 * a cluster of the test's own: the probe tells a cluster node from a single Redis and
 * REDIS_CLUSTER overrides it; a queue prefix without a hash tag is refused on a cluster;
 * a message published through the cluster client reaches a subscriber on one node; a
 * BullMQ delayed job under the hash-tagged prefix runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectCluster, isCluster } from '../../src/redis/client.js';
import { expiryJobId } from '../../src/redis/keys.js';
import { createRuntime } from '../../src/runtime.js';
import { startTestService, testConfig, waitFor, type TestService } from '../helpers.js';
import { ownCluster, type OwnCluster } from '../support/own-cluster.js';

let cluster: OwnCluster;
let svc: TestService;

beforeAll(async () => {
  cluster = await ownCluster(3);
  svc = await startTestService({ workers: true, config: { REDIS_URL: cluster.url } });
}, 60_000);

afterAll(async () => {
  await svc?.close();
  await cluster?.remove();
});

describe('Redis Cluster client', () => {
  it('is found by INFO cluster unless REDIS_CLUSTER says; a single Redis is not one', async () => {
    expect(await detectCluster(cluster.url, undefined)).toBe(true);
    expect(await detectCluster(testConfig().REDIS_URL, undefined)).toBe(false);
    expect(await detectCluster(cluster.url, false)).toBe(false);
    // A Redis that does not answer is taken for a single one, and says so.
    const said: Error[] = [];
    expect(await detectCluster('redis://127.0.0.1:1', undefined, (err) => said.push(err))).toBe(false);
    expect(said[0].message).toMatch(/set REDIS_CLUSTER/);
    expect(isCluster(svc.rt.redis)).toBe(true);
  });

  it('refuses a queue prefix without a hash tag on a cluster', async () => {
    await expect(createRuntime(testConfig({ REDIS_URL: cluster.url, QUEUE_PREFIX: 'svcq' }))).rejects.toThrow(/QUEUE_PREFIX must carry a hash tag/);
  });

  it('delivers a message published through the cluster client to a subscriber on one node', async () => {
    const subscriber = svc.rt.extraConnection();
    const channel = `${svc.rt.config.REDIS_PREFIX}cluster-test`;
    const got: string[] = [];
    subscriber.on('message', (ch: string, message: string) => {
      if (ch === channel) got.push(message);
    });
    await subscriber.subscribe(channel);
    await svc.rt.redis.publish(channel, 'hello');
    await waitFor(() => got.length > 0, 5_000, 'the message');
    expect(got).toEqual(['hello']);
  });

  it('runs a TTL freeze expiry job under the hash-tagged queue prefix', async () => {
    expect(svc.rt.config.QUEUE_PREFIX).toMatch(/^\{.+\}$/);
    const p = await svc.project('B');
    const post = (path: string, body: Record<string, unknown>) => svc.call('POST', path, { key: p.projectKey, body });
    expect((await post('/v1/customers/deposit', { customer_id: 'c1', amount: 100, idempotency_key: 'dep1' })).status).toBe(200);
    const frozen = await post('/v1/billing/freeze', { customer_id: 'c1', transaction_id: 'f1', amount: 40, consume_after_seconds: 1 });
    expect(frozen.status).toBe(200);
    const jobId = expiryJobId(p.projectId, 'c1', 'f1');
    expect(await (await svc.rt.ledgerQueue.getJob(jobId))?.getState()).toBe('delayed');
    // Nobody touches the customer (a read would settle the freeze itself): the job runs,
    // and is removed once completed.
    await waitFor(async () => (await svc.rt.ledgerQueue.getJob(jobId)) === undefined, 15_000, 'the expiry job to run');
    expect((await svc.rt.ledgerQueue.getJobCounts('failed')).failed).toBe(0);
    const balance = await svc.call('GET', '/v1/customers/c1/balance', { key: p.projectKey });
    expect([String(balance.body.frozen), String(balance.body.used)]).toEqual(['0', '40']);
  });
});
