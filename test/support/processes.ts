/**
 * Child processes of the real service (`src/web.ts`, `workers/main.ts`, run with tsx, or
 * their build under dist/) for tests that need separate processes: caches per process,
 * kill -9, the compiled service.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

/** A port that was free a moment ago, for servers that cannot bind port 0 and report it (redis-server). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

export interface ServiceProcess {
  child: ChildProcess;
  port: number;
  url: string;
  output(): string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** pino's numeric levels, to keep in output() only the lines the caller asked for. */
const log_levels: Record<string, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: Number.POSITIVE_INFINITY };
const start_timeout_ms = 20_000;

/** An entry point: the TypeScript (run with the tsx loader) or its build (`npm run build`). */
export type ServiceEntry = 'src/web.ts' | 'workers/main.ts' | 'dist/src/web.js' | 'dist/workers/main.js';

/**
 * Starts the API or the worker as a child process. An API binds port 0 and
 * reports the port the kernel gave it in its "API listening" log line, so two tests can
 * never race for a port picked in advance. That line is logged at info, so the child
 * logs at info at least; output() keeps only the lines at the level the caller asked for
 * (`LOG_LEVEL` in `env`, warn by default).
 */
export async function spawnService(entry: ServiceEntry, env: Record<string, string>): Promise<ServiceProcess> {
  const wanted = log_levels[env.LOG_LEVEL ?? 'warn'] ?? log_levels.warn;
  const childLevel = wanted <= log_levels.info ? (env.LOG_LEVEL ?? 'info') : 'info';
  const loader = entry.endsWith('.ts') ? ['--import', 'tsx'] : [];
  const child = spawn(process.execPath, [...loader, entry], {
    // The mock upstreams of the tests listen on 127.0.0.1.
    // No invoice schedule (INVOICE_INTERVAL_MS 0): its job would close every test file's periods.
    env: { ...process.env, UPSTREAM_ALLOW_PRIVATE: '1', INVOICE_INTERVAL_MS: '0', ...env, LOG_LEVEL: childLevel, PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let reportPort: (port: number) => void = () => undefined;
  const reported = new Promise<number>((resolve) => (reportPort = resolve));
  let partial = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const lines = (partial + chunk).split('\n');
    partial = lines.pop()!;
    for (const line of lines) {
      let record: { level?: number; msg?: string; port?: number } | null = null;
      try {
        record = JSON.parse(line);
      } catch {
        // not a log record: keep it as it is
      }
      if (record?.msg === 'API listening' && typeof record.port === 'number') reportPort(record.port);
      if (record === null || (record.level ?? log_levels.fatal) >= wanted) out += `${line}\n`;
    }
  });
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let port = 0;
  if (entry === 'src/web.ts' || entry === 'dist/src/web.js') {
    let timer: NodeJS.Timeout | undefined;
    const failed = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`web process did not report its port within ${start_timeout_ms} ms: ${out}`)), start_timeout_ms);
      void exited.then(() => reject(new Error(`web process exited: ${out}`)));
    });
    try {
      port = await Promise.race([reported, failed]);
    } catch (e) {
      child.kill('SIGKILL');
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }
  return {
    child,
    port,
    url: `http://127.0.0.1:${port}`,
    output: () => out + partial,
    async kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}
