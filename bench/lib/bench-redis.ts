/**
 * Which Redis a bench runs against (BENCH_REDIS_PERSISTENCE). By default the shared one at
 * REDIS_URL, which on this project's machines keeps nothing on disk. With `none`,
 * `everysec` or `always` the bench starts its own redis-server in a temporary directory on
 * a free port, with the append-only file off or fsynced as named, so that the cost of the
 * production setting (`appendfsync always`, docs/OPERATIONS.md) can be measured against
 * the same server without it. `none` is that same own server without an append-only file:
 * compared with the shared Redis it would also differ by the other clients' load.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RedisClient } from '../../src/redis/client.js';
import { freePort, spawnLogged, stopProcess, waitForPort, type SpawnedProcess } from './processes.js';

export const redis_persistence_settings = ['shared', 'none', 'everysec', 'always'] as const;
export type RedisPersistence = (typeof redis_persistence_settings)[number];

export function parseRedisPersistence(value: string | undefined): RedisPersistence {
  const setting = value === undefined || value === '' ? 'shared' : value;
  const known = redis_persistence_settings.find((s) => s === setting);
  if (!known) throw new Error(`BENCH_REDIS_PERSISTENCE must be one of ${redis_persistence_settings.join(', ')}, not ${JSON.stringify(value)}`);
  return known;
}

export interface BenchRedis {
  url: string;
  pid: number;
  /** Holds the append-only file; removed by stop(). */
  dir: string;
  /** Shuts the server down (SIGTERM, SIGKILL after the grace time) and removes its directory. */
  stop(): Promise<void>;
  /** For process 'exit' handlers, which cannot wait. */
  killNow(): void;
}

/** Starts a redis-server with the given persistence; resolves when it accepts connections. */
export async function startBenchRedis(persistence: Exclude<RedisPersistence, 'shared'>, logDir: string, timeoutMs: number): Promise<BenchRedis> {
  // Under the system's temporary directory, on the disk the append-only file is fsynced to
  // (a tmpfs would make fsync free and the measurement meaningless; the report names the
  // directory).
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-redis-'));
  const port = await freePort();
  const aof = persistence === 'none' ? ['--appendonly', 'no'] : ['--appendonly', 'yes', '--appendfsync', persistence];
  let spawned: SpawnedProcess;
  try {
    spawned = spawnLogged({
      name: 'redis-server',
      command: 'redis-server',
      args: ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', ...aof],
      env: process.env,
      logPath: join(logDir, 'redis.log'),
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  const redis: BenchRedis = {
    url: `redis://127.0.0.1:${port}`,
    pid: spawned.proc.pid,
    dir,
    async stop() {
      await stopProcess(spawned);
      removeDir();
    },
    killNow() {
      if (spawned.proc.isRunning()) spawned.child.kill('SIGKILL');
      removeDir();
    },
  };
  try {
    await waitForPort(port, timeoutMs, spawned.proc);
  } catch (err) {
    await redis.stop();
    throw err;
  }
  return redis;
}

/**
 * What the Redis a run used persisted, read from the server itself (CONFIG GET) rather than
 * from the setting that asked for it, for the report's header.
 */
export async function describeRedis(redis: RedisClient, persistence: RedisPersistence, own: BenchRedis | undefined): Promise<string> {
  let config: string;
  try {
    const [, appendonly] = (await redis.config('GET', 'appendonly')) as string[];
    const [, appendfsync] = (await redis.config('GET', 'appendfsync')) as string[];
    config = appendonly === 'yes' ? `\`appendonly yes\`, \`appendfsync ${appendfsync}\`` : '`appendonly no`';
  } catch (err) {
    config = `configuration unreadable (${(err as Error).message})`;
  }
  const where = own ? `the bench's own redis-server (directory ${own.dir})` : 'the shared Redis (REDIS_URL), other clients included';
  return `Redis: BENCH_REDIS_PERSISTENCE=${persistence}, ${where}, ${config}`;
}
