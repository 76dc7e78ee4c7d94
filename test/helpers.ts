/**
 * Test harness: a real service (API and, when asked, workers) on a random port, against
 * the real Redis and PostgreSQL, with its own Redis key prefix and its own organization
 * and project, so test files run side by side without seeing each other.
 */
import { randomBytes } from 'node:crypto';
import { createAdminQueries } from '../src/admin/queries.js';
import { loadConfig, type Config } from '../src/config/index.js';
import { scanKeys } from '../src/redis/scan.js';
import { createRuntime, type Runtime } from '../src/runtime.js';
import { listen, type RunningServer } from '../src/server.js';
import { startWorkers, type Workers } from '../workers/index.js';
import type { ReconcileReport } from '../src/reconcile/report.js';

export interface TestProject {
  organizationId: string;
  projectId: string;
  projectKey: string;
  adminKey: string;
  /** A customer-scoped key bound to `customerId`. */
  customerKey(customerId: string, opts?: { allowedModels?: string[]; expiresAtMs?: number }): Promise<string>;
}

export interface TestService {
  rt: Runtime;
  url: string;
  server: RunningServer;
  workers: Workers | null;
  /** Creates an organization with one project of the given contract variant. */
  project(contract?: 'A' | 'B'): Promise<TestProject>;
  /** Calls the API; returns status, parsed JSON body and headers. */
  call(method: string, path: string, opts?: { key?: string; body?: unknown; headers?: Record<string, string> }): Promise<ApiResponse>;
  /** Waits until every outbox of this service is copied to PostgreSQL. */
  drained(): Promise<void>;
  close(): Promise<void>;
}

/**
 * A parsed JSON answer, which tests read field by field: its shape is what they assert,
 * so it is not typed ahead (a field that is missing or wrong fails the assertion reading it).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- an answer's shape is what the tests check, not a type they can trust
export type Json = any;

export interface ApiResponse {
  status: number;
  body: Json;
  headers: Headers;
}

/** Pause between two checks of a condition in waitFor. */
const poll_interval_ms = 20;

/**
 * Polls `cond` until it returns a truthy value, and returns that value; fails after
 * `timeoutMs` with `what` in the message. Tests wait for conditions with this, never
 * with a fixed sleep, which is either too short on a busy machine or wasted on an idle one.
 */
export async function waitFor<T>(cond: () => T | Promise<T>, timeoutMs: number, what = 'a condition'): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, poll_interval_ms));
  }
}

export function testConfig(overrides: Partial<Config> = {}): Config {
  const tag = randomBytes(4).toString('hex');
  return loadConfig(
    // The mock upstreams of the tests listen on 127.0.0.1.
    { ...process.env, DATABASE_URL: process.env.TEST_DATABASE_URL, LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent', SVC_CLOCK_CONTROL: '1', UPSTREAM_ALLOW_PRIVATE: '1' },
    // The queue prefix is a hash tag, as BullMQ needs on a Redis Cluster (REDIS_URL may name one).
    { REDIS_PREFIX: `t${tag}:`, QUEUE_PREFIX: `{tq${tag}}`, PORT: 0, SWEEP_INTERVAL_MS: 60_000, PERSIST_IDLE_MS: 5, PERSIST_IDLE_MAX_MS: 5,
      // Tests move their clocks by months: a test closes periods itself, no schedule does it behind another's back.
      INVOICE_INTERVAL_MS: 0, ...overrides },
  );
}

export async function startTestService(opts: { workers?: boolean; config?: Partial<Config> } = {}): Promise<TestService> {
  const config = testConfig(opts.config);
  const rt = await createRuntime(config);
  const server = await listen(rt, 0, '127.0.0.1');
  const workers = opts.workers ? await startWorkers(rt) : null;
  const admin = createAdminQueries(rt.db);

  const call: TestService['call'] = async (method, path, o = {}) => {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (o.key) headers.authorization = `Bearer ${o.key}`;
    let body: string | undefined;
    if (o.body !== undefined) {
      headers['content-type'] ??= 'application/json';
      body = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
    }
    const res = await fetch(`${server.url}${path}`, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };

  return {
    rt,
    url: server.url,
    server,
    workers,
    call,
    async project(contract = 'B') {
      const org = await admin.createOrganization(`test ${randomBytes(3).toString('hex')}`);
      const project = await admin.createProject(org.id, 'test project', contract);
      const adminKey = await rt.keyQueries.insertKey({ organizationId: org.id, projectId: null, type: 'admin' });
      const projectKey = await rt.keyQueries.insertKey({ organizationId: org.id, projectId: project.id, type: 'project' });
      return {
        organizationId: org.id,
        projectId: project.id,
        projectKey: projectKey.secret,
        adminKey: adminKey.secret,
        async customerKey(customerId, o = {}) {
          const k = await rt.keyQueries.insertKey({
            organizationId: org.id,
            projectId: project.id,
            type: 'customer',
            customerId,
            allowedModels: o.allowedModels ?? null,
            expiresAtMs: o.expiresAtMs ?? null,
          });
          return k.secret;
        },
      };
    },
    async drained() {
      const deadline = Date.now() + 20_000;
      for (;;) {
        let pending = 0;
        await scanKeys(rt.redis, `${config.REDIS_PREFIX}c:*:outbox`, 1000, async (keys) => {
          for (const k of keys) pending += await rt.redis.xlen(k);
        });
        if (pending === 0) return;
        if (!workers) {
          await scanKeys(rt.redis, `${config.REDIS_PREFIX}dirty:*`, 1000, async (keys) => {
            for (const k of keys) await rt.redis.del(k);
          });
          throw new Error('drained() needs a service started with workers: true');
        }
        if (Date.now() > deadline) throw new Error(`outboxes still hold ${pending} entries`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    async close() {
      await workers?.stop();
      await server.close();
      await rt.ledgerQueue.obliterate({ force: true }).catch(() => undefined);
      // One key per DEL: on a cluster, the keys of one DEL must share a slot.
      await scanKeys(rt.redis, `${config.REDIS_PREFIX}*`, 1000, async (keys) => {
        await Promise.all(keys.map((k) => rt.redis.del(k)));
      });
      await rt.close();
    },
  };
}

/**
 * A project's reconcile through the management API: POST queues the job (202 and its
 * Location), which the service's workers run; its status is followed until it has
 * finished, and its report answered (docs/API.md, "Reconcile jobs").
 */
export async function reconcileOverApi(svc: TestService, p: Pick<TestProject, 'projectId' | 'adminKey'>, repair = false, timeoutMs = 60_000): Promise<ReconcileReport> {
  const started = await svc.call('POST', `/v1/admin/projects/${p.projectId}/reconcile`, { key: p.adminKey, body: { repair } });
  if (started.status !== 202) throw new Error(`reconcile was not queued: ${started.status} ${JSON.stringify(started.body)}`);
  const location = started.headers.get('location')!;
  const job = await waitFor(async () => {
    const r = await svc.call('GET', location, { key: p.adminKey });
    return r.body.status === 'completed' || r.body.status === 'failed' ? r.body : null;
  }, timeoutMs, 'the reconcile job to finish');
  if (job.status !== 'completed') throw new Error(`the reconcile job failed: ${JSON.stringify(job.error)}`);
  return job.result as ReconcileReport;
}
