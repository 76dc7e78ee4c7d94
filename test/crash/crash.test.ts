/**
 * Crash test: the API and a worker run as child processes and are killed with SIGKILL
 * under load, then restarted. Clients retry a request that failed on the connection with
 * the same transaction id or idempotency key, as the contract tells them to. Afterwards
 * PostgreSQL must hold every acknowledged operation exactly once, the balances folded
 * from PostgreSQL must equal the ones Redis serves, and reconcile must find no drift.
 *
 * The persist loop drains continuously while clients write, and each worker kill waits
 * until outboxes hold entries, so a kill is likely to land mid-drain (between SPOP,
 * INSERT and XDEL); the sweeper (every 500 ms here) finds what a killed process left
 * behind, and the final checks hold wherever the kills landed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { createAdminQueries } from '../../src/admin/queries.js';
import { reconcile } from '../../src/reconcile/reconcile.js';
import { createRuntime, type Runtime } from '../../src/runtime.js';
import { testConfig } from '../helpers.js';
import { freePort, ServiceProcess, sleep } from './processes.js';

const client_loops = 4;
const ops_per_loop_max = 300;
const load_ms = 8_000;
/** How long a client keeps retrying one request after the load stopped. */
const retry_window_ms = 10_000;
const retry_pause_ms = 50;
const request_timeout_ms = 5_000;
const ready_timeout_ms = 15_000;
/** When each kill happens, in ms after the load started. */
const kills: ['worker' | 'api', number][] = [
  ['worker', 1_000],
  ['api', 2_300],
  ['worker', 3_800],
  ['worker', 5_000],
  ['api', 6_200],
];

type EntryType = 'DEPOSIT' | 'DEDUCT' | 'FREEZE' | 'CONSUME' | 'UNFREEZE';

interface Ack {
  type: EntryType;
  customerId: string;
  /** Idempotency key for deposits, transaction id otherwise. */
  id: string;
  body: Record<string, any>;
}

let rt: Runtime;
let api: ServiceProcess;
let worker: ServiceProcess;
let url: string;
let projectId: string;
let projectKey: string;
const acks: Ack[] = [];
/** Requests still failing on the connection when the client gave up: applied or not. */
const uncertain = new Set<string>();
const unexpected: string[] = [];
let connectionFailures = 0;

beforeAll(async () => {
  const config = testConfig();
  rt = await createRuntime(config);
  const admin = createAdminQueries(rt.db);
  const org = await admin.createOrganization('crash test');
  const project = await admin.createProject(org.id, 'crash project', 'B');
  projectId = project.id;
  projectKey = (await rt.keyQueries.insertKey({ organizationId: org.id, projectId, type: 'project' })).secret;

  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  const env = {
    ...process.env,
    REDIS_PREFIX: config.REDIS_PREFIX,
    QUEUE_PREFIX: config.QUEUE_PREFIX,
    DATABASE_URL: process.env.TEST_DATABASE_URL,
    HOST: '127.0.0.1',
    PORT: String(port),
    LOG_LEVEL: 'warn',
    SWEEP_INTERVAL_MS: '500',
    PERSIST_IDLE_MS: '5',
  };
  api = new ServiceProcess('api', 'src/web.ts', env);
  worker = new ServiceProcess('worker', 'workers/main.ts', env);
  api.start();
  worker.start();
  await apiReady();
});

afterAll(async () => {
  ServiceProcess.killAll();
  if (!rt) return;
  await rt.ledgerQueue.obliterate({ force: true }).catch(() => undefined);
  const keys = await rt.redis.keys(`${rt.config.REDIS_PREFIX}*`);
  if (keys.length) await rt.redis.del(...keys);
  await rt.close();
});

async function apiReady(): Promise<void> {
  const deadline = Date.now() + ready_timeout_ms;
  for (;;) {
    try {
      if ((await fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) })).ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`the API did not come up:\n${api.stderr}`);
    await sleep(retry_pause_ms);
  }
}

/**
 * POSTs until the API answers; a connection failure, a timeout, a 503 or a 429 repeats
 * the identical request. Null when the API did not answer before `giveUpAt`.
 */
async function send(path: string, body: Record<string, unknown>, giveUpAt: number): Promise<{ status: number; body: any } | null> {
  for (;;) {
    try {
      const res = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${projectKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(request_timeout_ms),
      });
      const parsed = await res.json();
      // 503 and 429 say that nothing was applied.
      if (res.status !== 503 && res.status !== 429) return { status: res.status, body: parsed };
    } catch {
      connectionFailures++;
    }
    if (Date.now() > giveUpAt) return null;
    await sleep(retry_pause_ms);
  }
}

/** A small deterministic generator, so a failing run can be read again. */
function random(seed: number): (n: number) => number {
  let s = seed;
  return (n) => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return 1 + (s % n);
  };
}

async function clientLoop(i: number, stopAt: number): Promise<void> {
  const customerId = `crash-${i}`;
  const giveUpAt = stopAt + retry_window_ms;
  const pick = random(i + 7);
  let seq = 0;
  const op = async (type: EntryType, path: string, body: Record<string, unknown>): Promise<Record<string, any> | null> => {
    const id = String(type === 'DEPOSIT' ? body.idempotency_key : body.transaction_id);
    const res = await send(path, body, giveUpAt);
    if (res === null) {
      uncertain.add(`${type}:${id}`);
      return null;
    }
    if (res.status === 200) {
      acks.push({ type, customerId, id, body: res.body });
      return res.body;
    }
    if (res.status !== 400 || res.body?.error?.code !== 'insufficient_balance') unexpected.push(`${type} ${id}: ${res.status} ${JSON.stringify(res.body)}`);
    return null;
  };
  const deposit = (amount: number) =>
    op('DEPOSIT', '/v1/customers/deposit', { customer_id: customerId, amount, idempotency_key: `${customerId}-k${seq++}` });

  await deposit(100_000);
  for (let n = 0; n < ops_per_loop_max && Date.now() < stopAt; n++) {
    const roll = pick(100);
    const transaction_id = `${customerId}-t${seq++}`;
    if (roll <= 10) {
      await deposit(20_000);
    } else if (roll <= 45) {
      await op('DEDUCT', '/v1/billing/deduct', { customer_id: customerId, transaction_id, amount: pick(500) });
    } else {
      const frozen = await op('FREEZE', '/v1/billing/freeze', { customer_id: customerId, transaction_id, amount: pick(500) });
      if (frozen === null) continue;
      if (roll <= 80) {
        // Half of the consumes name an amount, half take the whole frozen amount.
        const amount = roll % 2 === 0 ? { amount: pick(frozen.frozen_amount) } : {};
        await op('CONSUME', '/v1/billing/consume', { transaction_id, ...amount });
      } else {
        await op('UNFREEZE', '/v1/billing/unfreeze', { transaction_id });
      }
    }
  }
}

async function outboxLength(): Promise<number> {
  let total = 0;
  let cursor = '0';
  do {
    const [next, keys] = await rt.redis.scan(cursor, 'MATCH', `${rt.config.REDIS_PREFIX}c:*:outbox`, 'COUNT', 1000);
    cursor = next;
    for (const k of keys) total += await rt.redis.xlen(k);
  } while (cursor !== '0');
  return total;
}

async function chaos(startedAt: number): Promise<void> {
  for (const [which, at] of kills) {
    await sleep(Math.max(0, startedAt + at - Date.now()));
    if (which === 'worker') {
      // Kill while there is something to drain.
      const until = Date.now() + 500;
      while ((await outboxLength()) === 0 && Date.now() < until) await sleep(10);
      await worker.kill();
      worker.start();
    } else {
      await api.kill();
      api.start();
    }
  }
}

interface Sums {
  total: number;
  used: number;
  frozen: number;
}

function emptySums(): Record<string, Sums> {
  return Object.fromEntries(Array.from({ length: client_loops }, (_, i) => [`crash-${i}`, { total: 0, used: 0, frozen: 0 }]));
}

describe('crash safety', () => {
  it('keeps every acknowledged operation exactly once through kill -9 of the worker and the API', async () => {
    const startedAt = Date.now();
    const stopAt = startedAt + load_ms;
    await Promise.all([chaos(startedAt), ...Array.from({ length: client_loops }, (_, i) => clientLoop(i, stopAt))]);

    await apiReady();
    expect(worker.running).toBe(true);
    const drainDeadline = Date.now() + ready_timeout_ms;
    while ((await outboxLength()) > 0) {
      if (Date.now() > drainDeadline) throw new Error(`outboxes were not drained:\n${worker.stderr}`);
      await sleep(retry_pause_ms);
    }

    expect(unexpected).toEqual([]);
    // The API kills really cut requests off; the retries are what this test is about.
    expect(connectionFailures).toBeGreaterThan(0);
    expect(acks.length).toBeGreaterThan(client_loops * 5);

    const rows = await rt.db.any(sql.type(
      z.object({
        customer_id: z.string(),
        type: z.enum(['DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY']),
        transaction_id: z.string(),
        amount: z.number(),
        returned_amount: z.number().nullable(),
        ik: z.string().nullable(),
      }),
    )`
      SELECT customer_id, type, transaction_id, amount, returned_amount, extra->>'ik' AS ik
      FROM ledger_entries WHERE project_id = ${projectId}`);

    // Exactly once: every entry's identity appears once, and each was acknowledged (or
    // its request was still unanswered when the client gave up).
    const stored = new Map<string, { count: number; transactionId: string }>();
    for (const r of rows) {
      const key = `${r.type}:${r.type === 'DEPOSIT' ? r.ik : r.transaction_id}`;
      const seen = stored.get(key);
      stored.set(key, { count: (seen?.count ?? 0) + 1, transactionId: r.transaction_id });
    }
    const duplicates = [...stored].filter(([, v]) => v.count !== 1).map(([k]) => k);
    expect(duplicates).toEqual([]);
    const missing = acks.filter((a) => !stored.has(`${a.type}:${a.id}`)).map((a) => `${a.type}:${a.id}`);
    expect(missing).toEqual([]);
    const acknowledged = new Set(acks.map((a) => `${a.type}:${a.id}`));
    expect(acknowledged.size).toBe(acks.length);
    const unacknowledged = [...stored.keys()].filter((k) => !acknowledged.has(k) && !uncertain.has(k));
    expect(unacknowledged).toEqual([]);
    for (const a of acks.filter((x) => x.type === 'DEPOSIT')) expect(stored.get(`DEPOSIT:${a.id}`)!.transactionId).toBe(a.body.record_id);

    // Balances: folded from PostgreSQL, served from Redis, and (when every request got an
    // answer) the client's own account of what it was told.
    const fromPg = emptySums();
    for (const r of rows) {
      const s = fromPg[r.customer_id];
      if (r.type === 'DEPOSIT') s.total += r.amount;
      if (r.type === 'DEDUCT') s.used += r.amount;
      if (r.type === 'FREEZE') s.frozen += r.amount;
      if (r.type === 'UNFREEZE') s.frozen -= r.amount;
      if (r.type === 'CONSUME') {
        s.used += r.amount;
        s.frozen -= r.amount + (r.returned_amount ?? 0);
      }
    }
    const fromRedis = emptySums();
    for (const id of Object.keys(fromRedis)) {
      const res = await fetch(`${url}/v1/customers/${id}/balance`, { headers: { authorization: `Bearer ${projectKey}` } });
      const { total, used, frozen } = (await res.json()) as Sums;
      fromRedis[id] = { total, used, frozen };
    }
    expect(fromRedis).toEqual(fromPg);
    if (uncertain.size === 0) {
      const told = emptySums();
      for (const a of acks) {
        const s = told[a.customerId];
        if (a.type === 'DEPOSIT') s.total += a.body.added_amount;
        if (a.type === 'DEDUCT') s.used += a.body.deducted_amount;
        if (a.type === 'FREEZE') s.frozen += a.body.frozen_amount;
        if (a.type === 'UNFREEZE') s.frozen -= a.body.unfrozen_amount;
        if (a.type === 'CONSUME') {
          s.used += a.body.consumed_amount;
          s.frozen -= a.body.consumed_amount + a.body.returned_amount;
        }
      }
      expect(told).toEqual(fromPg);
    }

    const report = await reconcile(rt, { projectId, repair: false });
    expect(report).toEqual({ customers_checked: client_loops, customers_with_drift: 0, customers_repaired: 0, drift: [], errors: [] });
  });
});
