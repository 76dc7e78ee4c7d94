/**
 * The service under test, as production runs it: one API process (src/web.ts) and one
 * worker process (workers/main.ts), compiled (dist/, built first when older than the
 * sources; BENCH_FROM_SOURCE=1 runs the TypeScript with tsx), started as children on their own Redis prefix and the
 * bench database, plus this process's own runtime on the same prefix to set up data and
 * read state. Also a paid organization with a project and its key, since the free plan's
 * hard limit (50,000 operations) would refuse most of a run.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { RedisClient } from '../../src/redis/client.js';
import { createAdminQueries } from '../../src/admin/queries.js';
import { loadConfig } from '../../src/config/index.js';
import { migrate } from '../../src/db/migrate.js';
import { heartbeatKey } from '../../src/health.js';
import { createRuntime, type Runtime } from '../../src/runtime.js';
import { freePort, waitForPort, waitUntil, type NodeProcess, type ProcessGroup } from './processes.js';
import { scanKeys } from './redis.js';

export interface BenchServiceOptions {
  /** The repository root. */
  root: string;
  group: ProcessGroup;
  logDir: string;
  databaseUrl: string;
  /** Everything the service writes in Redis goes under it (its queues too). */
  redisPrefix: string;
  /** The Redis of the service and of this process; REDIS_URL (the shared one) when unset. */
  redisUrl?: string;
  apiLogLevel: string;
  /** Writes V8 CPU profiles of the API and the worker there. */
  cpuProfDir?: string;
  startTimeoutMs: number;
  /** Runs the service's TypeScript with tsx instead of its build (BENCH_FROM_SOURCE=1). */
  fromSource?: boolean;
}

export interface BenchRuntime {
  /** This process's runtime on the service's prefix and database. */
  rt: Runtime;
  /** The environment of the service's processes. */
  env: NodeJS.ProcessEnv;
}

/** An entry point of the service, by its path under the repository without extension. */
export type ServiceEntry = 'src/web' | 'workers/main' | 'src/gateway/mock/main';

/**
 * The file a bench child runs for `entry` of the checkout at `root`: its compiled
 * JavaScript under dist/, which this builds first when dist/ is missing or older than the
 * sources (scripts/build-if-stale.mjs), or with `fromSource` the TypeScript itself.
 */
export function serviceScript(root: string, entry: ServiceEntry, fromSource = false): string {
  if (fromSource) return join(root, `${entry}.ts`);
  execFileSync(process.execPath, [join(root, 'scripts', 'build-if-stale.mjs')], { stdio: 'inherit' });
  return join(root, 'dist', `${entry}.js`);
}

/**
 * Makes sure Redis and PostgreSQL run and the migrations are applied, and opens this
 * process's runtime. Separate from starting the children so that a caller holds the
 * runtime (and can clean up with it) before anything can fail half-way.
 */
export async function createBenchRuntime(o: BenchServiceOptions): Promise<BenchRuntime> {
  // ensure-services.sh starts Redis/PostgreSQL when stopped and creates the database.
  const redisEnv = o.redisUrl ? { REDIS_URL: o.redisUrl } : {};
  execFileSync('bash', [join(o.root, 'scripts', 'ensure-services.sh')], { env: { ...process.env, ...redisEnv, DATABASE_URL: o.databaseUrl }, stdio: 'inherit' });
  await migrate(o.databaseUrl);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...redisEnv,
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    DATABASE_URL: o.databaseUrl,
    REDIS_PREFIX: o.redisPrefix,
    QUEUE_PREFIX: `${o.redisPrefix}q`,
    LOG_LEVEL: o.apiLogLevel,
    SVC_CLOCK_CONTROL: '0',
    // Production refuses to start without one; it encrypts the upstream keys of models,
    // and this process shares it to store them.
    SVC_MASTER_KEY: randomBytes(32).toString('hex'),
    // The per-key limit (60,000/min by default) would turn a run into 429s; the limiter
    // still runs on every request.
    RATE_LIMIT_PER_MINUTE: String(1_000_000_000),
    // The bench's mock upstream listens on 127.0.0.1.
    UPSTREAM_ALLOW_PRIVATE: '1',
  };
  const rt = await createRuntime(loadConfig(env, { LOG_LEVEL: 'warn' }));
  return { rt, env };
}

/** Starts the API and the worker; resolves when the API accepts connections and the worker beats. */
export async function startBenchService(o: BenchServiceOptions, { rt, env }: BenchRuntime): Promise<{ api: NodeProcess; worker: NodeProcess; apiUrl: string }> {
  const apiPort = await freePort();
  // Files are named by pid and thread (from source, the tsx loader thread writes one too).
  const profile = o.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${o.cpuProfDir}`] : [];
  const api = o.group.start({
    name: 'api',
    script: serviceScript(o.root, 'src/web', o.fromSource),
    env: { ...env, PORT: String(apiPort) },
    logPath: join(o.logDir, 'api.log'),
    nodeArgs: profile,
  });
  const worker = o.group.start({ name: 'worker', script: serviceScript(o.root, 'workers/main', o.fromSource), env, logPath: join(o.logDir, 'worker.log'), nodeArgs: profile });
  await waitForPort(apiPort, o.startTimeoutMs, api);
  await waitUntil('the worker heartbeat', async () => (await rt.redis.exists(heartbeatKey(o.redisPrefix))) === 1, o.startTimeoutMs, worker);
  return { api, worker, apiUrl: `http://127.0.0.1:${apiPort}` };
}

/** An organization on a paid plan with one project (contract B) and a project key. */
export async function createPaidProject(rt: Runtime, name: string): Promise<{ organizationId: string; projectId: string; projectKey: string }> {
  const admin = createAdminQueries(rt.db);
  const org = await admin.createOrganization(name);
  await rt.plans.setPlan(org.id, 'pro_50m');
  const project = await admin.createProject(org.id, name, 'B');
  const { secret } = await rt.keyQueries.insertKey({ organizationId: org.id, projectId: project.id, type: 'project', name: 'bench' });
  return { organizationId: org.id, projectId: project.id, projectKey: secret };
}

/** Ledger entries in the customers' outboxes that the worker has not yet copied to PostgreSQL. */
export async function outboxBacklog(redis: RedisClient, redisPrefix: string): Promise<number> {
  let pending = 0;
  await scanKeys(redis, `${redisPrefix}c:*:outbox`, async (key) => {
    pending += await redis.xlen(key);
  });
  return pending;
}
