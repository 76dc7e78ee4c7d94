/**
 * Learning the outcome of a money script whose reply was lost, on a Redis Cluster (where
 * an operation takes two steps: the binding in its bucket's slot, then the customer's
 * script; src/ledger/service.ts, learn). A cluster of the test's own, with a TCP proxy in
 * front of every node (ioredis's natMap), and a ledger on a cluster client through them.
 * The proxy of the customer's node lets the deduct script reach Redis and apply, swallows
 * its reply and cuts the connection:
 * - when the node answers again within the wait, the deduct answers its result (not a
 *   replay), applied once;
 * - when it does not, the deduct fails as outcome unknown (503 outcome_unknown), and its
 *   retry with the same id, once the node is back, is the replay, still applied once.
 */
import { randomBytes } from 'node:crypto';
import { Redis, type Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Clock } from '../../src/ledger/clock.js';
import { LedgerService } from '../../src/ledger/service.js';
import type { ProjectScope } from '../../src/ledger/requests.js';
import { Metrics, type OutcomePath } from '../../src/metrics/metrics.js';
import { createCluster } from '../../src/redis/client.js';
import { customerKeys } from '../../src/redis/keys.js';
import { registerScripts, scriptSource } from '../../src/redis/scripts.js';
import { OutcomeUnknownError } from '../../src/redis/sent.js';
import { keySlot } from '../../src/redis/slots.js';
import { waitFor } from '../helpers.js';
import { ownCluster, proxyEveryNode, type OwnCluster } from '../support/own-cluster.js';
import { TcpProxy } from '../support/tcp-proxy.js';

const prefix = `tclearn${randomBytes(4).toString('hex')}:`;
const scope: ProjectScope = { projectId: 'proj_learn', organizationId: 'org_learn' };
const customerId = 'c-learn';
const outcome_wait_ms = 1_500;

let cluster: OwnCluster;
let proxies = new Map<string, TcpProxy>();
let conn: Cluster;
let ledger: LedgerService;
let metrics: Metrics;

beforeAll(async () => {
  cluster = await ownCluster(3);
  const proxied = await proxyEveryNode(cluster);
  proxies = proxied.proxies;
  const { natMap } = proxied;
  conn = createCluster(proxies.get(cluster.nodes[0].key)!.via(cluster.url), {}, undefined, { natMap });
  await waitFor(() => conn.status === 'ready', 10_000, 'the cluster client to be ready');
  metrics = new Metrics({ defaultMetrics: false });
  ledger = new LedgerService(conn, registerScripts(conn), prefix, new Clock(false), { metrics, outcomeWaitMs: outcome_wait_ms });
  await ledger.deposit(scope, { customerId, amount: 1_000, wallet: 'credits', label: 'grant', startsAtMs: null, expiresAtMs: null, idempotencyKey: null, description: null });
  // The deduct runs once, so its node has the function loaded: the call the proxy watches
  // for is then answered by the function itself, never by "Function not found".
  await deduct('t-warm');
}, 60_000);

afterAll(async () => {
  conn?.disconnect();
  for (const p of proxies.values()) await p.close();
  await cluster?.remove();
});

const keys = () => customerKeys(prefix, scope.projectId, customerId);

/** The proxy of the node that serves the customer's keys. */
const customerProxy = () => proxies.get(cluster.nodeOf(keySlot(keys().meta)).key)!;

/** Straight to the customer's node, past the proxies. */
async function direct<T>(f: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(cluster.nodeOf(keySlot(keys().meta)).port, '127.0.0.1');
  try {
    return await f(r);
  } finally {
    r.disconnect();
  }
}

async function learned(): Promise<Record<OutcomePath, number>> {
  const m = await metrics.outcomeLearning.get();
  return Object.fromEntries(m.values.map((v) => [v.labels.path, v.value])) as Record<OutcomePath, number>;
}

const deduct = (transactionId: string) => ledger.deduct(scope, { customerId, transactionId, amount: 10, wallets: null, businessType: null, description: null });

/** Starts a deduct, lets its script apply on the customer's node and loses its reply; `back` lets the client reconnect at once. */
async function deductWithLostReply(transactionId: string, back: boolean): Promise<unknown> {
  const proxy = customerProxy();
  const { fn } = scriptSource('deduct');
  proxy.dropRepliesWhen((sent) => sent.includes(fn) && sent.includes(transactionId));
  const answer = deduct(transactionId).catch((err: unknown) => err);
  await waitFor(() => proxy.droppingReplies, 10_000, 'the deduct script to be sent');
  await waitFor(async () => (await direct((r) => r.hexists(keys().tx, transactionId))) === 1, 10_000, 'the deduct to apply');
  if (back) proxy.forward();
  else await proxy.refuse();
  proxy.cut();
  return answer;
}

async function used(): Promise<number> {
  const view = await ledger.view(scope, customerId);
  return view!.wallets.credits.used;
}

describe('a money script whose reply is lost on a Redis Cluster', () => {
  it('answers its result, applied once, when the node answers again within the wait', async () => {
    const before = await learned();
    const result = await deductWithLostReply('t-learned', true);
    expect(result).toMatchObject({ replay: false, body: { transaction_id: 't-learned', deducted_amount: 10 } });
    expect((await learned()).learned_applied - before.learned_applied).toBe(1);
    expect(await used()).toBe(20);
  });

  it('fails as outcome unknown when it does not, and the retry with the same id is the replay, applied once', async () => {
    const before = await learned();
    const err = await deductWithLostReply('t-unknown', false);
    expect(err).toBeInstanceOf(OutcomeUnknownError);
    expect((await learned()).unknown - before.unknown).toBe(1);
    const proxy = customerProxy();
    proxy.forward();
    await proxy.start();
    await waitFor(async () => (await ledger.view(scope, customerId).catch(() => null)) !== null, 10_000, 'the node to answer again');
    const retry = await deduct('t-unknown');
    expect(retry).toMatchObject({ replay: true, body: { transaction_id: 't-unknown', deducted_amount: 10 } });
    expect(await used()).toBe(30);
  });
});
