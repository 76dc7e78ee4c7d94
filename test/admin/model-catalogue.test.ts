/**
 * Model prices from the @pydantic/genai-prices catalogue: a model named by provider and
 * model id takes the catalogue's prices, converted exactly to credits; an explicit price
 * wins (an override); the sources show in the admin API and GET /v1/models; a call is
 * billed at the stored prices and its receipt keeps them after the model changes; what
 * the catalogue does not have, or cannot price with one number, is refused naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { calcPrice } from '@pydantic/genai-prices';
import { countInputTokens, mockDirective } from '../../src/gateway/mock/controls.js';
import { catalogue_version, usdToCreditsRoundedUp } from '../../src/admin/price-catalogue.js';
import { expectedCost, modelBody, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
  await env.fund('cat', 50_000_000);
});
afterAll(() => env?.close());

const modelUrl = (id: string) => `/v1/admin/projects/${env.p.projectId}/models/${encodeURIComponent(id)}`;
const admin = (method: string, id: string, body?: unknown) => env.svc.call(method, modelUrl(id), { key: env.p.adminKey, body });
/** A PUT body without prices: they come from `price_catalogue`, or from `prices`. */
const fromCatalogue = (provider: string, model: string, prices: Record<string, unknown> = {}) => {
  const { input_price_per_million_credits: _i, output_price_per_million_credits: _o, cache_read_price_per_million_credits: _r, cache_write_price_per_million_credits: _w, ...rest } =
    modelBody(env.mock, env.upstreamKey, 'openai');
  return { ...rest, price_catalogue: { provider, model }, ...prices };
};
/** A catalogue price (USD per million tokens) in credits, computed apart from the service's conversion. */
const catalogueCredits = (provider: string, model: string, key: string) => {
  const usd = calcPrice({ input_tokens: 0 }, model, { providerId: provider })!.model_price[key] as number;
  return Math.round(usd * 1_000_000);
};

describe('the conversion', () => {
  it('is exact, and rounds a fraction of a credit up', () => {
    expect(usdToCreditsRoundedUp(2.5)).toBe(2_500_000);
    expect(usdToCreditsRoundedUp(0.075)).toBe(75_000);
    expect(usdToCreditsRoundedUp(0.3)).toBe(300_000);
    expect(usdToCreditsRoundedUp(1.1e-7)).toBe(1);
    expect(usdToCreditsRoundedUp(0.0000015)).toBe(2);
    expect(usdToCreditsRoundedUp(15)).toBe(15_000_000);
    expect(usdToCreditsRoundedUp(1e21)).toBe(1e27);
  });
});

describe('a model priced from the catalogue', () => {
  it("stores the catalogue's prices with their source, and a call is billed at them; the receipt keeps them", async () => {
    const put = await admin('PUT', 'cat-4o', fromCatalogue('openai', 'gpt-4o-2024-08-06'));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    const input = catalogueCredits('openai', 'gpt-4o', 'input_mtok');
    const prices = { input, output: catalogueCredits('openai', 'gpt-4o', 'output_mtok'), cacheRead: catalogueCredits('openai', 'gpt-4o', 'cache_read_mtok'), cacheWrite: input };
    expect(prices).toEqual({ input: 2_500_000, output: 10_000_000, cacheRead: 1_250_000, cacheWrite: 2_500_000 });
    expect(put.body).toMatchObject({
      input_price_per_million_credits: prices.input,
      input_price_per_million_usd: 2.5,
      output_price_per_million_credits: prices.output,
      cache_read_price_per_million_credits: prices.cacheRead,
      // OpenAI prices no cache write: those tokens are input.
      cache_write_price_per_million_credits: prices.cacheWrite,
      price_catalogue: { provider: 'openai', model: 'gpt-4o', version: catalogue_version },
      price_sources: { input: 'catalogue', output: 'catalogue', cache_read: 'catalogue', cache_write: 'catalogue' },
    });

    const messages = [{ role: 'user', content: `hi ${mockDirective({ output_tokens: 7, cache_read_tokens: 3 })}` }];
    const call = await env.svc.call('POST', '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'X-Service-Customer': 'cat' },
      body: { model: 'cat-4o', messages, max_tokens: 16 },
    });
    expect(call.status, JSON.stringify(call.body)).toBe(200);
    const cost = expectedCost({ input: countInputTokens('openai', { messages }), output: 7, cacheRead: 3 }, prices);
    expect(Number(call.headers.get('x-service-cost-credits'))).toBe(cost);
    const txid = call.headers.get('x-service-transaction-id')!;
    const billedAt = {
      input_price_per_million_credits: prices.input, output_price_per_million_credits: prices.output,
      cache_read_price_per_million_credits: prices.cacheRead, cache_write_price_per_million_credits: prices.cacheWrite,
    };
    const receipt = () => env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect((await receipt()).body).toMatchObject({ cost_credits: cost, prices: billedAt });

    // Unlinked and repriced: the settled call keeps the prices it was billed at.
    const changed = await admin('PATCH', 'cat-4o', { price_catalogue: null, input_price_per_million_credits: 9_000_000 });
    expect(changed.body).toMatchObject({ price_catalogue: null, price_sources: { input: 'override', output: 'override' }, input_price_per_million_credits: 9_000_000, output_price_per_million_credits: prices.output });
    expect((await receipt()).body).toMatchObject({ cost_credits: cost, prices: billedAt });
  });

  it('an explicit price wins and stays an override when the catalogue is resolved again; a read sent back changes nothing', async () => {
    const put = await admin('PUT', 'cat-sonnet', fromCatalogue('anthropic', 'claude-sonnet-4-20250514', { output_price_per_million_usd: 20 }));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    expect(put.body).toMatchObject({
      input_price_per_million_credits: catalogueCredits('anthropic', 'claude-sonnet-4-20250514', 'input_mtok'),
      output_price_per_million_credits: 20_000_000,
      cache_read_price_per_million_credits: catalogueCredits('anthropic', 'claude-sonnet-4-20250514', 'cache_read_mtok'),
      // The dearer of the 5-minute and 1-hour cache writes: never under-billed.
      cache_write_price_per_million_credits: catalogueCredits('anthropic', 'claude-sonnet-4-20250514', 'cache_write_1h_mtok'),
      price_catalogue: { provider: 'anthropic', model: 'claude-sonnet-4-0' },
      price_sources: { input: 'catalogue', output: 'override', cache_read: 'catalogue', cache_write: 'catalogue' },
    });

    const { warnings: _w, ...read } = put.body;
    const back = await admin('PATCH', 'cat-sonnet', read);
    expect(back.body.price_sources).toEqual(put.body.price_sources);

    const cheaper = await admin('PATCH', 'cat-sonnet', { cache_read_price_per_million_credits: 1 });
    expect(cheaper.body.price_sources).toEqual({ input: 'catalogue', output: 'override', cache_read: 'override', cache_write: 'catalogue' });
    const refreshed = await admin('PATCH', 'cat-sonnet', { price_catalogue: { provider: 'anthropic', model: 'claude-sonnet-4-0' } });
    expect(refreshed.body).toMatchObject({ output_price_per_million_credits: 20_000_000, cache_read_price_per_million_credits: 1, price_sources: cheaper.body.price_sources });
  });

  it('GET /v1/models shows where each price came from', async () => {
    await admin('PUT', 'cat-list', fromCatalogue('openai', 'gpt-4o-mini', { input_price_per_million_credits: 1_000_000 }));
    const r = await env.svc.call('GET', '/v1/models', { key: env.p.projectKey });
    const entry = r.body.data.find((m: { id: string }) => m.id === 'cat-list');
    expect(entry).toMatchObject({
      price_catalogue: { provider: 'openai', model: 'gpt-4o-mini', version: catalogue_version },
      price_sources: { input: 'override', output: 'catalogue', cache_read: 'catalogue', cache_write: 'catalogue' },
    });
    const byHand = r.body.data.find((m: { id: string }) => m.id === 'gpt-test');
    expect(byHand).toMatchObject({ price_catalogue: null, price_sources: { input: 'override', output: 'override' } });
  });
});

describe('refused', () => {
  it('an unknown provider or model, naming the field and the nearest catalogue id', async () => {
    expectError(await admin('PUT', 'cat-bad', fromCatalogue('openai', 'gpt-4oo')), 400, 'invalid_request', {
      param: 'price_catalogue.model',
      message: /has no model gpt-4oo for provider openai; did you mean gpt-4o\?/,
      fields: { suggested_model: 'gpt-4o' },
    });
    expectError(await admin('PUT', 'cat-bad', fromCatalogue('openai', 'no-such-thing-at-all')), 400, 'invalid_request', {
      param: 'price_catalogue.model',
      message: /has no model no-such-thing-at-all for provider openai$/,
    });
    expectError(await admin('PUT', 'cat-bad', fromCatalogue('opnai', 'gpt-4o')), 400, 'invalid_request', { param: 'price_catalogue.provider' });
    const list = await env.svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models?limit=500`, { key: env.p.adminKey });
    expect(list.body.data.map((m: { id: string }) => m.id)).not.toContain('cat-bad');
  });

  it('prices that change with the prompt size, unless given explicitly', async () => {
    const tiered = await admin('PUT', 'cat-tiers', fromCatalogue('anthropic', 'claude-sonnet-4-5'));
    expectError(tiered, 400, 'invalid_request', { param: 'input_price_per_million_credits', message: /changes with the prompt's size .* give input_price_per_million_credits explicitly/ });
    const given = await admin('PUT', 'cat-tiers', fromCatalogue('anthropic', 'claude-sonnet-4-5', {
      input_price_per_million_credits: 6_000_000, output_price_per_million_credits: 22_500_000,
      cache_read_price_per_million_credits: 600_000, cache_write_price_per_million_credits: 12_000_000,
    }));
    expect(given.status, JSON.stringify(given.body)).toBe(201);
    expect(given.body.price_sources).toEqual({ input: 'override', output: 'override', cache_read: 'override', cache_write: 'override' });
  });
});
