/**
 * The build production runs (`npm run build`, dist/): most of the suite runs the
 * TypeScript with tsx, so this file is what keeps the build from breaking unnoticed. The
 * compiled web and worker processes start from dist/, find the Lua scripts, the
 * migrations and the dashboard's assets at the repository root from there, serve a
 * deposit, a deduct, the dashboard's files and the OpenAPI document the build wrote, and
 * the compiled worker copies both ledger entries to PostgreSQL.
 */
import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { sql } from 'slonik';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';
import { svc, useTestService } from '../support/service.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const build_timeout_ms = 180_000;

beforeAll(() => {
  // A no-op when dist/ is newer than the sources (CI builds it before the tests).
  execFileSync(process.execPath, [join(root, 'scripts', 'build-if-stale.mjs')], { cwd: root, stdio: 'inherit' });
}, build_timeout_ms);
useTestService({ variants: [] });

describe('the compiled service', () => {
  it('finds the repository root (lua/, migrations/) from dist/, and its migrate command runs', async () => {
    const { projectRoot } = (await import(pathToFileURL(join(root, 'dist', 'src', 'root.js')).href)) as { projectRoot: string };
    expect(projectRoot).toBe(root);
    const { stdout } = await promisify(execFile)(process.execPath, ['dist/src/cli/migrate.js'], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: process.env.TEST_DATABASE_URL! },
    });
    // The global setup applied every migration; a missing migrations/ would throw instead.
    expect(stdout.trim()).toBe('database is up to date');
  });

  it('carries no keepNames wrappers on the hot path', () => {
    // tsx (esbuild with keepNames) wraps named closures in __name(...); tsc does not.
    for (const file of ['src/ledger/service.js', 'src/http/front-door.js', 'src/gateway/relay.js']) {
      expect(readFileSync(join(root, 'dist', file), 'utf8')).not.toContain('__name(');
    }
  });

  it('serves a deposit and a deduct from the compiled web process, and the compiled worker persists both', async () => {
    const p = await svc.project();
    const env = {
      REDIS_PREFIX: svc.rt.config.REDIS_PREFIX,
      QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX,
      DATABASE_URL: process.env.TEST_DATABASE_URL!,
      SVC_CLOCK_CONTROL: '0',
    };
    const processes: ServiceProcess[] = [];
    try {
      const web = await spawnService('dist/src/web.js', env);
      processes.push(web);
      processes.push(await spawnService('dist/workers/main.js', env));
      const post = async (path: string, body: unknown) => {
        const r = await fetch(`${web.url}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${p.projectKey}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        return { status: r.status, body: (await r.json()) as Record<string, unknown> };
      };
      const deposit = await post('/v1/customers/deposit', { customer_id: 'b1', amount: 1_000 });
      expect(deposit.status, JSON.stringify(deposit.body)).toBe(200);
      const deduct = await post('/v1/billing/deduct', { customer_id: 'b1', transaction_id: 'b1-d1', amount: 300 });
      expect(deduct.status, JSON.stringify(deduct.body)).toBe(200);
      const balance = await fetch(`${web.url}/v1/customers/b1/balance`, { headers: { authorization: `Bearer ${p.projectKey}` } });
      expect(((await balance.json()) as { available: number }).available).toBe(700);
      // The dashboard's files: htmx from node_modules, ours from assets/, both found from dist/.
      for (const path of ['/dashboard/sign-in', '/dashboard/assets/htmx.min.js', '/dashboard/assets/dashboard.js', '/dashboard/assets/dashboard.css']) {
        const r = await fetch(`${web.url}${path}`);
        expect([path, r.status, (await r.text()).length > 0]).toEqual([path, 200, true]);
      }
      // The OpenAPI document: the one `npm run build` wrote (src/openapi/routes.ts), the same as the code generates.
      const served = await fetch(`${web.url}/openapi.json`);
      expect(served.status).toBe(200);
      expect(await served.text()).toBe(readFileSync(join(root, 'dist', 'openapi.json'), 'utf8'));
      const { generateDocument } = (await import(pathToFileURL(join(root, 'dist', 'src', 'openapi', 'document.js')).href)) as { generateDocument(): unknown };
      await import(pathToFileURL(join(root, 'dist', 'src', 'app.js')).href);
      expect(JSON.parse(readFileSync(join(root, 'dist', 'openapi.json'), 'utf8'))).toEqual(generateDocument());
      for (const path of ['/docs', '/docs/swagger-ui-bundle.js', '/docs/docs.js']) {
        const r = await fetch(`${web.url}${path}`);
        expect([path, r.status, (await r.text()).length > 0]).toEqual([path, 200, true]);
      }

      const persisted = await waitFor(
        async () => {
          const rows = await svc.rt.db.any(sql.unsafe`
            SELECT type, amount FROM ledger_entries WHERE project_id = ${p.projectId} AND customer_id = 'b1' ORDER BY seq`);
          return rows.length === 2 ? rows : null;
        },
        20_000,
        'the compiled worker to persist the ledger entries',
      );
      expect(persisted).toEqual([
        { type: 'DEPOSIT', amount: 1_000 },
        { type: 'DEDUCT', amount: 300 },
      ]);
    } finally {
      await Promise.all(processes.map((proc) => proc.kill('SIGTERM')));
    }
  });
});
