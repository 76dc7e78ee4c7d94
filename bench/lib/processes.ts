/**
 * Child processes for benches: entry points run by this same Node binary, the service's
 * compiled JavaScript (dist/) with plain node as production runs it and TypeScript with
 * the tsx loader (and other programs, such as a bench's own redis-server), their output
 * sent to a log file (a terminal or a pipe read by the load
 * generator would become the bottleneck), and a group that stops every child it started,
 * also when the bench fails half-way.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';

export const stop_grace_ms = 5_000;
export const log_tail_bytes = 4_000;

export interface NodeProcessSpec {
  name: string;
  /** A .js entry point, or a .ts one (run with the tsx loader). */
  script: string;
  env: NodeJS.ProcessEnv;
  /** Where stdout and stderr go; '/dev/null' to discard. */
  logPath: string;
  /** Extra Node flags, e.g. ['--cpu-prof', '--cpu-prof-dir=/tmp/prof']; a .ts preload among them brings the tsx loader too. */
  nodeArgs?: string[];
  /** Arguments after the script, e.g. ['--port=8787']. */
  args?: string[];
  cwd?: string;
}

export interface NodeProcess {
  name: string;
  pid: number;
  logPath: string;
  /** Resolves with the exit code (or signal name) when the process ends. */
  exited: Promise<string>;
  isRunning(): boolean;
  /** The last bytes of the log, for error messages. */
  logTail(): string;
}

/** Any program (redis-server, say) with its output sent to a log file. */
export interface CommandSpec {
  name: string;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  /** Where stdout and stderr go; '/dev/null' to discard. */
  logPath: string;
  cwd?: string;
}

/** A started process and the handle that signals it. */
export interface SpawnedProcess {
  proc: NodeProcess;
  child: ChildProcess;
}

export function spawnLogged(spec: CommandSpec): SpawnedProcess {
  const fd = openSync(spec.logPath, 'a');
  const child = spawn(spec.command, spec.args, { cwd: spec.cwd, env: spec.env, stdio: ['ignore', fd, fd] });
  // The child holds its own copy of the descriptor.
  closeSync(fd);
  if (child.pid === undefined) {
    // A command that cannot start also emits 'error', which would crash the bench unheard.
    child.once('error', () => undefined);
    throw new Error(`${spec.name}: spawn of ${spec.command} failed`);
  }
  let running = true;
  const exited = new Promise<string>((resolve) => {
    child.once('exit', (code, signal) => {
      running = false;
      resolve(signal ?? String(code));
    });
  });
  const proc: NodeProcess = {
    name: spec.name,
    pid: child.pid,
    logPath: spec.logPath,
    exited,
    isRunning: () => running,
    logTail: () => readTail(spec.logPath),
  };
  return { proc, child };
}

/** SIGTERM (the process shuts down cleanly), SIGKILL after the grace time; resolves once it has exited. */
export async function stopProcess({ proc, child }: SpawnedProcess, graceMs = stop_grace_ms): Promise<void> {
  if (!proc.isRunning()) return;
  child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const killed = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve();
    }, graceMs);
  });
  await Promise.race([proc.exited, killed]);
  clearTimeout(timer);
  await proc.exited;
}

export class ProcessGroup {
  private readonly children: SpawnedProcess[] = [];

  start(spec: NodeProcessSpec): NodeProcess {
    const spawned = spawnLogged({
      name: spec.name,
      command: process.execPath,
      args: [...loaderFor(spec), ...(spec.nodeArgs ?? []), spec.script, ...(spec.args ?? [])],
      env: spec.env,
      logPath: spec.logPath,
      cwd: spec.cwd,
    });
    this.children.push(spawned);
    return spawned.proc;
  }

  /** Stops every running child (stopProcess), all at once. */
  async stopAll(graceMs = stop_grace_ms): Promise<void> {
    await Promise.all(this.children.map((c) => stopProcess(c, graceMs)));
  }

  /** Last resort for process 'exit' handlers, which cannot wait. */
  killAllNow(): void {
    for (const c of this.children) if (c.proc.isRunning()) c.child.kill('SIGKILL');
  }
}

/**
 * The tsx loader when the child runs TypeScript (its script or a preload), nothing for
 * JavaScript: a loader costs start-up, and tsx's keepNames wraps named closures in a
 * `__name` call, which would show in the profiles of the compiled service.
 */
function loaderFor(spec: NodeProcessSpec): string[] {
  const runsTypeScript = [spec.script, ...(spec.nodeArgs ?? [])].some((a) => a.endsWith('.ts'));
  return runsTypeScript ? ['--import', 'tsx'] : [];
}

function readTail(path: string): string {
  if (path === '/dev/null') return '';
  try {
    const text = readFileSync(path, 'utf8');
    return text.slice(-log_tail_bytes);
  } catch {
    return '';
  }
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function canConnect(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Polls `check` until it returns true; fails at the deadline or when `proc` exits first. */
export async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs: number, proc?: NodeProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc && !proc.isRunning()) {
      throw new Error(`${proc.name} exited (${await proc.exited}) while waiting for ${what}; log tail:\n${proc.logTail()}`);
    }
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  const tail = proc ? `; log tail of ${proc.name}:\n${proc.logTail()}` : '';
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${tail}`);
}

export function waitForPort(port: number, timeoutMs: number, proc?: NodeProcess, host = '127.0.0.1'): Promise<void> {
  return waitUntil(`${host}:${port} to accept connections`, () => canConnect(port, host), timeoutMs, proc);
}

