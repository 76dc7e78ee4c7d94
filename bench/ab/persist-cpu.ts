/**
 * `npx tsx bench/ab/persist-cpu.ts <baseline-root>`: worker + PostgreSQL CPU per ledger
 * entry of this checkout's persist path against another checkout's (a `git worktree` of
 * an earlier commit, say), on a machine that is not quiet. Rounds alternate between the two:
 * each round starts that checkout's worker (workers/main, compiled), writes copies of a
 * real deduct entry into the customers' outboxes at a fixed rate for AB_ROUND_S seconds
 * (as `npm run bench:persist` does), waits until the outboxes are empty, and stops the
 * worker. What is counted, from the first write until drained: the worker process's CPU
 * and that of every PostgreSQL backend connected to the bench database. The median over
 * the rounds is compared, and the spread (min-max) shown.
 *
 * Knobs: AB_RATE (entries/s, 4000), AB_ROUNDS (6), AB_ROUND_S (5), AB_CUSTOMERS (64),
 * BENCH_DATABASE_URL (use a database of the run's own, so that other clients' backends are
 * not counted), BENCH_REDIS_PERSISTENCE (none gives the run a Redis of its own). The
 * baseline needs its own node_modules (a symlink to this one's works when the dependencies
 * are the same) and the same database schema.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseOutboxEntry } from '../../src/redis/codec.js';
import { customerKeys } from '../../src/redis/keys.js';
import { writeOpenLoop } from '../lib/outbox-load.js';
import { heartbeatKey } from '../../src/health.js';
import { cpuSeconds, pidsMatching } from '../lib/cpu.js';
import { waitUntil, type NodeProcess } from '../lib/processes.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { createBenchRuntime, createPaidProject, serviceScript, type BenchServiceOptions } from '../lib/service.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const baselineRoot = process.argv[2] ? resolve(process.argv[2]) : null;
const env = process.env;
const settings = {
  ...benchEnvSettings(env),
  rate: Number(env.AB_RATE ?? 4000),
  rounds: Number(env.AB_ROUNDS ?? 6),
  roundS: Number(env.AB_ROUND_S ?? 5),
  customers: Number(env.AB_CUSTOMERS ?? 64),
  startTimeoutMs: 30_000,
  drainTimeoutMs: 120_000,
};
const run = createBenchRun({ logDirPrefix: 'svc-ab-persist-', runTimeoutMs: 1_800_000 });
const { tag, redisPrefix, group, logDir } = run;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  if (baselineRoot === null) throw new Error('usage: npx tsx bench/ab/persist-cpu.ts <baseline-root>');
  if (!existsSync(join(baselineRoot, 'scripts', 'build-if-stale.mjs'))) throw new Error(`${baselineRoot} has no build (scripts/build-if-stale.mjs)`);
  const redisUrl = await run.startRedis(settings.redisPersistence, settings.startTimeoutMs);
  const o: BenchServiceOptions = { ...settings, root, group, logDir, redisPrefix, redisUrl, apiLogLevel: 'warn' };
  const bench = await createBenchRuntime(o);
  const { rt } = bench;
  run.runtime = rt;
  const contenders = [
    { name: 'baseline', root: baselineRoot, workerUs: [] as number[], pgUs: [] as number[], totalUs: [] as number[] },
    { name: 'this checkout', root, workerUs: [] as number[], pgUs: [] as number[], totalUs: [] as number[] },
  ];
  const scripts = new Map(contenders.map((c) => [c.name, serviceScript(c.root, 'workers/main', settings.fromSource)]));
  const startWorker = async (c: (typeof contenders)[0], n: number): Promise<NodeProcess> => {
    await rt.redis.del(heartbeatKey(redisPrefix));
    const w = group.start({ name: `${c.name} worker`, script: scripts.get(c.name)!, env: bench.env, logPath: join(logDir, `worker-${n}.log`), cwd: c.root });
    await waitUntil('the worker heartbeat', async () => (await rt.redis.exists(heartbeatKey(redisPrefix))) === 1, settings.startTimeoutMs, w);
    return w;
  };
  const stopWorker = async (w: NodeProcess) => {
    process.kill(w.pid, 'SIGTERM');
    await w.exited;
  };

  const project = await createPaidProject(rt, `ab-persist-${tag}`);
  const scope = { projectId: project.projectId, organizationId: project.organizationId };
  const customers = Array.from({ length: settings.customers }, (_, i) => `c${i}`);
  for (const c of customers) {
    await rt.ledger.deposit(scope, {
      customerId: c, amount: 1_000_000_000_000, wallet: 'default', label: 'bench', startsAtMs: null, expiresAtMs: null,
      idempotencyKey: null, description: null,
    });
  }
  await rt.ledger.deduct(scope, { customerId: 'c0', transactionId: 'template', amount: 1, wallets: null, businessType: null, description: null });
  const outboxes = customers.map((c) => customerKeys(redisPrefix, project.projectId, c));
  const [[, fields]] = (await rt.redis.xrevrange(outboxes[0].outbox, '+', '-', 'COUNT', 1)) as [string, string[]][];
  const template = parseOutboxEntry(fields);
  const backlog = async () => (await Promise.all(outboxes.map((k) => rt.redis.xlen(k.outbox)))).reduce((a, b) => a + b, 0);
  {
    const w = await startWorker(contenders[1], 0);
    await waitUntil('the setup entries to persist', async () => (await backlog()) === 0, settings.drainTimeoutMs, w);
    await stopWorker(w);
  }
  const seqs = await Promise.all(outboxes.map(async (k) => Number(await rt.redis.hget(k.meta, 'seq'))));
  const database = new URL(settings.databaseUrl).pathname.slice(1);
  const backends = new RegExp(`^postgres: .* ${database} `);
  const pgCpu = () => pidsMatching(backends).reduce((sum, pid) => sum + (Number.isFinite(cpuSeconds(pid)) ? cpuSeconds(pid) : 0), 0);

  console.log(`A/B persist: ${settings.rounds} rounds of ${settings.roundS} s per checkout at ${settings.rate} entries/s over ${settings.customers} customers`);
  let n = 1;
  for (let round = 0; round < settings.rounds; round++) {
    const order = round % 2 === 0 ? contenders : [...contenders].reverse();
    for (const c of order) {
      const w = await startWorker(c, n++);
      // Let the start-up settle (module loading, first passes) before counting.
      await new Promise((r) => setTimeout(r, 500));
      // A backend that exits during the round loses its share: the worker's pool keeps its connections.
      const w0 = cpuSeconds(w.pid);
      const p0 = pgCpu();
      const started = Date.now();
      const endAt = started + settings.roundS * 1000;
      const written = await writeOpenLoop({ redis: rt.redis, prefix: redisPrefix, customers, outboxes, seqs, template }, settings.rate, started, endAt);
      await waitUntil('the outboxes to drain', async () => (await backlog()) === 0, settings.drainTimeoutMs, w);
      const workerS = cpuSeconds(w.pid) - w0;
      const pgS = pgCpu() - p0;
      const wall = Date.now() - started;
      await stopWorker(w);
      c.workerUs.push((workerS / written) * 1e6);
      c.pgUs.push((pgS / written) * 1e6);
      c.totalUs.push(((workerS + pgS) / written) * 1e6);
      console.log(`  round ${round + 1} ${c.name}: ${written} entries, drained after ${wall} ms; worker ${c.workerUs.at(-1)!.toFixed(1)} + PostgreSQL ${c.pgUs.at(-1)!.toFixed(1)} = ${c.totalUs.at(-1)!.toFixed(1)} us/entry`);
    }
  }
  const spread = (xs: number[]) => `${Math.min(...xs).toFixed(1)}-${Math.max(...xs).toFixed(1)}`;
  console.log();
  for (const c of contenders) {
    console.log(`${c.name}: median worker ${median(c.workerUs).toFixed(1)} us/entry (${spread(c.workerUs)}), PostgreSQL ${median(c.pgUs).toFixed(1)} (${spread(c.pgUs)}), total ${median(c.totalUs).toFixed(1)} (${spread(c.totalUs)})`);
  }
  const [a, b] = contenders as [(typeof contenders)[0], (typeof contenders)[0]];
  console.log(`this checkout / baseline, median total: ${(median(b.totalUs) / median(a.totalUs)).toFixed(3)}x`);
}

void run.finish(main);
