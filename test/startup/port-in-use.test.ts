/**
 * A process started on a port that is taken says so in one line, naming the port and the
 * variable that sets it, and exits 1 without a stack trace: `npm run web` (PORT,
 * METRICS_PORT), `npm start` (PORT) and the mock upstream (MOCK_UPSTREAM_PORT). Each is
 * spawned with tsx against a port this test holds.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/processes.js';

const root = resolve(import.meta.dirname, '../..');
let held: Server;
let heldPort: number;
/** npm start writes the demo's credentials to its working directory when it sets up an empty database. */
let workDir: string;

beforeAll(async () => {
  held = createServer();
  await new Promise<void>((ok) => held.listen(0, '127.0.0.1', ok));
  heldPort = (held.address() as { port: number }).port;
  workDir = mkdtempSync(join(tmpdir(), 'svc-port-'));
});
afterAll(async () => {
  await new Promise<void>((ok) => held.close(() => ok()));
  rmSync(workDir, { recursive: true, force: true });
});

/** Runs `entry` (tsx) with `env` until it exits: its code and what it printed. */
function run(entry: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    // The tsx loader by its path: the working directory is not the project's.
    const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), join(root, entry)], {
      cwd: workDir,
      env: {
        ...process.env,
        DATABASE_URL: process.env.TEST_DATABASE_URL!,
        REDIS_PREFIX: `tport${randomBytes(3).toString('hex')}:`,
        HOST: '127.0.0.1',
        SVC_MASTER_KEY: randomBytes(32).toString('hex'),
        LOG_LEVEL: 'warn',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      fail(new Error(`${entry} did not exit: ${stdout}${stderr}`));
    }, 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

function expectOneLine(r: { code: number | null; stdout: string; stderr: string }, line: string): void {
  const printed = `${r.stdout}${r.stderr}`;
  expect({ code: r.code, stderr: r.stderr }, printed).toEqual({ code: 1, stderr: `${line}\n` });
  expect(printed).not.toMatch(/\n\s+at /);
}

describe('a taken port', () => {
  it('npm run web: PORT', async () => {
    expectOneLine(await run('src/web.ts', { PORT: String(heldPort) }), `port ${heldPort} is already in use: set PORT to another port`);
  });

  it('npm run web: METRICS_PORT', async () => {
    const r = await run('src/web.ts', { PORT: String(await freePort()), METRICS_PORT: String(heldPort) });
    expectOneLine(r, `port ${heldPort} is already in use: set METRICS_PORT to another port`);
  });

  it('npm start: PORT', async () => {
    const r = await run('src/main.ts', { PORT: String(heldPort), MOCK_UPSTREAM_PORT: String(await freePort()) });
    expectOneLine(r, `port ${heldPort} is already in use: set PORT to another port`);
  });

  it('the mock upstream: MOCK_UPSTREAM_PORT', async () => {
    const r = await run('src/gateway/mock/main.ts', { MOCK_UPSTREAM_PORT: String(heldPort) });
    expectOneLine(r, `port ${heldPort} is already in use: set MOCK_UPSTREAM_PORT to another port`);
  });
});
