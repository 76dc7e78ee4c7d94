/**
 * `npm run reconcile` refuses bad arguments with a clear message on stderr, exit 2 and
 * nothing on stdout, before it checks anything; `--customer` scopes the run to the
 * customers named, with the progress on stderr and the JSON report alone on stdout.
 *
 * The CLI runs from the build, as `npm run reconcile` runs it (dist/src/cli/reconcile.js,
 * built when stale): a start costs a fraction of what tsx's loader does.
 */
import { execFile, execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { customerKeys } from '../../src/redis/keys.js';
import { p, svc, useTestService } from '../support/service.js';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..', '..');
/** A build when dist/ is stale (a developer's run after an edit) takes a while on a busy machine. */
const build_timeout_ms = 180_000;

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = {
    ...process.env,
    DATABASE_URL: process.env.TEST_DATABASE_URL,
    REDIS_PREFIX: svc.rt.config.REDIS_PREFIX,
    QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX,
    LOG_LEVEL: 'warn',
  };
  try {
    const { stdout, stderr } = await run(process.execPath, ['dist/src/cli/reconcile.js', ...args], { cwd: root, env });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

useTestService({ workers: true });
beforeAll(async () => {
  // A no-op when dist/ is newer than the sources (CI builds it before the tests).
  execFileSync(process.execPath, [join(root, 'scripts', 'build-if-stale.mjs')], { cwd: root, stdio: 'inherit' });
  for (const id of ['a1', 'a2', 'a3']) {
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: id, amount: 10, name: id } })).status).toBe(200);
  }
  await svc.drained();
}, build_timeout_ms);

describe('npm run reconcile', () => {
  it('refuses bad arguments with exit 2, the reason and the usage on stderr, nothing on stdout', async () => {
    const cases: [string[], string][] = [
      [['--colour'], "Unknown option '--colour'"],
      [['--project'], "Option '--project <value>' argument missing"],
      [['--customer', 'a1'], '--customer needs --project (a customer id is unique within its project)'],
      [['--project', ' '], '--project needs a non-empty id'],
      [['--concurrency', '0'], '--concurrency must be an integer from 1 to 64, got "0"'],
      [['--concurrency', '2.5'], '--concurrency must be an integer from 1 to 64, got "2.5"'],
      [['--list-max', '-1'], "Option '--list-max' argument is ambiguous"],
      [['--list-max', 'many'], '--list-max must be an integer from 0 to 1000000, got "many"'],
      [['--project', 'proj_nope'], 'reconcile: project "proj_nope" not found'],
    ];
    // Four CLIs at a time.
    const results: Awaited<ReturnType<typeof cli>>[] = [];
    let next = 0;
    await Promise.all(Array.from({ length: 4 }, async () => {
      for (let i = next++; i < cases.length; i = next++) results[i] = await cli(...cases[i]![0]);
    }));
    cases.forEach(([args, message], i) => {
      const r = results[i]!;
      expect([args, r.code, r.stdout]).toEqual([args, 2, '']);
      expect(r.stderr, args.join(' ')).toContain(message);
    });
    // The usage is shown with an argument's mistake (the first case's).
    expect(results[0]!.stderr).toContain('usage: npm run reconcile');
  }, 120_000);

  it('checks only the customers named with --customer, progress on stderr and the JSON alone on stdout', async () => {
    await svc.rt.redis.hset(customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'a2').meta, 'name', 'tampered');
    await svc.rt.redis.hset(customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'a3').meta, 'name', 'tampered');
    const r = await cli('--project', p.projectId, '--customer', 'a1', '--customer', 'a2', '--json');
    expect(r.code).toBe(1);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ customers_checked: 2, customers_with_drift: 1, drift_total: 1 });
    expect(report.drift).toEqual([{ project_id: p.projectId, customer_id: 'a2', field: 'meta.name', redis: 'tampered', expected: 'a2' }]);
    expect(r.stderr).toMatch(/^reconcile: 2\/2 customers \(100%\), 1 with drift \(1 items\), 0 errors, [\d,]+\/s, [\d.]+ s$/m);

    const listed = await cli('--project', p.projectId, '--list-max', '1', '--skip-redis-scan');
    expect(listed.code).toBe(1);
    expect(listed.stdout).toContain('checked 3 customers: 2 with drift');
    expect(listed.stdout).toContain('... and 1 more drift items not listed (--list-max 1)');
  }, 120_000);
});
