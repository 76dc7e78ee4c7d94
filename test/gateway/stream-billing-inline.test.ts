/**
 * `X-Service-Stream-Billing: inline` (docs/API.md, "Reading the cost of a stream"): the
 * billing figures of a streamed call, which the official SDKs cannot read from the HTTP
 * trailers, added as the field `service_billing` to the final usage event (OpenAI's usage
 * chunk, Anthropic's `message_delta`), read here with the `openai` and `@anthropic-ai/sdk`
 * clients; the same figures as the trailers and the receipt. The relay (StreamRelay with
 * holdFinal) holds back only that event and what follows it, and changes nothing else;
 * without the header nothing is held and the stream stays byte for byte the upstream's.
 */
import type Anthropic from '@anthropic-ai/sdk';
import type { InlineBilling } from '../../src/gateway/billing.js';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import fc from 'fast-check';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { billing_field, prepareUpstreamBody, StreamRelay, type WireFormat } from '../../src/gateway/adapters.js';
import { countInputTokens, mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';
import { ANTHROPIC_MODEL, centsOf, expectedCost, OPENAI_MODEL, rawPost, startGatewayEnv, usdOf, type GatewayEnv } from './support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(async () => {
  await env?.close();
});

const inline = { 'X-Service-Stream-Billing': 'inline' };
const ask = (controls: Record<string, number>) => [{ role: 'user' as const, content: `tell me something ${mockDirective(controls)}` }];

type ServiceBilling = InlineBilling;

/** An SDK's event, with the figures the service adds to the final one. */
type Billed<E> = E & { service_billing?: ServiceBilling };

/** The figures a stream billed `cost` must carry, its balance read back from the service. */
async function expectFigures(b: ServiceBilling | undefined, customer: string, transactionId: string, cost: number) {
  const available = (await env.balance(customer)).wallets.credits!.available;
  expect(b).toEqual({
    transaction_id: transactionId,
    cost_credits: cost,
    cost_cents: centsOf(cost),
    cost_usd: usdOf(cost),
    balance_credits: available,
    balance_usd: usdOf(available),
    usage_estimated: false,
  });
  const receipt = await env.svc.call('GET', `/v1/billing/receipts/${transactionId}`, { key: env.p.projectKey });
  expect(receipt.body).toMatchObject({ transaction_id: transactionId, cost_credits: cost, balance_after_credits: available });
}

describe('with the official SDKs', () => {
  it('OpenAI: the usage chunk carries service_billing, the exact cost of that usage', async () => {
    await env.fund('in1', 1_000_000);
    const { data: stream, response } = await env
      .openai({ customer: 'in1', headers: inline })
      .chat.completions.create({ model: OPENAI_MODEL, stream: true, stream_options: { include_usage: true }, messages: ask({ output_tokens: 8, cache_read_tokens: 3 }) })
      .withResponse();
    let text = '';
    const withBilling: unknown[] = [];
    let usageChunk: Billed<OpenAI.ChatCompletionChunk> | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (billing_field in chunk) withBilling.push(chunk);
      if (chunk.usage) usageChunk = chunk;
    }
    expect(text).toBe(mockOutputText(8));
    expect(withBilling).toEqual([usageChunk]);
    const u = usageChunk!.usage!;
    const cost = expectedCost({ input: u.prompt_tokens - 3, output: u.completion_tokens, cacheRead: 3 });
    await expectFigures(usageChunk!.service_billing, 'in1', response.headers.get('x-service-transaction-id')!, cost);
  });

  it('OpenAI: without include_usage the client gets the usage chunk all the same, with the figures', async () => {
    await env.fund('in2', 1_000_000);
    const messages = ask({ output_tokens: 5 });
    const { data: stream, response } = await env.openai({ customer: 'in2', headers: inline }).chat.completions.create({ model: OPENAI_MODEL, stream: true, messages }).withResponse();
    const chunks: Billed<OpenAI.ChatCompletionChunk>[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: countInputTokens('openai', { messages }), completion_tokens: 5 });
    const cost = expectedCost({ input: last.usage!.prompt_tokens, output: 5 });
    await expectFigures(last.service_billing, 'in2', response.headers.get('x-service-transaction-id')!, cost);
  });

  it('Anthropic: message_delta carries service_billing, the exact cost of its usage', async () => {
    await env.fund('in3', 1_000_000);
    const { data: stream, response } = await env
      .anthropic({ customer: 'in3', headers: inline })
      .messages.create({ model: ANTHROPIC_MODEL, max_tokens: 64, stream: true, messages: ask({ output_tokens: 9, cache_read_tokens: 4, cache_write_tokens: 2 }) })
      .withResponse();
    const types: string[] = [];
    let delta: Billed<Anthropic.RawMessageDeltaEvent> | null = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'message_delta') delta = event;
      else expect(event).not.toHaveProperty(billing_field);
    }
    expect(types.at(-2)).toBe('message_delta');
    expect(types.at(-1)).toBe('message_stop');
    const u = delta!.usage;
    const cost = expectedCost({ input: u.input_tokens!, output: u.output_tokens, cacheRead: u.cache_read_input_tokens ?? 0, cacheWrite: u.cache_creation_input_tokens ?? 0 });
    expect(u.output_tokens).toBe(9);
    await expectFigures(delta!.service_billing, 'in3', response.headers.get('x-service-transaction-id')!, cost);
  });

  it('without the header: no service_billing; the cost is read from the receipt', async () => {
    await env.fund('in4', 1_000_000);
    const { data: stream, response } = await env
      .openai({ customer: 'in4' })
      .chat.completions.create({ model: OPENAI_MODEL, stream: true, stream_options: { include_usage: true }, messages: ask({ output_tokens: 4 }) })
      .withResponse();
    let usage: OpenAI.CompletionUsage | null = null;
    for await (const chunk of stream) {
      expect(chunk).not.toHaveProperty(billing_field);
      if (chunk.usage) usage = chunk.usage;
    }
    const txid = response.headers.get('x-service-transaction-id')!;
    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect(receipt.status).toBe(200);
    expect(receipt.body.cost_credits).toBe(expectedCost({ input: usage!.prompt_tokens, output: usage!.completion_tokens }));
  });
});

describe('over HTTP', () => {
  /** Ids and timestamps differ between two answers; the rest is deterministic. */
  const withoutIds = (s: string) => s.replace(/chatcmpl-[A-Za-z0-9]+/g, 'ID').replace(/msg_01[A-Za-z0-9]+/g, 'ID').replace(/"created":\d+/g, '"created":0');

  for (const [format, path, model] of [['openai', '/v1/chat/completions', OPENAI_MODEL], ['anthropic', '/v1/messages', ANTHROPIC_MODEL]] as const) {
    it(`${format}: the same events as without the header but for the field, and the same figures as the trailers`, async () => {
      await env.fund(`ih-${format}`, 1_000_000);
      const body = { model, stream: true, max_tokens: 64, stream_options: format === 'openai' ? { include_usage: true } : undefined, messages: ask({ output_tokens: 6 }) };
      const headers = { 'x-service-customer': `ih-${format}` };
      const plain = await rawPost(env.svc.url, path, { key: env.p.projectKey, headers, body });
      const billed = await rawPost(env.svc.url, path, { key: env.p.projectKey, headers: { ...headers, 'x-service-stream-billing': 'inline' }, body });
      expect(billed.status).toBe(200);
      expect(billed.headers.trailer).toBe(plain.headers.trailer);
      const events = billed.text.split('\n\n');
      const carrier = events.findIndex((e) => e.includes(`"${billing_field}"`));
      expect(carrier).toBeGreaterThan(0);
      const data = JSON.parse(events[carrier]!.slice(events[carrier]!.indexOf('data: ') + 6));
      const b = data[billing_field] as ServiceBilling;
      // The field is the data's last, spliced in: without it, the event's text as it came.
      delete data[billing_field];
      expect(events[carrier]).toContain(JSON.stringify(data).slice(0, -1));
      const stripped = billed.text.replace(`,"${billing_field}":${JSON.stringify(b)}}`, '}');
      expect(withoutIds(stripped)).toBe(withoutIds(plain.text));
      expect({
        'x-service-cost-credits': String(b.cost_credits),
        'x-service-cost-cents': b.cost_cents,
        'x-service-cost-usd': b.cost_usd,
        'x-service-balance-credits': String(b.balance_credits),
        'x-service-balance-usd': b.balance_usd,
      }).toEqual(billed.trailers);
      expect(b.transaction_id).toBe(billed.headers['x-service-transaction-id']);
    });
  }

  it('a value other than inline or trailers is a 400 naming the header, and nothing is held', async () => {
    await env.fund('ibad', 1_000_000);
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'ibad', 'x-service-stream-billing': 'body' },
      body: { model: OPENAI_MODEL, stream: true, messages: ask({ output_tokens: 3 }) },
    });
    expectError(res, 400, 'invalid_request', { param: 'X-Service-Stream-Billing' });
    expect(await env.balance('ibad')).toMatchObject({ frozen: 0, used: 0 });
    const trailers = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'ibad', 'x-service-stream-billing': 'trailers' },
      body: { model: OPENAI_MODEL, stream: true, messages: ask({ output_tokens: 3 }) },
    });
    expect(trailers.status).toBe(200);
    expect(trailers.text).not.toContain(billing_field);
    expect(Number(trailers.trailers['x-service-cost-credits'])).toBeGreaterThan(0);
  });

  it('a non-streamed call ignores the header: the figures are its headers', async () => {
    await env.fund('iwhole', 1_000_000);
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'iwhole', 'x-service-stream-billing': 'inline' },
      body: { model: OPENAI_MODEL, messages: ask({ output_tokens: 3 }) },
    });
    expect(res.status).toBe(200);
    expect(res.text).not.toContain(billing_field);
    expect(Number(res.headers['x-service-cost-credits'])).toBeGreaterThan(0);
  });
});

describe('StreamRelay with holdFinal', () => {
  const billing = { transaction_id: 'gw_x', cost_credits: 12, cost_cents: '0.0012', cost_usd: '0.000012', balance_credits: 88, balance_usd: '0.000088', usage_estimated: false };

  async function upstreamOf(format: WireFormat): Promise<Buffer> {
    const client = format === 'openai'
      ? { model: 'gpt-4o-mini', stream: true, messages: ask({ output_tokens: 5, cache_read_tokens: 2 }) }
      : { model: 'claude-haiku-4-5', stream: true, max_tokens: 64, messages: ask({ output_tokens: 5, cache_read_tokens: 2 }) };
    const prepared = prepareUpstreamBody(format, client, { upstreamModel: client.model, maxTokens: null, stream: true }).body;
    const res = await fetch(`${env.mock.url}${format === 'openai' ? '/chat/completions' : '/messages'}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${env.upstreamKey}`, 'x-api-key': env.upstreamKey },
      body: JSON.stringify(prepared),
    });
    return Buffer.from(await res.arrayBuffer());
  }

  function feed(r: StreamRelay, bytes: Buffer, sizes: number[]): Buffer {
    const parts: Uint8Array[] = [];
    for (let at = 0, i = 0; at < bytes.length; i++) {
      const size = Math.max(1, sizes[i % sizes.length]!);
      parts.push(r.push(bytes.subarray(at, at + size)));
      at += size;
    }
    parts.push(r.end());
    return Buffer.concat(parts);
  }

  const events = (bytes: Uint8Array) => {
    const out: EventSourceMessage[] = [];
    createParser({ onEvent: (e) => out.push(e) }).feed(Buffer.from(bytes).toString('utf8'));
    return out;
  };

  for (const format of ['openai', 'anthropic'] as const) {
    const finalOf = (e: EventSourceMessage) => (format === 'openai' ? e.data.includes('"usage":{') : e.event === 'message_delta');

    it(`${format}: holds the final usage event and what follows; released bare, every byte as it came; with billing, only the field added`, async () => {
      const upstream = await upstreamOf(format);
      const at = events(upstream).findIndex(finalOf);
      expect(at).toBeGreaterThan(0);
      for (const lineEnd of ['\n', '\r\n']) {
        const bytes = Buffer.from(upstream.toString('utf8').replaceAll('\n', lineEnd));
        fc.assert(
          fc.property(fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 30 }), fc.boolean(), (sizes, bare) => {
            const r = new StreamRelay(format, true, { holdFinal: true });
            const before = feed(r, bytes, sizes);
            expect(r.holding()).toBe(true);
            expect(r.usageComplete()).toBe(true);
            expect(r.sawTerminal()).toBe(true);
            const held = Buffer.from(r.releaseHeld(bare ? null : billing));
            expect(r.releaseHeld(billing).length).toBe(0);
            const out = Buffer.concat([before, held]);
            if (bare) {
              expect(out.equals(bytes)).toBe(true);
            } else {
              const got = events(out);
              const want = events(bytes);
              expect(got.map((e) => e.event)).toEqual(want.map((e) => e.event));
              for (const [i, e] of got.entries()) {
                if (i !== at) expect(e.data).toBe(want[i]!.data);
                else expect(JSON.parse(e.data)).toEqual({ ...JSON.parse(want[i]!.data), [billing_field]: billing });
              }
              expect(out.subarray(0, before.length).equals(bytes.subarray(0, before.length))).toBe(true);
            }
          }),
          { numRuns: 20 },
        );
      }
    });
  }

  it('a final event whose data spans lines is sent as one line with the field', () => {
    const r = new StreamRelay('anthropic', true, { holdFinal: true });
    const start = 'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}\n\n';
    const delta = 'event: message_delta\ndata: {"type":"message_delta",\ndata: "usage":{"output_tokens":4}}\n\n';
    const stop = 'event: message_stop\ndata: {"type":"message_stop"}\n\n';
    const out = Buffer.from(r.push(Buffer.from(start + delta + stop))).toString('utf8');
    expect(out).toBe(start);
    const held = Buffer.from(r.releaseHeld(billing)).toString('utf8');
    expect(held).toBe(`event: message_delta\ndata: ${JSON.stringify({ type: 'message_delta', usage: { output_tokens: 4 }, [billing_field]: billing })}\n\n${stop}`);
  });

  it('without holdFinal nothing is ever held', async () => {
    for (const format of ['openai', 'anthropic'] as const) {
      const upstream = await upstreamOf(format);
      const r = new StreamRelay(format, true);
      expect(feed(r, upstream, [17]).equals(upstream)).toBe(true);
      expect(r.holding()).toBe(false);
      expect(r.releaseHeld(billing).length).toBe(0);
    }
  });
});
