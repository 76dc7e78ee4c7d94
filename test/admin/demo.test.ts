/**
 * The demo that `npm start` makes stays on the Free plan with the demo allowance, so that
 * every feature can be tried at once: customer and project keys beside the demo's own
 * two, more projects, a team. An organization made by `npm run bootstrap` keeps Free's
 * limits, and without --owner-email gets an owner email of its own.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootstrapDemo, bootstrapOrganization, demo_owner_email, type Demo } from '../../src/bootstrap.js';
import { demo_allowance, plans } from '../../src/plans/catalogue.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

let demo: Demo;

useTestService({ variants: [] });
beforeAll(async () => {
  demo = await bootstrapDemo(svc.rt, 'http://127.0.0.1:9/v1');
  demoOrganizations.push(demo.organization_id);
});
/** Organizations whose members this file made with the demo owner's email. */
const demoOrganizations: string[] = [];

afterAll(async () => {
  // Sign-in reads at most sign_in_candidates_max memberships of an email: the demo
  // owner's address of this file's organizations must not crowd out other files' demos.
  const client = new pg.Client({ connectionString: svc.rt.config.DATABASE_URL });
  await client.connect();
  await client.query('DELETE FROM members WHERE organization_id = ANY($1)', [demoOrganizations]).finally(() => client.end());
});

const asDemo = (method: string, path: string, body?: unknown) => svc.call(method, `/v1/admin${path}`, { key: demo.admin_key, body });

describe('the demo organization', () => {
  it('is on Free with the demo allowance, and says so with its limits', async () => {
    const org = await asDemo('GET', '/organization');
    expect(org.body).toMatchObject({
      plan: 'free',
      hard_limit: true,
      included_ops: plans.free.includedOps,
      demo_allowance: true,
      limits: { projects_max: demo_allowance.projectsMax, keys_per_project_max: demo_allowance.keysPerProjectMax, members_max: demo_allowance.membersMax },
    });
  });

  it('creates customer and project keys beside its own two, with allowed_models of its models', async () => {
    const customerKey = await asDemo('POST', `/projects/${demo.project_id}/keys`, { type: 'customer', customer_id: demo.customer_id, allowed_models: ['demo-gpt'] });
    expect(customerKey.status, JSON.stringify(customerKey.body)).toBe(201);
    const balance = await svc.call('GET', `/v1/customers/${demo.customer_id}/balance`, { key: customerKey.body.key });
    expect(balance.status).toBe(200);
    expect((await asDemo('POST', `/projects/${demo.project_id}/keys`, { type: 'project' })).status).toBe(201);
  });

  it('creates more projects and members, up to the allowance, and then answers plan_limit_reached with the limit', async () => {
    const made = [];
    for (let i = 1; i < demo_allowance.projectsMax; i++) made.push((await asDemo('POST', '/projects', { name: `demo ${i}` })).status);
    expect(made.every((s) => s === 201)).toBe(true);
    const past = await asDemo('POST', '/projects', { name: 'one too many' });
    expectError(past, 403, 'plan_limit_reached', { fields: { limit: demo_allowance.projectsMax } });
    const member = await asDemo('POST', '/members', { email: 'teammate@demo.example', role: 'viewer' });
    expect(member.status).toBe(201);
  });

  it('an organization without the allowance keeps Free limits: a third key is refused with the limit', async () => {
    const org = await bootstrapOrganization(svc.rt, 'plain', null);
    expect((await svc.call('GET', '/v1/admin/organization', { key: org.admin_key })).body).toMatchObject({
      demo_allowance: false,
      limits: { projects_max: 1, keys_per_project_max: 2, members_max: 1 },
    });
    const project = await svc.call('POST', '/v1/admin/projects', { key: org.admin_key, body: { name: 'only' } });
    const key = (body: unknown) => svc.call('POST', `/v1/admin/projects/${project.body.id}/keys`, { key: org.admin_key, body });
    expect((await key({ type: 'project' })).status).toBe(201);
    expect((await key({ type: 'customer', customer_id: 'c' })).status).toBe(201);
    const third = await key({ type: 'customer', customer_id: 'd' });
    expectError(third, 403, 'plan_limit_reached', { fields: { limit: 2 } });
    const upgraded = await svc.call('PUT', '/v1/admin/organization/plan', { key: org.admin_key, body: { plan: 'pro_500k' } });
    expect(upgraded.body.limits).toEqual({ projects_max: null, keys_per_project_max: null, members_max: 5 });
  });
});

describe('npm run bootstrap', () => {
  it("without an owner email, makes one of the organization's own, which signs in without naming it", async () => {
    const [a, b] = [await bootstrapOrganization(svc.rt, 'first', null), await bootstrapOrganization(svc.rt, 'second', null)];
    expect(a.owner.email).not.toBe(b.owner.email);
    for (const org of [a, b]) {
      expect(org.owner.email).toBe(`owner+${org.organization_id.replace(/^org_/, '')}@example.com`);
      const signedIn = await svc.call('POST', '/dashboard/api/session', { body: { email: org.owner.email, password: org.owner.password } });
      expect(signedIn.status, JSON.stringify(signedIn.body)).toBe(201);
      expect(signedIn.body.organization.id).toBe(org.organization_id);
    }
  });
});

describe('a demo made before the allowance existed', () => {
  it("gets it from the migration, recognised by the demo's name and owner; other organizations do not", async () => {
    const old = await bootstrapOrganization(svc.rt, 'Demo organization', demo_owner_email);
    const lookalike = await bootstrapOrganization(svc.rt, 'Demo organization', null);
    demoOrganizations.push(old.organization_id);
    const migration = readFileSync(new URL('../../migrations/010_demo_allowance_deactivation.sql', import.meta.url), 'utf8');
    const update = /UPDATE organizations[\s\S]*?;/.exec(migration)![0];
    const client = new pg.Client({ connectionString: svc.rt.config.DATABASE_URL });
    await client.connect();
    await client.query(update).finally(() => client.end());
    const flag = async (key: string) => (await svc.call('GET', '/v1/admin/organization', { key })).body.demo_allowance;
    expect([await flag(old.admin_key), await flag(lookalike.admin_key)]).toEqual([true, false]);
  });
});
