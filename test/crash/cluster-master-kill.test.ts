/**
 * Crash test on a Redis Cluster: kill -9 of one master under load, in two variants, on a
 * 3-master cluster of the test's own that persists as production must (`appendonly yes`,
 * `appendfsync always`), with two web and two worker processes (the Procfile's, as child
 * processes) and concurrent clients: deposits, deducts, freezes with and without TTLs,
 * consumes, unfreezes, and gateway calls with an Idempotency-Key through the mock upstream.
 * Clients follow the contract: they retry with the same ids only after a connection error
 * or a 503 outcome_unknown (and, once an attempt was uncertain, after any 503 until a final
 * answer), and take any other answer as final: a 5xx other than outcome_unknown says
 * nothing was applied.
 *
 * 1. A master is killed and started again on its port from its append-only file. Redis
 *    lost nothing, so every acknowledged operation must be in PostgreSQL exactly once.
 * 2. Another master is killed and started again EMPTY (its append-only file deleted; it
 *    keeps its cluster config and slots). Its run_id is new and it has no recovery
 *    baseline: the generation guard recovers its customers from PostgreSQL, and what it
 *    held for the customers of the other masters (their bindings and Bloom filters, active
 *    and dirty marks, the ledger queue's sweep schedule: the queue lives on that master
 *    here). What it loses for good is what no worker had copied yet: acknowledged
 *    operations of its own customers whose entries were not in PostgreSQL when it died,
 *    and gateway calls whose holds it held, which are then never billed
 *    (docs/OPERATIONS.md): the test reads PostgreSQL during the outage, and only the
 *    operations and calls missing from it then may be missing at the end.
 *
 * After each variant, with the outboxes drained and TTLs settled: the master came back
 * with its data or empty, as meant (whether it still holds its previous generation's
 * recovery marker), and the guard verified its new generation (its marker); every acknowledged operation is in the ledger with its amount and no
 * operation or gateway call is there twice; nothing of an operation answered a 5xx other
 * than outcome_unknown is in the ledger or in Redis's records, and no gateway call so
 * answered is billed; requests answered while the master was down got 503s, and none sent then got
 * a 2xx before it was back; every client's customer was served again after it; Redis
 * balances equal the ledger's fold, none below zero; reconcile finds no drift and no
 * anomaly. At the end, every acknowledged operation of both variants answers its replay
 * with its original answer (by then most are archived from Redis: REDIS_RETENTION_SECONDS
 * is 3), and every gateway call's Idempotency-Key is refused as reused, naming its call,
 * with no call billed twice. Customers left idle with a TTL freeze across the empty
 * restart (one whose active mark and expiry job were on the emptied master) have their
 * freeze released by the TTL without any request of theirs.
 *
 * The summary line printed at the end counts, per variant, the operations acknowledged,
 * the 503s during the outage, how long after the restart money was served again, and the
 * operations the empty restart lost for good.
 */
import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { Redis } from 'ioredis';
import { sql } from 'slonik';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdminQueries } from '../../src/admin/queries.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { nodeRecoveredMarkerKey } from '../../src/redis/generation.js';
import { activeKeyOf, customerKeys } from '../../src/redis/keys.js';
import { keySlot, tagIn } from '../../src/redis/slots.js';
import { createRuntime, type Runtime } from '../../src/runtime.js';
import { ledgerQueueName } from '../../src/ledger/expiry.js';
import { modelBody, OPENAI_MODEL } from '../gateway/support.js';
import { testConfig, type Json } from '../helpers.js';
import { ownCluster, type OwnCluster, type OwnClusterNode } from '../support/own-cluster.js';
import { crashServiceEnv, random, ServiceProcess, sleep } from './processes.js';

/** Billing clients per master, each on a customer of its own whose keys live on that master. */
const billing_clients_per_master = 3;
const gateway_clients = 2;
const load_ms = 8_000;
const kill_at_ms = 1_500;
/**
 * Longer than a money operation waits for the generation guard (2 s) before its 503, so
 * that requests sent while the master is down get their 503 before it is back; shorter
 * than the cluster's node timeout, so that the other masters keep serving their slots.
 */
const outage_ms = 2_600;
const node_timeout_ms = 5_000;
/** After a kill, before reading what PostgreSQL holds: a worker's insert in flight lands. */
const settle_ms = 300;
/** How long a client keeps retrying one request after the load stopped. */
const retry_window_ms = 15_000;
const retry_pause_ms = 50;
/** Longer than the service's own Redis command timeout (5 s), which answers 503. */
const request_timeout_ms = 8_000;
const start_timeout_ms = 30_000;
/** TTL of the idle customers' freezes: due after the emptied master is back and recovered. */
const idle_ttl_seconds = 5;
const retention_seconds = 3;

let cluster: OwnCluster;
let mock: MockUpstream;
let rt: Runtime;
let projectId: string;
let projectKey: string;
const webs: ServiceProcess[] = [];
const workers: ServiceProcess[] = [];
/** The master killed and restarted from its append-only file, and the one restarted empty. */
let kept: OwnClusterNode;
let emptied: OwnClusterNode;

type EntryType = 'DEPOSIT' | 'DEDUCT' | 'FREEZE' | 'CONSUME' | 'UNFREEZE';

interface Ack {
  type: EntryType;
  customerId: string;
  /** Idempotency key for deposits, transaction id otherwise. */
  id: string;
  path: string;
  body: Record<string, unknown>;
  /** The answer, which a replay must repeat. */
  answer: Record<string, unknown>;
  amount: number;
  /**
   * When the attempt that got this answer was sent. An answer sent before the emptied
   * master was started again was applied before it died (nothing applies while it is
   * down); the answer itself may reach the client much later on a loaded machine.
   */
  sentAt: number;
}

interface GatewayAck {
  customerId: string;
  key: string;
  transactionId: string;
  /** From the answer's billing header; null when a retry learnt of the call from a 409. */
  cost: number | null;
  /** When its first attempt was sent: a call held before the emptied master died may be lost with it. */
  firstSentAt: number;
}

/** What one variant's clients saw. */
interface Run {
  acks: Ack[];
  gatewayAcks: GatewayAck[];
  /** `TYPE:id` of requests that never got a final answer after a connection error or an outcome-unknown 503. */
  uncertain: Set<string>;
  /** `TYPE:id` -> customer of requests finally answered a 5xx other than outcome_unknown, with no uncertain attempt before. */
  refused: Map<string, string>;
  /** Final answers that were not expected, with the freeze a consume or unfreeze depended on. */
  failures: { what: string; dependsOn: string | null }[];
  /** [sent, answered, status (0: no answer), customer] of every attempt. */
  attempts: [number, number, number, string][];
  replaysAfterUncertainty: number;
}

const newRun = (): Run => ({ acks: [], gatewayAcks: [], uncertain: new Set(), refused: new Map(), failures: [], attempts: [], replaysAfterUncertainty: 0 });

/** Every acknowledged operation of both variants, for the replays at the end. */
const allAcks: Ack[] = [];
const allGatewayAcks: GatewayAck[] = [];
/** Operations the emptied master lost for good (acknowledged, not yet in PostgreSQL when it died). */
const lostForGood = new Set<string>();
const summaries: Record<string, unknown>[] = [];

const billingCustomers: string[] = [];
const gatewayCustomers: string[] = [];
/** Idle across the empty restart, each with a TTL freeze; `why` says where its keys and active mark live. */
const idleCustomers: { id: string; why: string }[] = [];

function nodeOf(key: string): OwnClusterNode {
  return cluster.nodeOf(keySlot(key));
}

/** A customer id whose keys live on `node` (and, when given, whose active mark lives on `markOn`). */
function customerOn(node: OwnClusterNode, name: string, markOn?: OwnClusterNode): string {
  const prefix = rt.config.REDIS_PREFIX;
  for (;;) {
    const id = `${name}-${randomBytes(3).toString('hex')}`;
    const k = customerKeys(prefix, projectId, id);
    if (nodeOf(k.meta) === node && (markOn === undefined || nodeOf(activeKeyOf(prefix, k.base)) === markOn)) return id;
  }
}

beforeAll(async () => {
  cluster = await ownCluster(3, { persist: 'aof', nodeTimeoutMs: node_timeout_ms });
  // The processes are given the first node; the kills hit the other two.
  [, kept, emptied] = cluster.nodes;
  mock = await startMockUpstream({ requireKey: 'sk-upstream-cluster-crash', latencyMs: 20 });

  // The ledger queue (expiry jobs, the sweep schedule) lives on the master restarted empty.
  let queuePrefix: string;
  do queuePrefix = `{cq${randomBytes(3).toString('hex')}}`;
  while (cluster.nodeOf(keySlot(`${queuePrefix}:${ledgerQueueName}:meta`)) !== emptied);
  const masterKey = randomBytes(32).toString('hex');
  const config = testConfig({
    REDIS_URL: cluster.url,
    QUEUE_PREFIX: queuePrefix,
    SVC_MASTER_KEY: masterKey,
    REDIS_RETENTION_SECONDS: retention_seconds,
    SWEEP_INTERVAL_MS: 500,
  });
  rt = await createRuntime(config);
  const admin = createAdminQueries(rt.db);
  const org = await admin.createOrganization('cluster crash');
  projectId = (await admin.createProject(org.id, 'cluster crash', 'B')).id;
  projectKey = (await rt.keyQueries.insertKey({ organizationId: org.id, projectId, type: 'project' })).secret;
  const adminKey = (await rt.keyQueries.insertKey({ organizationId: org.id, projectId: null, type: 'admin' })).secret;

  const env = crashServiceEnv(
    { redisUrl: config.REDIS_URL, redisPrefix: config.REDIS_PREFIX, queuePrefix: config.QUEUE_PREFIX, databaseUrl: process.env.TEST_DATABASE_URL, masterKey },
    { REDIS_CLUSTER: '1', REDIS_RETENTION_SECONDS: String(retention_seconds), UPSTREAM_ALLOW_PRIVATE: '1' },
  );
  for (let i = 0; i < 2; i++) {
    webs.push(new ServiceProcess(`web${i}`, 'src/web.ts', env));
    workers.push(new ServiceProcess(`worker${i}`, 'workers/main.ts', { ...env, LOG_LEVEL: 'warn' }));
  }
  for (const p of [...webs, ...workers]) p.start();
  await Promise.all(webs.map((w) => w.listening(start_timeout_ms)));

  const put = await fetch(`http://127.0.0.1:${webs[0].port}/v1/admin/projects/${projectId}/models/${OPENAI_MODEL}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(modelBody(mock, 'sk-upstream-cluster-crash', 'openai')),
  });
  expect(put.status, await put.text()).toBeLessThan(300);

  cluster.nodes.forEach((node, n) => {
    for (let i = 0; i < billing_clients_per_master; i++) billingCustomers.push(customerOn(node, `b${n}${i}`));
  });
  // Gateway customers live on masters that are not emptied: a call whose hold the emptied
  // master lost mid-call cannot be settled (its record is gone), which is the loss above.
  for (let i = 0; i < gateway_clients; i++) gatewayCustomers.push(customerOn(cluster.nodes[i % 2], `gw${i}`));
  const [first] = cluster.nodes;
  idleCustomers.push(
    { id: customerOn(first, 'idle-mark-lost', emptied), why: 'keys on a kept master, active mark on the emptied one' },
    { id: customerOn(kept, 'idle-mark-kept', kept), why: 'keys and active mark on a kept master' },
    { id: customerOn(emptied, 'idle-rebuilt'), why: 'keys on the emptied master' },
  );
}, start_timeout_ms * 2);

afterAll(async () => {
  ServiceProcess.killAll();
  await rt?.close();
  await mock?.close();
  await cluster?.remove();
});

/** What a client does with an answer: retry (the outcome is unknown), or take it as final. */
function retryable(status: number, body: Json, uncertainBefore: boolean): boolean {
  if (status === 503 && body?.error?.code === 'outcome_unknown') return true;
  // An earlier attempt's fate is still open: only a final answer of the same id tells it.
  return uncertainBefore && status === 503;
}

/** A running web process for attempt `n`, alternating between the two. */
async function webPort(n: number): Promise<number> {
  for (;;) {
    const port = webs[n % webs.length].port ?? webs[(n + 1) % webs.length].port;
    if (port !== null) return port;
    await sleep(retry_pause_ms);
  }
}

/**
 * POSTs one operation and retries it with the same body after a connection error or a
 * 503 outcome_unknown. Null when no final answer came before `giveUpAt`, or for a final 5xx
 * (then in `run.refused`).
 */
async function send(run: Run, customerId: string, key: string, path: string, body: Record<string, unknown>, giveUpAt: number, headers: Record<string, string> = {}): Promise<{ status: number; body: Json; headers: Headers; sentAt: number } | null> {
  let uncertainBefore = false;
  for (let attempt = 0; ; attempt++) {
    const port = await webPort(attempt);
    const sent = Date.now();
    let answer: { status: number; body: Json; headers: Headers; sentAt: number } | null = null;
    try {
      const res = await fetch(`http://127.0.0.1:${port}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${projectKey}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(request_timeout_ms),
      });
      answer = { status: res.status, body: await res.json(), headers: res.headers, sentAt: sent };
      run.attempts.push([sent, Date.now(), res.status, customerId]);
    } catch {
      run.attempts.push([sent, Date.now(), 0, customerId]);
      uncertainBefore = true;
    }
    if (answer && retryable(answer.status, answer.body, uncertainBefore)) {
      uncertainBefore = true;
      answer = null;
    }
    if (answer !== null) {
      if (answer.status >= 500) {
        run.refused.set(key, customerId);
        return null;
      }
      if (answer.status === 200 && answer.body.is_idempotent_replay === true) {
        if (uncertainBefore) run.replaysAfterUncertainty++;
        else run.failures.push({ what: `${key}: a replay on the first answer`, dependsOn: null });
      }
      return answer;
    }
    if (Date.now() > giveUpAt) break;
    await sleep(retry_pause_ms);
  }
  run.uncertain.add(key);
  return null;
}

const answered_amount: Record<EntryType, string> = {
  DEPOSIT: 'added_amount', DEDUCT: 'deducted_amount', FREEZE: 'frozen_amount', CONSUME: 'consumed_amount', UNFREEZE: 'unfrozen_amount',
};
const op_path: Record<EntryType, string> = {
  DEPOSIT: '/v1/customers/deposit', DEDUCT: '/v1/billing/deduct', FREEZE: '/v1/billing/freeze', CONSUME: '/v1/billing/consume', UNFREEZE: '/v1/billing/unfreeze',
};
/** Codes a consume or unfreeze may get when a TTL settled its freeze first. */
const settled_by_ttl = new Set(['freeze_records_already_consumed', 'no_consumable_freeze_records', 'no_unfreezable_records']);

/** One money operation: recorded as acknowledged, or as a failure unless its refusal is one the contract allows. */
async function op(run: Run, customerId: string, type: EntryType, body: Record<string, unknown>, giveUpAt: number, o: { ttl?: boolean; dependsOn?: string } = {}): Promise<Record<string, Json> | null> {
  const id = String(type === 'DEPOSIT' ? body.idempotency_key : body.transaction_id);
  const key = `${type}:${id}`;
  const res = await send(run, customerId, key, op_path[type], body, giveUpAt);
  if (res === null) return null;
  if (res.status === 200) {
    const ack: Ack = { type, customerId, id, path: op_path[type], body, answer: res.body, amount: res.body[answered_amount[type]], sentAt: res.sentAt };
    run.acks.push(ack);
    allAcks.push(ack);
    return res.body;
  }
  const code = res.body?.error?.code;
  const expected = (res.status === 400 && code === 'insufficient_balance') || (o.ttl && res.status === 400 && settled_by_ttl.has(code));
  if (!expected) run.failures.push({ what: `${key}: ${res.status} ${JSON.stringify(res.body)}`, dependsOn: o.dependsOn ?? null });
  return null;
}

async function billingClient(run: Run, variant: string, i: number, stopAt: number): Promise<void> {
  const customerId = billingCustomers[i];
  const giveUpAt = stopAt + retry_window_ms;
  const pick = random(i * 31 + variant.length);
  let seq = 0;
  const next = () => `${customerId}-${variant}-${seq++}`;
  await op(run, customerId, 'DEPOSIT', { customer_id: customerId, amount: 100_000, idempotency_key: next() }, giveUpAt);
  while (Date.now() < stopAt) {
    const roll = pick(100);
    const transaction_id = next();
    if (roll <= 8) {
      await op(run, customerId, 'DEPOSIT', { customer_id: customerId, amount: 20_000, idempotency_key: transaction_id }, giveUpAt);
    } else if (roll <= 38) {
      await op(run, customerId, 'DEDUCT', { customer_id: customerId, transaction_id, amount: pick(500) }, giveUpAt);
    } else {
      // A third without TTL, a third released by its TTL, a third consumed by it.
      const ttlKind = roll % 3;
      const ttl = ttlKind === 0 ? {} : ttlKind === 1 ? { release_after_seconds: 1 } : { consume_after_seconds: 1 };
      const frozen = await op(run, customerId, 'FREEZE', { customer_id: customerId, transaction_id, amount: pick(500), ...ttl }, giveUpAt);
      if (frozen === null) continue;
      const hasTtl = ttlKind !== 0;
      if (hasTtl && roll % 2 === 0) continue;
      const dependsOn = `FREEZE:${transaction_id}`;
      if (roll <= 75) {
        const amount = roll % 2 === 0 ? { amount: pick(frozen.frozen_amount) } : {};
        await op(run, customerId, 'CONSUME', { transaction_id, ...amount }, giveUpAt, { ttl: hasTtl, dependsOn });
      } else {
        await op(run, customerId, 'UNFREEZE', { transaction_id }, giveUpAt, { ttl: hasTtl, dependsOn });
      }
    }
  }
}

/**
 * Gateway calls (not streamed) with an Idempotency-Key. A retry after a failure gets 409
 * `idempotency_key_reused` naming the call when an earlier attempt may have billed, or is
 * relayed again when nothing was billed.
 */
async function gatewayClient(run: Run, variant: string, i: number, stopAt: number): Promise<void> {
  const customerId = gatewayCustomers[i];
  const giveUpAt = stopAt + retry_window_ms;
  await op(run, customerId, 'DEPOSIT', { customer_id: customerId, amount: 50_000_000, idempotency_key: `${customerId}-${variant}-fund` }, giveUpAt);
  for (let n = 0; Date.now() < stopAt; n++) {
    const key = `${customerId}-${variant}-c${n}`;
    const firstSentAt = Date.now();
    const res = await send(run, customerId, `GATEWAY:${key}`, '/v1/chat/completions', { model: OPENAI_MODEL, max_tokens: 16, messages: [{ role: 'user', content: `call ${n}` }] }, giveUpAt, {
      'x-service-customer': customerId,
      'idempotency-key': key,
    });
    if (res === null) continue;
    if (res.status === 200) {
      const ack = { customerId, key, transactionId: String(res.headers.get('x-service-transaction-id')), cost: Number(res.headers.get('x-service-cost-credits')), firstSentAt };
      run.gatewayAcks.push(ack);
      allGatewayAcks.push(ack);
    } else if (res.status === 409 && res.body?.error?.code === 'idempotency_key_reused') {
      const ack = { customerId, key, transactionId: String(res.body.error.transaction_id), cost: null, firstSentAt };
      run.gatewayAcks.push(ack);
      allGatewayAcks.push(ack);
    } else {
      run.failures.push({ what: `gateway ${key}: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`, dependsOn: null });
    }
  }
}

const ledgerRow = z.object({
  customer_id: z.string(),
  type: z.enum(['DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY']),
  transaction_id: z.string(),
  amount: z.number(),
  returned_amount: z.number().nullable(),
  reason: z.string().nullable(),
  ik: z.string().nullable(),
  gk: z.string().nullable(),
});

function ledgerRows() {
  return rt.db.any(sql.type(ledgerRow)`
    SELECT customer_id, type, transaction_id, amount, returned_amount, reason, extra->>'ik' AS ik, extra->>'gk' AS gk
    FROM ledger_entries WHERE project_id = ${projectId}`);
}

/**
 * What an entry is the record of: `TYPE:id`, as acknowledged operations are named. A
 * consume or release by a freeze's TTL is named apart (`:ttl`): it is not the client's
 * consume or unfreeze of that freeze. After an empty restart that lost a client's consume
 * (acknowledged, not yet in PostgreSQL), the freeze comes back frozen and its TTL may
 * settle it: that entry must not pass for the lost one.
 */
const keyOfRow = (r: z.infer<typeof ledgerRow>) => `${r.type}:${r.type === 'DEPOSIT' ? r.ik : r.transaction_id}${r.reason === null ? '' : ':ttl'}`;

/** The messages of a process's last error lines, for failure messages. */
function errorsOf(p: ServiceProcess): string {
  return p.stderr.split('\n').slice(-8).map((line) => /"msg":"([^"]*)"/.exec(line)?.[1] ?? line.slice(0, 200)).join('\n  ');
}

/** Polls until `check` holds, or throws with `what` after `timeoutMs`. */
async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}\n${[...webs, ...workers].map((p) => `${p.name}:\n  ${errorsOf(p)}`).join('\n')}`);
    await sleep(retry_pause_ms);
  }
}

/**
 * Whether `node` holds the recovery marker of generation `runId`: the guard sets it once
 * the generation is verified (recovered). After a restart, a master back from its
 * append-only file still has its previous generation's, one back empty has not.
 */
async function hasMarker(node: OwnClusterNode, runId: string): Promise<boolean> {
  const slots = new Set<number>();
  for (let s = node.slots[0]; s <= node.slots[1]; s++) slots.add(s);
  const conn = new Redis(node.port, '127.0.0.1');
  try {
    return (await conn.exists(nodeRecoveredMarkerKey(rt.config.REDIS_PREFIX, tagIn(slots), runId))) === 1;
  } finally {
    conn.disconnect();
  }
}

async function runIdOf(node: OwnClusterNode): Promise<string> {
  const conn = new Redis(node.port, '127.0.0.1');
  try {
    return /run_id:([0-9a-f]+)/.exec(await conn.info('server'))![1];
  } finally {
    conn.disconnect();
  }
}

const everyCustomer = () => [...billingCustomers, ...gatewayCustomers, ...idleCustomers.map((c) => c.id)];

/**
 * Runs the load with one master killed at kill_at_ms and started again after outage_ms
 * (`wipe`: without its append-only file), then the checks of one variant.
 */
async function killUnderLoad(variant: string, node: OwnClusterNode, wipe: boolean): Promise<void> {
  const run = newRun();
  const startedAt = Date.now();
  const stopAt = startedAt + load_ms;
  let killedAt = 0;
  /** When the node was started again: until then nothing could be served. */
  let revivedAt = 0;
  /** Ledger entries of the node's customers that PostgreSQL held while it was down. */
  let inPostgresAtKill = new Set<string>();
  const runIdBefore = await runIdOf(node);
  let markerKept: boolean | null = null;
  const chaos = async () => {
    await sleep(kill_at_ms);
    killedAt = Date.now();
    await node.kill();
    await sleep(settle_ms);
    inPostgresAtKill = new Set((await ledgerRows()).map(keyOfRow));
    await sleep(Math.max(0, killedAt + outage_ms - Date.now()));
    revivedAt = Date.now();
    await node.start({ wipe });
    markerKept = await hasMarker(node, runIdBefore);
  };
  await Promise.all([
    chaos(),
    ...billingCustomers.map((_, i) => billingClient(run, variant, i, stopAt)),
    ...gatewayCustomers.map((_, i) => gatewayClient(run, variant, i, stopAt)),
  ]);

  // What the emptied master may have lost: operations of its customers acknowledged by an
  // attempt sent before it was started again (so applied before it died: nothing can be
  // applied on it while it is down) that PostgreSQL did not hold while it was down. Lost
  // for good are those of them still missing at the end. (By when the answer arrived, an
  // operation applied just before the kill can look later than the restart: on a loaded
  // machine an answer took seconds to reach the client.)
  const onNode = (customerId: string) => nodeOf(customerKeys(rt.config.REDIS_PREFIX, projectId, customerId).meta) === node;
  const mayBeLost = wipe ? run.acks.filter((a) => a.sentAt < revivedAt && onNode(a.customerId) && !inPostgresAtKill.has(`${a.type}:${a.id}`)) : [];
  // Gateway calls the same way, by their first attempt: one settled before the kill whose
  // GATEWAY entry no worker had copied, or one whose hold (kept in Redis only) died with the
  // master before its settlement: that call is never billed, and a retry of its key that
  // learnt of it from a 409 acknowledged a call that the empty restart took back.
  const mayBeLostCalls = wipe ? run.gatewayAcks.filter((g) => g.firstSentAt < revivedAt && onNode(g.customerId) && !inPostgresAtKill.has(`GATEWAY:${g.transactionId}`)) : [];

  // Drained and settled: TTL freezes (seconds; gateway holds have an hour), outboxes.
  await until('TTL freezes were not settled', 20_000, async () => {
    for (const c of everyCustomer()) if ((await rt.redis.zcount(customerKeys(rt.config.REDIS_PREFIX, projectId, c).ttl, '-inf', Date.now() + 60_000)) > 0) return false;
    return true;
  });
  await until('outboxes were not drained', 20_000, async () => {
    for (const c of everyCustomer()) if ((await rt.redis.xlen(customerKeys(rt.config.REDIS_PREFIX, projectId, c).outbox)) > 0) return false;
    return true;
  });

  const rows = await ledgerRows();
  const stored = new Map<string, { count: number; amount: number }>();
  const endings = new Map<string, number>();
  for (const r of rows) {
    const key = keyOfRow(r);
    stored.set(key, { count: (stored.get(key)?.count ?? 0) + 1, amount: r.amount });
    if (r.type === 'CONSUME' || r.type === 'UNFREEZE') endings.set(r.transaction_id, (endings.get(r.transaction_id) ?? 0) + 1);
  }
  const lost = [
    ...mayBeLost.filter((a) => !stored.has(`${a.type}:${a.id}`)).map((a) => `${a.type}:${a.id}`),
    ...mayBeLostCalls.filter((g) => !stored.has(`GATEWAY:${g.transactionId}`)).map((g) => `GATEWAY:${g.transactionId}`),
  ];
  for (const k of lost) lostForGood.add(k);
  const gatewayByTx = new Map(rows.filter((r) => r.type === 'GATEWAY').map((r) => [r.transaction_id, r]));
  const gatewayByKey = new Map<string, number>();
  for (const r of rows) if (r.type === 'GATEWAY' && r.gk !== null) gatewayByKey.set(`${r.customer_id}|${r.gk}`, (gatewayByKey.get(`${r.customer_id}|${r.gk}`) ?? 0) + 1);

  const missing = allAcks.filter((a) => !lostForGood.has(`${a.type}:${a.id}`) && stored.get(`${a.type}:${a.id}`)?.amount !== a.amount).map((a) => `${a.type}:${a.id} (${a.amount})`);
  missing.push(...allGatewayAcks
    .filter((g) => !lostForGood.has(`GATEWAY:${g.transactionId}`))
    .filter((g) => !gatewayByTx.has(g.transactionId) || (g.cost !== null && gatewayByTx.get(g.transactionId)!.amount !== g.cost))
    .map((g) => `GATEWAY:${g.transactionId} (${g.cost})`));
  const appliedTwice = [
    ...[...stored].filter(([, v]) => v.count !== 1).map(([k, v]) => `${k} x${v.count}`),
    ...[...endings].filter(([, n]) => n > 1).map(([tx, n]) => `freeze ${tx} ended ${n} times`),
    ...[...gatewayByKey].filter(([, n]) => n > 1).map(([k, n]) => `gateway key ${k} billed ${n} times`),
  ];
  // A 5xx other than outcome_unknown said nothing was applied: nothing of it is in the
  // ledger, in Redis's records of its id, or billed (a gateway call, by its key).
  const appliedAfterRefusal: string[] = [];
  for (const [k, customerId] of run.refused) {
    const [type, id] = k.split(/:(.*)/s);
    if (type === 'GATEWAY') {
      if (gatewayByKey.has(`${customerId}|${id}`)) appliedAfterRefusal.push(`${k} (billed)`);
      continue;
    }
    if (stored.has(k)) appliedAfterRefusal.push(k);
    const keys = customerKeys(rt.config.REDIS_PREFIX, projectId, customerId);
    const found = type === 'DEPOSIT' ? await rt.redis.hexists(keys.dep, id) : type === 'DEDUCT' || type === 'FREEZE' ? await rt.redis.hexists(keys.tx, id) : 0;
    if (found === 1) appliedAfterRefusal.push(`${k} (in Redis)`);
  }
  // A consume or unfreeze of a freeze the emptied master lost answers that there is no such freeze.
  const failures = run.failures.filter((f) => f.dependsOn === null || !lostForGood.has(f.dependsOn)).map((f) => f.what);

  // The outage: nothing sent while the master was down (once its connections closed) was
  // answered 2xx before it was back, and requests got 503s meanwhile.
  const okDuringOutage = run.attempts.filter(([sent, answered, status]) => sent >= killedAt + 100 && answered < revivedAt && status >= 200 && status < 300).length;
  const unavailableDuringOutage = run.attempts.filter(([, answered, status]) => answered >= killedAt && answered < revivedAt && status === 503).length;
  // The load went on: every client's customer, those of the restarted master included, was answered again.
  const servedAfter = new Set(run.attempts.filter(([, answered, status]) => answered > revivedAt && status !== 0 && status !== 503).map(([, , , c]) => c));
  // How long after the master was started again money was served: its recovery included.
  const servedAgainMs = Math.min(...run.attempts.filter(([sent, , status]) => sent >= revivedAt && status === 200).map(([, answered]) => answered)) - revivedAt;

  // Redis balances are the ledger's fold; none below zero.
  const balanceDiff: string[] = [];
  const negative: string[] = [];
  for (const customerId of everyCustomer()) {
    const own = rows.filter((r) => r.customer_id === customerId);
    const sum = (f: (r: (typeof own)[number]) => number) => own.reduce((s, r) => s + f(r), 0);
    const total = sum((r) => (r.type === 'DEPOSIT' ? r.amount : 0));
    const used = sum((r) => (r.type === 'DEDUCT' || r.type === 'GATEWAY' || r.type === 'CONSUME' ? r.amount : 0));
    const frozen = sum((r) => (r.type === 'FREEZE' ? r.amount : r.type === 'UNFREEZE' ? -r.amount : r.type === 'CONSUME' ? -(r.amount + (r.returned_amount ?? 0)) : 0));
    if (total === 0) continue;
    const res = await fetch(`http://127.0.0.1:${await webPort(0)}/v1/customers/${customerId}/balance`, { headers: { authorization: `Bearer ${projectKey}` } });
    const b = (await res.json()) as { total: number; used: number; frozen: number; available: number };
    if (b.total !== total || b.used !== used || b.frozen !== frozen) balanceDiff.push(`${customerId}: redis ${JSON.stringify(b)} ledger ${JSON.stringify({ total, used, frozen })}`);
    if (b.available < 0 || b.total - b.used - b.frozen < 0) negative.push(`${customerId}: ${JSON.stringify(b)}`);
  }
  const report = await reconcile(rt, { projectId, repair: false });

  const summary = {
    variant,
    acknowledged: run.acks.length,
    gatewayCalls: run.gatewayAcks.length,
    attempts: run.attempts.length,
    unavailableDuringOutage,
    replaysAfterUncertainty: run.replaysAfterUncertainty,
    uncertain: run.uncertain.size,
    refused: run.refused.size,
    appliedAfterRefusal: appliedAfterRefusal.length,
    lostForGood: lost.length,
    outageMs: revivedAt - killedAt,
    servedAgainMs,
  };
  summaries.push(summary);
  // The master came back with its data from its append-only file, or empty; the guard
  // verified (and recovered) its new generation.
  expect(markerKept).toBe(!wipe);
  expect(await hasMarker(node, await runIdOf(node))).toBe(true);
  expect(missing).toEqual([]);
  expect(appliedTwice).toEqual([]);
  expect(appliedAfterRefusal).toEqual([]);
  expect(failures).toEqual([]);
  expect([...run.uncertain]).toEqual([]);
  expect({ okDuringOutage, someUnavailable: unavailableDuringOutage > 0 }).toEqual({ okDuringOutage: 0, someUnavailable: true });
  expect([...billingCustomers, ...gatewayCustomers].filter((c) => !servedAfter.has(c))).toEqual([]);
  expect(balanceDiff).toEqual([]);
  expect(negative).toEqual([]);
  expect(report).toMatchObject({ customers_with_drift: 0, drift: [], errors: [], anomalies: [] });
  // Real load of each kind, on every master.
  expect(run.acks.length).toBeGreaterThan(billingCustomers.length * 5);
  expect(run.gatewayAcks.length).toBeGreaterThan(gateway_clients);
  expect(rows.some((r) => r.reason !== null)).toBe(true);
  expect([...webs, ...workers].map((p) => p.unhandledRedisErrors)).toEqual([0, 0, 0, 0]);
}

/**
 * The empty restart (a master that lost its append-only file: outside what production
 * promises, which is `appendfsync always`). It runs by default; CRASH_EMPTY_MASTER=0
 * skips it. It failed before in ways the lost-for-good allowance did not explain, each
 * now fixed or told apart: a freeze's TTL settling a freeze whose client consume or
 * unfreeze was lost passed for that operation (keyOfRow), an operation applied just
 * before the kill whose answer reached this loaded test after the restart was not
 * counted as possibly lost (sentAt), a gateway key whose free failed while its bucket's
 * master was down stayed claimed by a call that billed nothing (src/gateway/billing.ts),
 * and a binding archived by the trim during the final reconcile read as drift
 * (src/reconcile/compare.ts).
 */
const emptyVariant = process.env.CRASH_EMPTY_MASTER !== '0';

describe('kill -9 of a Redis Cluster master under load', () => {
  it('restarted from its append-only file: every acknowledged operation is kept exactly once', async () => {
    await killUnderLoad('aof', kept, false);
  }, 60_000);

  it.runIf(emptyVariant)('restarted empty: its customers and what it held for the others come back from PostgreSQL', async () => {
    // Idle customers with a TTL freeze due after the master is back: nothing but the
    // expiry job, the sweeper or a recovery settles it.
    const run = newRun();
    for (const c of idleCustomers) {
      await op(run, c.id, 'DEPOSIT', { customer_id: c.id, amount: 1_000, idempotency_key: `${c.id}-fund` }, Date.now() + 10_000);
      await op(run, c.id, 'FREEZE', { customer_id: c.id, transaction_id: `${c.id}-ttl`, amount: 400, release_after_seconds: idle_ttl_seconds }, Date.now() + 10_000);
    }
    expect(run.acks.map((a) => a.type)).toEqual(idleCustomers.flatMap(() => ['DEPOSIT', 'FREEZE']));
    await until('the idle customers were not persisted', 5_000, async () => {
      const keys = new Set((await ledgerRows()).map(keyOfRow));
      return run.acks.every((a) => keys.has(`${a.type}:${a.id}`));
    });

    await killUnderLoad('empty', emptied, true);

    const released = (await ledgerRows()).filter((r) => r.type === 'UNFREEZE' && r.reason !== null).map((r) => r.transaction_id);
    expect(idleCustomers.filter((c) => !released.includes(`${c.id}-ttl`)).map((c) => c.why)).toEqual([]);
  }, 60_000);

  it('answers every acknowledged operation of the variants that ran as a replay, and every gateway key as reused', async () => {
    const replays = allAcks.filter((a) => !lostForGood.has(`${a.type}:${a.id}`));
    // A call the empty restart took back billed nothing: its key may be free again (its
    // claim lost with the hold) or still name it; it is not checked.
    const calls = allGatewayAcks.filter((g) => !lostForGood.has(`GATEWAY:${g.transactionId}`));
    const wrong: string[] = [];
    const check = async (a: Ack, n: number) => {
      const res = await fetch(`http://127.0.0.1:${await webPort(n)}${a.path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${projectKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(a.body),
      });
      const body = await res.json();
      if (res.status !== 200 || !isDeepStrictEqual(body, { ...a.answer, is_idempotent_replay: true })) {
        wrong.push(`${a.type}:${a.id}: ${res.status} ${JSON.stringify(body)} (first answer ${JSON.stringify(a.answer)})`);
      }
    };
    const checkKey = async (g: GatewayAck, n: number) => {
      const res = await fetch(`http://127.0.0.1:${await webPort(n)}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${projectKey}`, 'content-type': 'application/json', 'x-service-customer': g.customerId, 'idempotency-key': g.key },
        body: JSON.stringify({ model: OPENAI_MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'again' }] }),
      });
      const body = await res.json();
      if (res.status !== 409 || body?.error?.code !== 'idempotency_key_reused' || body.error.transaction_id !== g.transactionId) {
        wrong.push(`gateway key ${g.key}: ${res.status} ${JSON.stringify(body).slice(0, 300)} (call ${g.transactionId})`);
      }
    };
    const jobs: (() => Promise<void>)[] = [...replays.map((a, n) => () => check(a, n)), ...calls.map((g, n) => () => checkKey(g, n))];
    await Promise.all(Array.from({ length: 8 }, async () => {
      for (let job = jobs.shift(); job; job = jobs.shift()) await job();
    }));
    const gatewayEntries = (await ledgerRows()).filter((r) => r.type === 'GATEWAY').length;
    console.log(`cluster master kill: ${JSON.stringify({ summaries, replays: replays.length, gatewayKeys: calls.length, gatewayEntries })}`);
    expect(wrong).toEqual([]);
    // A reused key relays nothing and bills nothing.
    expect(gatewayEntries).toBe(new Set(calls.map((g) => g.transactionId)).size);
    expect(replays.length).toBeGreaterThan(billingCustomers.length * 10);
  }, 60_000);
});
