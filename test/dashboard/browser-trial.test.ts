/**
 * What a second new-user trial found on the dashboard, in a real browser (Debian's chromium
 * through playwright-core): an event's data as a field a line with separated numbers, not
 * one line of JSON, and on a 390 px phone a data column wide enough to read (it was 52 px,
 * each row a thousand pixels tall); invoice lines in words (minutes left, separated
 * operations) where the API's description writes milliseconds and `->`. Screens are
 * photographed on the way (support.ts: screenshotDir).
 */
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { browserSignIn, screenshotDir, useSeededDashboard, watchedPage } from './support.js';
import { svc } from '../support/service.js';

const fx = useSeededDashboard({ browser: true });
const problems: string[] = [];

async function signedIn(viewport: { width: number; height: number }): Promise<Page> {
  const page = await watchedPage(fx.browser, problems, { viewport });
  await browserSignIn(page, svc.url, fx.org.owner.email, fx.org.owner.password);
  return page;
}

describe('the Events screen', () => {
  it("shows an event's data a field a line, readable on a phone", async () => {
    const page = await signedIn({ width: 390, height: 844 });
    await page.goto(`${svc.url}/dashboard/projects/${fx.org.p.projectId}/events?type=deposit.created&customer_id=${fx.org.customerId}`);
    const rows = page.getByTestId('event-row');
    await rows.first().waitFor();
    // Acme's deposits: 25,000,000 credits, then 1,000,000 of launch promo (newest first).
    const promo = rows.first().getByTestId('event-data');
    expect(await promo.locator('dt').allTextContents()).toContain('amount');
    const fields = await promo.evaluate((dl) => {
      const out: Record<string, string> = {};
      for (const dt of dl.querySelectorAll('dt')) out[dt.textContent!] = dt.nextElementSibling!.textContent!;
      return out;
    });
    expect(fields).toMatchObject({ amount: '1,000,000', wallet: 'promo', label: 'launch promo', customer_id: fx.org.customerId });
    expect(await rows.first().textContent()).not.toContain('{"');

    for (const row of await rows.all()) {
      const data = (await row.getByTestId('event-data').boundingBox())!;
      expect(data.width).toBeGreaterThanOrEqual(200);
      expect((await row.boundingBox())!.height).toBeLessThan(400);
    }
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBe(0);
    await page.screenshot({ path: join(screenshotDir(), 'events-phone.png'), fullPage: true });
    expect(problems).toEqual([]);
  });
});

describe('the Plan & invoices screen', () => {
  it('writes invoice lines in words: minutes left, separated operations, no arrows or milliseconds', async () => {
    const page = await signedIn({ width: 1280, height: 860 });
    await page.goto(`${svc.url}/dashboard/billing`);
    // The seeded organization upgraded from free to pro_500k this period.
    const upgrade = page.locator('[data-testid="upcoming-line"][data-line-type="upgrade"]');
    expect(await upgrade.textContent()).toMatch(/^Upgrade from free to pro_500k on \d{4}-\d\d-\d\d \d\d:\d\d UTC, pro rata: [\d,]+ of [\d,]+ minutes left\$\d+\.\d{2}$/);
    const overage = page.locator('[data-testid="upcoming-line"][data-line-type="overage"]');
    expect(await overage.textContent()).toMatch(/^[\d,]+ operations over the 500,000 included, at \$0\.50 per 10,000\$\d+\.\d{2}$/);
    // The closed periods' invoices (on free) say the same way.
    const closed = (await page.getByTestId('invoice-list').textContent())!;
    expect(closed).toContain('operations over the 50,000 included, at $0.00 per 10,000');
    for (const text of [closed, (await page.getByTestId('upcoming-invoice').textContent())!]) {
      expect(text).not.toMatch(/->|\d{7,}|\bms\b/);
    }
    await page.screenshot({ path: join(screenshotDir(), 'billing-lines.png'), fullPage: true });
    expect(problems).toEqual([]);
  });
});
