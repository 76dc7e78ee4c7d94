/**
 * A cluster master that restarts empty held keys for customers of the other masters: the
 * project's binding buckets (transaction ids, deposit keys, gateway Idempotency-Keys), a
 * shard of the active index, the ledger queue (expiry jobs, the sweep schedule). Its
 * recovery puts them back (src/reconcile/shared-keys.ts), which reconcile's repair of its
 * own customers does not: the others are not behind the ledger.
 *
 * The service (API and workers) runs against a 3-master cluster of the test's own,
 * nothing persisted; every id below is chosen so that its binding lives on the master
 * restarted, and the customers on another one.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimId } from '../../src/ledger/bindings.js';
import { activeKeyOf, bindingKeys, customerKeys, type BindingKind } from '../../src/redis/keys.js';
import { keySlot } from '../../src/redis/slots.js';
import { ledgerQueueName } from '../../src/ledger/expiry.js';
import { OPENAI_MODEL, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { waitFor, type ApiResponse } from '../helpers.js';
import { ownCluster, type OwnCluster, type OwnClusterNode } from '../support/own-cluster.js';
import { expectError } from '../support/errors.js';

let cluster: OwnCluster;
let env: GatewayEnv;
/** The master restarted empty, and the one the customers live on. */
let restarted: OwnClusterNode;
let home: OwnClusterNode;

beforeAll(async () => {
  cluster = await ownCluster(3);
  [home, restarted] = cluster.nodes;
  let queuePrefix: string;
  do queuePrefix = `{sq${randomBytes(3).toString('hex')}}`;
  while (cluster.nodeOf(keySlot(`${queuePrefix}:${ledgerQueueName}:meta`)) !== restarted);
  env = await startGatewayEnv({ config: { REDIS_URL: cluster.url, QUEUE_PREFIX: queuePrefix, SWEEP_INTERVAL_MS: 200 } });
}, 60_000);

afterAll(async () => {
  await env?.close();
  await cluster?.remove();
});

const prefix = () => env.svc.rt.config.REDIS_PREFIX;
const onNode = (key: string, node: OwnClusterNode) => cluster.nodeOf(keySlot(key)) === node;

/** A fresh id starting with `name` whose binding of `kind` lives on the restarted master (`binding` maps it to the bound id). */
function idOnRestarted(name: string, kind: BindingKind, binding: (id: string) => string = (id) => id): string {
  for (;;) {
    const id = `${name}-${randomBytes(3).toString('hex')}`;
    if (onNode(bindingKeys(prefix(), env.p.projectId, kind, binding(id)).ids, restarted)) return id;
  }
}

/** A customer whose keys live on the home master, and whose active mark lives on `markOn` when given. */
function customerOnHome(name: string, markOn?: OwnClusterNode): string {
  for (;;) {
    const id = `${name}-${randomBytes(3).toString('hex')}`;
    const k = customerKeys(prefix(), env.p.projectId, id);
    if (onNode(k.meta, home) && (markOn === undefined || onNode(activeKeyOf(prefix(), k.base), markOn))) return id;
  }
}

function post(path: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<ApiResponse> {
  return env.svc.call('POST', path, { key: env.p.projectKey, body, headers });
}

function chat(customer: string, key: string): Promise<ApiResponse> {
  return post('/v1/chat/completions', { model: OPENAI_MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hello' }] }, { 'x-service-customer': customer, 'idempotency-key': key });
}

describe('Redis Cluster: a master restarted empty', () => {
  it("gets back the bindings, claims, active marks and sweep schedule it held for the other masters' customers", async () => {
    const customer = customerOnHome('kept');
    const sleeper = customerOnHome('sleeper', restarted);
    const third = customerOnHome('third');
    const open = idOnRestarted('open', 't');
    const refused = idOnRestarted('refused', 't');
    const depositKey = idOnRestarted('dep', 'd');
    const gatewayKey = idOnRestarted('call', 'g', (key) => claimId(customer, key));

    await env.fund(third, 10_000);
    expect((await post('/v1/customers/deposit', { customer_id: customer, amount: 5_000_000, idempotency_key: depositKey })).status).toBe(200);
    expect((await post('/v1/billing/freeze', { customer_id: customer, transaction_id: open, amount: 300 })).status).toBe(200);
    const refusal = await post('/v1/billing/deduct', { customer_id: customer, transaction_id: refused, amount: 900_000_000 });
    expectError(refusal, 400, 'insufficient_balance');
    const call = await chat(customer, gatewayKey);
    expect(call.status, JSON.stringify(call.body)).toBe(200);
    const callId = call.headers.get('x-service-transaction-id');
    // Nobody touches the sleeper again: only its expiry job or the sweeper can settle its TTL.
    await env.fund(sleeper, 1_000);
    expect((await post('/v1/billing/freeze', { customer_id: sleeper, transaction_id: `${sleeper}-ttl`, amount: 400, release_after_seconds: 3 })).status).toBe(200);
    await env.svc.drained();
    const sleeperKeys = customerKeys(prefix(), env.p.projectId, sleeper);
    expect(await env.svc.rt.redis.zscore(activeKeyOf(prefix(), sleeperKeys.base), sleeperKeys.base)).not.toBeNull();
    expect(await env.svc.rt.redis.hget(bindingKeys(prefix(), env.p.projectId, 't', open).ids, open)).toMatch(new RegExp(`^${customer}\\|`));

    await restarted.restart();
    const admin = new Redis(restarted.port, '127.0.0.1');
    try {
      const runId = /run_id:([0-9a-f]+)/.exec(await admin.info('server'))![1];
      await waitFor(() => env.svc.rt.generation.runId?.includes(`${restarted.key}=${runId}`), 20_000, 'the restarted master to be verified');
    } finally {
      admin.disconnect();
    }

    // The open freeze is found through its binding.
    const consume = await post('/v1/billing/consume', { transaction_id: open, amount: 100 });
    expect([consume.status, consume.body.consumed_amount]).toEqual([200, 100]);
    // The refused id and the deposit key still belong to their customer.
    expectError(await post('/v1/billing/deduct', { customer_id: third, transaction_id: refused, amount: 10 }), 409, 'transaction_conflict');
    expect((await post('/v1/customers/deposit', { customer_id: third, amount: 10, idempotency_key: depositKey })).status).toBe(409);
    // The settled call's key is still taken, by that call: not relayed nor billed again.
    const again = await chat(customer, gatewayKey);
    expectError(again, 409, 'idempotency_key_reused', { fields: { transaction_id: callId } });
    expect((await env.ledger(customer, 'GATEWAY')).length).toBe(1);
    // The sleeper's TTL: its expiry job went with the queue, its active mark with the
    // index shard; the mark is back and the sweeps run again. Within 30 s: usually 1-3 s
    // after the restart, but the queue worker's connections to the restarted master come
    // back on their own schedule (a blocking command waits for its watchdog, a failed
    // fetch for runRetryDelay), and on a loaded CI machine this once took more than 15 s.
    await waitFor(async () => (await env.svc.rt.redis.zcard(sleeperKeys.ttl)) === 0, 30_000, 'the sweeper to release the TTL freeze');
    expect((await env.ledger(sleeper, 'UNFREEZE')).map((e) => [e.transaction_id, e.amount])).toEqual([[`${sleeper}-ttl`, 400]]);
  }, 60_000);
});
