/**
 * Issue 22, part 2: what a newcomer's trial found in translated calls (docs/API.md, "Any
 * model through any format"). An output limit below a Responses-format model's least (16)
 * is refused naming the client's own field, or, when the wallet lowered it, with a 402;
 * translated answers say when they were made and carry ids of the client format's shape;
 * count_tokens refuses a non-Anthropic model saying its format; the service's own errors
 * on /v1/messages carry Anthropic's error types.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { expectError } from '../support/errors.js';
import { ANTHROPIC_MODEL, OPENAI_MODEL, rawPost, sseData, startGatewayEnv, type GatewayEnv } from './support.js';

let env: GatewayEnv;
const RESPONSES_MODEL = 'gpt-responses-followups';
beforeAll(async () => {
  env = await startGatewayEnv();
  await env.putModel(RESPONSES_MODEL, { provider: 'openai', wire_format: 'responses' });
});
afterAll(async () => {
  await env?.close();
});

type Json = Record<string, unknown>;
const post = (path: string, customer: string, body: Json, headers: Record<string, string> = {}) =>
  rawPost(env.svc.url, path, { key: env.p.projectKey, headers: { 'X-Service-Customer': customer, 'anthropic-version': '2023-06-01', ...headers }, body });
const upstreamCalls = () => env.mock.requests.filter((r) => r.path.endsWith('/responses')).length;

describe('an output limit below 16 for a Responses-format model', () => {
  const cases = [
    { client: 'chat', path: '/v1/chat/completions', field: 'max_tokens' },
    { client: 'chat', path: '/v1/chat/completions', field: 'max_completion_tokens' },
    { client: 'messages', path: '/v1/messages', field: 'max_tokens' },
  ] as const;
  it.each(cases)('$client client, $field 15: 400 naming $field, nothing held or sent', async ({ path, field }) => {
    await env.fund('small-limit', 1_000_000);
    const before = upstreamCalls();
    const res = await post(path, 'small-limit', { model: RESPONSES_MODEL, [field]: 15, messages: [{ role: 'user', content: 'hi' }] });
    expectError(res, 400, 'invalid_request', { param: field, message: `${field} must be at least 16 for a Responses-format model (got 15)` });
    expect(upstreamCalls()).toBe(before);
    expect(await env.balance('small-limit')).toMatchObject({ used: 0, frozen: 0 });
  });

  it('16 passes, to the same model', async () => {
    await env.fund('limit-16', 1_000_000);
    const res = await post('/v1/chat/completions', 'limit-16', { model: RESPONSES_MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    expect(env.mock.requests.at(-1)!.body).toMatchObject({ max_output_tokens: 16 });
  });

  it('a wallet that covers fewer than 16 output tokens, no limit sent: 402 insufficient_balance, nothing sent, the hold released', async () => {
    const before = upstreamCalls();
    for (const [customer, path, body] of [
      ['thin-chat', '/v1/chat/completions', { model: RESPONSES_MODEL, messages: [{ role: 'user', content: 'hi' }] }],
      ['thin-resp', '/v1/responses', { model: RESPONSES_MODEL, input: 'hi' }],
    ] as const) {
      // The hold's input bound first, from the refusal of the same call on 1 credit.
      await env.fund(customer, 1);
      const probe = await post(path, customer, body);
      const input = (probe.json().error as { details: { input_bound_credits: number } }).details.input_bound_credits;
      // Ten output tokens at 2.5 credits each on top of the input bound: the hold lowers the limit to 10.
      await env.fund(customer, input + 25 - 1);
      const res = await post(path, customer, body);
      expectError(res, 402, 'insufficient_balance', { message: /covers 10 output tokens, and model gpt-responses-followups \(Responses format\) needs an output limit of at least 16/, fields: { details: { output_tokens: 10, min_output_tokens: 16 } } });
      await expect.poll(async () => (await env.balance(customer)).frozen).toBe(0);
      expect(await env.balance(customer)).toMatchObject({ used: 0 });
    }
    expect(upstreamCalls()).toBe(before);
  });
});

describe('translated answers: when made, and ids of the client format', () => {
  const now = () => Math.floor(Date.now() / 1000);

  it('Responses client, messages model, whole: created_at now; resp_ id and msg_ item of the same core', async () => {
    await env.fund('stamp-1', 1_000_000);
    const res = await post('/v1/responses', 'stamp-1', { model: ANTHROPIC_MODEL, input: 'hi' });
    const body = res.json() as { id: string; created_at: number; output: { id: string }[] };
    expect(Math.abs(body.created_at - now())).toBeLessThanOrEqual(5);
    expect(body.id).toMatch(/^resp_(?!msg_)\w+$/);
    expect(body.output[0]!.id).toBe(`msg_${body.id.slice('resp_'.length)}`);
  });

  it('Responses client, messages model, streamed: every response.* event says the same created_at, now; ids as whole', async () => {
    await env.fund('stamp-2', 1_000_000);
    const res = await post('/v1/responses', 'stamp-2', { model: ANTHROPIC_MODEL, input: 'hi', stream: true });
    const events = sseData(res.text) as { type: string; response?: { id: string; created_at: number }; item?: { id: string; type: string } }[];
    const responses = events.filter((e) => e.response !== undefined).map((e) => e.response!);
    expect(responses.length).toBeGreaterThanOrEqual(3);
    expect(new Set(responses.map((r) => r.created_at)).size).toBe(1);
    expect(Math.abs(responses[0]!.created_at - now())).toBeLessThanOrEqual(5);
    const id = responses[0]!.id;
    expect(id).toMatch(/^resp_(?!msg_)\w+$/);
    const item = events.find((e) => e.type === 'response.output_item.added' && e.item?.type === 'message')!.item!;
    expect(item.id).toBe(`msg_${id.slice('resp_'.length)}`);
  });

  it('chat client, messages model: a chatcmpl- id; messages client, chat and Responses models: msg_ ids', async () => {
    await env.fund('stamp-3', 1_000_000);
    const chat = await post('/v1/chat/completions', 'stamp-3', { model: ANTHROPIC_MODEL, messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.json().id).toMatch(/^chatcmpl-(?!msg_)\w+$/);
    for (const model of [OPENAI_MODEL, RESPONSES_MODEL]) {
      const msg = await post('/v1/messages', 'stamp-3', { model, max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
      expect(msg.json().id, model).toMatch(/^msg_(?!chatcmpl-|resp_)\w+$/);
    }
  });
});

describe('count_tokens on a model of another format', () => {
  it('a Responses-format model: 400 saying its format, in the Anthropic envelope', async () => {
    await env.fund('count-1', 1);
    const res = await post('/v1/messages/count_tokens', 'count-1', { model: RESPONSES_MODEL, messages: [{ role: 'user', content: 'hi' }] });
    expectError(res, 400, 'invalid_request', { param: 'model', message: /is a Responses-format model: token counts are served by Anthropic-format models only/ });
    expect(res.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_request' } });
  });
});

describe("the service's own errors on /v1/messages: Anthropic's types, the service's code", () => {
  it('402 billing_error, 404 not_found_error, 400 invalid_request_error', async () => {
    await env.fund('anth-types', 1);
    const cases = [
      [{ model: ANTHROPIC_MODEL, max_tokens: 4000, messages: [{ role: 'user', content: 'hi' }] }, 402, 'billing_error', 'insufficient_balance'],
      [{ model: 'no-such-model', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }, 404, 'not_found_error', 'model_not_found'],
      [{ model: ANTHROPIC_MODEL, max_tokens: 10 }, 400, 'invalid_request_error', 'invalid_request'],
    ] as const;
    for (const [body, status, type, code] of cases) {
      const res = await post('/v1/messages', 'anth-types', body);
      expect({ status: res.status, body: res.json() }).toMatchObject({ status, body: { type: 'error', error: { type, code } } });
    }
    // Other endpoints keep the service's own types.
    const chat = await post('/v1/chat/completions', 'anth-types', { model: OPENAI_MODEL, max_tokens: 4000, messages: [{ role: 'user', content: `hi ${mockDirective({})}` }] });
    expect(chat.json()).toMatchObject({ error: { type: 'bad_request', code: 'insufficient_balance' } });
  });
});
