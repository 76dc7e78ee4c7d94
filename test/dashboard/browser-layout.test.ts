/**
 * The dashboard's layout and the slips a first user found, in a real browser (Debian's
 * chromium through playwright-core, one browser for the file): the owner's navigation on
 * one line at 1280 px; at 390 px every screen as wide as the viewport at most, the
 * navigation a row that scrolls; error pages (404, 403, 500) with the navigation; chart
 * labels in the page's font; a reconcile check read as queued, then finished, never
 * "already running"; a red Repair; a member's removal confirmed; a refused invitation
 * that keeps what was typed and says what is wrong; the keys form's customer fields and
 * UTC expiry; key prefixes on one line; "Last used" fresh on a reload. Screens are
 * photographed on the way (support.ts: screenshotDir).
 *
 * The service keeps the default KEY_LAST_USED_FLUSH_MS (10 s): "Last used" must not wait for it.
 */
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { browserSignIn, screenshotDir, watchedPage, useSeededDashboard } from './support.js';
import { svc } from '../support/service.js';

const fx = useSeededDashboard({ browser: true });
let webhookId: string;
const shots = screenshotDir();
const problems: string[] = [];

beforeAll(async () => {
  const hook = await svc.call('POST', `/v1/admin/projects/${fx.org.p.projectId}/webhooks`, { key: fx.org.p.adminKey, body: { url: 'http://127.0.0.1:9/hook', description: 'layout test' } });
  expect(hook.status, JSON.stringify(hook.body)).toBe(201);
  webhookId = hook.body.id;
}, 60_000);

/** A signed-in page of its own size (and time zone): script errors and CSP reports are collected. */
async function signedIn(who: { email: string; password: string }, viewport: { width: number; height: number }, timezoneId = 'UTC'): Promise<Page> {
  // The error pages and refusals the tests ask for are answers, not script errors.
  const page = await watchedPage(fx.browser, problems, { viewport, timezoneId, provoked: /status of (400|403|404|409|500)/ });
  await browserSignIn(page, svc.url, who.email, who.password);
  return page;
}

async function shoot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

/** Every screen's address, the seeded customer's, a receipt's and a webhook's log included. */
async function everyScreen(): Promise<string[]> {
  const project = `/dashboard/projects/${fx.org.p.projectId}`;
  const usage = (await svc.call('GET', `/v1/admin/projects/${fx.org.p.projectId}/usage?limit=1`, { key: fx.org.p.adminKey })).body.data;
  return [
    '/dashboard/overview', '/dashboard/projects', `${project}/keys`, `${project}/models`, `${project}/customers`,
    `${project}/customers/${fx.org.customerId}`, `${project}/usage`, `${project}/receipts/${usage[0].transaction_id}`,
    `${project}/reconcile`, `${project}/webhooks`, `${project}/webhooks/${webhookId}/deliveries`, `${project}/events`,
    '/dashboard/billing', '/dashboard/team', '/dashboard/queues', '/dashboard/no-such-page',
  ];
}

const project = () => `/dashboard/projects/${fx.org.p.projectId}`;

describe('the layout', () => {
  it("fits the owner's navigation on one line at 1280 px, and draws the chart's labels in the page's font", async () => {
    const page = await signedIn(fx.org.owner, { width: 1280, height: 860 });
    await shoot(page, 'layout-1280');
    const tops = await page.locator('header.top nav a').evaluateAll((links) => links.map((a) => a.getBoundingClientRect().top));
    expect(tops).toHaveLength(12);
    expect(new Set(tops).size).toBe(1);
    // The whole bar is one line: the name, the links and the sign-out share it.
    const bar = await page.locator('header.top').evaluate((h) => h.getBoundingClientRect().height);
    expect(bar).toBeLessThan(50);
    // The labels are HTML in the page's font, not SVG text stretched with the bars.
    const fonts = await page.locator('figure.chart').evaluate((f) => ({
      page: getComputedStyle(document.body).fontFamily,
      labels: [...f.querySelectorAll('.ticks span')].map((s) => getComputedStyle(s).fontFamily),
      svgText: f.querySelectorAll('svg text').length,
    }));
    expect(fonts.labels).toHaveLength(3);
    expect(fonts).toEqual({ page: fonts.page, labels: fonts.labels.map(() => fonts.page), svgText: 0 });
  });

  it('at 390 px, shows every screen within the viewport width, the navigation a row that scrolls, key prefixes on one line', async () => {
    const page = await signedIn(fx.org.owner, { width: 390, height: 844 });
    const wider: string[] = [];
    const withoutNav: string[] = [];
    for (const path of await everyScreen()) {
      await page.goto(`${svc.url}${path}`);
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      if (width > 390) wider.push(`${path}: ${width}px`);
      // Every link stays reachable: the navigation scrolls sideways inside itself.
      if ((await page.getByTestId('nav-queues').count()) !== 1) withoutNav.push(path);
    }
    expect([wider, withoutNav]).toEqual([[], []]);
    const nav = await page.locator('header.top nav').evaluate((n) => ({ scrolls: n.scrollWidth > n.clientWidth, overflow: getComputedStyle(n).overflowX }));
    expect(nav).toEqual({ scrolls: true, overflow: 'auto' });

    await page.goto(`${svc.url}${project()}/keys`);
    // The keys table scrolls in its own box; each prefix stays one line.
    const table = await page.getByTestId('key-list').evaluate((t) => ({ scrolls: t.scrollWidth > t.clientWidth, overflow: getComputedStyle(t).overflowX }));
    expect(table).toEqual({ scrolls: true, overflow: 'auto' });
    const prefixLines = await page.locator('[data-testid="key-row"] code').evaluateAll((codes) => codes.map((c) => c.getClientRects().length));
    expect(prefixLines.length).toBeGreaterThan(0);
    expect(prefixLines.every((n) => n === 1)).toBe(true);
    await shoot(page, 'layout-390-keys');
    await page.goto(`${svc.url}${project()}/customers/${fx.org.customerId}`);
    await shoot(page, 'layout-390-customer');
  });

  it('keeps the navigation on the error pages: 404, 403 and 500', async () => {
    const owner = await signedIn(fx.org.owner, { width: 1280, height: 860 });
    const missing = await owner.goto(`${svc.url}/dashboard/no-such-page`);
    expect(missing!.status()).toBe(404);
    expect(await owner.getByTestId('nav-keys').count()).toBe(1);
    expect(await owner.locator('h1').textContent()).toBe('Not found');
    // No screen's link is marked current on an error page.
    expect(await owner.locator('header.top [aria-current]').count()).toBe(0);
    await shoot(owner, 'error-404');

    // A screen that fails with an error of our own: the 500 page, inside the navigation.
    const failing = vi.spyOn(svc.rt.ledgerQueries, 'quarantine').mockImplementation(() => {
      throw new Error('test: the reconcile screen fails');
    });
    try {
      const broken = await owner.goto(`${svc.url}${project()}/reconcile`);
      expect(broken!.status()).toBe(500);
      expect(await owner.getByTestId('notice-error').textContent()).toBe('internal server error');
      expect(await owner.getByTestId('nav-reconcile').count()).toBe(1);
    } finally {
      failing.mockRestore();
    }

    const viewer = await signedIn(fx.org.viewer, { width: 1280, height: 860 });
    const refused = await viewer.goto(`${svc.url}/dashboard/queues`);
    expect(refused!.status()).toBe(403);
    expect(await viewer.getByTestId('notice-error').textContent()).toBe('this needs the owner role; you are a viewer');
    expect(await viewer.getByTestId('nav-overview').count()).toBe(1);
  });
});

describe('reconcile', () => {
  it('shows a new check as queued, then finished, never "already running"; Repair is a red button with a confirm', async () => {
    const page = await signedIn(fx.org.owner, { width: 1280, height: 860 });
    await page.goto(`${svc.url}${project()}/reconcile`);
    const red = await page.getByTestId('reconcile-repair').evaluate((b) => getComputedStyle(b).backgroundColor);
    expect(red).toBe('rgb(180, 35, 24)');
    // No worker takes the job until the page has shown it queued.
    await svc.workers!.reconcileWorker.pause();
    try {
      await page.getByTestId('reconcile-run').click();
      const panel = page.getByTestId('reconcile-job');
      await panel.waitFor();
      expect(await page.getByTestId('notice-ok').textContent()).toBe('Check started; this page follows it');
      expect([await panel.getAttribute('data-status'), await page.getByTestId('job-status').textContent()]).toEqual(['queued', 'queued']);
      expect(await page.getByTestId('reconcile-outcome').count()).toBe(0);
      const jobId = await panel.getAttribute('data-job-id');
      await shoot(page, 'reconcile-queued');

      // A second click while it waits follows the same job, and says so.
      await page.getByTestId('reconcile-run').click();
      await page.getByTestId('notice-ok').filter({ hasText: 'already under way' }).waitFor();
      expect(await page.getByTestId('reconcile-job').getAttribute('data-job-id')).toBe(jobId);
    } finally {
      svc.workers!.reconcileWorker.resume();
    }
    await page.getByTestId('reconcile-outcome').waitFor({ timeout: 60_000 });
    expect(await page.getByTestId('reconcile-job').getAttribute('data-status')).toBe('completed');
    expect(await page.getByTestId('reconcile-progress').count()).toBe(0);
    expect(await page.locator('main').textContent()).not.toContain('already running');

    await page.getByTestId('reconcile-repair').click();
    const confirm = page.getByTestId('reconcile-repair-confirm');
    await confirm.waitFor();
    expect(await confirm.evaluate((b) => getComputedStyle(b).backgroundColor)).toBe('rgb(180, 35, 24)');
    await shoot(page, 'reconcile-repair-confirm');
  }, 90_000);
});

describe('team', () => {
  it('keeps a refused invitation as typed and says what is wrong; a removal takes a confirming click', async () => {
    const page = await signedIn(fx.org.owner, { width: 1280, height: 860 });
    await page.goto(`${svc.url}/dashboard/team`);
    await page.getByTestId('invite-email').fill(fx.org.viewer.email);
    await page.getByTestId('invite-role').selectOption('admin');
    await page.getByTestId('invite-submit').click();
    await page.getByTestId('notice-error').waitFor();
    expect(await page.getByTestId('notice-error').textContent()).toBe(`${fx.org.viewer.email} is already a member of this organization`);
    expect([await page.getByTestId('invite-email').inputValue(), await page.getByTestId('invite-role').inputValue()]).toEqual([fx.org.viewer.email, 'admin']);

    await page.getByTestId('invite-email').fill('layout.member@example.com');
    await page.locator('input[name="password"]').fill('short');
    await page.getByTestId('invite-submit').click();
    await page.getByTestId('notice-error').filter({ hasText: 'password' }).waitFor();
    expect(await page.getByTestId('notice-error').textContent()).toBe('The password needs 12 to 256 characters; or leave it empty, and one is made and shown once');
    expect(await page.getByTestId('invite-email').inputValue()).toBe('layout.member@example.com');
    await shoot(page, 'team-invite-refused');

    await page.getByTestId('invite-submit').click();
    await page.getByTestId('notice-ok').waitFor();
    const row = page.locator('[data-testid="member-row"][data-member-email="layout.member@example.com"]');
    await row.getByTestId('member-remove').click();
    const confirm = row.getByTestId('member-remove-confirm');
    await confirm.waitFor();
    // The first click removed nobody.
    const members = async () => (await svc.call('GET', '/v1/admin/members', { key: fx.org.p.adminKey })).body.data.map((m: { email: string }) => m.email);
    expect(await members()).toContain('layout.member@example.com');
    await shoot(page, 'team-remove-confirm');
    await confirm.click();
    await page.getByTestId('notice-ok').filter({ hasText: 'Removed layout.member@example.com' }).waitFor();
    expect(await members()).not.toContain('layout.member@example.com');
  });
});

describe('keys', () => {
  it('shows the customer fields for a customer key only, takes the expiry in UTC, and shows a fresh "Last used" on a reload', async () => {
    // A browser far from UTC: what is typed is UTC all the same.
    const page = await signedIn(fx.org.owner, { width: 1280, height: 860 }, 'America/Los_Angeles');
    await page.goto(`${svc.url}${project()}/keys`);
    await page.getByTestId('key-create').click();
    const customerFields = page.getByTestId('key-customer-fields');
    await page.getByTestId('key-kind').selectOption('project');
    expect(await customerFields.isVisible()).toBe(false);
    await page.getByTestId('key-kind').selectOption('customer');
    expect(await customerFields.isVisible()).toBe(true);
    await shoot(page, 'keys-create-customer');
    await page.getByTestId('key-customer').fill(fx.org.customerId);
    // The field says what it takes before anything is sent.
    const expires = page.getByTestId('key-expires');
    await expires.fill('next friday');
    expect(await expires.evaluate((i: HTMLInputElement) => i.validity.patternMismatch)).toBe(true);
    await expires.fill('2099-01-31 23:30');
    expect(await expires.evaluate((i: HTMLInputElement) => i.validity.valid)).toBe(true);
    await page.getByTestId('key-submit').click();
    const secret = (await page.getByTestId('key-secret').textContent())!;
    const row = page.locator(`[data-testid="key-row"][data-key-prefix="${secret.slice(0, 16)}"]`);
    expect(await row.textContent()).toContain('2099-01-31 23:30 UTC');
    const listed = (await svc.call('GET', `/v1/admin/projects/${fx.org.p.projectId}/keys`, { key: fx.org.p.adminKey })).body.data;
    expect(listed.find((k: { prefix: string }) => secret.startsWith(k.prefix)).expires_at).toBe('2099-01-31T23:30:00.000Z');

    // Used, then the page reloaded: its last use is there, without waiting for the 10 s flush.
    const lastUsed = row.getByTestId('key-last-used');
    expect(await lastUsed.textContent()).toBe('—');
    const before = Date.now();
    expect((await svc.call('GET', `/v1/customers/${fx.org.customerId}/balance`, { key: secret })).status).toBe(200);
    await page.reload();
    const first = Date.parse((await lastUsed.getAttribute('data-at'))!);
    expect(first).toBeGreaterThanOrEqual(before - 1);
    expect(await lastUsed.textContent()).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await svc.call('GET', `/v1/customers/${fx.org.customerId}/balance`, { key: secret })).status).toBe(200);
    await page.reload();
    expect(Date.parse((await lastUsed.getAttribute('data-at'))!)).toBeGreaterThan(first);
  });
});

// Last: everything above ran without a script error or a CSP report in the fx.browser.
describe('the browser console', () => {
  it('reported no script error and no CSP violation', () => {
    expect(problems).toEqual([]);
  });
});
