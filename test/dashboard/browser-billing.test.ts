/**
 * The billing screen in a real browser: the owner previews an upgrade, confirms it in the
 * page, and sees at once the confirmation saying where the charge goes and the upgrade's
 * line, with that charge, on the upcoming invoice (its total too). The screen is
 * photographed as `billing` (support.ts: screenshotDir).
 */
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { browserSignIn, screenshotDir, watchedPage, useSeededDashboard } from './support.js';
import { svc } from '../support/service.js';

const fx = useSeededDashboard({ browser: true });
let page: Page;
const problems: string[] = [];
beforeAll(async () => {
  page = await watchedPage(fx.browser, problems);
});

describe('the billing screen', () => {
  it('shows an upgrade made in the page on the upcoming invoice at once', async () => {
    await browserSignIn(page, svc.url, fx.org.owner.email, fx.org.owner.password);
    await page.getByTestId('nav-billing').click();
    await page.waitForURL('**/dashboard/billing');
    // The seeded organization upgraded to pro_500k this period: that line is there already.
    await page.getByTestId('upcoming-invoice').waitFor();
    expect(await page.locator('[data-testid="upcoming-line"][data-line-type="upgrade"]').count()).toBe(1);
    const totalBefore = await page.getByTestId('upcoming-total').textContent();

    await page.getByTestId('plan-select').selectOption('pro_2m');
    await page.getByTestId('plan-preview').click();
    await page.getByTestId('plan-quote').waitFor();
    const charge = (await page.getByTestId('plan-charge').textContent())!;
    expect(charge).toMatch(/^\$\d+\.\d{2}$/);
    expect(await page.getByTestId('plan-quote').textContent()).toContain('as a line of the upcoming invoice');
    await page.getByTestId('plan-confirm').click();

    const ok = await page.getByTestId('notice-ok').textContent();
    expect(ok).toMatch(/^Upgraded to pro_2m; charged \$\d+\.\d{2} for the rest of the period, on the upcoming invoice below/);
    const charged = /charged (\$\d+\.\d{2})/.exec(ok!)![1];
    const upgrades = page.locator('[data-testid="upcoming-line"][data-line-type="upgrade"]');
    expect(await upgrades.count()).toBe(2);
    const line = (await upgrades.nth(1).textContent())!;
    expect(line).toMatch(/^Upgrade from pro_500k to pro_2m on \d{4}-\d\d-\d\d \d\d:\d\d UTC, pro rata: [\d,]+ of [\d,]+ minutes left/);
    expect(line).toContain(charged);
    // The API's upcoming invoice says the same.
    const api = (await svc.call('GET', '/v1/admin/invoices/upcoming', { key: fx.org.p.adminKey })).body;
    expect(`$${api.total_usd}`).toBe(await page.getByTestId('upcoming-total').textContent());
    expect(await page.getByTestId('upcoming-total').textContent()).not.toBe(totalBefore);
    expect(`$${api.lines.find((l: { to_plan?: string }) => l.to_plan === 'pro_2m').amount_usd}`).toBe(charged);
    await page.screenshot({ path: join(screenshotDir(), 'billing.png'), fullPage: true });
    expect(problems).toEqual([]);
  });
});
