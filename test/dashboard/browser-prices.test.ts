/**
 * The models screen in a browser with a model priced from the catalogue: each price
 * carries its `catalogue` or `override` label and the row names the catalogue entry.
 * Photographed as `models-catalogue.png` (support.ts: screenshotDir).
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { browserSignIn, launchChromium, screenshotDir, seedOrganization, watchedPage } from './support.js';
import { svc, useTestService } from '../support/service.js';

let browser: Browser;
let mock: MockUpstream;
const problems: string[] = [];

useTestService({ workers: true, variants: [] });
beforeAll(async () => {
  browser = await launchChromium();
  mock = await startMockUpstream();
});
afterAll(async () => {
  await browser?.close();
  await mock?.close();
});

describe('the models screen', () => {
  it('labels the prices of a catalogue-priced model with their sources', async () => {
    const org = await seedOrganization(svc, mock);
    const put = await svc.call('PUT', `/v1/admin/projects/${org.p.projectId}/models/claude-sonnet`, {
      key: org.p.adminKey,
      body: {
        provider: 'anthropic', upstream_base_url: mock.url, upstream_model: 'mock-claude', context_window: 200_000, max_output_tokens: 8_192,
        supports_streaming: true, price_catalogue: { provider: 'anthropic', model: 'claude-sonnet-4-20250514' }, output_price_per_million_usd: 18,
      },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    const page = await watchedPage(browser, problems);
    await browserSignIn(page, svc.url, org.owner.email, org.owner.password);
    await page.goto(`${svc.url}/dashboard/projects/${org.p.projectId}/models`);
    const row = page.locator('[data-testid="model-row"][data-model-id="claude-sonnet"]');
    expect(await row.getByTestId('price-source').allTextContents()).toEqual(['catalogue', 'override', 'catalogue', 'catalogue']);
    expect(await row.getByTestId('model-catalogue').textContent()).toMatch(/^catalogue: anthropic\/claude-sonnet-4-0 \(genai-prices /);
    await page.getByTestId('model-list').screenshot({ path: join(screenshotDir(), 'models-catalogue.png') });
    expect(problems).toEqual([]);
  });
});
