/**
 * Dashboard sessions: sign-in sets an HttpOnly, SameSite=Strict cookie whose id is stored
 * only as its SHA-256; the session reaches the same management operations as the admin
 * key, within the member's role; every change needs the session's CSRF token; sign-out
 * and expiry end it; API keys and session cookies each work only on their own prefix.
 */
import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { hashPassword } from '../../src/members/passwords.js';
import { createMemberQueries, sign_in_candidates_max } from '../../src/members/store.js';
import type { TestProject } from '../helpers.js';
import { addMember, dash, signIn, signInRaw, type SignedIn } from './dashboard-support.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

let owner: { id: string; email: string; password: string };
let viewer: { id: string; email: string; password: string };

useTestService();
beforeAll(async () => {
  expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
  owner = await addMember(svc, p, 'owner');
  viewer = await addMember(svc, p, 'viewer');
});

describe('sign-in', () => {
  it('sets a HttpOnly, SameSite=Strict cookie for /dashboard whose id is stored only as its SHA-256', async () => {
    const s = await signIn(svc, owner.email.toUpperCase(), owner.password);
    expect(s.setCookie).toMatch(/^svc_session=[A-Za-z0-9_-]{43}; /);
    expect(s.setCookie).toContain('HttpOnly');
    expect(s.setCookie).toContain('SameSite=Strict');
    expect(s.setCookie).toContain('Path=/dashboard');
    expect(s.setCookie).not.toContain('Secure');
    expect(s.body).toMatchObject({ member: { id: owner.id, role: 'owner' }, organization: { id: p.organizationId } });
    expect(s.body.csrf_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // 256 random bits in the cookie; the table holds their SHA-256 and not the id.
    expect(Buffer.from(s.token, 'base64url')).toHaveLength(32);
    const rows = await svc.rt.db.any(sql.type(z.object({ id_hash: z.instanceof(Buffer), expires_at: z.number(), last_seen_at: z.number() }))`
      SELECT id_hash, expires_at, last_seen_at FROM member_sessions WHERE member_id = ${owner.id}`);
    const hash = createHash('sha256').update(s.token).digest();
    const row = rows.find((r) => r.id_hash.equals(hash));
    expect(row).toBeDefined();
    expect(rows.some((r) => r.id_hash.toString('base64url') === s.token)).toBe(false);
    expect(row!.expires_at - Date.now()).toBeGreaterThan(11 * 3_600_000);
    expect(s.body.expires_at).toBe(new Date(row!.expires_at).toISOString());

    const me = await dash(svc, s, 'GET', '/session');
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ member: { email: owner.email }, csrf_token: s.csrf });
    expect(me.headers.get('cache-control')).toBe('no-store');
  });

  it('refuses a wrong password or an unknown email alike: 401 invalid_credentials, no cookie', async () => {
    for (const r of [await signInRaw(svc, owner.email, 'not the password'), await signInRaw(svc, 'nobody@example.com', owner.password)]) {
      expectError(r, 401, 'invalid_credentials');
      expect(r.headers.get('set-cookie')).toBeNull();
    }
    expectError(await svc.call('POST', '/dashboard/api/session', { body: `email=${owner.email}&password=${owner.password}`, headers: { 'content-type': 'application/x-www-form-urlencoded' } }), 400, 'invalid_json');
  });

  it('an email in several organizations signs in to the one its password opens, or the one named', async () => {
    const other = await svc.project();
    await svc.call('POST', '/v1/admin/members', { key: other.adminKey, body: { email: owner.email, role: 'viewer', password: owner.password } });
    const first = await signIn(svc, owner.email, owner.password);
    expect(first.body.organization.id).toBe(p.organizationId);
    expect(first.body.other_organizations).toEqual([{ id: other.organizationId, name: expect.any(String) }]);
    const named = await signIn(svc, owner.email, owner.password, { organization_id: other.organizationId });
    expect(named.body).toMatchObject({ organization: { id: other.organizationId }, member: { role: 'viewer' } });
  });

  it('an email in more organizations than sign-in reads at once still signs in to the one it names', async () => {
    const email = `many-${p.organizationId.slice(-6).toLowerCase()}@example.com`;
    const password = 'the same password for all';
    const orgs: TestProject[] = [];
    for (let i = 0; i <= sign_in_candidates_max; i++) {
      const q = await svc.project();
      expect((await svc.call('POST', '/v1/admin/members', { key: q.adminKey, body: { email, role: 'viewer', password } })).status).toBe(201);
      orgs.push(q);
    }
    const last = orgs[orgs.length - 1];
    const named = await signIn(svc, email, password, { organization_id: last.organizationId });
    expect(named.body.organization.id).toBe(last.organizationId);
    // Without an organization the oldest ones are checked, and the password opens the first.
    expect((await signIn(svc, email, password)).body.organization.id).toBe(orgs[0].organizationId);
  });

  it('an email in more organizations than sign-in checks, none of them opened, is asked for the organization', async () => {
    const email = `crowded-${p.organizationId.slice(-6).toLowerCase()}@example.com`;
    const orgs: TestProject[] = [];
    // A password of each organization's own: the newest one's is past the checked ones.
    for (let i = 0; i <= sign_in_candidates_max; i++) {
      const q = await svc.project();
      expect((await svc.call('POST', '/v1/admin/members', { key: q.adminKey, body: { email, role: 'owner', password: `password number ${i}` } })).status).toBe(201);
      orgs.push(q);
    }
    const newest = orgs[sign_in_candidates_max];
    const asked = await signInRaw(svc, email, `password number ${sign_in_candidates_max}`);
    expectError(asked, 401, 'organization_required', { param: 'organization_id' });
    expect(asked.headers.get('set-cookie')).toBeNull();
    // Whatever the password: the answer cannot tell a right one past the bound from a wrong one.
    expectError(await signInRaw(svc, email, 'a wrong password'), 401, 'organization_required');
    const named = await signIn(svc, email, `password number ${sign_in_candidates_max}`, { organization_id: newest.organizationId });
    expect(named.body.organization.id).toBe(newest.organizationId);
    // A password that one of the checked memberships opens signs in as before.
    expect((await signIn(svc, email, 'password number 3')).body.organization.id).toBe(orgs[3].organizationId);
    // An unknown email, and an email at the bound with a wrong password, are refused as before.
    expectError(await signInRaw(svc, `nobody-${email}`, 'a wrong password'), 401, 'invalid_credentials');
    await svc.rt.db.query(sql.unsafe`DELETE FROM members WHERE lower(email) = ${email} AND organization_id = ${newest.organizationId}`);
    expectError(await signInRaw(svc, email, 'a wrong password'), 401, 'invalid_credentials');
  });
});

describe('one set of operations, two authentications', () => {
  it('a session creates a key that works on the API, lists and revokes it, as the admin key does', async () => {
    const s = await signIn(svc, owner.email, owner.password);
    const created = await dash(svc, s, 'POST', `/projects/${p.projectId}/keys`, { body: { type: 'project', name: 'from the dashboard' } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const deposit = await svc.call('POST', '/v1/customers/deposit', { key: created.body.key, body: { customer_id: 'c1', amount: 100 } });
    expect(deposit.status).toBe(200);
    const viaKey = await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey });
    const viaSession = await dash(svc, s, 'GET', `/projects/${p.projectId}/keys`);
    expect(viaSession.body).toEqual(viaKey.body);
    expect(JSON.stringify(viaSession.body)).not.toContain(created.body.key);
    expect((await dash(svc, s, 'POST', `/projects/${p.projectId}/keys/${created.body.id}/revoke`)).status).toBe(200);
    expectError(await svc.call('GET', '/v1/customers/c1/balance', { key: created.body.key }), 401, 'api_key_revoked');
    const [org1, org2] = [await dash(svc, s, 'GET', '/organization'), await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })];
    expect(org1.body).toEqual(org2.body);
  });

  it('an API key is not a session, and a session cookie is not an API key', async () => {
    expectError(await svc.call('GET', '/dashboard/api/organization', { key: p.adminKey }), 401, 'not_signed_in');
    const s = await signIn(svc, owner.email, owner.password);
    expectError(await svc.call('GET', '/v1/admin/organization', { headers: { cookie: s.cookie } }), 401, 'missing_api_key');
    expectError(await dash(svc, null, 'GET', '/members'), 401, 'not_signed_in');
    const forged = await dash(svc, { ...s, cookie: `svc_session=${'A'.repeat(43)}` }, 'GET', '/members');
    expectError(forged, 401, 'not_signed_in');
    // Unknown paths under the prefix need a session before they are 404.
    expectError(await dash(svc, null, 'GET', '/nothing-here'), 401, 'not_signed_in');
    expectError(await dash(svc, s, 'GET', '/nothing-here'), 404, 'not_found');
  });
});

describe('CSRF', () => {
  it('refuses every change made with the cookie but without the session token, and applies nothing', async () => {
    const s = await signIn(svc, owner.email, owner.password);
    const other = await signIn(svc, owner.email, owner.password);
    const changes: [string, string, unknown][] = [
      ['POST', '/projects', { name: 'csrf' }],
      ['PATCH', `/projects/${p.projectId}`, { name: 'renamed by csrf' }],
      ['POST', `/projects/${p.projectId}/keys`, { type: 'project' }],
      ['PUT', '/organization/plan', { plan: 'pro_2m' }],
      ['POST', '/members', { email: 'csrf@example.com', role: 'owner', password: 'a long password' }],
      ['PATCH', `/members/${viewer.id}`, { role: 'owner' }],
      ['DELETE', `/members/${viewer.id}`, undefined],
      ['DELETE', '/session', undefined],
    ];
    for (const [method, path, body] of changes) {
      for (const csrf of [null, 'x'.repeat(43), other.csrf]) {
        const r = await dash(svc, s, method, path, { body, csrf });
        expectError(r, 403, 'csrf_token_invalid', { label: [method, path, csrf === null ? 'none' : 'wrong'].join(' ') });
      }
    }
    expect((await dash(svc, s, 'GET', `/projects/${p.projectId}`)).body.name).toBe('test project');
    expect((await dash(svc, s, 'GET', `/members/${viewer.id}`)).body.role).toBe('viewer');
    expect((await dash(svc, s, 'GET', '/organization')).body.plan).toBe('pro_500k');
    expect((await dash(svc, s, 'GET', '/session')).status).toBe(200);
    // With its token, the same change applies.
    expect((await dash(svc, s, 'PATCH', `/projects/${p.projectId}`, { body: { name: 'renamed' } })).body.name).toBe('renamed');
    await dash(svc, s, 'PATCH', `/projects/${p.projectId}`, { body: { name: 'test project' } });
  });
});

describe('roles', () => {
  it('a viewer reads everything and every change is 403 permission_denied naming the role needed', async () => {
    const s = await signIn(svc, viewer.email, viewer.password);
    for (const path of ['/organization', '/organization/plan/preview?plan=pro_2m', '/projects', `/projects/${p.projectId}`, `/projects/${p.projectId}/keys`,
      `/projects/${p.projectId}/models`, `/projects/${p.projectId}/customers`, '/usage/daily', '/members', `/members/${owner.id}`, '/invoices', '/session']) {
      const r = await dash(svc, s, 'GET', path);
      expect([path, r.status]).toEqual([path, 200]);
    }
    const keyId = (await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey, body: { type: 'project' } })).body.id;
    const changes: [string, string, unknown, string][] = [
      ['POST', '/projects', { name: 'x' }, 'admin'],
      ['PATCH', `/projects/${p.projectId}`, { name: 'x' }, 'admin'],
      ['POST', `/projects/${p.projectId}/keys`, { type: 'project' }, 'admin'],
      ['POST', `/projects/${p.projectId}/keys/${keyId}/revoke`, undefined, 'admin'],
      ['PUT', `/projects/${p.projectId}/models/m1`, { provider: 'openai' }, 'admin'],
      ['POST', `/projects/${p.projectId}/reconcile`, undefined, 'admin'],
      ['PUT', '/organization/plan', { plan: 'pro_2m' }, 'owner'],
      ['POST', '/members', { email: 'v@example.com', role: 'viewer' }, 'owner'],
      ['PATCH', `/members/${owner.id}`, { role: 'viewer' }, 'owner'],
      ['DELETE', `/members/${owner.id}`, undefined, 'owner'],
    ];
    for (const [method, path, body, needed] of changes) {
      const r = await dash(svc, s, method, path, { body });
      expectError(r, 403, 'permission_denied', { fields: { role_required: needed }, label: [method, path].join(' ') });
      expect(r.body.error.message).toContain(`needs the ${needed} role`);
      expect(r.body.error.message).toContain('you are a viewer');
    }
    const keys = await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey });
    expect(keys.body.data.find((k: { id: string }) => k.id === keyId).revoked_at).toBeNull();
  });

  it('an admin manages keys and projects but not members or the plan', async () => {
    const admin = await addMember(svc, p, 'admin');
    const s = await signIn(svc, admin.email, admin.password);
    expect((await dash(svc, s, 'POST', `/projects/${p.projectId}/keys`, { body: { type: 'project' } })).status).toBe(201);
    const r = await dash(svc, s, 'PUT', '/organization/plan', { body: { plan: 'pro_2m' } });
    expectError(r, 403, 'permission_denied');
    expect(r.body.error.message).toBe('this needs the owner role; you are an admin');
    await svc.call('DELETE', `/v1/admin/members/${admin.id}`, { key: p.adminKey });
  });
});

describe('the end of a session', () => {
  it('sign-out ends it and clears the cookie; other sessions of the member go on', async () => {
    const s = await signIn(svc, owner.email, owner.password);
    const kept = await signIn(svc, owner.email, owner.password);
    const out = await dash(svc, s, 'DELETE', '/session');
    expect(out.body).toEqual({ signed_out: true });
    expect(out.headers.get('set-cookie')).toMatch(/^svc_session=; .*Max-Age=0/);
    expectError(await dash(svc, s, 'GET', '/session'), 401, 'not_signed_in');
    expect((await dash(svc, kept, 'GET', '/session')).status).toBe(200);
  });

  it('an expired or idle session is refused and deleted', async () => {
    const expire = async (s: SignedIn, column: 'expires_at' | 'last_seen_at', ago: string) => {
      const hash = createHash('sha256').update(s.token).digest();
      await svc.rt.db.query(sql.unsafe`UPDATE member_sessions SET ${sql.identifier([column])} = now() - ${ago}::interval WHERE id_hash = ${sql.binary(hash)}`);
    };
    const a = await signIn(svc, owner.email, owner.password);
    await expire(a, 'expires_at', '1 second');
    const r = await dash(svc, a, 'GET', '/session');
    expectError(r, 401, 'not_signed_in');
    expect(r.body.error.message).toContain('sign in again');
    expect(r.headers.get('set-cookie')).toContain('Max-Age=0');
    const b = await signIn(svc, owner.email, owner.password);
    await expire(b, 'last_seen_at', '3 hours');
    expectError(await dash(svc, b, 'GET', '/session'), 401, 'not_signed_in');
    const left = await svc.rt.db.anyFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int8 AS n FROM member_sessions WHERE id_hash IN (${sql.binary(createHash('sha256').update(a.token).digest())}, ${sql.binary(createHash('sha256').update(b.token).digest())})`);
    expect(left).toEqual([0]);
  });

  it('a member changes its own password with the current one', async () => {
    const m = await addMember(svc, p, 'viewer');
    const s = await signIn(svc, m.email, m.password);
    expectError(await dash(svc, s, 'PUT', '/session/password', { body: { current_password: 'wrong password', new_password: 'another long password' } }), 401, 'invalid_credentials');
    expect((await dash(svc, s, 'PUT', '/session/password', { body: { current_password: m.password, new_password: 'another long password' } })).status).toBe(200);
    expectError(await signInRaw(svc, m.email, m.password), 401, 'invalid_credentials');
    await signIn(svc, m.email, 'another long password');
    await svc.call('DELETE', `/v1/admin/members/${m.id}`, { key: p.adminKey });
  });

  it("a password change ends the member's other sessions, not the one that made it, nor another member's", async () => {
    const m = await addMember(svc, p, 'viewer');
    const [changer, laptop, phone] = [await signIn(svc, m.email, m.password), await signIn(svc, m.email, m.password), await signIn(svc, m.email, m.password)];
    const bystander = await signIn(svc, viewer.email, viewer.password);
    expect((await dash(svc, changer, 'PUT', '/session/password', { body: { current_password: m.password, new_password: 'a new long password' } })).status).toBe(200);
    for (const s of [laptop, phone]) expectError(await dash(svc, s, 'GET', '/session'), 401, 'not_signed_in');
    expect((await dash(svc, changer, 'GET', '/session')).status).toBe(200);
    expect((await dash(svc, bystander, 'GET', '/session')).status).toBe(200);
    await svc.call('DELETE', `/v1/admin/members/${m.id}`, { key: p.adminKey });
  });

  it("a password set by anyone else (no session of the member's kept) ends all of the member's sessions", async () => {
    const m = await addMember(svc, p, 'viewer');
    const sessions = [await signIn(svc, m.email, m.password), await signIn(svc, m.email, m.password)];
    await createMemberQueries(svc.rt.db).setPassword(m.id, await hashPassword('set by an owner'));
    for (const s of sessions) expectError(await dash(svc, s, 'GET', '/session'), 401, 'not_signed_in');
    await signIn(svc, m.email, 'set by an owner');
    await svc.call('DELETE', `/v1/admin/members/${m.id}`, { key: p.adminKey });
  });
});
