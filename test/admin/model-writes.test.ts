/**
 * Model writes beyond PUT: the warning a model without its provider key answers with,
 * PATCH (a partial change: adding the key alone), a model read accepted back as a write
 * (its `*_usd` prices and read-only fields), and DELETE; each checked through the gateway,
 * which is where a wrong model shows.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_OUTPUT_TOKENS, modelBody, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
  await env.fund('buyer', 50_000_000);
});
afterAll(() => env?.close());

const modelUrl = (id: string, projectId = env.p.projectId) => `/v1/admin/projects/${projectId}/models/${encodeURIComponent(id)}`;
const admin = (method: string, id: string, body?: unknown) => env.svc.call(method, modelUrl(id), { key: env.p.adminKey, body });
const chat = (model: string) =>
  env.svc.call('POST', '/v1/chat/completions', {
    key: env.p.projectKey,
    headers: { 'X-Service-Customer': 'buyer' },
    body: { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 },
  });
const stored = async (id: string) => (await env.svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models?limit=500`, { key: env.p.adminKey })).body.data.find((m: { id: string }) => m.id === id);

describe('a model without upstream_api_key', () => {
  it('is saved with a byok_key_required warning, calls answer 402, and a PATCH of the key alone makes it callable', async () => {
    const { upstream_api_key: _k, ...keyless } = modelBody(env.mock, env.upstreamKey, 'openai');
    const put = await admin('PUT', 'keyless', keyless);
    expect(put.status).toBe(201);
    expect(put.body.has_upstream_key).toBe(false);
    expect(put.body.warnings).toEqual([
      { code: 'byok_key_required', param: 'upstream_api_key', message: expect.stringContaining('402 byok_key_required') },
    ]);
    expect(put.body.warnings[0].message).toContain(`PATCH ${modelUrl('keyless')}`);
    const refused = await chat('keyless');
    expect([refused.status, refused.body.error.code]).toEqual([402, 'byok_key_required']);

    const patched = await admin('PATCH', 'keyless', { upstream_api_key: env.upstreamKey });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ has_upstream_key: true, warnings: [], upstream_model: keyless.upstream_model, context_window: keyless.context_window });
    const served = await chat('keyless');
    expect(served.status, JSON.stringify(served.body)).toBe(200);
  });
});

describe('PATCH /v1/admin/projects/{id}/models/{model_id}', () => {
  it('changes only the fields sent and keeps the rest, the key included', async () => {
    await env.putModel('patched', { display_name: 'before', input_price_per_million_credits: 1_000_000 });
    const before = await stored('patched');
    const r = await admin('PATCH', 'patched', { display_name: 'after', output_price_per_million_credits: 7_000_000 });
    expect(r.status).toBe(200);
    const { updated_at: _a, warnings: _w, ...changed } = r.body;
    const { updated_at: _b, ...was } = before;
    expect(changed).toEqual({ ...was, display_name: 'after', output_price_per_million_credits: 7_000_000, output_price_per_million_usd: 7 });
    expect(r.body.has_upstream_key).toBe(true);
    // The gateway uses the new price at once (the write drops the cached model).
    const call = await chat('patched');
    expect(call.status).toBe(200);
    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${call.headers.get('x-service-transaction-id')}`, { key: env.p.projectKey });
    expect(receipt.body.prices).toMatchObject({ input_price_per_million_credits: 1_000_000, output_price_per_million_credits: 7_000_000 });
  });

  it('null removes the key; bad input and an unknown model change nothing', async () => {
    await env.putModel('strict');
    const before = await stored('strict');
    const cases: [unknown, number, string, string | undefined][] = [
      [{ max_output_tokens: 300_000 }, 400, 'invalid_request', 'max_output_tokens'],
      [{ context_window: 10 }, 400, 'invalid_request', 'max_output_tokens'],
      [{ provider: 'google' }, 400, 'invalid_request', 'provider'],
      [{ input_price_per_million_credits: -1 }, 400, 'invalid_request', 'input_price_per_million_credits'],
      [{ input_price_per_million_usd: 0.0000001 }, 400, 'invalid_request', 'input_price_per_million_usd'],
      [{ input_price_per_million_usd: 2, input_price_per_million_credits: 3 }, 400, 'invalid_request', 'input_price_per_million_usd'],
      [{ upstream_base_url: 'http://user:pw@host/v1' }, 400, 'invalid_request', 'upstream_base_url'],
      [{ upstreamApiKey: 'sk' }, 400, 'invalid_request', 'upstreamApiKey'],
      ['[]', 400, 'invalid_json', undefined],
    ];
    for (const [body, status, code, param] of cases) {
      const r = await admin('PATCH', 'strict', body);
      expect([JSON.stringify(body), r.status, r.body.error.code, r.body.error.param]).toEqual([JSON.stringify(body), status, code, param]);
    }
    expect(await stored('strict')).toEqual(before);
    const missing = await admin('PATCH', 'never-made', { display_name: 'x' });
    expect([missing.status, missing.body.error.code]).toEqual([404, 'not_found']);
    expect(await stored('never-made')).toBeUndefined();

    const removed = await admin('PATCH', 'strict', { upstream_api_key: null });
    expect([removed.body.has_upstream_key, removed.body.warnings.map((w: { code: string }) => w.code)]).toEqual([false, ['byok_key_required']]);
    expect((await chat('strict')).body.error.code).toBe('byok_key_required');
  });
});

describe('a model read sent back as a write', () => {
  it('PUT and PATCH accept the GET entry as it is (the *_usd prices, id, object, created, ...) and change nothing', async () => {
    await env.putModel('roundtrip', { cache_read_price_per_million_credits: 1_234_567 });
    const read = await stored('roundtrip');
    const put = await admin('PUT', 'roundtrip', read);
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const patch = await admin('PATCH', 'roundtrip', read);
    expect(patch.status, JSON.stringify(patch.body)).toBe(200);
    const { updated_at: _u, ...after } = await stored('roundtrip');
    const { updated_at: _v, ...was } = read;
    expect(after).toEqual(was);
    // A write's own answer, warnings included, is accepted back too.
    expect((await admin('PUT', 'roundtrip', put.body)).status).toBe(200);
  });

  it('a price in USD alone sets the price in credits, exactly', async () => {
    const { input_price_per_million_credits: _i, output_price_per_million_credits: _o, ...rest } = modelBody(env.mock, env.upstreamKey, 'openai');
    const r = await admin('PUT', 'usd-priced', { ...rest, input_price_per_million_usd: 0.3, output_price_per_million_usd: 1.2 });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect([r.body.input_price_per_million_credits, r.body.output_price_per_million_credits]).toEqual([300_000, 1_200_000]);
    const neither = await admin('PUT', 'unpriced', rest);
    expect([neither.status, neither.body.error.code, neither.body.error.param]).toEqual([400, 'invalid_request', 'input_price_per_million_credits']);
    expect(await stored('unpriced')).toBeUndefined();
  });

  it('PUT still requires the fields a model cannot do without', async () => {
    const body = modelBody(env.mock, env.upstreamKey, 'openai');
    for (const field of ['provider', 'upstream_base_url', 'upstream_model', 'context_window', 'max_output_tokens', 'supports_streaming']) {
      const { [field]: _gone, ...without } = body as Record<string, unknown>;
      const r = await admin('PUT', 'incomplete', without);
      expect([field, r.status, r.body.error.param]).toEqual([field, 400, field]);
    }
    expect(await stored('incomplete')).toBeUndefined();
  });
});

describe('DELETE /v1/admin/projects/{id}/models/{model_id}', () => {
  it('removes the model (calls answer 404 model_not_found), keeps the receipts of its calls, and frees the id', async () => {
    await env.putModel('doomed');
    const call = await chat('doomed');
    expect(call.status).toBe(200);
    const txid = call.headers.get('x-service-transaction-id');
    const del = await admin('DELETE', 'doomed');
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ id: 'doomed', deleted: true, max_output_tokens: MAX_OUTPUT_TOKENS });
    expect(await stored('doomed')).toBeUndefined();
    const gone = await chat('doomed');
    expect([gone.status, gone.body.error.code]).toEqual([404, 'model_not_found']);
    const listed = await env.svc.call('GET', '/v1/models', { key: env.p.projectKey });
    expect(listed.body.data.map((m: { id: string }) => m.id)).not.toContain('doomed');
    // The money record of the call stands, with the model and the prices it was billed at.
    await env.svc.drained();
    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect([receipt.status, receipt.body.model]).toEqual([200, 'doomed']);
    const again = await admin('DELETE', 'doomed');
    expect([again.status, again.body.error.code]).toEqual([404, 'not_found']);
    await env.putModel('doomed');
    expect((await chat('doomed')).status).toBe(200);
  });

  it("another organization's model is 404 and stays", async () => {
    const other = await env.svc.project('B');
    await env.putModel('theirs', {}, other);
    const r = await env.svc.call('DELETE', modelUrl('theirs', other.projectId), { key: env.p.adminKey });
    expect([r.status, r.body.error.code]).toEqual([404, 'not_found']);
    const patch = await env.svc.call('PATCH', modelUrl('theirs', other.projectId), { key: env.p.adminKey, body: { active: false } });
    expect([patch.status, patch.body.error.code]).toEqual([404, 'not_found']);
    const list = await env.svc.call('GET', `/v1/admin/projects/${other.projectId}/models`, { key: other.adminKey });
    expect(list.body.data.map((m: { id: string; active: boolean }) => [m.id, m.active])).toEqual([['theirs', true]]);
  });
});
