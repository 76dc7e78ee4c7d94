/**
 * Shared setup of the dashboard suites: an organization with data on every screen (a
 * model served by the mock upstream, funded customers, a gateway call, closed periods
 * with invoices, an owner and a viewer), the page's sign-in over plain HTTP, and the
 * Debian chromium driven by playwright-core.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { sql } from 'slonik';
import { afterAll, beforeAll, expect } from 'vitest';
import { Invoicing } from '../../src/billing/invoices.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import type { TestProject, TestService } from '../helpers.js';
import { addMember } from '../admin/dashboard-support.js';
import { svc, useTestService, type ServiceFixtureOptions } from '../support/service.js';

const chromium_path = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** One headless chromium per test file (the machine has 2 cores). */
export function launchChromium(): Promise<Browser> {
  if (!existsSync(chromium_path)) throw new Error(`no chromium at ${chromium_path}: apt-get install -y chromium (.ci/run does)`);
  return chromium.launch({ executablePath: chromium_path, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
}

export interface WatchedPageOptions {
  viewport?: { width: number; height: number };
  timezoneId?: string;
  acceptDownloads?: boolean;
  /** The console's reports of error statuses the test provokes itself (`/status of 403/`): answers, not problems. */
  provoked?: RegExp;
}

/**
 * A new page in a context of its own (1280x860 unless told), whose script errors, CSP
 * violations (an inline script or style the page should not have) and console errors are
 * pushed to `problems`, which each file expects empty at its end.
 */
export async function watchedPage(browser: Browser, problems: string[], o: WatchedPageOptions = {}): Promise<Page> {
  const context = await browser.newContext({ viewport: o.viewport ?? { width: 1280, height: 860 }, timezoneId: o.timezoneId, acceptDownloads: o.acceptDownloads });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (m) => {
    if (o.provoked?.test(m.text())) return;
    if (m.type() === 'error' || /Content Security Policy/i.test(m.text())) problems.push(`console ${m.type()}: ${m.text()}`);
  });
  return page;
}

/**
 * Where the browser tests save their screenshots: docs/dashboard/ with
 * DASHBOARD_SCREENSHOTS=1 (`npm run screenshots`, to refresh the committed ones), else
 * .tmp/dashboard/, so that an ordinary test run leaves the repository unchanged.
 */
export function screenshotDir(): string {
  const dir = process.env.DASHBOARD_SCREENSHOTS === '1' ? join('docs', 'dashboard') : join('.tmp', 'dashboard');
  mkdirSync(dir, { recursive: true });
  return dir;
}

export interface Seeded {
  p: TestProject;
  owner: { id: string; email: string; password: string };
  viewer: { id: string; email: string; password: string };
  customerId: string;
  modelId: string;
}

/** An organization on a Pro plan with something to show on every screen. */
export async function seedOrganization(svc: TestService, mock: MockUpstream): Promise<Seeded> {
  const p = await svc.project();
  // Emails are unique per run: sign-in finds a member by email across organizations.
  const tag = p.organizationId.slice(-6).toLowerCase().replace(/[^a-z0-9]/g, 'x');
  // Started 70 days ago: two closed periods to invoice.
  await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = now() - interval '70 days' WHERE id = ${p.organizationId}`);
  const plan = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
  expect(plan.status, JSON.stringify(plan.body)).toBe(200);
  const modelId = 'demo-chat';
  const model = await svc.call('PUT', `/v1/admin/projects/${p.projectId}/models/${modelId}`, {
    key: p.adminKey,
    body: {
      provider: 'openai', upstream_base_url: mock.url, upstream_model: 'mock-gpt', upstream_api_key: 'mock-upstream-key', display_name: 'Demo chat',
      context_window: 128_000, max_output_tokens: 4_096, supports_streaming: true,
      input_price_per_million_credits: 2_500_000, output_price_per_million_credits: 10_000_000,
    },
  });
  expect(model.status, JSON.stringify(model.body)).toBe(201);
  const customerId = 'acme';
  for (const [id, amount, name] of [[customerId, 25_000_000, 'Acme Corp'], ['globex', 4_000_000, 'Globex']] as const) {
    const d = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: id, amount, name, email: `billing@${id}.example` } });
    expect(d.status, JSON.stringify(d.body)).toBe(200);
  }
  const promo = await svc.call('POST', '/v1/customers/deposit', {
    key: p.projectKey,
    body: { customer_id: customerId, amount: 1_000_000, wallet: 'promo', source: 'launch promo', expires_at: new Date(Date.now() + 30 * 86_400_000).toISOString() },
  });
  expect(promo.status, JSON.stringify(promo.body)).toBe(200);
  for (let i = 0; i < 3; i++) {
    const r = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: customerId, transaction_id: `job-${i}`, amount: 150_000 + i } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
  const chat = await svc.call('POST', '/v1/chat/completions', {
    key: p.projectKey,
    headers: { 'x-service-customer': customerId, 'x-service-trace-id': 'trace-hello' },
    body: { model: modelId, messages: [{ role: 'user', content: 'Hello from the dashboard test' }] },
  });
  expect(chat.status, JSON.stringify(chat.body)).toBe(200);
  const owner = await addMember(svc, p, 'owner', `owner-${tag}@example.com`);
  const viewer = await addMember(svc, p, 'viewer', `viewer-${tag}@example.com`);
  await svc.drained();
  await new Invoicing(svc.rt.db, svc.rt.redis, svc.rt.config.REDIS_PREFIX, 0, svc.rt.logger).closeOrganization(p.organizationId, Date.now());
  return { p, owner, viewer, customerId, modelId };
}

/** Signs in through the sign-in form in the browser, landing on the overview. */
export async function browserSignIn(page: Page, baseUrl: string, email: string, password: string): Promise<void> {
  await page.goto(`${baseUrl}/dashboard`);
  await page.getByTestId('login-email').fill(email);
  await page.getByTestId('login-password').fill(password);
  await page.getByTestId('login-submit').click();
  await page.waitForURL(`${baseUrl}/dashboard/overview`);
}

export interface PageSession {
  /** The Cookie header the browser would send. */
  cookie: string;
  csrf: string;
}

/** Signs in through the page's form as a browser does: the form's token cookie, then the post. */
export async function pageSignIn(svc: TestService, email: string, password: string): Promise<PageSession> {
  const form = await fetch(`${svc.url}/dashboard/sign-in`);
  const token = /svc_signin=([^;]+)/.exec(form.headers.get('set-cookie') ?? '')![1];
  const res = await fetch(`${svc.url}/dashboard/sign-in`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: `svc_signin=${token}`, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ _csrf: decodeURIComponent(token), email, password }),
  });
  expect([res.status, res.headers.get('location')]).toEqual([303, '/dashboard/overview']);
  const cookie = /svc_session=[^;]+/.exec(res.headers.get('set-cookie') ?? '')![0];
  const page = await (await fetch(`${svc.url}/dashboard/overview`, { headers: { cookie } })).text();
  const csrf = /name="_csrf" value="([^"]+)"/.exec(page)![1];
  return { cookie, csrf };
}

/** A page request with the session's cookie; `form` posts it urlencoded; `extra` adds headers (htmx's). */
export async function pageCall(svc: TestService, s: PageSession | null, method: 'GET' | 'POST', path: string, form?: Record<string, string | string[]>, extra: Record<string, string> = {}) {
  const headers: Record<string, string> = { ...extra };
  if (s) headers.cookie = s.cookie;
  let body: string | undefined;
  if (form) {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(form)) for (const one of Array.isArray(v) ? v : [v]) q.append(k, one);
    body = q.toString();
  }
  const res = await fetch(`${svc.url}${path}`, { method, headers, body, redirect: 'manual' });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** What useSeededDashboard fills in before the file's tests: the mock upstream, the seeded organization, the browser. */
export interface SeededDashboard {
  mock: MockUpstream;
  org: Seeded;
  /** Only with `browser: true`. */
  browser: Browser;
}

/**
 * The dashboard files' set-up: a test service with its workers and no project of the
 * fixture's (seedOrganization makes the organization with its own), the mock upstream,
 * the seeded organization, and with `browser: true` one chromium; all closed after the file.
 */
export function useSeededDashboard(o: { browser?: boolean; config?: ServiceFixtureOptions['config'] } = {}): SeededDashboard {
  const fx = {} as SeededDashboard;
  useTestService({ workers: true, variants: [], config: o.config });
  beforeAll(async () => {
    const [mock, browser] = await Promise.all([startMockUpstream(), o.browser ? launchChromium() : undefined]);
    fx.mock = mock;
    if (browser) fx.browser = browser;
    fx.org = await seedOrganization(svc, mock);
  }, 60_000);
  afterAll(async () => {
    await fx.browser?.close();
    await fx.mock?.close();
  });
  return fx;
}
