/**
 * The dashboard page's security, over plain HTTP: no admin key (nor any secret) in any
 * page or script; the security headers and a CSP without inline script; CSRF refused
 * without the token; a session of organization A can neither see nor change organization
 * B on any screen (nor through the listings this page added to the management API); a
 * viewer's every change refused; brute-force sign-in slowed; values from callers escaped.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { addMember, dash, signIn } from '../admin/dashboard-support.js';
import { pageCall, pageSignIn, seedOrganization, type PageSession, type Seeded } from './support.js';
import { svc, useTestService } from '../support/service.js';

let mock: MockUpstream;
let a: Seeded;
let b: Seeded;
let owner: PageSession;
let viewer: PageSession;
/** A's gateway call and one of B's, and a key of each (for the revoke paths). */
const ids = { aCall: '', bCall: '', aKey: '', bKey: '', bMember: '' };
/** A webhook endpoint of each project (by project id), with its test delivery; A's signing secret. */
const hooks: Record<string, { id: string; delivery: string }> = {};
let aHookSecret = '';

// No project of the fixture's: seedOrganization makes each organization with its own.
useTestService({ workers: true, variants: [] });
beforeAll(async () => {
  mock = await startMockUpstream();
  [a, b] = [await seedOrganization(svc, mock), await seedOrganization(svc, mock)];
  owner = await pageSignIn(svc, a.owner.email, a.owner.password);
  viewer = await pageSignIn(svc, a.viewer.email, a.viewer.password);
  ids.aCall = (await svc.call('GET', '/v1/usage', { key: a.p.projectKey })).body.data[0].transaction_id;
  ids.bCall = (await svc.call('GET', '/v1/usage', { key: b.p.projectKey })).body.data[0].transaction_id;
  ids.aKey = (await svc.call('GET', `/v1/admin/projects/${a.p.projectId}/keys`, { key: a.p.adminKey })).body.data[0].id;
  ids.bKey = (await svc.call('GET', `/v1/admin/projects/${b.p.projectId}/keys`, { key: b.p.adminKey })).body.data[0].id;
  ids.bMember = b.owner.id;
  for (const s of [a, b]) {
    const made = await svc.call('POST', '/v1/webhooks', { key: s.p.projectKey, body: { url: 'http://127.0.0.1:9/hook' } });
    expect(made.status).toBe(201);
    if (s === a) aHookSecret = made.body.secret;
    const sent = await svc.call('POST', `/v1/webhooks/${made.body.id}/test`, { key: s.p.projectKey });
    hooks[s.p.projectId] = { id: made.body.id, delivery: sent.body.id };
  }
}, 60_000);

afterAll(async () => {
  await mock?.close();
});

/** Every screen a member of `s` can open, with its project, key, customer and call. */
function screens(s: Seeded, call: string, key: string): string[] {
  const p = `/dashboard/projects/${s.p.projectId}`;
  const hook = hooks[s.p.projectId].id;
  return [
    `${p}/webhooks`, `${p}/webhooks/${hook}/deliveries`, `${p}/webhooks/${hook}/delete`, `${p}/events`, `${p}/events?type=balance.low&customer_id=acme`,
    '/dashboard/overview', '/dashboard/projects', `${p}/keys`, `${p}/keys/${key}/revoke`, `${p}/models`, `${p}/models?edit=${s.modelId}`,
    `${p}/customers`, `${p}/customers?search=acme`, `${p}/customers/${s.customerId}`, `${p}/customers/${s.customerId}?type=DEDUCT`,
    `${p}/usage`, `${p}/usage?trace_id=trace-hello`, `${p}/usage.csv`, `${p}/receipts/${call}`, '/dashboard/billing',
    '/dashboard/billing?plan=pro_2m', '/dashboard/team', `${p}/reconcile`, `${p}/reconcile/repair`, '/dashboard/queues',
  ];
}

const assets = ['/dashboard/assets/htmx.min.js', '/dashboard/assets/dashboard.js', '/dashboard/assets/dashboard.css', '/dashboard/sign-in'];

describe('pages and scripts', () => {
  it('hold no admin key, no key secret and no session id', async () => {
    const session = owner.cookie.split('=')[1];
    for (const path of [...screens(a, ids.aCall, ids.aKey), ...assets]) {
      const r = await pageCall(svc, owner, 'GET', path);
      expect([path, r.status]).toEqual([path, 200]);
      for (const secret of [a.p.adminKey, a.p.adminKey.slice(0, 16), a.p.projectKey, b.p.adminKey, session, 'svc_admin_', aHookSecret]) {
        expect([path, r.text.includes(secret)]).toEqual([path, false]);
      }
    }
  });

  it('carry the security headers, a same-origin CSP and no inline script', async () => {
    for (const path of [...screens(a, ids.aCall, ids.aKey), '/dashboard/sign-in']) {
      const r = await pageCall(svc, owner, 'GET', path);
      const csp = r.headers.get('content-security-policy') ?? '';
      expect([path, csp]).toEqual([path, expect.stringContaining("script-src 'self';script-src-attr 'none';style-src 'self'")]);
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toMatch(/unsafe|https:|\*/);
      expect(r.headers.get('x-frame-options')).toBe('DENY');
      expect(r.headers.get('x-content-type-options')).toBe('nosniff');
      expect(r.headers.get('cache-control')).toBe('no-store');
      if (path.endsWith('.csv')) continue;
      // Scripts come from files only: no inline script element, handler attribute or javascript: URL.
      expect([path, [...r.text.matchAll(/<script\b[^>]*>/g)].map((m) => m[0]).filter((t) => !/\ssrc="\/dashboard\/assets\//.test(t))]).toEqual([path, []]);
      expect([path, /<[^>]*(\son[a-z]+\s*=|javascript:|\sstyle=)/i.test(r.text)]).toEqual([path, false]);
    }
  });

  it('sets the session cookie HttpOnly, SameSite=Strict, scoped to /dashboard', async () => {
    const form = await fetch(`${svc.url}/dashboard/sign-in`);
    expect(form.headers.get('set-cookie')).toMatch(/^svc_signin=[^;]+; Path=\/dashboard; HttpOnly; SameSite=Strict$/);
    const token = /svc_signin=([^;]+)/.exec(form.headers.get('set-cookie')!)![1];
    const r = await fetch(`${svc.url}/dashboard/sign-in`, {
      method: 'POST', redirect: 'manual',
      headers: { cookie: `svc_signin=${token}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ _csrf: token, email: a.owner.email, password: a.owner.password }),
    });
    expect(r.headers.getSetCookie().find((c) => c.startsWith('svc_session='))).toMatch(/^svc_session=[A-Za-z0-9_-]{43}; Path=\/dashboard; HttpOnly; SameSite=Strict; Max-Age=\d+$/);
  });

  it('escape what callers wrote: a customer named <script> shows as text', async () => {
    const name = '<script>alert("x")</script><img src=x onerror=alert(1)>';
    expect((await svc.call('POST', '/v1/customers/deposit', { key: a.p.projectKey, body: { customer_id: 'x"><b>id', amount: 5, name } })).status).toBe(200);
    // The customer list reads PostgreSQL: what the workers have persisted.
    await svc.drained();
    for (const path of [`/dashboard/projects/${a.p.projectId}/customers?search=x`, `/dashboard/projects/${a.p.projectId}/customers/${encodeURIComponent('x"><b>id')}`]) {
      const r = await pageCall(svc, owner, 'GET', path);
      expect([path, r.status]).toEqual([path, 200]);
      expect(r.text).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;');
      expect(r.text).not.toContain('<script>alert');
      expect(r.text).not.toContain('"><b>id');
    }
  });
});

describe('CSRF', () => {
  const keysPath = () => `/dashboard/projects/${a.p.projectId}/keys`;
  const keyCount = async () => (await svc.call('GET', `/v1/admin/projects/${a.p.projectId}/keys`, { key: a.p.adminKey })).body.data.length;

  it('refuses a change without the session\'s token, or with another, and makes it with it', async () => {
    const before = await keyCount();
    const other = await pageSignIn(svc, a.owner.email, a.owner.password);
    const forms: Record<string, string>[] = [{ kind: 'project' }, { kind: 'project', _csrf: '' }, { kind: 'project', _csrf: other.csrf }, { kind: 'project', _csrf: owner.csrf.slice(0, -1) }];
    for (const form of forms) {
      const r = await pageCall(svc, owner, 'POST', keysPath(), form);
      expect([r.status, r.text.includes('the CSRF token is missing or does not match')]).toEqual([403, true]);
    }
    expect(await keyCount()).toBe(before);
    // The token as a field (a plain form) or in X-CSRF-Token (htmx) makes the change.
    expect((await pageCall(svc, owner, 'POST', keysPath(), { kind: 'project', _csrf: owner.csrf })).status).toBe(200);
    const viaHeader = await fetch(`${svc.url}${keysPath()}`, {
      method: 'POST',
      headers: { cookie: owner.cookie, 'x-csrf-token': owner.csrf, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'kind=project',
    });
    expect(viaHeader.status).toBe(200);
    expect(await keyCount()).toBe(before + 2);
  });

  it('refuses a sign-out and a sign-in form without their tokens', async () => {
    const out = await pageCall(svc, owner, 'POST', '/dashboard/sign-out', {});
    expect(out.status).toBe(403);
    expect((await pageCall(svc, owner, 'GET', '/dashboard/overview')).status).toBe(200);
    // A cross-site form has no svc_signin cookie (SameSite=Strict), or not the one it posts.
    for (const cookie of [undefined, 'svc_signin=somethingelse']) {
      const r = await fetch(`${svc.url}/dashboard/sign-in`, {
        method: 'POST', redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...(cookie ? { cookie } : {}) },
        body: new URLSearchParams({ _csrf: 'forged', email: a.owner.email, password: a.owner.password }),
      });
      expect(r.status).toBe(403);
      expect(r.headers.getSetCookie().some((c) => c.startsWith('svc_session='))).toBe(false);
    }
  });
});

describe('organization A\'s session and organization B', () => {
  /** What B has that a change could reach. */
  async function stateOfB() {
    const get = async (path: string) => (await svc.call('GET', `/v1/admin${path}`, { key: b.p.adminKey })).body;
    return {
      org: await get('/organization'),
      keys: await get(`/projects/${b.p.projectId}/keys`),
      models: await get(`/projects/${b.p.projectId}/models`),
      customers: await get(`/projects/${b.p.projectId}/customers`),
      members: await get('/members'),
      webhooks: await get(`/projects/${b.p.projectId}/webhooks`),
      deliveries: (await get(`/projects/${b.p.projectId}/webhooks/${hooks[b.p.projectId].id}/deliveries`)).data.map((d: { id: string; status: string }) => [d.id, d.status]),
    };
  }

  it('cannot open any of B\'s screens: 404, nothing of B shown', async () => {
    const bNames = [b.p.projectId, b.owner.email, b.viewer.email, ids.bCall];
    for (const path of screens(b, ids.bCall, ids.bKey).filter((p) => p.includes(b.p.projectId))) {
      const r = await pageCall(svc, owner, 'GET', path);
      expect([path, r.status]).toEqual([path, 404]);
      for (const id of bNames.slice(1)) expect([path, r.text.includes(id)]).toEqual([path, false]);
    }
    // A's own screens show A's things only, though A and B have the same customer ids.
    for (const path of screens(a, ids.aCall, ids.aKey)) {
      const r = await pageCall(svc, owner, 'GET', path);
      expect([path, r.status]).toEqual([path, 200]);
      for (const id of bNames) expect([path, r.text.includes(id)]).toEqual([path, false]);
    }
    // A's key or call named under A's project, when it is B's: not found either.
    expect((await pageCall(svc, owner, 'GET', `/dashboard/projects/${a.p.projectId}/receipts/${ids.bCall}`)).status).toBe(404);
  });

  it('never lands on B\'s project through the picker or a remembered project', async () => {
    const picked = await pageCall(svc, owner, 'GET', `/dashboard/pick?screen=keys&project_id=${b.p.projectId}`);
    expect((await pageCall(svc, owner, 'GET', picked.headers.get('location')!)).status).toBe(404);
    const r = await fetch(`${svc.url}/dashboard/keys`, { redirect: 'manual', headers: { cookie: `${owner.cookie}; svc_project=${b.p.projectId}` } });
    expect(r.headers.get('location')).toBe(`/dashboard/projects/${a.p.projectId}/keys`);
  });

  it('cannot change any of B\'s things: 404, B unchanged', async () => {
    const before = await stateOfB();
    const pb = `/dashboard/projects/${b.p.projectId}`;
    const pa = `/dashboard/projects/${a.p.projectId}`;
    const changes: [string, Record<string, string>][] = [
      [`${pb}/keys`, { kind: 'project' }],
      [`${pb}/keys/${ids.bKey}/revoke`, {}],
      [`${pa}/keys/${ids.bKey}/revoke`, {}],
      [`${pb}/models`, { model_id: b.modelId, provider: 'openai', upstream_base_url: mock.url, upstream_model: 'taken', context_window: '10', max_output_tokens: '10', input_price_per_million_credits: '0', output_price_per_million_credits: '0' }],
      [`${pb}/customers/${b.customerId}/deposits`, { amount: '1000' }],
      [`/dashboard/team/${ids.bMember}/role`, { role: 'viewer' }],
      [`/dashboard/team/${ids.bMember}/remove`, {}],
      [`${pb}/webhooks`, { url: 'http://127.0.0.1:9/mine' }],
      ...['disable', 'test', 'delete', `deliveries/${hooks[b.p.projectId].delivery}/replay`].flatMap((action): [string, Record<string, string>][] => [
        [`${pb}/webhooks/${hooks[b.p.projectId].id}/${action}`, {}],
        [`${pa}/webhooks/${hooks[b.p.projectId].id}/${action}`, {}],
      ]),
    ];
    for (const [path, form] of changes) {
      const r = await pageCall(svc, owner, 'POST', path, { ...form, _csrf: owner.csrf });
      expect([path, r.status]).toEqual([path, 404]);
    }
    expect(await stateOfB()).toEqual(before);
  });

  it('reads only A\'s rows in the listings the page added to the management API', async () => {
    const session = await signIn(svc, a.owner.email, a.owner.password);
    const bEntries = (await svc.call('GET', `/v1/customers/${b.customerId}/ledger`, { key: b.p.projectKey })).body.data.map((e: { id: string }) => e.id);
    expect(bEntries.length).toBeGreaterThan(0);
    const pa = `/projects/${a.p.projectId}`;
    for (const [path, listed] of [[`${pa}/customers/${a.customerId}/ledger`, 'data'], [`${pa}/usage`, 'data'], [`${pa}/customers/${a.customerId}`, 'sources'], [`${pa}/receipts/${ids.aCall}`, 'details']] as const) {
      for (const r of [await dash(svc, session, 'GET', path), await svc.call('GET', `/v1/admin${path}`, { key: a.p.adminKey })]) {
        expect([path, r.status]).toEqual([path, 200]);
        expect(r.body[listed].length).toBeGreaterThan(0);
        const text = JSON.stringify(r.body);
        for (const id of [...bEntries, ids.bCall, b.p.projectId]) expect([path, text.includes(id)]).toEqual([path, false]);
      }
    }
    const pb = `/projects/${b.p.projectId}`;
    for (const [method, path, body] of [
      ['GET', `${pb}/customers/${b.customerId}/ledger`, undefined],
      ['GET', `${pb}/usage`, undefined],
      ['GET', `${pb}/receipts/${ids.bCall}`, undefined],
      ['GET', `${pa}/receipts/${ids.bCall}`, undefined],
      ['POST', `${pb}/customers/${b.customerId}/deposits`, { amount: 1000 }],
    ] as const) {
      for (const r of [await dash(svc, session, method, path, { body }), await svc.call(method, `/v1/admin${path}`, { key: a.p.adminKey, body })]) {
        expect([method, path, r.status]).toEqual([method, path, 404]);
      }
    }
  });
});

describe('a viewer', () => {
  it('has every change refused with the API\'s message, and nothing changes', async () => {
    const state = async () => ({
      // Without last use, which a timer writes (KEY_LAST_USED_FLUSH_MS) whenever it comes.
      keys: (await svc.call('GET', `/v1/admin/projects/${a.p.projectId}/keys`, { key: a.p.adminKey })).body.data.map(({ last_used_at: _u, ...k }: { last_used_at: unknown }) => k),
      project: (await svc.call('GET', `/v1/admin/projects/${a.p.projectId}`, { key: a.p.adminKey })).body,
      org: (await svc.call('GET', '/v1/admin/organization', { key: a.p.adminKey })).body.plan,
      members: (await svc.call('GET', '/v1/admin/members', { key: a.p.adminKey })).body,
      balance: (await svc.call('GET', `/v1/customers/${a.customerId}/balance`, { key: a.p.projectKey })).body.available,
      models: (await svc.call('GET', `/v1/admin/projects/${a.p.projectId}/models`, { key: a.p.adminKey })).body,
      webhooks: (await svc.call('GET', `/v1/admin/projects/${a.p.projectId}/webhooks`, { key: a.p.adminKey })).body,
    });
    const before = await state();
    const pa = `/dashboard/projects/${a.p.projectId}`;
    const changes: [string, Record<string, string>, string][] = [
      ['/dashboard/projects', { name: 'mine' }, 'admin'],
      [`${pa}/keys`, { kind: 'project' }, 'admin'],
      [`${pa}/keys/${ids.aKey}/revoke`, {}, 'admin'],
      [`${pa}/models`, { model_id: a.modelId, provider: 'openai', upstream_base_url: mock.url, upstream_model: 'x', context_window: '10', max_output_tokens: '10' }, 'admin'],
      [`${pa}/models/delete`, { model_id: a.modelId }, 'admin'],
      [`${pa}/deactivate`, {}, 'admin'],
      [`${pa}/customers/${a.customerId}/deposits`, { amount: '1000' }, 'admin'],
      [`${pa}/reconcile`, {}, 'admin'],
      [`${pa}/reconcile/repair`, {}, 'admin'],
      [`${pa}/webhooks`, { url: 'http://127.0.0.1:9/mine' }, 'admin'],
      [`${pa}/webhooks/${hooks[a.p.projectId].id}/disable`, {}, 'admin'],
      [`${pa}/webhooks/${hooks[a.p.projectId].id}/delete`, {}, 'admin'],
      ['/dashboard/billing/plan', { plan: 'pro_2m' }, 'owner'],
      ['/dashboard/team', { email: 'new@example.com', role: 'owner' }, 'owner'],
      [`/dashboard/team/${a.viewer.id}/role`, { role: 'owner' }, 'owner'],
      [`/dashboard/team/${a.owner.id}/remove`, {}, 'owner'],
    ];
    for (const [path, form, role] of changes) {
      const r = await pageCall(svc, viewer, 'POST', path, { ...form, _csrf: viewer.csrf });
      expect([path, r.status]).toEqual([path, 403]);
      const needs = role === 'owner' ? 'this needs the owner role; you are a viewer' : 'this needs the admin role or higher; you are a viewer';
      expect([path, r.text.includes(needs)]).toEqual([path, true]);
    }
    expect(await state()).toEqual(before);
  });
});

describe('sign-in', () => {
  it('is slowed after 5 failures for an email: 429 with Retry-After, the right password included', async () => {
    const m = await addMember(svc, a.p, 'viewer', `guessed-${a.p.organizationId.slice(-6).toLowerCase()}@example.com`);
    const attempt = async (password: string) => {
      const form = await fetch(`${svc.url}/dashboard/sign-in`);
      const token = /svc_signin=([^;]+)/.exec(form.headers.get('set-cookie')!)![1];
      return fetch(`${svc.url}/dashboard/sign-in`, {
        method: 'POST', redirect: 'manual',
        headers: { cookie: `svc_signin=${token}`, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ _csrf: token, email: m.email, password }),
      });
    };
    for (let i = 0; i < 5; i++) {
      const r = await attempt(`wrong-${i}`);
      expect([r.status, (await r.text()).includes('email or password is incorrect')]).toEqual([401, true]);
    }
    for (const password of ['wrong-again', m.password]) {
      const r = await attempt(password);
      expect(r.status).toBe(429);
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(await r.text()).toContain('too many failed sign-ins');
      expect(r.headers.getSetCookie().some((c) => c.startsWith('svc_session='))).toBe(false);
    }
  });
});
