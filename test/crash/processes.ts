/**
 * Service processes for the crash test: the API (`src/web.ts`) and a worker
 * (`workers/main.ts`) run as real child processes, started with `node --import tsx` so
 * that SIGKILL hits the service itself and not a wrapper, and killed without warning.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

const projectRoot = fileURLToPath(new URL('../..', import.meta.url));

/** Lines of a process's stderr kept for failure messages. */
export const output_lines_max = 50;

export class ServiceProcess {
  private child: ChildProcess | null = null;
  private readonly lines: string[] = [];
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
    const child = spawn(process.execPath, ['--import', 'tsx', this.script], { cwd: projectRoot, env: this.env, stdio: ['ignore', 'ignore', 'pipe'] });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      this.lines.push(...chunk.split('\n').filter(Boolean));
      this.lines.splice(0, Math.max(0, this.lines.length - output_lines_max));
    });
    ServiceProcess.all.add(child);
    child.once('exit', () => ServiceProcess.all.delete(child));
    this.child = child;
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

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null;
  }

  get stderr(): string {
    return this.lines.join('\n');
  }

  /** Kills every child still alive; for afterAll, whatever happened before. */
  static killAll(): void {
    for (const child of ServiceProcess.all) child.kill('SIGKILL');
  }
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
