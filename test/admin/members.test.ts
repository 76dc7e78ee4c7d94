/**
 * Team members: the admin key creates the first owner (bootstrap); owners invite within
 * the plan's member limit (Free 1, Pro 5, Enterprise unlimited), change roles and remove
 * members, never the last owner; passwords are scrypt hashes; emails are unique per
 * organization in any case; the demo has an owner that signs in.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { bootstrapDemo, demo_owner_email } from '../../src/bootstrap.js';
import { verifyPassword } from '../../src/members/passwords.js';
import type { PlanId } from '../../src/plans/catalogue.js';
import type { TestProject } from '../helpers.js';
import { addMember, dash, signIn, signInRaw } from './dashboard-support.js';
import { expectError } from '../support/errors.js';
import { operatorSetsPlan } from '../support/plans.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ variants: [] });

/** The plan as the owner sets it; Enterprise as the operator does (an owner may not). */
const setPlan = async (p: TestProject, plan: PlanId) => {
  if (plan === 'enterprise') return operatorSetsPlan(svc, p.organizationId, plan);
  const r = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
};

const storedHash = (memberId: string) =>
  svc.rt.db.oneFirst(sql.type(z.object({ password_hash: z.string() }))`SELECT password_hash FROM members WHERE id = ${memberId}`);

describe('bootstrap and the plan member limit', () => {
  it('the admin key creates the first owner; on Free a second member is 403 plan_limit_reached naming the limit', async () => {
    const p = await svc.project();
    const owner = await addMember(svc, p, 'owner');
    const s = await signIn(svc, owner.email, owner.password);
    expect(s.body.member).toMatchObject({ id: owner.id, role: 'owner', organization_id: p.organizationId });

    const refused = await dash(svc, s, 'POST', '/members', { body: { email: 'second@example.com', role: 'viewer' } });
    expectError(refused, 403, 'plan_limit_reached');
    expect(refused.body.error.limit).toBe(1);
    expect(refused.body.error.message).toContain('1 team member');
    // The admin key meets the same limit.
    expectError(await svc.call('POST', '/v1/admin/members', { key: p.adminKey, body: { email: 'x@example.com', role: 'admin' } }), 403, 'plan_limit_reached');
  });

  it('Pro allows 5 members (owners included), the sixth is refused; Enterprise has no limit', async () => {
    const p = await svc.project();
    await setPlan(p, 'pro_500k');
    const owner = await addMember(svc, p, 'owner');
    const s = await signIn(svc, owner.email, owner.password);
    for (let i = 0; i < 4; i++) {
      const r = await dash(svc, s, 'POST', '/members', { body: { email: `m${i}@example.com`, role: 'viewer' } });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    }
    const sixth = await dash(svc, s, 'POST', '/members', { body: { email: 'm5@example.com', role: 'viewer' } });
    expectError(sixth, 403, 'plan_limit_reached');
    expect(sixth.body.error.limit).toBe(5);

    await setPlan(p, 'enterprise');
    expect((await dash(svc, s, 'POST', '/members', { body: { email: 'm5@example.com', role: 'viewer' } })).status).toBe(201);
    const list = await dash(svc, s, 'GET', '/members?limit=500');
    expect(list.body.data).toHaveLength(6);
  });

  it('concurrent invitations at the limit admit exactly the free places', async () => {
    const p = await svc.project();
    await setPlan(p, 'pro_500k');
    await addMember(svc, p, 'owner');
    const tries = await Promise.all(
      Array.from({ length: 8 }, (_, i) => svc.call('POST', '/v1/admin/members', { key: p.adminKey, body: { email: `race${i}@example.com`, role: 'viewer' } })),
    );
    expect(tries.filter((r) => r.status === 201)).toHaveLength(4);
    expect(tries.filter((r) => r.status === 403)).toHaveLength(4);
  });
});

describe('members', () => {
  let p: TestProject;
  beforeAll(async () => {
    p = await svc.project();
    await setPlan(p, 'enterprise');
  });

  it('stores a scrypt hash with its own salt, never the password; a made password is shown once and signs in', async () => {
    const a = await addMember(svc, p, 'admin');
    const b = await addMember(svc, p, 'admin');
    const [ha, hb] = [await storedHash(a.id), await storedHash(b.id)];
    expect(ha).toMatch(/^scrypt\$16384\$8\$1\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{43}$/);
    expect(ha).not.toContain(a.password);
    expect(ha.split('$')[4]).not.toBe(hb.split('$')[4]);
    expect(await verifyPassword(a.password, ha)).toBe(true);
    expect(await verifyPassword(`${a.password}x`, ha)).toBe(false);

    const made = await svc.call('POST', '/v1/admin/members', { key: p.adminKey, body: { email: 'made@example.com', role: 'viewer' } });
    expect(made.status).toBe(201);
    expect(typeof made.body.password).toBe('string');
    expect(made.body.password.length).toBeGreaterThanOrEqual(20);
    await signIn(svc, 'made@example.com', made.body.password);
    const read = await svc.call('GET', `/v1/admin/members/${made.body.id}`, { key: p.adminKey });
    expect(read.body).not.toHaveProperty('password');
    expect(JSON.stringify(read.body)).not.toContain('scrypt');
    // A password the caller chose is not echoed.
    const chosen = await svc.call('POST', '/v1/admin/members', { key: p.adminKey, body: { email: 'chosen@example.com', role: 'viewer', password: 'a chosen password' } });
    expect(chosen.body).not.toHaveProperty('password');
  });

  it('an email is unique per organization in any case: 409 email_taken; another organization may use it', async () => {
    await addMember(svc, p, 'viewer', 'Dup@Example.com');
    expectError(await svc.call('POST', '/v1/admin/members', { key: p.adminKey, body: { email: 'dup@example.COM', role: 'viewer' } }), 409, 'email_taken');
    const other = await svc.project();
    await addMember(svc, other, 'owner', 'dup@example.com');
  });

  it('refuses bad input naming the field', async () => {
    const bad = async (body: unknown, param: string) => {
      const r = await svc.call('POST', '/v1/admin/members', { key: p.adminKey, body });
      expectError(r, 400, 'invalid_request');
      expect(r.body.error.param).toBe(param);
    };
    await bad({ email: 'not an email', role: 'viewer' }, 'email');
    await bad({ email: 'ok@example.com', role: 'superuser' }, 'role');
    await bad({ email: 'ok@example.com', role: 'viewer', password: 'short' }, 'password');
    await bad({ email: 'ok@example.com', role: 'viewer', name: 'x' }, 'name');
  });

  it('an owner changes roles and removes members; the last owner can be neither demoted nor removed', async () => {
    const q = await svc.project();
    await setPlan(q, 'pro_500k');
    const owner = await addMember(svc, q, 'owner');
    const other = await addMember(svc, q, 'viewer');
    const s = await signIn(svc, owner.email, owner.password);

    expectError(await dash(svc, s, 'PATCH', `/members/${owner.id}`, { body: { role: 'admin' } }), 409, 'last_owner');
    expectError(await dash(svc, s, 'DELETE', `/members/${owner.id}`), 409, 'last_owner');

    const promoted = await dash(svc, s, 'PATCH', `/members/${other.id}`, { body: { role: 'owner' } });
    expect(promoted.body).toMatchObject({ id: other.id, role: 'owner' });
    // Two owners: one may step down.
    expect((await dash(svc, s, 'PATCH', `/members/${owner.id}`, { body: { role: 'admin' } })).body.role).toBe('admin');
    // Its session now has the admin role: member changes need an owner.
    expectError(await dash(svc, s, 'PATCH', `/members/${other.id}`, { body: { role: 'viewer' } }), 403, 'permission_denied');

    const s2 = await signIn(svc, other.email, other.password);
    const removed = await dash(svc, s2, 'DELETE', `/members/${owner.id}`);
    expect(removed.body).toMatchObject({ id: owner.id, deleted: true });
    // Removing a member ends its sessions.
    expectError(await dash(svc, s, 'GET', '/session'), 401, 'not_signed_in');
    expectError(await dash(svc, s2, 'DELETE', `/members/${owner.id}`), 404, 'not_found');
    expectError(await dash(svc, s2, 'DELETE', `/members/${other.id}`), 409, 'last_owner');
  });

  it('lists members newest first in cursor pages', async () => {
    const q = await svc.project();
    await setPlan(q, 'enterprise');
    const made = [];
    for (let i = 0; i < 5; i++) made.push(await addMember(svc, q, 'viewer'));
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const r = await svc.call('GET', `/v1/admin/members?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key: q.adminKey });
      expect(r.status).toBe(200);
      expect(r.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...r.body.data.map((m: { id: string }) => m.id));
      cursor = r.body.next_cursor;
      expect(r.body.has_more).toBe(cursor !== null);
    } while (cursor);
    expect(seen).toEqual(made.map((m) => m.id).reverse());
    expectError(await svc.call('GET', '/v1/admin/members?cursor=nonsense', { key: q.adminKey }), 400, 'invalid_request');
  });
});

describe('the demo', () => {
  it('has an owner who signs in with the printed email and password', async () => {
    const demo = await bootstrapDemo(svc.rt, 'http://127.0.0.1:9/v1');
    expect(demo.owner.email).toBe(demo_owner_email);
    const s = await signIn(svc, demo.owner.email, demo.owner.password, { organization_id: demo.organization_id });
    expect(s.body.member.role).toBe('owner');
    expect(s.body.organization.id).toBe(demo.organization_id);
    const projects = await dash(svc, s, 'GET', '/projects');
    expect(projects.body.data.map((x: { id: string }) => x.id)).toEqual([demo.project_id]);
    expectError(await signInRaw(svc, demo.owner.email, 'wrong password!'), 401, 'invalid_credentials');
  });
});
