/**
 * Brute-force sign-in is slowed: failed attempts per email and per client address are
 * counted in Redis (shared by every API process); past the budget the answer is 429
 * rate_limited with Retry-After, even for the right password, until the window ends. A
 * success gives its attempt back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestProject, type TestService } from '../helpers.js';
import { addMember, signIn, signInRaw } from './dashboard-support.js';
import { expectError } from '../support/errors.js';

let svc: TestService;
let second: TestService;
let p: TestProject;

beforeAll(async () => {
  const config = { SIGNIN_EMAIL_ATTEMPTS: 3, SIGNIN_IP_ATTEMPTS: 8, SIGNIN_WINDOW_SECONDS: 60 };
  svc = await startTestService({ config });
  // A second API process on the same Redis prefix: the budgets are one.
  second = await startTestService({ config: { ...config, REDIS_PREFIX: svc.rt.config.REDIS_PREFIX } });
  p = await svc.project();
  await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'enterprise' } });
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
