/**
 * Enterprise is set by the operator only: an owner's change or preview to it is 403
 * permission_denied and changes nothing; `npm run plan -- set` (src/cli/plan.ts, run here
 * with tsx against the test database) sets it, after which the owner may stay on it or
 * move down.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ variants: [] });

const operator = /^the enterprise plan is set by the operator of this service/;

async function planCli(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const env = { ...process.env, DATABASE_URL: process.env.TEST_DATABASE_URL, REDIS_PREFIX: svc.rt.config.REDIS_PREFIX, QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX };
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'src/cli/plan.ts', ...args], { env });
    return { code: 0, out: stdout, err: stderr };
  } catch (e) {
    const f = e as { code: number; stdout: string; stderr: string };
    return { code: f.code, out: f.stdout, err: f.stderr };
  }
}

const changesOf = (organizationId: string) =>
  svc.rt.db.anyFirst(sql.type(z.object({ to_plan: z.string() }))`SELECT to_plan FROM plan_changes WHERE organization_id = ${organizationId} ORDER BY requested_at`);

describe('Enterprise', () => {
  it("an owner's change or preview to it is 403 permission_denied, and nothing changes", async () => {
    const p = await svc.project();
    const put = (plan: string) => svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan } });
    expect((await put('pro_2m')).status).toBe(200);
    const before = (await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body;
    const changesBefore = await changesOf(p.organizationId);

    expectError(await put('enterprise'), 403, 'permission_denied', { message: operator });
    expectError(await svc.call('GET', '/v1/admin/organization/plan/preview?plan=enterprise', { key: p.adminKey }), 403, 'permission_denied', { message: operator });

    expect((await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body).toEqual(before);
    expect(await changesOf(p.organizationId)).toEqual(changesBefore);
  });

  it('the operator sets it with npm run plan; the owner may then stay on it or move down', async () => {
    const p = await svc.project();
    const set = await planCli('set', '--organization', p.organizationId, '--plan', 'enterprise');
    expect(set, set.err).toMatchObject({ code: 0, out: `${p.organizationId}: free -> enterprise now; charged $0.00 on this period's invoice\n` });
    const org = (await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body;
    expect(org).toMatchObject({ plan: 'enterprise', included_ops: null, limits: { projects_max: null, keys_per_project_max: null, members_max: null } });
    expect(await changesOf(p.organizationId)).toEqual(['enterprise']);

    const put = (plan: string) => svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan } });
    expect((await put('pro_5m')).body).toMatchObject({ plan: 'enterprise', pending_plan: 'pro_5m' });
    // Staying on Enterprise cancels the downgrade: the owner may, it is the plan in force.
    expect((await put('enterprise')).body).toMatchObject({ plan: 'enterprise', pending_plan: null, change: { change: 'none' } });

    const json = await planCli('set', '--organization', p.organizationId, '--plan', 'pro_500k', '--json');
    expect(json.code, json.err).toBe(0);
    expect(JSON.parse(json.out)).toMatchObject({ current_plan: 'enterprise', plan: 'pro_500k', change: 'downgrade' });
  });

  it('npm run plan refuses bad arguments (2) and an unknown organization (1)', async () => {
    expect(await planCli('set', '--organization', 'org_x', '--plan', 'platinum')).toMatchObject({ code: 2, err: expect.stringMatching(/^plan: unknown plan "platinum"/) });
    expect(await planCli('set', '--organization', 'org_unknown', '--plan', 'pro_2m')).toMatchObject({ code: 1, err: 'plan: no organization org_unknown\n' });
  });
});
