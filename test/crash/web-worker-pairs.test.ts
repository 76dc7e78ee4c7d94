/**
 * Two web and two worker processes (real child processes, as the Procfile runs them) on
 * the Redis that REDIS_URL names: the single Redis in the normal suite, the local Redis
 * Cluster in the cluster suite. Clients spread deposits and deducts over both web
 * processes while one web process and one worker are killed with kill -9 and started
 * again. Afterwards every acknowledged operation is in PostgreSQL exactly once, every
 * outbox is drained (an outbox a killed web process left unmarked is found through its
 * active mark by the sweeper), and reconcile finds no drift.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'slonik';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdminQueries } from '../../src/admin/queries.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { scanKeys } from '../../src/redis/scan.js';
import { createRuntime, type Runtime } from '../../src/runtime.js';
import { testConfig } from '../helpers.js';
import { crashServiceEnv, postUntilAnswered, ServiceProcess, sleep } from './processes.js';

const clients = 8;
const customers = 6;
const load_ms = 6_000;
const start_timeout_ms = 30_000;
const request_timeout_ms = 8_000;

let rt: Runtime;
let projectId: string;
let projectKey: string;
const webs: ServiceProcess[] = [];
const workers: ServiceProcess[] = [];

beforeAll(async () => {
  const masterKey = randomBytes(32).toString('hex');
  const config = testConfig({ SVC_MASTER_KEY: masterKey });
  rt = await createRuntime(config);
  const admin = createAdminQueries(rt.db);
  const org = await admin.createOrganization('web-worker pairs');
  projectId = (await admin.createProject(org.id, 'pairs', 'B')).id;
  projectKey = (await rt.keyQueries.insertKey({ organizationId: org.id, projectId, type: 'project' })).secret;
  const env = crashServiceEnv({ redisUrl: config.REDIS_URL, redisPrefix: config.REDIS_PREFIX, queuePrefix: config.QUEUE_PREFIX, databaseUrl: process.env.TEST_DATABASE_URL, masterKey });
  for (let i = 0; i < 2; i++) {
    webs.push(new ServiceProcess(`web${i}`, 'src/web.ts', env));
    workers.push(new ServiceProcess(`worker${i}`, 'workers/main.ts', { ...env, LOG_LEVEL: 'warn' }));
  }
  for (const p of [...webs, ...workers]) p.start();
  await Promise.all(webs.map((w) => w.listening(start_timeout_ms)));
}, start_timeout_ms * 2);

afterAll(async () => {
  await Promise.all([...webs, ...workers].map((p) => p.kill()));
  await rt?.close();
});

type Outcome = { kind: 'deposit' | 'deduct'; customer: string; id: string; amount: number };


async function client(n: number, stopAt: number, acknowledged: Outcome[], unanswered: string[]): Promise<void> {
  for (let step = 0; Date.now() < stopAt; step++) {
    const customer = `c${(n + step) % customers}`;
    const deposit = step % 3 === 0;
    const id = `${deposit ? 'dep' : 'ded'}-${n}-${step}`;
    const amount = deposit ? 50 : 7;
    const body = deposit ? { customer_id: customer, amount, idempotency_key: id } : { customer_id: customer, transaction_id: id, amount };
    const res = await postUntilAnswered(webs, { path: deposit ? '/v1/customers/deposit' : '/v1/billing/deduct', key: projectKey, body, turn: n + step, giveUpAt: stopAt + 15_000, timeoutMs: request_timeout_ms });
    if (res === null) unanswered.push(id);
    else if (res.status === 200) acknowledged.push({ kind: deposit ? 'deposit' : 'deduct', customer, id, amount });
    else expect(res.body.error?.code, `${id}: ${res.status} ${JSON.stringify(res.body)}`).toBe('insufficient_balance');
  }
}

async function outboxEntries(): Promise<number> {
  let total = 0;
  await scanKeys(rt.redis, `${rt.config.REDIS_PREFIX}c:*:outbox`, 1000, async (keys) => {
    for (const k of keys) total += await rt.redis.xlen(k);
  });
  return total;
}

describe('two web and two worker processes', () => {
  it('keep every acknowledged operation exactly once through kill -9 of a web process and a worker', async () => {
    const acknowledged: Outcome[] = [];
    const unanswered: string[] = [];
    const stopAt = Date.now() + load_ms;
    const chaos = (async () => {
      await sleep(load_ms / 3);
      await webs[0].kill();
      webs[0].start();
      await webs[0].listening(start_timeout_ms);
      await workers[1].kill();
      workers[1].start();
    })();
    await Promise.all([chaos, ...Array.from({ length: clients }, (_, n) => client(n, stopAt, acknowledged, unanswered))]);
    expect(unanswered).toEqual([]);
    expect(acknowledged.length).toBeGreaterThan(clients * 5);

    // The sweeper finds what a killed process left unmarked once its active mark is over (10 s).
    const deadline = Date.now() + 30_000;
    while ((await outboxEntries()) > 0) {
      if (Date.now() > deadline) throw new Error(`outboxes still hold ${await outboxEntries()} entries`);
      await sleep(100);
    }
    const rows = await rt.db.any(sql.type(z.object({ transaction_id: z.string(), type: z.string(), amount: z.number() }))`
      SELECT transaction_id, type, amount::float8 AS amount FROM ledger_entries WHERE project_id = ${projectId}`);
    const deducts = new Map<string, number>();
    for (const r of rows.filter((r) => r.type === 'DEDUCT')) deducts.set(r.transaction_id, (deducts.get(r.transaction_id) ?? 0) + 1);
    for (const op of acknowledged.filter((o) => o.kind === 'deduct')) expect(deducts.get(op.id), op.id).toBe(1);
    const deposits = rows.filter((r) => r.type === 'DEPOSIT');
    expect(deposits.length).toBe(acknowledged.filter((o) => o.kind === 'deposit').length);
    const report = await reconcile(rt, { projectId, repair: false });
    expect(report.drift).toEqual([]);
    expect(report.errors).toEqual([]);
    expect([...webs, ...workers].map((p) => p.unhandledRedisErrors)).toEqual([0, 0, 0, 0]);
  }, 120_000);
});
