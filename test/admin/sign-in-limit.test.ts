/**
 * Brute-force sign-in is slowed: failed attempts per email and per client address are
 * counted in Redis (shared by every API process); past the budget the answer is 429
 * rate_limited with Retry-After, even for the right password, until the window ends. A
 * success gives its own attempt back and clears nothing else: an email's failures count
 * across its organizations. Behind a proxy named by TRUST_PROXY each client has its own
 * address budget; without it X-Forwarded-For is not believed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestProject, type TestService } from '../helpers.js';
import { addMember, signIn, signInRaw } from './dashboard-support.js';
import { expectError } from '../support/errors.js';
import { operatorSetsPlan } from '../support/plans.js';

let svc: TestService;
let second: TestService;
let p: TestProject;

beforeAll(async () => {
  const config = { SIGNIN_EMAIL_ATTEMPTS: 3, SIGNIN_IP_ATTEMPTS: 8, SIGNIN_WINDOW_SECONDS: 60 };
  svc = await startTestService({ config });
  // A second API process on the same Redis prefix: the budgets are one.
  second = await startTestService({ config: { ...config, REDIS_PREFIX: svc.rt.config.REDIS_PREFIX } });
  p = await svc.project();
  await operatorSetsPlan(svc, p.organizationId, 'enterprise');
});
afterAll(async () => {
  await second?.close();
  await svc?.close();
});

describe('the sign-in limit', () => {
  it('after the failures an email allows, even the right password is 429 with Retry-After; other emails are not blocked', async () => {
    const m = await addMember(svc, p, 'owner');
    const other = await addMember(svc, p, 'viewer');
    // A success does not use the budget.
    for (let i = 0; i < 4; i++) await signIn(svc, m.email, m.password);
    expectError(await signInRaw(svc, m.email, 'guess number 1'), 401, 'invalid_credentials');
    expectError(await signInRaw(second, m.email.toUpperCase(), 'guess number 2'), 401, 'invalid_credentials');
    expectError(await signInRaw(svc, m.email, 'guess number 3'), 401, 'invalid_credentials');
    for (const s of [svc, second]) {
      const r = await signInRaw(s, m.email, m.password);
      expectError(r, 429, 'rate_limited');
      const retryAfter = Number(r.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThan(0);
      expect(retryAfter).toBeLessThanOrEqual(60);
      expect(r.headers.get('set-cookie')).toBeNull();
    }
    await signIn(svc, other.email, other.password);
  });

  it('concurrent guesses cannot pass the budget', async () => {
    const m = await addMember(svc, p, 'viewer');
    const tries = await Promise.all(Array.from({ length: 10 }, (_, i) => signInRaw(i % 2 ? svc : second, m.email, `concurrent guess ${i}`)));
    const statuses = tries.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 401).length).toBeLessThanOrEqual(3);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(7);
  });

  it('one address trying many emails is stopped by its own budget', async () => {
    // The earlier tests spent part of this address's budget of 8 failures.
    const tries = [];
    for (let i = 0; i < 8; i++) tries.push(await signInRaw(svc, `spray${i}@example.com`, 'a sprayed password'));
    expect(tries.map((r) => r.status)).toContain(429);
    const last = tries[tries.length - 1];
    expectError(last, 429, 'rate_limited');
    expect(Number(last.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});

describe('the sign-in limit across organizations and behind a proxy', () => {
  let own: TestService;
  let q: TestProject;
  let other: TestProject;
  beforeAll(async () => {
    own = await startTestService({ config: { SIGNIN_EMAIL_ATTEMPTS: 3, SIGNIN_IP_ATTEMPTS: 4, SIGNIN_WINDOW_SECONDS: 60, TRUST_PROXY: 'loopback' } });
    q = await own.project();
    other = await own.project();
    for (const t of [q, other]) await operatorSetsPlan(own, t.organizationId, 'enterprise');
  });
  afterAll(async () => {
    await own?.close();
  });
  /** A sign-in from the client the trusted proxy names. */
  const from = (client: string, email: string, password: string, organizationId?: string) =>
    own.call('POST', '/dashboard/api/session', {
      body: { email, password, ...(organizationId ? { organization_id: organizationId } : {}) },
      headers: { 'x-forwarded-for': client },
    });

  it("another organization's member with the same email signing in clears none of the email's failures", async () => {
    const victim = await addMember(own, q, 'owner');
    // The attacker's own membership under the same email, in another organization.
    const mine = 'the attacker knows this one';
    expect((await own.call('POST', '/v1/admin/members', { key: other.adminKey, body: { email: victim.email, role: 'viewer', password: mine } })).status).toBe(201);
    const statuses: number[] = [];
    for (let round = 0; round < 4; round++) {
      // Each from a new address: only the email's budget is at stake.
      statuses.push((await from(`203.0.113.${round * 2 + 1}`, victim.email, `guess ${round}`, q.organizationId)).status);
      statuses.push((await from(`203.0.113.${round * 2 + 2}`, victim.email, mine, other.organizationId)).status);
    }
    // Three failures in the window; from then on every attempt is 429, the known password's too.
    expect(statuses).toEqual([401, 201, 401, 201, 401, 429, 429, 429]);
  });

  it('with TRUST_PROXY, each client behind the proxy has its own address budget', async () => {
    for (let i = 0; i < 4; i++) expect((await from('198.51.100.1', `spray${i}@example.com`, 'a sprayed password')).status).toBe(401);
    expectError(await from('198.51.100.1', 'spray9@example.com', 'a sprayed password'), 429, 'rate_limited');
    expectError(await from('198.51.100.2', 'spray9@example.com', 'a sprayed password'), 401, 'invalid_credentials');
  });

  it('without TRUST_PROXY, X-Forwarded-For is not believed: every client of the socket shares one budget', async () => {
    const plain = await startTestService({ config: { SIGNIN_IP_ATTEMPTS: 2, SIGNIN_WINDOW_SECONDS: 60 } });
    try {
      const attempt = (client: string, i: number) =>
        plain.call('POST', '/dashboard/api/session', { body: { email: `nobody${i}@example.com`, password: 'a sprayed password' }, headers: { 'x-forwarded-for': client } });
      expect((await attempt('198.51.100.7', 1)).status).toBe(401);
      expect((await attempt('198.51.100.8', 2)).status).toBe(401);
      expectError(await attempt('198.51.100.9', 3), 429, 'rate_limited');
    } finally {
      await plain.close();
    }
  });
});
