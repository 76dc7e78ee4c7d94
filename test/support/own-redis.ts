/**
 * A redis-server of a test's own, in a temporary directory, on a port that stays the same
 * across restarts (a service reconnects to it by itself): for tests that kill Redis,
 * restore its files or change its persistence settings without touching the shared one.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './processes.js';

export interface OwnRedis {
  dir: string;
  port: number;
  url: string;
  /** True while the redis-server process runs. */
  readonly running: boolean;
  /** Starts redis-server (again) with these extra arguments; resolves once it accepts connections. */
  start(args?: string[]): Promise<void>;
  /** kill -9, as a crash. */
  kill(): Promise<void>;
  /** Kills it if running and removes its directory. */
  remove(): Promise<void>;
}

/** One redis-server process on a fixed port and directory, started and killed at will. */
export interface RedisServerProcess {
  /** True while the process runs. */
  readonly running: boolean;
  /** Starts redis-server with these arguments; resolves once it accepts connections. */
  start(args: string[]): Promise<void>;
  /** kill -9, as a crash. */
  kill(): Promise<void>;
}

const start_timeout_ms = 10_000;

export function redisServerProcess(port: number, dir: string): RedisServerProcess {
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();
  const running = () => child !== null && child.exitCode === null && child.signalCode === null;
  return {
    get running() {
      return running();
    },
    async start(args) {
      const c = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      child = c;
      exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
      let out = '';
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${out}`)), start_timeout_ms);
        const onData = (d: Buffer) => {
          out += d;
          if (out.includes('Ready to accept connections')) {
            clearTimeout(timer);
            resolve();
          }
        };
        c.stdout!.on('data', onData);
        c.stderr!.on('data', onData);
        c.once('exit', () => {
          clearTimeout(timer);
          reject(new Error(`redis-server exited: ${out}`));
        });
      });
    },
    async kill() {
      if (running()) child!.kill('SIGKILL');
      await exited;
    },
  };
}

export async function ownRedis(prefix: string): Promise<OwnRedis> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const port = await freePort();
  const server = redisServerProcess(port, dir);
  const self: OwnRedis = {
    dir,
    port,
    url: `redis://127.0.0.1:${port}`,
    get running() {
      return server.running;
    },
    start: (args = ['--save', '', '--appendonly', 'no']) => server.start(args),
    kill: () => server.kill(),
    async remove() {
      await self.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return self;
}
