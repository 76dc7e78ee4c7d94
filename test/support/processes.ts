/**
 * Child processes of the real service (`src/web.ts`, `workers/main.ts`) for tests that
 * need separate processes: caches per process, kill -9.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

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

export async function spawnService(entry: 'src/web.ts' | 'workers/main.ts', env: Record<string, string>): Promise<ServiceProcess> {
  const port = entry === 'src/web.ts' ? await freePort() : 0;
  const child = spawn(process.execPath, ['--import', 'tsx', entry], {
    env: { ...process.env, LOG_LEVEL: 'warn', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  if (entry === 'src/web.ts') {
    const deadline = Date.now() + 20_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`web process exited: ${out}`);
      try {
        if ((await fetch(`${url}/health`)).status > 0) break;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`web process did not start: ${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    child,
    port,
    url,
    output: () => out,
    async kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}
