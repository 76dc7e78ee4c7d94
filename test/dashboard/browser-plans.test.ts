/**
 * The demo banner in a browser: the demo organization's pages name the plan in force
 * now; after the owner upgrades, a reload shows the new plan. Photographed as
 * `demo-banner.png` (support.ts: screenshotDir).
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMember } from '../admin/dashboard-support.js';
import { browserSignIn, launchChromium, screenshotDir, watchedPage } from './support.js';
import { svc, useTestService } from '../support/service.js';

let browser: Browser;
const problems: string[] = [];

useTestService({ variants: [] });
beforeAll(async () => {
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
});

describe('the demo banner', () => {
  it('names the plan in force now, and the new one after a change and a reload', async () => {
    const p = await svc.project();
    await svc.rt.db.query(sql.unsafe`UPDATE organizations SET demo_allowance = true, name = 'Demo organization' WHERE id = ${p.organizationId}`);
    const owner = await addMember(svc, p, 'owner');
    const page = await watchedPage(browser, problems);
    await browserSignIn(page, svc.url, owner.email, owner.password);
    await expect.poll(() => page.getByTestId('demo-plan').textContent()).toBe('free');

    const put = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_2m' } });
    expect(put.status).toBe(200);
    await page.reload();
    expect(await page.getByTestId('demo-plan').textContent()).toBe('pro_2m');
    expect(await page.getByTestId('demo-banner').textContent()).toMatch(/any number of projects, any number of keys per project, 5 members\.$/);
    await page.screenshot({ path: join(screenshotDir(), 'demo-banner.png') });
    expect(problems).toEqual([]);
  });
});
