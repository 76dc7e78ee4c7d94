/**
 * Webhook deliveries through kill -9 (issue 20): two web processes and a worker (real
 * child processes) on a Redis of the test's own (append-only file, `appendfsync always`),
 * an endpoint subscribed to `deposit.created` on a receiver in this test that verifies
 * every delivery's signature with `standardwebhooks`. Clients make deposits (each implies
 * exactly one `deposit.created`) while the worker is killed with kill -9 in the middle of
 * deliveries and started again, and Redis is killed with kill -9 and restarted from its
 * file; each kill waits for a delivery in flight at the receiver (which answers after a
 * short wait). The receiver fails the first attempt of every third event, so that retries
 * are under way too. Afterwards:
 * - the events table holds one `deposit.created` per acknowledged deposit, exactly;
 * - every event was answered 2xx by the receiver under its own id as `webhook-id`, and no
 *   deposit's event reached it under a second id (repeats under the same id are the
 *   at-least-once the contract allows);
 * - every signature verified, and no delivery is left pending.
 * Then Redis is restarted empty while deliveries wait for their retries: its recovery
 * (src/reconcile/shared-keys.ts) remakes the dispatch schedule and queues the pending
 * deliveries again, and they arrive within seconds, not after the minute a worker takes
 * to renew the schedule.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { sql, type DatabasePool } from 'slonik';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAdminQueries } from '../../src/admin/queries.js';
import { createDb } from '../../src/db/pool.js';
import { createKeyQueries } from '../../src/keys/store.js';
import { testConfig } from '../helpers.js';
import { ownDatabase } from '../support/own-database.js';
import { ownRedis, type OwnRedis } from '../support/own-redis.js';
import { crashServiceEnv, postUntilAnswered, ServiceProcess, sleep } from './processes.js';

const clients = 3;
/** A client's pause between deposits: CPU left for a restarted worker to start on 2 cores. */
const deposit_pause_ms = 25;
/** The load runs until the last kill, and this long after it. */
const load_after_chaos_ms = 1_000;
const start_timeout_ms = 30_000;
const request_timeout_ms = 8_000;
/** How long a client keeps retrying one deposit after a connection error or a 503. */
const retry_window_ms = 15_000;
/** How long the receiver takes to answer: deliveries are in flight when a kill lands. */
const receiver_delay_ms = 80;
/** How long a kill waits for a delivery in flight (a restarted worker takes seconds to start). */
const in_flight_wait_ms = 10_000;
const aof_args = ['--appendonly', 'yes', '--appendfsync', 'always', '--save', ''];

/** The kills, in order, each once a delivery is in flight at the receiver. */
const chaos_plan = ['redis', 'worker', 'redis'] as const;

interface Received {
  webhookId: string;
  eventId: string;
  idempotencyKey: string;
  status: number;
}

let redis: OwnRedis;
let db: DatabasePool;
let receiver: Server;
let receiverUrl: string;
let secret = '';
let projectId: string;
let projectKey: string;
let endpointId: string;
const webs: ServiceProcess[] = [];
let worker: ServiceProcess;

/** Every request the receiver answered, in order. */
const received: Received[] = [];
/** Requests whose signature did not verify. */
const unverified: string[] = [];
/** Kills so far: a request counts as in flight at a kill only if it began after the kill before. */
let kills = 0;
/** Requests the receiver is answering right now: the kills before each began, and its event once read. */
const inFlight = new Set<{ epoch: number; eventId: string | null }>();
/** The deliveries begun since the last kill that the receiver read and has not answered yet. */
const inFlightSinceLastKill = () => [...inFlight].filter((r) => r.epoch === kills && r.eventId !== null);
/** The receiver answers every request 500 (a receiver that is down), for the empty-restart case. */
let receiverDown = false;
/** Events whose first attempt the receiver failed already. */
const failedOnce = new Set<string>();
let eventsSeen = 0;

function startReceiver(): Promise<void> {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    const request = { epoch: kills, eventId: null as string | null };
    inFlight.add(request);
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let status = 200;
      try {
        const event = new Webhook(secret).verify(body, req.headers as Record<string, string>) as { id: string; data: { idempotency_key: string } };
        const webhookId = String(req.headers['webhook-id']);
        request.eventId = event.id;
        // Every third event's first attempt fails: its retry is scheduled across the kills.
        if (!failedOnce.has(event.id) && eventsSeen++ % 3 === 0) {
          failedOnce.add(event.id);
          status = 500;
        }
        if (receiverDown) status = 500;
        received.push({ webhookId, eventId: event.id, idempotencyKey: event.data.idempotency_key, status });
      } catch (err) {
        unverified.push((err as Error).message);
        status = 400;
      }
      setTimeout(() => {
        inFlight.delete(request);
        res.writeHead(status).end();
      }, receiver_delay_ms);
    });
  });
  return new Promise((resolve) => receiver.listen(0, '127.0.0.1', () => {
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    resolve();
  }));
}

beforeAll(async () => {
  redis = await ownRedis('svc-whcrash-');
  await redis.start(aof_args);
  await startReceiver();
  // A database of its own: the dispatcher fans out every event of its database, and the
  // workers of the test files beside this one (other schedules) must not take these.
  const databaseUrl = await ownDatabase('whcrash');
  const masterKey = randomBytes(32).toString('hex');
  const config = testConfig({ REDIS_URL: redis.url, SVC_MASTER_KEY: masterKey, DATABASE_URL: databaseUrl });
  db = await createDb(config.DATABASE_URL, 2);
  const admin = createAdminQueries(db);
  const org = await admin.createOrganization('webhook crash test');
  projectId = (await admin.createProject(org.id, 'webhook crash project', 'B')).id;
  projectKey = (await createKeyQueries(db).insertKey({ organizationId: org.id, projectId, type: 'project' })).secret;
  const env = crashServiceEnv({ redisUrl: redis.url, redisPrefix: config.REDIS_PREFIX, queuePrefix: config.QUEUE_PREFIX, databaseUrl, masterKey }, {
    UPSTREAM_ALLOW_PRIVATE: '1',
    // Short waits, so that the test stays short: retries, passes, a killed worker's jobs.
    // 18 s of retries: deliveries of a receiver that is down outlast an empty restart.
    WEBHOOK_RETRY_SCHEDULE_MS: Array.from({ length: 60 }, () => '300').join(','),
    WEBHOOK_DISPATCH_INTERVAL_MS: '200',
    // A worker killed between its commit and its push: the poll takes the events after this.
    WEBHOOK_DISPATCH_GRACE_MS: '1000',
    WEBHOOK_STALLED_MS: '2000',
    WEBHOOK_TIMEOUT_MS: '3000',
  });
  for (let i = 0; i < 2; i++) webs.push(new ServiceProcess(`web${i}`, 'src/web.ts', env));
  worker = new ServiceProcess('worker', 'workers/main.ts', { ...env, LOG_LEVEL: 'warn' });
  for (const p of [...webs, worker]) p.start();
  await Promise.all(webs.map((w) => w.listening(start_timeout_ms)));

  const created = await fetch(`${webUrl(0)}/v1/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${projectKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: `${receiverUrl}/hook`, events: ['deposit.created'] }),
  });
  const endpoint = (await created.json()) as { id: string; secret: string };
  expect(created.status, JSON.stringify(endpoint)).toBe(201);
  secret = endpoint.secret;
  endpointId = endpoint.id;
}, start_timeout_ms * 2);

afterAll(async () => {
  ServiceProcess.killAll();
  await db?.end();
  receiver?.closeAllConnections();
  await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve(undefined)));
  await redis?.remove();
});

function webUrl(i: number): string {
  const port = webs[i].port;
  if (port === null) throw new Error(`web${i} is not listening`);
  return `http://127.0.0.1:${port}`;
}

/**
 * POSTs a deposit to either web process until it gets a final answer: after a connection
 * error or a 503 the same idempotency key is sent again (the contract's retry). Null when
 * none came within the retry window.
 */
async function deposit(customerId: string, key: string, turn: number, giveUpAt: number): Promise<{ status: number; body: { error?: { code: string } } } | null> {
  const body = { customer_id: customerId, amount: 100, idempotency_key: key };
  return postUntilAnswered(webs, { path: '/v1/customers/deposit', key: projectKey, body, turn, giveUpAt, timeoutMs: request_timeout_ms });
}

async function client(n: number, stopAt: () => number, acknowledged: string[], problems: string[]): Promise<void> {
  for (let step = 0; Date.now() < stopAt(); step++) {
    const key = `dep-${n}-${step}`;
    const res = await deposit(`wh-${n % 3}`, key, n + step, Date.now() + retry_window_ms);
    if (res?.status === 200) acknowledged.push(key);
    else problems.push(`${key}: ${res === null ? 'no final answer' : `${res.status} ${JSON.stringify(res.body)}`}`);
    await sleep(deposit_pause_ms);
  }
}

const eventRow = z.object({ id: z.string(), idempotency_key: z.string() });

async function depositEvents(): Promise<readonly z.infer<typeof eventRow>[]> {
  return db.any(sql.type(eventRow)`
    SELECT id, data->>'idempotency_key' AS idempotency_key FROM events WHERE project_id = ${projectId} AND type = 'deposit.created'`);
}

async function pendingDeliveries(): Promise<number> {
  return db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = ${endpointId} AND status = 'pending'`);
}

/** Polls until `check` holds, or throws with `what` and the processes' last words after `timeoutMs`. */
async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}\n${worker.describe()}\n${webs.map((w) => w.describe()).join('\n')}`);
    await sleep(100);
  }
}

/** What the receiver must have seen: each event answered 2xx under its own id, and no deposit under two ids. */
function checkReceived(events: readonly z.infer<typeof eventRow>[]): void {
  const delivered = new Set(received.filter((r) => r.status === 200).map((r) => r.webhookId));
  expect(events.filter((e) => !delivered.has(e.id)).map((e) => e.id), 'events never delivered').toEqual([]);
  expect(received.filter((r) => r.webhookId !== r.eventId), 'webhook-id is the event id').toEqual([]);
  const idsOfDeposit = new Map<string, Set<string>>();
  for (const r of received) idsOfDeposit.set(r.idempotencyKey, (idsOfDeposit.get(r.idempotencyKey) ?? new Set()).add(r.webhookId));
  expect([...idsOfDeposit].filter(([, ids]) => ids.size > 1), 'deposits delivered under two ids').toEqual([]);
  const eventOfDeposit = new Map(events.map((e) => [e.idempotency_key, e.id]));
  expect([...idsOfDeposit].filter(([key, ids]) => eventOfDeposit.get(key) !== [...ids][0]), 'deliveries of no stored event').toEqual([]);
  expect(unverified).toEqual([]);
}

describe('webhook deliveries through kill -9', () => {
  it('delivers every acknowledged deposit\'s event under one id through kill -9 of the worker and of Redis', async () => {
    const acknowledged: string[] = [];
    const problems: string[] = [];
    /** Requests the receiver was answering when each kill landed. */
    const inFlightAtKill: [string, number, number][] = [];
    /** Events whose attempt a killed worker left unanswered, and how many requests the receiver had had then. */
    const cutByWorkerKill: [string, number][] = [];
    let stopAt = Number.POSITIVE_INFINITY;
    const startedAt = Date.now();
    const chaos = (async () => {
      await sleep(1_000);
      for (const what of chaos_plan) {
        const deadline = Date.now() + in_flight_wait_ms;
        while (inFlightSinceLastKill().length === 0 && Date.now() < deadline) await sleep(2);
        const cut = inFlightSinceLastKill();
        inFlightAtKill.push([what, cut.length, Date.now() - startedAt]);
        if (what === 'worker') for (const r of cut) cutByWorkerKill.push([r.eventId!, received.length]);
        if (what === 'worker') {
          await worker.kill();
          kills++;
          worker.start();
        } else {
          await redis.kill();
          kills++;
          await redis.start(aof_args);
        }
      }
      stopAt = Date.now() + load_after_chaos_ms;
    })();
    await Promise.all([chaos, ...Array.from({ length: clients }, (_, n) => client(n, () => stopAt, acknowledged, problems))]);
    const loadMs = Date.now() - startedAt;
    expect(problems, `${worker.describe()}\n${webs.map((w) => w.describe()).join('\n')}`).toEqual([]);
    expect(acknowledged.length).toBeGreaterThan(clients * 5);

    // Every acknowledged deposit's event is stored once the outboxes are drained: exactly those.
    await until('the events of every acknowledged deposit stored', 15_000, async () => (await depositEvents()).length >= acknowledged.length);
    const events = await depositEvents();
    expect(events.map((e) => e.idempotency_key).sort()).toEqual([...acknowledged].sort());
    expect(new Set(events.map((e) => e.id)).size).toBe(events.length);

    await until('every delivery finished', 20_000, async () => {
      const made = await db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = ${endpointId}`);
      return made === events.length && (await pendingDeliveries()) === 0;
    });
    const drainMs = Date.now() - startedAt - loadMs;
    const failed = await db.anyFirst(sql.type(z.object({ id: z.string() }))`SELECT id FROM webhook_deliveries WHERE endpoint_id = ${endpointId} AND status <> 'succeeded'`);
    expect(failed).toEqual([]);
    checkReceived(events);

    // The kills landed in the middle of deliveries, and retries ran across them.
    expect(inFlightAtKill.filter(([, n]) => n === 0), 'kills with no delivery in flight').toEqual([]);
    // An attempt cut short by the worker's death is made again, under the same id (BullMQ's stalled check).
    expect(cutByWorkerKill.length).toBeGreaterThan(0);
    expect(cutByWorkerKill.filter(([eventId, before]) => !received.slice(before).some((r) => r.eventId === eventId)), 'cut attempts never made again').toEqual([]);
    expect(received.filter((r) => r.status === 500).length).toBeGreaterThan(0);
    expect([...webs, worker].flatMap((p) => p.deaths)).toEqual([]);
    const repeats = received.filter((r) => r.status === 200).length - events.length;
    console.log(`webhook crash: ${acknowledged.length} deposits in ${loadMs} ms, delivered ${drainMs} ms later; ${received.length} requests (${repeats} repeats under the same id); [kill, deliveries in flight, ms after the start] ${JSON.stringify(inFlightAtKill)}`);
  }, 60_000);

  it('resumes pending deliveries within seconds after Redis restarted empty', async () => {
    receiverDown = true;
    const acknowledged: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await deposit('wh-empty', `empty-${i}`, i, Date.now() + retry_window_ms);
      expect(res?.status).toBe(200);
      acknowledged.push(`empty-${i}`);
    }
    // Their deliveries are made and failing: each waits for a retry, its job only in Redis.
    const attempted = sql.fragment`SELECT count(*)::int AS n FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
      WHERE d.endpoint_id = ${endpointId} AND d.status = 'pending' AND jsonb_array_length(d.attempts) >= 1 AND e.data->>'customer_id' = 'wh-empty'`;
    await until('the new deliveries attempted', 10_000, async () => (await db.oneFirst(sql.type(z.object({ n: z.number() }))`${attempted}`)) === acknowledged.length);

    await redis.kill();
    rmSync(join(redis.dir, 'appendonlydir'), { recursive: true, force: true });
    await redis.start(aof_args);
    receiverDown = false;
    const restartedAt = Date.now();
    // A worker renews the schedule every 60 s and the stale grace here is 4 s: without the
    // recovery nothing would run before the renewal.
    await until('the pending deliveries delivered after the empty restart', 15_000, async () => (await pendingDeliveries()) === 0);
    const waited = Date.now() - restartedAt;
    checkReceived(await depositEvents());
    expect([...webs, worker].flatMap((p) => p.deaths)).toEqual([]);
    console.log(`webhook crash: deliveries resumed ${waited} ms after Redis restarted empty`);
  }, 40_000);
});
