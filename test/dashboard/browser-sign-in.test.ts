/**
 * The sign-in page for an email in more organizations than a sign-in checks without one
 * (sign_in_candidates_max), in a real browser: twelve organizations bootstrapped with the
 * same owner email, each with its own password. The newest one's password, sent without
 * an organization, is asked for the organization (the field pre-filled from what was
 * sent, focused, with a message), and then signs in with it. A link naming the
 * organization pre-fills the field. The asking screen is photographed (support.ts:
 * screenshotDir).
 */
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootstrapOrganization } from '../../src/bootstrap.js';
import { sign_in_candidates_max } from '../../src/members/store.js';
import { launchChromium, screenshotDir, watchedPage } from './support.js';
import { svc, useTestService } from '../support/service.js';

const organizations_of_one_email = 12;

let browser: Browser;
let page: Page;
const problems: string[] = [];
/** Unique per run: sign-in finds an email's memberships across every organization. */
const email = `crowded-owner-${Date.now().toString(36)}@example.com`;
const orgs: { id: string; name: string; password: string }[] = [];

useTestService({ variants: [] });
beforeAll(async () => {
  browser = await launchChromium();
  for (let i = 1; i <= organizations_of_one_email; i++) {
    const name = `Crowded organization ${i}`;
    const created = await bootstrapOrganization(svc.rt, name, email);
    orgs.push({ id: created.organization_id, name, password: created.owner.password });
  }
  // The asking answer is a 401: the one error status these tests provoke.
  page = await watchedPage(browser, problems, { provoked: /status of 401/ });
}, 120_000);

afterAll(async () => {
  await browser?.close();
});

const focusedTestId = () => page.evaluate(() => document.activeElement?.getAttribute('data-testid') ?? null);

describe('an email in more organizations than a sign-in checks', () => {
  it('is asked for the organization from the page, and then signs in with it', async () => {
    expect(organizations_of_one_email).toBeGreaterThan(sign_in_candidates_max);
    const newest = orgs[orgs.length - 1];
    await page.goto(`${svc.url}/dashboard/sign-in`);
    await expect(page.getByTestId('login-organization').count()).resolves.toBe(0);
    await page.getByTestId('login-email').fill(email);
    await page.getByTestId('login-password').fill(newest.password);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('notice-organization').waitFor();
    expect(await page.getByTestId('notice-organization').textContent()).toContain(`more than ${sign_in_candidates_max} organizations`);
    expect(await page.getByTestId('login-email').inputValue()).toBe(email);
    expect(await focusedTestId()).toBe('login-organization');
    expect(await page.getByTestId('login-password').inputValue()).toBe('');
    await page.screenshot({ path: join(screenshotDir(), 'sign-in-organization.png'), fullPage: true });

    await page.getByTestId('login-organization').fill(newest.id);
    await page.getByTestId('login-password').fill(newest.password);
    await page.getByTestId('login-submit').click();
    await page.waitForURL(`${svc.url}/dashboard/overview`);
    expect(await page.locator('header .brand').textContent()).toBe(newest.name);
    expect(problems).toEqual([]);
  });

  it('keeps the organization typed when the password was wrong, and a link can name it', async () => {
    const [, second] = orgs;
    await page.context().clearCookies();
    await page.goto(`${svc.url}/dashboard/sign-in?email=${encodeURIComponent(email)}&organization_id=${second.id}`);
    expect(await page.getByTestId('login-organization').inputValue()).toBe(second.id);
    await page.getByTestId('login-password').fill('not the password');
    await page.getByTestId('login-submit').click();
    await page.getByTestId('notice-error').waitFor();
    expect(await page.getByTestId('login-organization').inputValue()).toBe(second.id);
    await page.getByTestId('login-password').fill(second.password);
    await page.getByTestId('login-submit').click();
    await page.waitForURL(`${svc.url}/dashboard/overview`);
    expect(await page.locator('header .brand').textContent()).toBe(second.name);
    expect(problems).toEqual([]);
  });
});
