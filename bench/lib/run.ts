/**
 * The frame of a bench run: a random tag and Redis key prefix, the child processes, a log
 * folder, the bench's own Redis when BENCH_REDIS_PERSISTENCE asks for one, and one cleanup
 * (children stopped, this run's Redis keys removed, never FLUSHALL, its own Redis stopped
 * and its directory removed) whatever ends the run: its end, an error, Ctrl-C or the
 * watchdog.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Runtime } from '../../src/runtime.js';
import { parseRedisPersistence, startBenchRedis, type BenchRedis, type RedisPersistence } from './bench-redis.js';
import { ProcessGroup } from './processes.js';
import { deleteByPrefix } from './redis.js';

/** The knobs every bench reads from the environment (docs/PERFORMANCE.md). */
export function benchEnvSettings(env: NodeJS.ProcessEnv = process.env) {
  return {
    apiLogLevel: env.BENCH_API_LOG_LEVEL ?? 'info',
    cpuProfDir: env.BENCH_CPU_PROF_DIR,
    writeDocs: env.BENCH_WRITE_DOCS !== '0',
    databaseUrl: env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/svc_bench',
    redisPersistence: parseRedisPersistence(env.BENCH_REDIS_PERSISTENCE),
    // The service runs from dist/ as in production; 1 runs its TypeScript with tsx instead.
    fromSource: env.BENCH_FROM_SOURCE === '1',
  };
}

export interface BenchRun {
  tag: string;
  /** Every Redis key of the run starts with it. */
  redisPrefix: string;
  group: ProcessGroup;
  /** Child logs; kept when the run fails. */
  logDir: string;
  /** The bench's own runtime, once made: cleanup deletes the keys through it and closes it. */
  runtime: Runtime | undefined;
  /** The bench's own Redis, once started. */
  ownRedis: BenchRedis | undefined;
  /**
   * Starts the bench's own Redis unless the setting is `shared`; returns the URL the
   * service and the bench's runtime must use (undefined: REDIS_URL, the shared one).
   */
  startRedis(persistence: RedisPersistence, timeoutMs: number): Promise<string | undefined>;
  /** Runs the bench, cleans up, and exits the process (1 when it threw). */
  finish(main: () => Promise<void>): Promise<never>;
}

export function createBenchRun(opts: { logDirPrefix: string; runTimeoutMs: number }): BenchRun {
  const tag = randomBytes(4).toString('hex');
  let cleaned = false;
  const run: BenchRun = {
    tag,
    redisPrefix: `bench:${tag}:`,
    group: new ProcessGroup(),
    logDir: mkdtempSync(join(tmpdir(), opts.logDirPrefix)),
    runtime: undefined,
    ownRedis: undefined,
    async startRedis(persistence, timeoutMs) {
      if (persistence === 'shared') return undefined;
      run.ownRedis = await startBenchRedis(persistence, run.logDir, timeoutMs);
      return run.ownRedis.url;
    },
    async finish(main) {
      let failed = false;
      try {
        await main();
      } catch (err) {
        failed = true;
        console.error(err);
      } finally {
        await cleanup();
        clearTimeout(watchdog);
        if (failed) console.error(`logs kept in ${run.logDir}`);
        else rmSync(run.logDir, { recursive: true, force: true });
      }
      process.exit(failed ? 1 : 0);
    },
  };

  /** Stops the children, removes this run's Redis keys and its own Redis; safe to call more than once. */
  async function cleanup(): Promise<void> {
    if (cleaned) return;
    cleaned = true;
    await run.group.stopAll();
    const rt = run.runtime;
    if (rt) {
      const deleted = await deleteByPrefix(rt.redis, run.redisPrefix).catch((err: Error) => {
        console.error(`could not delete ${run.redisPrefix}* keys: ${err.message}`);
        return 0;
      });
      console.log(`removed ${deleted} Redis keys under ${run.redisPrefix}`);
      await rt.close().catch(() => undefined);
    }
    // Last, since the runtime above talks to it.
    const own = run.ownRedis;
    if (own) {
      await own.stop().catch((err: Error) => console.error(`could not stop the bench Redis (pid ${own.pid}): ${err.message}`));
      console.log(`stopped the bench Redis and removed ${own.dir}`);
    }
  }

  process.once('exit', () => {
    run.group.killAllNow();
    run.ownRedis?.killNow();
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.error(`${signal}: stopping; logs kept in ${run.logDir}`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  const watchdog = setTimeout(() => {
    console.error(`bench exceeded ${opts.runTimeoutMs} ms: stopping`);
    void cleanup().finally(() => process.exit(1));
  }, opts.runTimeoutMs);
  watchdog.unref();

  return run;
}
