/**
 * The API reference page (/docs) in a real browser (Debian's chromium): Swagger UI, served
 * by the service from the swagger-ui-dist package, renders /openapi.json; every request
 * the page makes goes to the service itself (no CDN, no validator badge, no fonts from
 * elsewhere), and neither a script error nor a CSP violation happens.
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../dashboard/support.js';
import { svc, useTestService } from '../support/service.js';

let browser: Browser;

useTestService({ variants: [] });
beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
});

describe('the API reference page', () => {
  it('renders the document with requests to the service only, and no CSP violation', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const requests: string[] = [];
    const problems: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error' || /Content Security Policy/i.test(m.text())) problems.push(`console ${m.type()}: ${m.text()}`);
    });

    const res = await page.goto(`${svc.url}/docs`);
    expect(res?.status()).toBe(200);
    expect(res?.headers()['content-security-policy']).toMatch(/script-src 'self'/);
    // Swagger UI has rendered the document: its title, a section and an operation.
    await page.getByText('svc-billing API').first().waitFor({ timeout: 20_000 });
    await page.locator('.opblock-tag', { hasText: 'Ledger' }).first().waitFor();
    expect(await page.locator('.opblock').count()).toBeGreaterThan(40);
    // Open an operation: its schemas render too.
    await page.locator('.opblock-summary-path', { hasText: '/v1/billing/deduct' }).first().click();
    await page.getByText('Variant B').first().waitFor();
    await page.screenshot({ path: join('.tmp', 'openapi-docs.png') });

    expect(requests.length).toBeGreaterThan(0);
    const elsewhere = requests.filter((u) => !u.startsWith(`${svc.url}/`) && !u.startsWith('data:'));
    expect(elsewhere, 'requests to another host').toEqual([]);
    expect(requests).toContain(`${svc.url}/openapi.json`);
    expect(problems).toEqual([]);
    await context.close();
  }, 60_000);
});
