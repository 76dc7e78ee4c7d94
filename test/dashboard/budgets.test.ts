/**
 * Budgets and balance alerts in the dashboard, over plain HTTP and checked against the
 * API: the customer screen shows the budget with its counters and sets, changes and clears
 * it, and sets the alert settings; a customer-scoped key's budget is shown in the keys
 * screen and set or cleared in its row; bad input, a missing CSRF token and a viewer
 * change nothing. The management operation the forms use (PATCH of a customer) answers at
 * /v1/admin and /dashboard/api alike.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { addMember, dash, signIn } from '../admin/dashboard-support.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';
import { pageCall, pageSignIn, type PageSession } from './support.js';

useTestService({ workers: true });

let admin: PageSession;
let viewer: PageSession;
const customer = 'dash-budget';

beforeAll(async () => {
  // The free plan allows one member.
  expect((await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } })).status).toBe(200);
  admin = await pageSignIn(svc, ...creds(await addMember(svc, p, 'admin')));
  viewer = await pageSignIn(svc, ...creds(await addMember(svc, p, 'viewer')));
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: customer, amount: 5_000_000 } })).status).toBe(200);
  // The customer screens read PostgreSQL.
  await svc.drained();
});

function creds(m: { email: string; password: string }): [string, string] {
  return [m.email, m.password];
}

const customerPath = () => `/dashboard/projects/${p.projectId}/customers/${customer}`;
const notice = (text: string) => /data-testid="notice-(?:ok|error)">([^<]*)</.exec(text)?.[1];
const post = (s: PageSession, path: string, form: Record<string, string>) => pageCall(svc, s, 'POST', path, { ...form, _csrf: s.csrf });
const profile = async () => (await svc.call('GET', `/v1/customers/${customer}`, { key: p.projectKey })).body;
/** The data-* of the customer page's budget element. */
const budgetShown = (text: string) => /data-testid="customer-budget" data-limit="(\d*)"(?: data-spent="(\d+)" data-held="(\d+)" data-remaining="(\d+)")?/.exec(text)?.slice(1);

describe('the customer budget', () => {
  it('is set, shown with its counters, changed and cleared from the customer screen', async () => {
    const before = await pageCall(svc, admin, 'GET', customerPath());
    expect(before.status).toBe(200);
    expect(budgetShown(before.text)).toEqual(['', undefined, undefined, undefined]);
    expect(before.text).toContain('data-testid="budget-form"');

    const set = await post(admin, `${customerPath()}/budget`, { limit: '1,000', period: 'day' });
    expect([set.status, notice(set.text)]).toEqual([200, 'Set the budget of the customer to 1,000 credits per day']);
    expect((await profile()).budget).toMatchObject({ limit: 1000, period: 'day', spent: 0 });

    expect((await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: customer, transaction_id: 'db-1', amount: 300 } })).status).toBe(200);
    expect((await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: customer, transaction_id: 'db-2', amount: 200 } })).status).toBe(200);
    const shown = await pageCall(svc, admin, 'GET', customerPath());
    expect(budgetShown(shown.text)).toEqual(['1000', '300', '200', '500']);
    expect(shown.text).toMatch(/Resets<\/dt><dd>\d{4}-\d{2}-\d{2} 00:00 UTC/);
    expect(shown.text).toContain('data-testid="budget-clear"');

    const changed = await post(admin, `${customerPath()}/budget`, { limit: '600', period: 'day' });
    expect(notice(changed.text)).toBe('Set the budget of the customer to 600 credits per day');
    expect(budgetShown(changed.text)).toEqual(['600', '300', '200', '100']);

    const cleared = await post(admin, `${customerPath()}/budget`, { clear: '1' });
    expect([cleared.status, notice(cleared.text)]).toEqual([200, 'Cleared the budget of the customer']);
    expect((await profile()).budget).toBeNull();
    expect(budgetShown(cleared.text)?.[0]).toBe('');
  });

  it('refuses bad input with the API message, keeps what was typed and changes nothing', async () => {
    expect((await post(admin, `${customerPath()}/budget`, { limit: '5000', period: 'month' })).status).toBe(200);
    for (const [form, message] of [
      [{ limit: 'lots', period: 'month' }, /budget\.limit/],
      [{ limit: '0', period: 'month' }, /budget\.limit/],
      [{ limit: '10', period: 'year' }, /budget\.period/],
      [{ limit: '', period: 'week' }, /budget\.limit/],
    ] as const) {
      const r = await post(admin, `${customerPath()}/budget`, form);
      expect(r.status, form.limit).toBe(400);
      expect(notice(r.text)).toMatch(message);
      expect(r.text).toContain(`value="${form.limit}" data-testid="budget-limit"`);
    }
    expect((await profile()).budget).toMatchObject({ limit: 5000, period: 'month' });
  });

  it("refuses a viewer's change and a post without the CSRF token", async () => {
    const refused = await post(viewer, `${customerPath()}/budget`, { limit: '1', period: 'day' });
    expect([refused.status, notice(refused.text)]).toEqual([403, 'this needs the admin role or higher; you are a viewer']);
    const viewerClear = await post(viewer, `${customerPath()}/budget`, { clear: '1' });
    expect(viewerClear.status).toBe(403);
    const forged = await pageCall(svc, admin, 'POST', `${customerPath()}/budget`, { limit: '1', period: 'day' });
    expect(forged.status).toBe(403);
    expect(forged.text).toContain('the CSRF token is missing or does not match');
    expect((await profile()).budget).toMatchObject({ limit: 5000, period: 'month' });
    // The viewer still reads it.
    expect(budgetShown((await pageCall(svc, viewer, 'GET', customerPath())).text)?.[0]).toBe('5000');
  });
});

describe('the balance alerts', () => {
  it('are set and cleared from the customer screen; a bad top-up changes nothing', async () => {
    const set = await post(admin, `${customerPath()}/alerts`, { low_balance_threshold: '100000', top_up_below: '50000', top_up_amount: '2000000', top_up_monthly_limit: '' });
    expect([set.status, notice(set.text)]).toEqual([200, 'Saved the balance alerts']);
    expect(await profile()).toMatchObject({ low_balance_threshold: 100_000, auto_top_up: { below: 50_000, amount: 2_000_000, monthly_limit: null } });
    expect(set.text).toMatch(/Low balance: below 100,000 credits\.\s+Auto top-up: ask for 2,000,000 credits below 50,000\./);

    const bad = await post(admin, `${customerPath()}/alerts`, { low_balance_threshold: '5', top_up_below: '10', top_up_amount: '', top_up_monthly_limit: '' });
    expect(bad.status).toBe(400);
    expect(notice(bad.text)).toMatch(/auto_top_up\.amount/);
    expect(await profile()).toMatchObject({ low_balance_threshold: 100_000, auto_top_up: { below: 50_000 } });
    const below = await post(admin, `${customerPath()}/alerts`, { low_balance_threshold: '', top_up_below: '10', top_up_amount: '100', top_up_monthly_limit: '50' });
    expect([below.status, notice(below.text)]).toEqual([400, expect.stringMatching(/monthly_limit must be at least amount/)]);

    const viewerSet = await post(viewer, `${customerPath()}/alerts`, { low_balance_threshold: '1' });
    expect(viewerSet.status).toBe(403);

    const cleared = await post(admin, `${customerPath()}/alerts`, { low_balance_threshold: '', top_up_below: '', top_up_amount: '', top_up_monthly_limit: '' });
    expect(cleared.status).toBe(200);
    expect(await profile()).toMatchObject({ low_balance_threshold: null, auto_top_up: null });
    expect(cleared.text).toMatch(/Low balance: off\.\s+Auto top-up: off\./);
  });
});

describe('the management operation', () => {
  it('PATCH of a customer answers at /v1/admin and /dashboard/api; GET shows the budget and the settings', async () => {
    const path = `/projects/${p.projectId}/customers/${customer}`;
    const r = await svc.call('PATCH', `/v1/admin${path}`, { key: p.adminKey, body: { budget: { limit: 7000, period: 'week' }, low_balance_threshold: 10 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ id: customer, budget: { limit: 7000, period: 'week' }, low_balance_threshold: 10 });
    const got = await svc.call('GET', `/v1/admin${path}`, { key: p.adminKey });
    expect(got.body).toMatchObject({ budget: { limit: 7000, period: 'week', remaining: expect.any(Number) }, low_balance_threshold: 10, auto_top_up: null });
    expectError(await svc.call('PATCH', `/v1/admin${path}`, { key: p.adminKey, body: { budget: { limit: 7, period: 'day' }, colour: 'red' } }), 400, 'invalid_request');
    expectError(await svc.call('PATCH', `/v1/admin/projects/${p.projectId}/customers/nobody-here`, { key: p.adminKey, body: { budget: null } }), 404, 'customer_not_found');
    expect((await profile()).budget).toMatchObject({ limit: 7000 });

    const owner = await addMember(svc, p, 'owner');
    const session = await signIn(svc, owner.email, owner.password);
    const viaSession = await dash(svc, session, 'PATCH', path, { body: { budget: null, low_balance_threshold: null } });
    expect(viaSession.status, JSON.stringify(viaSession.body)).toBe(200);
    expect(await profile()).toMatchObject({ budget: null, low_balance_threshold: null });
  });
});

describe('a key budget', () => {
  it('is given when a customer key is created in the keys screen; a bad one creates no key', async () => {
    const keysPath = `/dashboard/projects/${p.projectId}/keys`;
    const count = async () => (await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys?limit=100`, { key: p.adminKey })).body.data.length as number;
    const before = await count();
    const bad = await post(admin, keysPath, { kind: 'customer', customer_id: customer, budget_limit: '0', budget_period: 'day' });
    expect(bad.status).toBe(400);
    expect(notice(bad.text)).toMatch(/budget\.limit/);
    expect(bad.text).toContain('value="0" data-testid="key-budget-limit"');
    expect(await count()).toBe(before);
    const made = await post(admin, keysPath, { kind: 'customer', customer_id: customer, budget_limit: '25,000', budget_period: 'day' });
    expect(made.status).toBe(200);
    expect(made.text).toMatch(/data-testid="key-budget" data-limit="25000" data-spent="0" data-remaining="25000"/);
    expect(await count()).toBe(before + 1);
  });

  it('is shown with its spend in the keys screen and set or cleared in its row; a project key has none', async () => {
    const keysPath = `/dashboard/projects/${p.projectId}/keys`;
    const made = await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey, body: { type: 'customer', customer_id: customer, name: 'budgeted' } });
    expect(made.status).toBe(201);
    const keyId = made.body.id as string;
    const listed = await pageCall(svc, admin, 'GET', keysPath);
    expect(listed.text).toContain(`href="${keysPath}/${keyId}/budget"`);

    const open = await pageCall(svc, admin, 'GET', `${keysPath}/${keyId}/budget`);
    expect(open.text).toContain('data-testid="key-budget-form"');
    expect(open.text).toContain(`action="${keysPath}/${keyId}/budget"`);

    const bad = await post(admin, `${keysPath}/${keyId}/budget`, { limit: '-3', period: 'day' });
    expect(bad.status).toBe(400);
    expect(notice(bad.text)).toMatch(/budget\.limit/);
    expect(bad.text).toContain('data-testid="key-budget-form"');

    const set = await post(admin, `${keysPath}/${keyId}/budget`, { limit: '40000', period: 'week' });
    expect([set.status, notice(set.text)]).toEqual([200, `Set the budget of key ${made.body.prefix}… to 40,000 credits per week`]);
    expect(set.text).toMatch(/data-testid="key-budget" data-limit="40000" data-spent="0" data-remaining="40000"/);
    const key = (await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys?limit=100`, { key: p.adminKey })).body.data.find((k: { id: string }) => k.id === keyId);
    expect(key.budget).toMatchObject({ limit: 40_000, period: 'week' });

    expect((await post(viewer, `${keysPath}/${keyId}/budget`, { clear: '1' })).status).toBe(403);
    const cleared = await post(admin, `${keysPath}/${keyId}/budget`, { clear: '1' });
    expect([cleared.status, notice(cleared.text)]).toEqual([200, `Cleared the budget of key ${made.body.prefix}…`]);
    const after = (await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys?limit=100`, { key: p.adminKey })).body.data;
    expect(after.find((k: { id: string }) => k.id === keyId).budget).toBeNull();

    // A project key: no Budget link; its row says none; a post is refused by the API.
    const projectKey = after.find((k: { type: string }) => k.type === 'project');
    expect(cleared.text).not.toContain(`${keysPath}/${projectKey.id}/budget`);
    const refused = await post(admin, `${keysPath}/${projectKey.id}/budget`, { limit: '5', period: 'day' });
    expect([refused.status, notice(refused.text)]).toEqual([400, expect.stringMatching(/only for customer-scoped keys/)]);
  });
});
