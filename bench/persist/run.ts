/**
 * `npm run bench:persist`: what persisting the ledger costs. One worker process
 * (workers/main.ts) copies outbox entries to PostgreSQL while this process writes entries
 * into the customers' outboxes at a fixed rate, in steps that double until the outbox lag
 * passes its bound. Per step: worker + PostgreSQL CPU per ledger entry (from the start of
 * the step until the outboxes are empty again) and the outbox lag's p50/p99 (sampled every
 * lag_sample_ms: the age of the oldest entry in any outbox). The highest sustained rate is
 * the highest step whose lag p99 stayed within 1 s.
 *
 * The entries are copies of a real deduct entry (the API's script wrote the template),
 * with a new id, seq, transaction id and time each, added with XADD and marked dirty as the
 * API marks them, so the API's own cost stays out of the measurement.
 *
 * Knobs (environment): BENCH_PERSIST_STEP_S (8), BENCH_PERSIST_RATES (comma-separated
 * entries/s; 1000,2000,4000,8000,16000 when unset), BENCH_PERSIST_CUSTOMERS (64),
 * BENCH_DATABASE_URL, BENCH_REDIS_PERSISTENCE (bench/lib/bench-redis.ts).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseOutboxEntry } from '../../src/redis/codec.js';
import { customerKeys } from '../../src/redis/keys.js';
import { writeOpenLoop } from '../lib/outbox-load.js';
import { matchingProcessesCpu, processCpu, withCpu } from '../lib/cpu.js';
import { waitUntil } from '../lib/processes.js';
import { fmt, markdownTable } from '../lib/report.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { createBenchRuntime, createPaidProject, serviceScript, type BenchServiceOptions } from '../lib/service.js';
import { heartbeatKey } from '../../src/health.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const env = process.env;

const settings = {
  stepS: Number(env.BENCH_PERSIST_STEP_S ?? 8),
  rates: (env.BENCH_PERSIST_RATES ?? '1000,2000,4000,8000,16000').split(',').map(Number),
  customers: Number(env.BENCH_PERSIST_CUSTOMERS ?? 64),
  ...benchEnvSettings(env),
  startTimeoutMs: 30_000,
  drainTimeoutMs: 60_000,
  runTimeoutMs: 600_000,
};

/** Targets: worker + PostgreSQL CPU per entry, and the lag bound of a sustained rate. */
const targets = { cpuPerEntryUs: 80, lagP99Ms: 1_000 };
const lag_sample_ms = 20;

const run = createBenchRun({ logDirPrefix: 'svc-bench-persist-', runTimeoutMs: settings.runTimeoutMs });
const { redisPrefix, group, logDir } = run;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

await run.finish(async () => {
  const redisUrl = await run.startRedis(settings.redisPersistence, settings.startTimeoutMs);
  const o: BenchServiceOptions = {
    root, group, logDir, databaseUrl: settings.databaseUrl, redisPrefix, redisUrl, apiLogLevel: 'warn', startTimeoutMs: settings.startTimeoutMs,
    fromSource: settings.fromSource,
  };
  const bench = await createBenchRuntime(o);
  const { rt } = bench;
  run.runtime = rt;
  const profile = settings.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${settings.cpuProfDir}`] : [];
  const worker = group.start({ name: 'worker', script: serviceScript(root, 'workers/main', settings.fromSource), env: bench.env, logPath: join(logDir, 'worker.log'), nodeArgs: profile });
  await waitUntil('the worker heartbeat', async () => (await rt.redis.exists(heartbeatKey(redisPrefix))) === 1, settings.startTimeoutMs, worker);

  const project = await createPaidProject(rt, `bench-persist-${run.tag}`);
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
  await waitUntil('the setup entries to persist', async () => (await backlog()) === 0, settings.drainTimeoutMs, worker);

  // Sequence numbers continue from each customer's own counter.
  const seqs = await Promise.all(outboxes.map(async (k) => Number(await rt.redis.hget(k.meta, 'seq'))));
  const database = new URL(settings.databaseUrl).pathname.slice(1);
  const sources = [processCpu('worker', worker.pid), matchingProcessesCpu('postgres', new RegExp(`^postgres: .* ${database} `))];

  const rows: (string | number)[][] = [];
  let best: { rate: number; cpuUs: number; lagP99: number } | null = null;
  for (const rate of settings.rates) {
    const lags: number[] = [];
    let written = 0;
    const { cpu, wallS } = await withCpu(sources, async () => {
      const started = Date.now();
      const endAt = started + settings.stepS * 1000;
      const sampler = setInterval(() => {
        void Promise.all(outboxes.map((k) => rt.redis.xrange(k.outbox, '-', '+', 'COUNT', 1))).then((firsts) => {
          const oldest = Math.min(Date.now(), ...firsts.flat().map(([id]) => Number(id.split('-')[0])));
          lags.push(Date.now() - oldest);
        });
      }, lag_sample_ms);
      written = await writeOpenLoop({ redis: rt.redis, prefix: redisPrefix, customers, outboxes, seqs, template }, rate, started, endAt);
      clearInterval(sampler);
      await waitUntil('the outboxes to drain', async () => (await backlog()) === 0, settings.drainTimeoutMs, worker);
    });
    lags.sort((a, b) => a - b);
    const workerPostgres = cpu.worker + cpu.postgres;
    const cpuUs = (workerPostgres / written) * 1e6;
    const lagP99 = percentile(lags, 99);
    const sustained = lagP99 <= targets.lagP99Ms;
    rows.push([
      rate, written, fmt.ms(wallS * 1000), fmt.int((cpu.worker / written) * 1e6), fmt.int((cpu.postgres / written) * 1e6), fmt.int(cpuUs),
      fmt.ms(percentile(lags, 50)), fmt.ms(lagP99), sustained ? 'yes' : 'no',
    ]);
    console.log(`rate ${rate}/s: ${written} entries, worker+postgres ${cpuUs.toFixed(1)} us/entry, lag p99 ${lagP99} ms`);
    if (!sustained) break;
    best = { rate, cpuUs, lagP99 };
  }
  console.log();
  console.log(markdownTable(
    ['offered entries/s', 'entries', 'wall to drained (ms)', 'worker CPU/entry (us)', 'PostgreSQL CPU/entry (us)', 'worker + PostgreSQL (us)', 'lag p50 (ms)', 'lag p99 (ms)', `lag p99 <= ${targets.lagP99Ms} ms`],
    rows,
  ));
  console.log();
  if (best) {
    const ok = best.cpuUs <= targets.cpuPerEntryUs;
    console.log(`highest sustained rate: ${best.rate} entries/s, ${best.cpuUs.toFixed(1)} us worker + PostgreSQL CPU per entry (target <= ${targets.cpuPerEntryUs}: ${ok ? 'met' : 'not met'}), lag p99 ${best.lagP99} ms`);
  } else {
    console.log(`no rate was sustained (lag p99 > ${targets.lagP99Ms} ms at ${settings.rates[0]} entries/s)`);
  }
});
