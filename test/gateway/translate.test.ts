/**
 * Any model through either format (docs/API.md, "Any model through any format"), between
 * chat completions and Anthropic messages: the trailers and inline figures of a translated
 * stream, an upstream error in the caller's envelope, and a field without counterpart, a
 * 400 that holds and bills nothing. Every cell of the matrix (each endpoint x each wire
 * format x stream or not, with a tool call and its result) is translate-matrix.test.ts.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { ANTHROPIC_MODEL, expectedCost, OPENAI_MODEL, rawPost, sseData, startGatewayEnv, type GatewayEnv } from './support.js';

let env: GatewayEnv;
beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(async () => {
  await env?.close();
});

type Json = Record<string, unknown>;
const INPUT = 41;
const OUTPUT = 7;
const CACHE_READ = 5;
/** The mock reports cache writes in Anthropic answers only. */
const cacheWriteOf = (model: string) => (model === ANTHROPIC_MODEL ? 3 : 0);
const costOf = (model: string) => expectedCost({ input: INPUT, output: OUTPUT, cacheRead: CACHE_READ, cacheWrite: cacheWriteOf(model) });
const controls = () => mockDirective({ input_tokens: INPUT, output_tokens: OUTPUT, cache_read_tokens: CACHE_READ, cache_write_tokens: 3 });

describe('streams: trailers and inline billing on a translated stream', () => {
  it('chat client, Anthropic model: the trailers and the inline figures carry the native cost; no usage chunk unless asked', async () => {
    await env.fund('ts1', 1_000_000);
    const body = { model: ANTHROPIC_MODEL, stream: true, messages: [{ role: 'user', content: `hi ${controls()}` }] };
    const plain = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers: { 'x-service-customer': 'ts1' }, body });
    expect(plain.trailers['x-service-cost-credits']).toBe(String(costOf(ANTHROPIC_MODEL)));
    const chunks = sseData(plain.text);
    expect(chunks.at(-1)).toBe('[DONE]');
    expect(chunks.some((c) => typeof c === 'object' && (c as Json).usage)).toBe(false);

    const inline = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers: { 'x-service-customer': 'ts1', 'x-service-stream-billing': 'inline' }, body });
    const usageChunk = sseData(inline.text).find((c) => typeof c === 'object' && (c as Json).usage) as Json;
    expect(usageChunk.service_billing).toMatchObject({ cost_credits: costOf(ANTHROPIC_MODEL), usage_estimated: false });
    expect(inline.trailers['x-service-cost-credits']).toBe(String(costOf(ANTHROPIC_MODEL)));
  });

  it('Anthropic client, OpenAI model: named events, message_delta with the inline figures', async () => {
    await env.fund('ts2', 1_000_000);
    const body = { model: OPENAI_MODEL, max_tokens: 100, stream: true, messages: [{ role: 'user', content: `hi ${controls()}` }] };
    const res = await rawPost(env.svc.url, '/v1/messages', { key: env.p.projectKey, headers: { 'x-service-customer': 'ts2', 'x-service-stream-billing': 'inline' }, body });
    expect(res.text).toMatch(/^event: message_start\n/);
    expect(res.text).toMatch(/event: message_stop\ndata: \{"type":"message_stop"\}\n\n$/);
    const delta = sseData(res.text).find((e) => (e as Json).type === 'message_delta') as Json;
    expect(delta.usage).toEqual({ input_tokens: INPUT, output_tokens: OUTPUT, cache_read_input_tokens: CACHE_READ, cache_creation_input_tokens: 0 });
    expect(delta.service_billing).toMatchObject({ cost_credits: costOf(OPENAI_MODEL) });
    expect(res.trailers['x-service-cost-credits']).toBe(String(costOf(OPENAI_MODEL)));
  });
});

describe('errors and refusals', () => {
  it('an upstream error comes back in the caller envelope with its status, nothing billed', async () => {
    await env.fund('te1', 1_000_000);
    const err = await env
      .openai({ customer: 'te1' })
      .chat.completions.create({ model: ANTHROPIC_MODEL, messages: [{ role: 'user', content: `hi ${mockDirective({ fail: 429 })}` }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'rate_limit_error', message: expect.stringContaining('rate limit') });

    const aerr = await env
      .anthropic({ customer: 'te1' })
      .messages.create({ model: OPENAI_MODEL, max_tokens: 10, messages: [{ role: 'user', content: `hi ${mockDirective({ fail: 500 })}` }] })
      .catch((e: unknown) => e);
    expect(aerr).toBeInstanceOf(Anthropic.InternalServerError);
    expect((aerr as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ type: 'error', error: { type: 'api_error' } });
    expect(await env.ledger('te1', 'GATEWAY')).toEqual([]);
    expect((await env.balance('te1')).frozen).toBe(0);
  });

  it('a field without counterpart is a 400 naming it, and nothing is sent, held or billed', async () => {
    await env.fund('te2', 1_000_000);
    const before = env.mock.requests.length;
    const n = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers: { 'x-service-customer': 'te2' }, body: { model: ANTHROPIC_MODEL, n: 2, messages: [{ role: 'user', content: 'hi' }] } });
    expect(n.status).toBe(400);
    expect(n.json().error).toMatchObject({ code: 'invalid_request', param: 'n' });
    const thinking = await rawPost(env.svc.url, '/v1/messages', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'te2' },
      body: { model: OPENAI_MODEL, max_tokens: 10, thinking: { type: 'enabled', budget_tokens: 5 }, messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(thinking.status).toBe(400);
    expect(thinking.json().error).toMatchObject({ code: 'invalid_request', param: 'thinking' });
    expect(env.mock.requests.length).toBe(before);
    expect(await env.ledger('te2', 'GATEWAY')).toEqual([]);
    expect(await env.balance('te2')).toMatchObject({ used: 0, frozen: 0 });
  });
});
