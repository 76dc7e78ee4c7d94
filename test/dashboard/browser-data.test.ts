/**
 * The data screens in a real browser (Debian's chromium through playwright-core), checked
 * against the API: a customer created, edited and funded in USD from the dashboard, with
 * refusals said in words and the typed input kept; numbers with thousands separators;
 * the ledger naming its sources; a receipt with the prices billed; the Usage screen's
 * chart following the search, the range and the split, gateway spend labelled apart from
 * ledger deducts, and the CSV download under the name the docs give. Each screen is
 * photographed (support.ts: screenshotDir). One browser and one page for the file.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { csvFileName } from '../../src/dashboard/screens/usage.js';
import { browserSignIn, pageCall, pageSignIn, screenshotDir, watchedPage, useSeededDashboard } from './support.js';
import { svc } from '../support/service.js';

const fx = useSeededDashboard({ browser: true });
let page: Page;
const shots = screenshotDir();
const problems: string[] = [];

beforeAll(async () => {
  // A second customer's call, so that the usage chart has two customers to split by.
  const call = await svc.call('POST', '/v1/chat/completions', {
    key: fx.org.p.projectKey,
    headers: { 'x-service-customer': 'globex', 'x-service-trace-id': 'trace-globex' },
    body: { model: fx.org.modelId, messages: [{ role: 'user', content: 'Hello from Globex' }] },
  });
  expect(call.status, JSON.stringify(call.body)).toBe(200);
  await svc.drained();
  // The refusals the tests provoke answer 400.
  page = await watchedPage(fx.browser, problems, { acceptDownloads: true, provoked: /status of 400/ });
  await browserSignIn(page, svc.url, fx.org.owner.email, fx.org.owner.password);
}, 60_000);

async function shoot(name: string): Promise<void> {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

const projectPath = (...rest: string[]) => `${svc.url}/dashboard/projects/${fx.org.p.projectId}/${rest.join('/')}`;
const customer = async (id: string) => (await svc.call('GET', `/v1/customers/${encodeURIComponent(id)}`, { key: fx.org.p.projectKey })).body;
const usageTotal = async (query: Record<string, string>) =>
  (await svc.call('GET', `/v1/admin/usage?${new URLSearchParams({ project_id: fx.org.p.projectId, group_by: '', ...query })}`, { key: fx.org.p.adminKey })).body.data[0]?.cost_credits ?? 0;
const errorText = () => page.getByTestId('notice-error').textContent();

describe('customers', () => {
  it('refuses metadata that is not JSON in words, keeping what was typed, then creates the customer', async () => {
    await page.goto(projectPath('customers'));
    await page.getByTestId('customer-create').click();
    await page.getByTestId('customer-new-id').fill('initech');
    await page.getByTestId('customer-new-name').fill('Initech');
    await page.getByTestId('customer-new-email').fill('ap@initech.example');
    await page.getByTestId('customer-new-metadata').fill('{"plan": pro}');
    await page.getByTestId('customer-new-submit').click();
    expect(await errorText()).toMatch(/^metadata is not valid JSON \(.*\): write an object, such as \{"plan": "pro"\}$/);
    expect(await page.getByTestId('customer-new-id').inputValue()).toBe('initech');
    expect(await page.getByTestId('customer-new-metadata').inputValue()).toBe('{"plan": pro}');
    expect((await svc.call('GET', '/v1/customers/initech', { key: fx.org.p.projectKey })).status).toBe(404);
    await shoot('customer-create-refused');

    await page.getByTestId('customer-new-metadata').fill('{"plan": "pro", "seats": 12}');
    await page.getByTestId('customer-new-submit').click();
    await page.getByTestId('notice-ok').filter({ hasText: 'Created customer initech' }).waitFor();
    await page.waitForURL('**/customers/initech');
    expect(await customer('initech')).toMatchObject({ id: 'initech', name: 'Initech', email: 'ap@initech.example', metadata: { plan: 'pro', seats: 12 } });
    expect(await page.getByTestId('customer-available').textContent()).toBe('0');
  });

  it('edits the name, email and metadata through the PATCH of the customer; a bad email is refused with input kept', async () => {
    await page.getByTestId('profile-edit').click();
    expect(await page.getByTestId('profile-metadata').inputValue()).toBe(JSON.stringify({ plan: 'pro', seats: 12 }, null, 2));
    await page.getByTestId('profile-name').fill('Initech Inc.');
    await page.getByTestId('profile-email').fill('not an email');
    // The browser's own check of type=email would stop the post: the API's message is what is tested.
    await page.getByTestId('profile-form').evaluate((f) => f.setAttribute('novalidate', ''));
    await page.getByTestId('profile-submit').click();
    expect(await errorText()).toMatch(/email/i);
    expect(await page.getByTestId('profile-name').inputValue()).toBe('Initech Inc.');
    expect(await page.getByTestId('profile-email').inputValue()).toBe('not an email');
    expect((await customer('initech')).name).toBe('Initech');

    await page.getByTestId('profile-email').fill('billing@initech.example');
    await page.getByTestId('profile-metadata').fill('{"plan": "enterprise"}');
    await page.getByTestId('profile-submit').click();
    await page.getByTestId('notice-ok').filter({ hasText: 'Saved the profile' }).waitFor();
    expect(await customer('initech')).toMatchObject({ name: 'Initech Inc.', email: 'billing@initech.example', metadata: { plan: 'enterprise' } });
  });

  it('deposits in USD at 1,000,000 credits a dollar, and refuses USD that is not whole credits in words, input kept', async () => {
    await page.getByTestId('deposit-amount').fill('0.0000005');
    await page.getByTestId('deposit-unit').selectOption('usd');
    await page.getByTestId('deposit-source').fill('welcome credit');
    await page.getByTestId('deposit-submit').click();
    expect(await errorText()).toBe('$0.0000005 is not a whole number of credits (1 USD = 1,000,000 credits, so at most 6 decimal places): nothing was deposited');
    expect(await page.getByTestId('deposit-amount').inputValue()).toBe('0.0000005');
    expect(await page.getByTestId('deposit-unit').inputValue()).toBe('usd');
    expect(await page.getByTestId('deposit-source').inputValue()).toBe('welcome credit');
    expect((await customer('initech')).wallets).toEqual({});

    await page.getByTestId('deposit-amount').fill('1,234.567891');
    await page.getByTestId('deposit-submit').click();
    await page.getByTestId('notice-ok').filter({ hasText: 'Deposited 1,234,567,891 credits ($1,234.567891)' }).waitFor();
    expect((await svc.call('GET', '/v1/customers/initech/balance', { key: fx.org.p.projectKey })).body.available).toBe(1_234_567_891);
    // The headline balance, with its separators.
    expect(await page.getByTestId('customer-available').textContent()).toBe('1,234,567,891');
    expect(await page.getByTestId('customer-available').getAttribute('data-credits')).toBe('1234567891');

    await page.getByTestId('deposit-unit').selectOption('credits');
    await page.getByTestId('deposit-amount').fill('109');
    await page.getByTestId('deposit-submit').click();
    await page.getByTestId('notice-ok').filter({ hasText: 'Deposited 109 credits ($0.000109)' }).waitFor();
    await shoot('customer-created');
  });

  it('refuses a viewer\'s new customer with the API\'s message, creating nothing', async () => {
    const viewer = await pageSignIn(svc, fx.org.viewer.email, fx.org.viewer.password);
    const r = await pageCall(svc, viewer, 'POST', `/dashboard/projects/${fx.org.p.projectId}/customers`, { _csrf: viewer.csrf, customer_id: 'hooli', name: 'Hooli' });
    expect(r.status).toBe(403);
    expect(r.text).toContain('this needs the admin role or higher; you are a viewer');
    expect(r.text).toContain('value="hooli"');
    expect((await svc.call('GET', '/v1/customers/hooli', { key: fx.org.p.projectKey })).status).toBe(404);
  });

  it('lists the customers with thousands separators', async () => {
    await page.goto(projectPath('customers'));
    const row = page.locator('[data-testid="customer-row"][data-customer-id="initech"]');
    await expect(row.textContent()).resolves.toContain('1,234,568,000 credits ($1,234.568)');
    await shoot('customers-list');
  });
});

describe('the ledger', () => {
  it('names the sources of each entry by their deposit\'s label, not their wallet', async () => {
    await page.goto(projectPath('customers', fx.org.customerId));
    const sourceLabels = await page.getByTestId('source-row').locator('td:first-child').evaluateAll((cells) => cells.map((c) => c.firstChild?.textContent?.trim()));
    expect(sourceLabels).toContain('launch promo');
    const named = await page.getByTestId('ledger-source').allTextContents();
    expect(named.length).toBeGreaterThan(0);
    // Every item starts with a source's label; none with a wallet's name.
    for (const item of named) expect(sourceLabels.some((l) => item.startsWith(`${l}: `)), item).toBe(true);
    const promo = page.locator('[data-testid="ledger-row"][data-entry-type="DEPOSIT"]').filter({ hasText: 'launch promo' });
    await expect(promo.getByTestId('ledger-source').textContent()).resolves.toMatch(/^launch promo: 1,000,000 src_/);
    await shoot('customer-ledger');
  });
});

describe('receipts', () => {
  it('show the prices the call was billed at, per token', async () => {
    await page.goto(projectPath(`usage?trace_id=trace-hello`));
    await page.getByTestId('receipt-link').click();
    await page.getByTestId('receipt').waitFor();
    const prices = page.getByTestId('receipt-prices');
    await expect(prices.locator('[data-price="input_price_per_million_credits"]').textContent()).resolves.toBe('2.5 credits per token (2,500,000 ($2.50) per million tokens)');
    await expect(prices.locator('[data-price="output_price_per_million_credits"]').textContent()).resolves.toBe('10 credits per token (10,000,000 ($10.00) per million tokens)');
    await expect(prices.locator('[data-price="cache_read_price_per_million_credits"]').count()).resolves.toBe(1);
    await expect(prices.locator('[data-price="cache_write_price_per_million_credits"]').count()).resolves.toBe(1);
    await shoot('receipt-prices');
  });
});

describe('the usage screen', () => {
  const spendShown = async () => Number((await page.getByTestId('usage-daily-chart').getAttribute('aria-label'))!.replace(/^.*: ([\d,]+) credits in total$/, '$1').replace(/,/g, ''));

  it('charts the gateway spend of the search, labelled apart from ledger deducts', async () => {
    await page.goto(projectPath('usage'));
    const all = await usageTotal({});
    expect(all).toBeGreaterThan(0);
    expect(await spendShown()).toBe(all);
    expect(await page.getByTestId('usage-spend-note').textContent()).toMatch(/^Gateway calls only: the deducts and consumes/);

    await page.getByTestId('usage-customer').fill('globex');
    await page.getByTestId('usage-search').click();
    await page.waitForURL(/customer_id=globex/);
    expect(await page.getByTestId('usage-row').count()).toBe(1);
    expect(await spendShown()).toBe(await usageTotal({ customer_id: 'globex' }));
    expect(await spendShown()).toBeLessThan(all);

    await page.getByTestId('usage-customer').fill('');
    await page.getByTestId('usage-trace').fill('trace-hello');
    await page.getByTestId('usage-search').click();
    await page.waitForURL(/trace_id=trace-hello/);
    expect(await page.getByTestId('usage-row').count()).toBe(1);
    expect(await spendShown()).toBe(await usageTotal({ trace_id: 'trace-hello' }));
  });

  it('splits the chart by customer or by model, over a chosen range', async () => {
    await page.goto(projectPath('usage'));
    await page.getByTestId('usage-split').selectOption('customer');
    await page.getByTestId('usage-search').click();
    await page.waitForURL(/split=customer/);
    expect(await page.getByTestId('usage-daily-chart-legend').locator('li').allTextContents()).toEqual(expect.arrayContaining([' acme', ' globex']));
    const acme = await page.locator('[data-testid="usage-daily-chart"] rect.part[data-series="acme"]').count();
    expect(acme).toBe(1);
    await shoot('usage-by-customer');

    await page.getByTestId('usage-split').selectOption('model');
    await page.getByTestId('usage-search').click();
    await page.waitForURL(/split=model/);
    expect(await page.getByTestId('usage-daily-chart-legend').locator('li').allTextContents()).toEqual([` ${fx.org.modelId}`]);

    // A range of days long past: no calls, in the chart or the table.
    await page.getByTestId('usage-from').fill('2020-01-01');
    await page.getByTestId('usage-to').fill('2020-01-31');
    await page.getByTestId('usage-search').click();
    await page.waitForURL(/from=2020-01-01/);
    expect(await page.getByTestId('usage-row').count()).toBe(0);
    expect(await spendShown()).toBe(0);
    expect(await page.locator('[data-testid="usage-daily-chart"] rect').count()).toBe(0);
    await expect(page.locator('figcaption').textContent()).resolves.toMatch(/over 31 days$/);

    // A range backwards is said in words; the default range is shown.
    await page.goto(projectPath('usage?from=2020-02-01&to=2020-01-01'));
    expect(await errorText()).toBe('from (2020-02-01) is after to (2020-01-01): the last 30 days are shown');
    expect(await spendShown()).toBe(await usageTotal({}));
  });

  it('downloads the CSV of the search under the name the docs give', async () => {
    await page.goto(projectPath('usage?customer_id=globex'));
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('usage-csv').click()]);
    expect(download.suggestedFilename()).toBe(csvFileName(fx.org.p.projectId));
    expect(csvFileName(fx.org.p.projectId)).toBe(`usage-${fx.org.p.projectId}.csv`);
    const rows = readFileSync((await download.path())!, 'utf8').trim().split('\r\n');
    expect(rows.length).toBe(2);
    expect(rows[1]).toContain(',globex,');
  });

  it('had no script error and no CSP violation', () => {
    expect(problems).toEqual([]);
  });
});
