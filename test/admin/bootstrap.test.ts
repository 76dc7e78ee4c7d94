/**
 * `npm run bootstrap -- --json` (docs/API.md, "POST /v1/admin/members"): stdout is
 * exactly one JSON object with the new organization, its admin key, its owner's sign-in
 * and the dashboard's address; the key works on the management API and the owner signs
 * in.
 */
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { svc, useTestService } from '../support/service.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

useTestService({ variants: [] });

describe('npm run bootstrap -- --json', () => {
  // The npm script builds dist/ first when it is stale: up to a minute on a busy machine.
  it('prints only {organization_id, admin_key, owner, dashboard_url} on stdout; the key administers that organization, the owner signs in', async () => {
    const { stdout } = await promisify(execFile)('npm', ['run', 'bootstrap', '--', '--json'], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: process.env.TEST_DATABASE_URL, REDIS_PREFIX: svc.rt.config.REDIS_PREFIX, PORT: '3999' },
    });
    expect(stdout.endsWith('\n')).toBe(true);
    const printed = JSON.parse(stdout) as { organization_id: string; admin_key: string; owner: { email: string; password: string }; dashboard_url: string };
    expect(Object.keys(printed).sort()).toEqual(['admin_key', 'dashboard_url', 'organization_id', 'owner']);
    expect(printed.dashboard_url).toBe('http://127.0.0.1:3999/dashboard');
    expect(Object.keys(printed.owner).sort()).toEqual(['email', 'password']);
    expect(printed.admin_key).toMatch(/^svc_admin_/);
    const org = await svc.call('GET', '/v1/admin/organization', { key: printed.admin_key });
    expect(org.status).toBe(200);
    expect(org.body).toMatchObject({ id: printed.organization_id, plan: 'free' });
    const session = await svc.call('POST', '/dashboard/api/session', { body: { ...printed.owner, organization_id: printed.organization_id } });
    expect(session.status).toBe(201);
    expect(session.body.member).toMatchObject({ email: printed.owner.email, role: 'owner' });
  }, 180_000);
});
