/**
 * `npm run bootstrap -- --json` (CONTRACT.md section 7): stdout is exactly one JSON object
 * with the new organization and its admin key, and that key works on the management API.
 */
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
let svc: TestService;

beforeAll(async () => {
  svc = await startTestService();
});
afterAll(() => svc.close());

describe('npm run bootstrap -- --json', () => {
  // The npm script builds dist/ first when it is stale: up to a minute on a busy machine.
  it('prints only {organization_id, admin_key} on stdout, and the key administers that organization', async () => {
    const { stdout } = await promisify(execFile)('npm', ['run', 'bootstrap', '--', '--json'], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: process.env.TEST_DATABASE_URL, REDIS_PREFIX: svc.rt.config.REDIS_PREFIX },
    });
    expect(stdout.endsWith('\n')).toBe(true);
    const printed = JSON.parse(stdout) as Record<string, string>;
    expect(Object.keys(printed).sort()).toEqual(['admin_key', 'organization_id']);
    expect(printed.admin_key).toMatch(/^svc_admin_/);
    const org = await svc.call('GET', '/v1/admin/organization', { key: printed.admin_key });
    expect(org.status).toBe(200);
    expect(org.body).toMatchObject({ id: printed.organization_id, plan: 'free' });
  }, 180_000);
});
