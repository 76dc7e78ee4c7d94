/**
 * The dashboard in a real browser (Debian's chromium through playwright-core), with the
 * stable test hooks: sign in, create a key and use it on the API, revoke it in the page and
 * see the API refuse it within 1 s, open a customer and find the balance the API reports,
 * set its budget and see a deduct past it refused,
 * add a webhook endpoint on a receiver that verifies signatures, see a test delivery succeed,
 * a failing one, and its replay succeed, and, as a viewer, try a change and see it refused. Each screen is photographed on the
 * way (support.ts: screenshotDir). One browser and one page for the whole file.
 */
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { waitFor } from '../helpers.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { browserSignIn, launchChromium, screenshotDir, seedOrganization, watchedPage, type Seeded } from './support.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

let mock: MockUpstream;
let receiver: Receiver;
let browser: Browser;
let page: Page;
let org: Seeded;
const shots = screenshotDir();
const problems: string[] = [];

// No project of the fixture's: seedOrganization makes the organization with its own. A
// failed webhook delivery's scheduled retry is a minute away: the replay is what fixes it.
useTestService({ workers: true, config: { KEY_LAST_USED_FLUSH_MS: 50, WEBHOOK_RETRY_SCHEDULE_MS: [60_000] }, variants: [] });
beforeAll(async () => {
  [mock, browser, receiver] = await Promise.all([startMockUpstream(), launchChromium(), startReceiver()]);
  org = await seedOrganization(svc, mock);
  // The viewer's refused change is the one error status the tests provoke.
  page = await watchedPage(browser, problems, { provoked: /status of 403/ });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await mock?.close();
  await receiver?.close();
});

async function shoot(name: string): Promise<void> {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

const signIn = (email: string, password: string) => browserSignIn(page, svc.url, email, password);

/** Follows a navigation link; htmx swaps the screen in and then sets the address. */
async function open(testid: string, path: string | RegExp): Promise<void> {
  await page.getByTestId(testid).click();
  await page.waitForURL(typeof path === 'string' ? `**${path}` : path);
}

/** The API's answer to a read with `key`. */
async function balanceWith(key: string, customerId = org.customerId) {
  return svc.call('GET', `/v1/customers/${encodeURIComponent(customerId)}/balance`, { key });
}

describe('the dashboard as the owner', () => {
  it('signs in onto the overview, with the credits chart', async () => {
    await page.goto(`${svc.url}/dashboard`);
    expect(page.url()).toBe(`${svc.url}/dashboard/sign-in`);
    await shoot('sign-in');
    await signIn(org.owner.email, org.owner.password);
    // htmx loaded from the service itself, boosting links and forms.
    expect(await page.evaluate(() => typeof (window as unknown as { htmx?: { version: string } }).htmx?.version)).toBe('string');
    await expect(page.getByTestId('usage-chart').count()).resolves.toBe(1);
    expect(await page.getByTestId('plan').textContent()).toBe('pro_500k');
    // The seeded deducts and the chat call: billable operations of this period.
    expect(Number((await page.getByTestId('ops-used').textContent())!.replace(/,/g, ''))).toBeGreaterThanOrEqual(4);
    await shoot('overview');
  });

  it('creates a project key that works on the API, then revokes it: 401 api_key_revoked within 1 s', async () => {
    await open('nav-keys', `/projects/${org.p.projectId}/keys`);
    await page.getByTestId('key-create').click();
    await page.getByTestId('key-kind').selectOption('project');
    await page.getByTestId('key-submit').click();
    const secret = (await page.getByTestId('key-secret').textContent())!;
    expect(secret).toMatch(/^svc_live_[A-Za-z0-9_-]{43}$/);
    const row = page.locator(`[data-testid="key-row"][data-key-prefix="${secret.slice(0, 16)}"]`);
    expect(await row.count()).toBe(1);
    expect(await row.getByTestId('key-status').textContent()).toBe('active');
    expect((await balanceWith(secret)).status).toBe(200);

    await row.getByTestId('key-revoke').click();
    const confirm = row.getByTestId('key-revoke-confirm');
    await confirm.waitFor();
    // Nothing happens on the first click: the key still works.
    expect((await balanceWith(secret)).status).toBe(200);
    const clickedAt = Date.now();
    await confirm.click();
    let refused = await balanceWith(secret);
    while (refused.status === 200 && Date.now() - clickedAt < 2_000) refused = await balanceWith(secret);
    const elapsed = Date.now() - clickedAt;
    expectError(refused, 401, 'api_key_revoked');
    expect(elapsed).toBeLessThan(1_000);
    await page.getByTestId('notice-ok').waitFor();
    expect(await row.getByTestId('key-status').textContent()).toBe('revoked');
    await shoot('keys');
  });

  it('creates a customer key with a customer, models and an expiry, secret shown once with a copy button', async () => {
    await page.getByTestId('key-create').click();
    await page.getByTestId('key-kind').selectOption('customer');
    await page.getByTestId('key-customer').fill(org.customerId);
    await page.getByTestId('key-model').first().check();
    await page.getByTestId('key-expires').fill('2099-01-01T00:00');
    await page.getByTestId('key-submit').click();
    const secret = (await page.getByTestId('key-secret').textContent())!;
    expect(secret).toMatch(/^svc_customer_/);
    expect((await balanceWith(secret)).status).toBe(200);
    expect((await balanceWith(secret, 'someone-else')).status).toBe(404);
    const row = page.locator(`[data-testid="key-row"][data-key-prefix="${secret.slice(0, 16)}"]`);
    expect(await row.textContent()).toContain(org.modelId);
    expect(await row.textContent()).toContain('2099-01-01');
    expect(await page.getByTestId('key-copy').count()).toBe(1);
    // Shown once: the list, reloaded, never holds it. The key's uses above show as its
    // last use once the API process wrote them (every 50 ms here).
    await waitFor(async () => {
      const keys = (await svc.call('GET', `/v1/admin/projects/${org.p.projectId}/keys`, { key: org.p.adminKey })).body.data;
      return keys.find((k: { prefix: string }) => secret.startsWith(k.prefix))?.last_used_at;
    }, 5_000, 'the key\'s last use written');
    await page.reload();
    expect(await page.content()).not.toContain(secret);
    expect(await row.getByTestId('key-last-used').textContent()).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
  });

  it('opens a customer found by search and shows the balance the API reports', async () => {
    await open('nav-customers', `/projects/${org.p.projectId}/customers`);
    await page.getByTestId('customer-search').fill('acme');
    await page.getByTestId('customer-search').press('Enter');
    await page.waitForURL(/search=acme/);
    expect(await page.getByTestId('customer-row').count()).toBe(1);
    await shoot('customers');
    await page.locator(`[data-testid="customer-row"][data-customer-id="${org.customerId}"]`).click();
    await page.waitForURL(`**/customers/${org.customerId}`);
    const shown = (await page.getByTestId('customer-available').getAttribute('data-credits'))!;
    expect(shown).toMatch(/^\d+$/);
    const api = await balanceWith(org.p.projectKey);
    expect(Number(shown)).toBe(api.body.available);
    expect(await page.getByTestId('customer-available').textContent()).toBe(api.body.available.toLocaleString('en-US'));
    expect(await page.getByTestId('source-row').count()).toBe(2);
    expect(await page.getByTestId('ledger-row').count()).toBeGreaterThanOrEqual(5);
    await page.getByTestId('ledger-type').selectOption('DEDUCT');
    await page.waitForURL(/type=DEDUCT/);
    expect(await page.getByTestId('ledger-row').count()).toBe(3);
    expect(await page.locator('[data-testid="ledger-row"]:not([data-entry-type="DEDUCT"])').count()).toBe(0);
    await shoot('customer');
  });

  it('deposits from the customer page', async () => {
    const before = (await balanceWith(org.p.projectKey)).body.available;
    await page.getByTestId('deposit-amount').fill('2500000');
    await page.getByTestId('deposit-submit').click();
    await page.getByTestId('notice-ok').waitFor();
    expect((await balanceWith(org.p.projectKey)).body.available).toBe(before + 2_500_000);
    expect(Number(await page.getByTestId('customer-available').getAttribute('data-credits'))).toBe(before + 2_500_000);
  });

  it('sets a budget on the customer page, which then shows its spend; a deduct past it is refused', async () => {
    await page.getByTestId('budget-limit').fill('1000000');
    await page.getByTestId('budget-period').selectOption('month');
    await page.getByTestId('budget-submit').click();
    await page.getByTestId('notice-ok').filter({ hasText: 'Set the budget' }).waitFor();
    expect(await page.getByTestId('customer-budget').getAttribute('data-limit')).toBe('1000000');
    const deduct = (id: string, amount: number) =>
      svc.call('POST', '/v1/billing/deduct', { key: org.p.projectKey, body: { customer_id: org.customerId, transaction_id: id, amount } });
    expect((await deduct('budget-ok', 600_000)).status).toBe(200);
    expectError(await deduct('budget-over', 500_000), 400, 'budget_exceeded');
    await page.reload();
    expect(await page.getByTestId('customer-budget').getAttribute('data-spent')).toBe('600000');
    expect(await page.getByTestId('customer-budget').getAttribute('data-remaining')).toBe('400000');
  });

  it('shows the other screens', async () => {
    await open('nav-usage', `/projects/${org.p.projectId}/usage`);
    await page.getByTestId('usage-trace').fill('trace-hello');
    await page.getByTestId('usage-search').click();
    await page.waitForURL(/trace_id=trace-hello/);
    expect(await page.getByTestId('usage-row').count()).toBe(1);
    await shoot('usage');
    await open('receipt-link', /\/receipts\//);
    await page.getByTestId('receipt').waitFor();
    await shoot('receipt');

    await open('nav-models', `/projects/${org.p.projectId}/models`);
    expect(await page.locator(`[data-testid="model-row"][data-model-id="${org.modelId}"]`).count()).toBe(1);
    await shoot('models');

    await open('nav-billing', '/dashboard/billing');
    await page.getByTestId('plan-select').selectOption('pro_2m');
    await page.getByTestId('plan-preview').click();
    await page.getByTestId('plan-quote').waitFor();
    expect(await page.getByTestId('plan-charge').textContent()).toMatch(/^\$\d+\.\d{2}$/);
    expect(await page.getByTestId('invoice-row').count()).toBe(2);

    await open('nav-team', '/dashboard/team');
    expect(await page.getByTestId('member-row').count()).toBe(2);
    await shoot('team');

    await open('nav-projects', '/dashboard/projects');
    expect(await page.getByTestId('project-row').count()).toBe(1);
    await shoot('projects');

    await open('nav-reconcile', /\/dashboard\/.*reconcile/);
    await page.getByTestId('reconcile-run').click();
    // The check runs on the workers; htmx asks for the job's panel every second until the report shows.
    await page.getByTestId('reconcile-outcome').waitFor({ timeout: 60_000 });
    expect(page.url()).toMatch(/\/reconcile\/jobs\/rcj_[A-Za-z0-9_-]{16}$/);
    expect(await page.getByTestId('reconcile-job').getAttribute('data-status')).toBe('completed');
    expect(await page.getByTestId('customers-checked').textContent()).toMatch(/^[1-9][\d,]*$/);
    await shoot('reconcile');

    await open('nav-queues', /\/dashboard\/queues/);
    await shoot('queues');
  });

  it('adds a webhook endpoint, sees a test delivery succeed, then a failure, and a replay after the fix succeed', async () => {
    await open('nav-webhooks', `/projects/${org.p.projectId}/webhooks`);
    await page.getByTestId('webhook-create').click();
    await page.getByTestId('webhook-url').fill(`${receiver.url}/dash`);
    await page.getByTestId('webhook-description').fill('billing sync');
    await page.getByTestId('webhook-submit').click();
    const secret = (await page.getByTestId('webhook-secret').textContent())!;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    receiver.expect('/dash', secret, [200]);
    await shoot('webhooks');

    // The test send answers with the endpoint's log, which htmx refreshes until the delivery is done.
    await page.getByTestId('webhook-row').getByTestId('webhook-test').click();
    await page.waitForURL('**/deliveries');
    await page.locator('[data-testid="delivery-row"][data-status="succeeded"]').waitFor();
    expect(await page.getByTestId('delivery-last-code').textContent()).toBe('HTTP 200');

    receiver.reply('/dash', [500]);
    await page.getByTestId('webhook-test').click();
    // The log now has the second delivery, newest first.
    await page.getByTestId('delivery-row').nth(1).waitFor();
    const failing = page.getByTestId('delivery-row').first();
    const failingId = (await failing.getAttribute('data-delivery-id'))!;
    const row = page.locator(`[data-testid="delivery-row"][data-delivery-id="${failingId}"]`);
    await row.locator('[data-testid="delivery-last-code"]', { hasText: 'HTTP 500' }).waitFor();
    expect(await row.getAttribute('data-status')).toBe('pending');
    await row.getByTestId('delivery-attempts').locator('summary').click();
    expect(await row.getByTestId('delivery-attempt').count()).toBe(1);
    await shoot('deliveries');

    receiver.reply('/dash', [200]);
    await row.getByTestId('delivery-replay').click();
    await page.locator(`[data-testid="delivery-row"][data-delivery-id="${failingId}"][data-status="succeeded"]`).waitFor();
    const events = receiver.on('/dash');
    expect(events).toHaveLength(3);
    expect(events[1].headers['webhook-id']).toBe(events[2].headers['webhook-id']);
    expect(receiver.unverified).toEqual([]);

    await open('nav-events', `/projects/${org.p.projectId}/events`);
    await page.getByTestId('event-list').waitFor();
    await shoot('events');
  });
});

describe('the dashboard as a viewer', () => {
  it('reads the keys but a change is refused with the API\'s message', async () => {
    await page.getByTestId('sign-out').click();
    await page.waitForURL(`${svc.url}/dashboard/sign-in`);
    await signIn(org.viewer.email, org.viewer.password);
    await open('nav-keys', `/projects/${org.p.projectId}/keys`);
    // The seed's project key and the two keys made above.
    const keysBefore = await page.getByTestId('key-row').count();
    expect(keysBefore).toBe(3);
    await page.getByTestId('key-create').click();
    await page.getByTestId('key-kind').selectOption('project');
    const answer = page.waitForResponse((r) => r.request().method() === 'POST');
    await page.getByTestId('key-submit').click();
    expect((await answer).status()).toBe(403);
    expect(await page.getByTestId('notice-error').textContent()).toBe('this needs the admin role or higher; you are a viewer');
    expect(await page.getByTestId('key-row').count()).toBe(keysBefore);
    const listed = await svc.call('GET', `/v1/admin/projects/${org.p.projectId}/keys`, { key: org.p.adminKey });
    expect(listed.body.data).toHaveLength(keysBefore);
  });
});

// Last: everything above ran without a script error or a CSP report in the browser. The
// refusals the tests provoke (a viewer's 403) are answers, not console errors: htmx swaps them in.
describe('the browser console', () => {
  it('reported no script error and no CSP violation', () => {
    expect(problems).toEqual([]);
  });
});
