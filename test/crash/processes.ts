/**
 * Service processes for the crash test: the API (`src/web.ts`) and a worker
 * (`workers/main.ts`) run as real child processes, started with `node --import tsx` so
 * that SIGKILL hits the service itself and not a wrapper, and killed without warning.
 * The API binds port 0 and this reads the port it reports in its "API listening" log
 * line, so each restart gets a port nobody else holds. A child that ends without being
 * killed here is recorded with its exit code and signal (`deaths`), its port forgotten,
 * and its last stderr lines kept (`describe()`), so a test can say why its API stopped
 * answering instead of failing later on a refused connection.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const projectRoot = fileURLToPath(new URL('../..', import.meta.url));

/** Lines of a process's stderr (and error log lines) kept for failure messages. */
const output_lines_max = 50;

export class ServiceProcess {
  private child: ChildProcess | null = null;
  private readonly lines: string[] = [];
  /** The API's port while it listens; null while it starts or is down. */
  port: number | null = null;
  /**
   * Lines where ioredis reported an error event nobody listened to, over every run of
   * this process: a connection without an error listener, which the service must not have.
   */
  unhandledRedisErrors = 0;
  /** The service's own "unhandled error" log lines (its 500s), every one, for failure messages. */
  readonly serverErrors: string[] = [];
  /**
   * How each run of this process ended: `killed` when this object sent the SIGKILL; any
   * other end (an exit code, a signal from elsewhere) is a death the test did not cause.
   */
  readonly exits: { pid: number; code: number | null; signal: NodeJS.Signals | null; killed: boolean; at: string; stderr?: string }[] = [];
  /** The last log lines of the current run, whatever their level: what a start that hangs was doing. */
  private recentStdout: string[] = [];
  /** Children this object sent SIGKILL to: their end is not a death. */
  private readonly killing = new WeakSet<ChildProcess>();
  /** Every child this object started, for the final cleanup. */
  private static readonly all = new Set<ChildProcess>();

  constructor(
    readonly name: string,
    private readonly script: string,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  start(): void {
    if (this.child) throw new Error(`${this.name} is already running`);
    // Also when the test process ends without reaching afterAll.
    if (ServiceProcess.all.size === 0) process.once('exit', ServiceProcess.killAll);
    // No invoice schedule: its job would close the periods of every test file's organizations.
    const child = spawn(process.execPath, ['--import', 'tsx', this.script], { cwd: projectRoot, env: { INVOICE_INTERVAL_MS: '0', ...this.env, PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (text: string) => {
      this.lines.push(text);
      this.lines.splice(0, Math.max(0, this.lines.length - output_lines_max));
    };
    // This child's own stderr, apart from the error log lines: what Node prints as it dies.
    const stderrTail: string[] = [];
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      for (const line of chunk.split('\n').filter(Boolean)) {
        if (line.includes('[ioredis] Unhandled error event')) this.unhandledRedisErrors++;
        keep(line);
        stderrTail.push(line);
        stderrTail.splice(0, Math.max(0, stderrTail.length - output_lines_max));
      }
    });
    let partial = '';
    const recent: string[] = [];
    this.recentStdout = recent;
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        recent.push(line.slice(0, 500));
        recent.splice(0, Math.max(0, recent.length - 10));
        if (line.includes('"API listening"')) this.port = (JSON.parse(line) as { port: number }).port;
        else if (line.includes('"msg":"unhandled error"')) this.serverErrors.push(line);
        else if (/"level":(50|60)/.test(line)) keep(line);
      }
    });
    ServiceProcess.all.add(child);
    child.once('exit', (code, signal) => {
      ServiceProcess.all.delete(child);
      const killed = this.killing.has(child);
      this.exits.push({ pid: child.pid ?? 0, code, signal, killed, at: new Date().toISOString(), ...(killed ? {} : { stderr: stderrTail.join('\n') }) });
      if (!killed) keep(`${this.name} (pid ${child.pid}) exited by itself: code ${code}, signal ${signal}`);
      // A process that died on its own no longer listens.
      if (this.child === child) this.port = null;
    });
    this.child = child;
  }

  /** Resolves with the port once the API reports it listens. */
  async listening(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    while (this.port === null) {
      if (!this.running) throw new Error(`${this.name} is not running:\n${this.stderr}`);
      if (Date.now() > deadline) throw new Error(`${this.name} did not report its port within ${timeoutMs} ms:\n${this.stderr}\nits last log lines:\n${this.recentStdout.join('\n')}`);
      await sleep(20);
    }
    return this.port;
  }

  /** kill -9, and wait until the process is gone. */
  async kill(): Promise<void> {
    const child = this.child;
    this.child = null;
    this.port = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((resolve) => child.once('exit', resolve));
    this.killing.add(child);
    child.kill('SIGKILL');
    await gone;
  }

  /** Ends of runs the test did not cause (none when every end was a kill of ours). */
  get deaths(): string[] {
    return this.exits.filter((e) => !e.killed).map((e) => `${this.name} pid ${e.pid} exited at ${e.at}: code ${e.code}, signal ${e.signal}; its stderr:\n${e.stderr}`);
  }

  /** Whether it runs, how its runs ended, and its last stderr and error lines: for failure messages. */
  describe(): string {
    const state = this.running ? `running (pid ${this.child!.pid}, port ${this.port})` : 'not running';
    const exits = this.exits.map(({ stderr: _stderr, ...e }) => e);
    return `${this.name}: ${state}; exits ${JSON.stringify(exits)}\n${this.stderr}`;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  get stderr(): string {
    return this.lines.join('\n');
  }

  /** Kills every child still alive; for afterAll, whatever happened before. */
  static killAll(): void {
    for (const child of ServiceProcess.all) child.kill('SIGKILL');
  }
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The environment of a crash test's web and worker processes: the test's Redis, key and
 * queue prefixes, database and master key, info logs, short sweep and persist passes;
 * `extra` on top.
 */
export function crashServiceEnv(
  o: { redisUrl: string; redisPrefix: string; queuePrefix: string; databaseUrl: string | undefined; masterKey: string },
  extra: NodeJS.ProcessEnv = {},
): NodeJS.ProcessEnv {
  return {
    ...process.env,
    REDIS_URL: o.redisUrl,
    REDIS_PREFIX: o.redisPrefix,
    QUEUE_PREFIX: o.queuePrefix,
    DATABASE_URL: o.databaseUrl,
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    SWEEP_INTERVAL_MS: '500',
    PERSIST_IDLE_MS: '5',
    PERSIST_IDLE_MAX_MS: '5',
    SVC_MASTER_KEY: o.masterKey,
    ...extra,
  };
}

/**
 * POSTs `body` to `path` with `key` on one of `webs` (turn by turn, waiting while one is
 * down), sending the same request again after a connection error or a 503 (the contract's
 * retry: it may have applied, the same id tells) until `giveUpAt`. Null when no other
 * answer came.
 */
export async function postUntilAnswered(
  webs: readonly ServiceProcess[],
  o: { path: string; key: string; body: unknown; turn: number; giveUpAt: number; timeoutMs: number },
): Promise<{ status: number; body: { error?: { code: string } } } | null> {
  for (let attempt = 0; Date.now() < o.giveUpAt; attempt++) {
    const web = webs[(o.turn + attempt) % webs.length];
    if (web.port === null) {
      await sleep(50);
      continue;
    }
    try {
      const res = await fetch(`http://127.0.0.1:${web.port}${o.path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${o.key}`, 'content-type': 'application/json' },
        body: JSON.stringify(o.body),
        signal: AbortSignal.timeout(o.timeoutMs),
      });
      const body = (await res.json()) as { error?: { code: string } };
      if (res.status !== 503) return { status: res.status, body };
    } catch {
      // A connection error or a timeout: sent again below.
    }
    await sleep(50);
  }
  return null;
}

/** A small deterministic generator, so a failing run can be read again. */
export function random(seed: number): (n: number) => number {
  let s = seed;
  return (n) => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return 1 + (s % n);
  };
}
