/**
 * A Redis of the crash test's own, in a temporary directory, persisting the way
 * production must (`appendonly yes`, `appendfsync always`, no RDB snapshots), so that
 * kill -9 and a restart from the append-only file show what a Redis crash keeps. It
 * listens on a unix socket only, so a restart finds its address free.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ready_timeout_ms = 20_000;

export class AofRedis {
  readonly dir = mkdtempSync(join(tmpdir(), 'crash-redis-'));
  readonly socket = join(this.dir, 'redis.sock');
  private child: ChildProcess | null = null;
  private output = '';
  /** Every start after the first one loaded the append-only file. */
  starts = 0;

  async start(): Promise<void> {
    if (this.child) throw new Error('redis is already running');
    const child = spawn(
      'redis-server',
      ['--port', '0', '--unixsocket', this.socket, '--unixsocketperm', '700', '--dir', this.dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', '', '--daemonize', 'no', '--loglevel', 'warning'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (this.output = (this.output + d).slice(-4_000)));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.output = (this.output + d).slice(-4_000)));
    this.child = child;
    this.starts++;
    process.once('exit', () => child.kill('SIGKILL'));
    const deadline = Date.now() + ready_timeout_ms;
    // Redis answers -LOADING while it replays the append-only file: ready means PONG.
    while (!(await this.ping())) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`redis did not start:\n${this.output}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  private async ping(): Promise<boolean> {
    return (await this.command('PING').catch(() => '')).startsWith('+PONG');
  }

  /** Sends one inline command on a connection of its own; resolves with the first reply line. */
  command(line: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = net.connect(this.socket);
      let reply = '';
      s.setTimeout(1_000, () => s.destroy(new Error(`${line}: no reply`)));
      s.on('connect', () => s.write(`${line}\r\n`));
      s.on('data', (d) => {
        reply += d;
        if (reply.includes('\r\n')) s.end();
      });
      s.on('error', reject);
      s.on('close', () => resolve(reply.split('\r\n')[0]));
    });
  }

  /** How many keys Redis holds: after a restart, what it read back from its append-only file. */
  async keys(): Promise<number> {
    return Number((await this.command('DBSIZE')).slice(1));
  }

  /** kill -9, and wait until the process is gone. */
  async kill(): Promise<void> {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await gone;
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
