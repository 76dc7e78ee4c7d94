/**
 * The models screen and a model's upstreams (docs/API.md, "Upstreams and failover"): each
 * upstream's id, base URL and weight, and its state as this process sees it: cooling down
 * until a 429's retry-after passed, then its circuit open after consecutive failures. No
 * upstream key is ever in the page.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { pageCall, pageSignIn, type PageSession, useSeededDashboard } from './support.js';
import { svc } from '../support/service.js';

const fx = useSeededDashboard();
let owner: PageSession;
let limited: MockUpstream;
let failing: MockUpstream;
const keys = { limited: 'sk-upstream-limited-5f1c9e', flaky: 'sk-upstream-flaky-8a2d47' };

beforeAll(async () => {
  owner = await pageSignIn(svc, fx.org.owner.email, fx.org.owner.password);
  limited = await startMockUpstream({ controls: { fail: 429, retry_after: 600 } });
  failing = await startMockUpstream({ controls: { fail: 503 } });
  const put = await svc.call('PUT', `/v1/admin/projects/${fx.org.p.projectId}/models/routed`, {
    key: fx.org.p.adminKey,
    body: {
      provider: 'openai', upstream_base_url: fx.mock.url, upstream_model: 'mock-gpt', context_window: 128_000, max_output_tokens: 4_096, supports_streaming: true,
      input_price_per_million_credits: 1_000, output_price_per_million_credits: 2_000,
      upstreams: [{ id: 'limited', base_url: limited.url, api_key: keys.limited, weight: 3 }, { id: 'flaky', base_url: failing.url, api_key: keys.flaky }],
    },
  });
  expect(put.status, JSON.stringify(put.body)).toBe(201);
  // In list order: `limited` first while it may be tried.
  svc.rt.upstream.router.random = () => 0;
});
afterAll(async () => {
  await Promise.all([limited?.close(), failing?.close()]);
});

const call = () =>
  svc.call('POST', '/v1/chat/completions', {
    key: fx.org.p.projectKey,
    headers: { 'x-service-customer': fx.org.customerId },
    body: { model: 'routed', messages: [{ role: 'user', content: 'route me' }] },
  });

/** Each upstream's line of the model's row: id, then what it says of it. */
async function upstreamLines(): Promise<{ page: string; lines: Record<string, string> }> {
  const screen = await pageCall(svc, owner, 'GET', `/dashboard/projects/${fx.org.p.projectId}/models`);
  expect(screen.status).toBe(200);
  const row = /<tr data-testid="model-row" data-model-id="routed">([\s\S]*?)<\/tr>/.exec(screen.text)?.[1] ?? '';
  const lines: Record<string, string> = {};
  for (const m of row.matchAll(/<li data-upstream-id="([^"]+)">([\s\S]*?)<\/li>/g)) lines[m[1]!] = m[2]!.replace(/<[^>]+>/g, '').replace(/\s+/g, ' ').trim();
  return { page: screen.text, lines };
}

describe('a model with two upstreams on the models screen', () => {
  it('shows each with its base URL and weight, cooling down after a 429, circuit open after consecutive failures, never a key', async () => {
    const fresh = await upstreamLines();
    expect(fresh.lines).toEqual({ limited: `limited ${limited.url} · weight 3 · ok`, flaky: `flaky ${failing.url} · weight 1 · ok` });
    expect(fresh.page).toContain('on its upstreams');

    // limited answers 429 (retry-after 600 s), flaky 503: the last answer relayed.
    expect((await call()).status).toBe(503);
    const read = await svc.call('GET', `/v1/admin/projects/${fx.org.p.projectId}/models?limit=100`, { key: fx.org.p.adminKey });
    const routed = (read.body.data as { id: string; upstreams: { cooling_until: string | null }[] }[]).find((m) => m.id === 'routed')!;
    const until = routed.upstreams[0]!.cooling_until!;
    expect(Date.parse(until)).toBeGreaterThan(Date.now() + 500_000);
    const cooling = await upstreamLines();
    expect(cooling.lines).toEqual({ limited: `limited ${limited.url} · weight 3 · cooling down until ${until}`, flaky: `flaky ${failing.url} · weight 1 · ok` });

    // Four more failures of flaky in a row (limited skipped meanwhile) open its circuit.
    for (let i = 0; i < 4; i++) expect((await call()).status).toBe(503);
    expect(limited.requests).toHaveLength(1);
    const open = await upstreamLines();
    expect(open.lines.flaky).toBe(`flaky ${failing.url} · weight 1 · circuit open`);
    expect(open.lines.limited).toContain('cooling down until');

    for (const page of [fresh.page, cooling.page, open.page]) for (const key of Object.values(keys)) expect(page).not.toContain(key);
  });
});
