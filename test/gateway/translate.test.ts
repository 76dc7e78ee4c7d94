/**
 * Any model through either format (docs/API.md, "Any model through any format"): the
 * official `openai` client at /v1/chat/completions and `@anthropic-ai/sdk` at
 * /v1/messages, each against a model of either wire format, whole and streamed, with a
 * tool call and then its result. The answer parses in the SDK with the right stop reason,
 * tool call and usage; the cost equals the native call's for the same upstream usage; the
 * upstream got a body of its own format; an upstream error comes back in the caller's
 * envelope; a field without counterpart is a 400 that holds and bills nothing.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';
import { ANTHROPIC_MODEL, ANTHROPIC_UPSTREAM_MODEL, expectedCost, OPENAI_MODEL, OPENAI_UPSTREAM_MODEL, rawPost, sseData, startGatewayEnv, type GatewayEnv } from './support.js';

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
const controls = (tool: boolean) => mockDirective({ input_tokens: INPUT, output_tokens: OUTPUT, cache_read_tokens: CACHE_READ, cache_write_tokens: 3, ...(tool ? { tool_call: 1 } : {}) });
const toolArgs = { query: mockOutputText(OUTPUT) };
const upstreamModelOf = (model: string) => (model === ANTHROPIC_MODEL ? ANTHROPIC_UPSTREAM_MODEL : OPENAI_UPSTREAM_MODEL);

async function ledgerCost(customer: string, txid: string): Promise<number> {
  const entry = (await env.ledger(customer, 'GATEWAY')).find((e) => e.transaction_id === txid);
  expect(entry, 'a GATEWAY ledger entry').toBeDefined();
  return entry!.amount;
}

interface Turn {
  text: string;
  calls: { id: string; name: string; args: unknown }[];
  stop: string | null;
  usage: { input: number; output: number; cacheRead: number; cacheWrite: number };
  txid: string;
  cost: number;
}

// ---------------------------------------------------------------------------
// The openai client at /v1/chat/completions
// ---------------------------------------------------------------------------

const chatTools: OpenAI.ChatCompletionTool[] = [{ type: 'function', function: { name: 'lookup', description: 'looks up', parameters: { type: 'object', properties: { query: { type: 'string' } } } } }];

async function chatTurn(customer: string, model: string, stream: boolean, messages: OpenAI.ChatCompletionMessageParam[]): Promise<Turn> {
  const client = env.openai({ customer });
  if (!stream) {
    const { data, response } = await client.chat.completions.create({ model, messages, tools: chatTools }).withResponse();
    const choice = data.choices[0]!;
    const u = data.usage! as OpenAI.CompletionUsage & { cache_write_tokens?: number };
    const cacheRead = u.prompt_tokens_details?.cached_tokens ?? 0;
    const cacheWrite = u.cache_write_tokens ?? 0;
    return {
      text: choice.message.content ?? '',
      calls: (choice.message.tool_calls ?? []).map((c) => (c.type === 'function' ? { id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) as unknown } : { id: c.id, name: '', args: null })),
      stop: choice.finish_reason,
      usage: { input: u.prompt_tokens - cacheRead - cacheWrite, output: u.completion_tokens, cacheRead, cacheWrite },
      txid: response.headers.get('x-service-transaction-id')!,
      cost: Number(response.headers.get('x-service-cost-credits')),
    };
  }
  const { data, response } = await client.chat.completions.create({ model, messages, tools: chatTools, stream: true, stream_options: { include_usage: true } }).withResponse();
  let text = '';
  let stop: string | null = null;
  let usage: Turn['usage'] | null = null;
  const calls: { id: string; name: string; args: string }[] = [];
  for await (const chunk of data) {
    const choice = chunk.choices[0];
    if (choice?.delta.content) text += choice.delta.content;
    for (const c of choice?.delta.tool_calls ?? []) {
      if (c.id) calls[c.index] = { id: c.id, name: c.function?.name ?? '', args: '' };
      calls[c.index]!.args += c.function?.arguments ?? '';
    }
    if (choice?.finish_reason) stop = choice.finish_reason;
    if (chunk.usage) {
      const u = chunk.usage as OpenAI.CompletionUsage & { cache_write_tokens?: number };
      const cacheRead = u.prompt_tokens_details?.cached_tokens ?? 0;
      const cacheWrite = u.cache_write_tokens ?? 0;
      usage = { input: u.prompt_tokens - cacheRead - cacheWrite, output: u.completion_tokens, cacheRead, cacheWrite };
    }
  }
  const txid = response.headers.get('x-service-transaction-id')!;
  return { text, calls: calls.map((c) => ({ ...c, args: JSON.parse(c.args) as unknown })), stop, usage: usage!, txid, cost: await ledgerCost(customer, txid) };
}

// ---------------------------------------------------------------------------
// The Anthropic client at /v1/messages
// ---------------------------------------------------------------------------

const messagesTools: Anthropic.Tool[] = [{ name: 'lookup', description: 'looks up', input_schema: { type: 'object', properties: { query: { type: 'string' } } } }];

async function messagesTurn(customer: string, model: string, stream: boolean, messages: Anthropic.MessageParam[]): Promise<Turn> {
  const client = env.anthropic({ customer });
  const params = { model, max_tokens: 1000, messages, tools: messagesTools };
  let message: Anthropic.Message;
  let response: Response;
  if (stream) {
    const s = client.messages.stream(params);
    response = (await s.withResponse()).response;
    message = await s.finalMessage();
  } else {
    ({ data: message, response } = await client.messages.create(params).withResponse());
  }
  const txid = response.headers.get('x-service-transaction-id')!;
  const u = message.usage;
  return {
    text: message.content.map((b) => (b.type === 'text' ? b.text : '')).join(''),
    calls: message.content.flatMap((b) => (b.type === 'tool_use' ? [{ id: b.id, name: b.name, args: b.input }] : [])),
    stop: message.stop_reason,
    usage: { input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens ?? 0, cacheWrite: u.cache_creation_input_tokens ?? 0 },
    txid,
    cost: stream ? await ledgerCost(customer, txid) : Number(response.headers.get('x-service-cost-credits')),
  };
}

const lastUpstreamBody = () => env.mock.requests.at(-1)!.body as Json;

// ---------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------

const matrix = [OPENAI_MODEL, ANTHROPIC_MODEL].flatMap((model) => [false, true].map((stream) => ({ model, stream })));

describe.each(matrix)('the openai client, chat completions, model $model, stream $stream', ({ model, stream }) => {
  it('a tool call, then its result: the answers, usage and cost are those of the native path', async () => {
    const customer = `tc-${model.length}-${String(stream)}`;
    await env.fund(customer, 1_000_000);
    const first: OpenAI.ChatCompletionMessageParam = { role: 'user', content: `find it ${controls(true)}` };
    const t1 = await chatTurn(customer, model, stream, [{ role: 'system', content: 'be brief' }, first]);
    expect(t1.stop).toBe('tool_calls');
    expect(t1.calls).toEqual([{ id: expect.any(String), name: 'lookup', args: toolArgs }]);
    expect(t1.usage).toEqual({ input: INPUT, output: OUTPUT, cacheRead: CACHE_READ, cacheWrite: cacheWriteOf(model) });
    expect(t1.cost).toBe(costOf(model));
    expect(await ledgerCost(customer, t1.txid)).toBe(t1.cost);

    const sent = lastUpstreamBody();
    expect(sent.model).toBe(upstreamModelOf(model));
    if (model === ANTHROPIC_MODEL) {
      // A native Anthropic body: the system prompt on top, tools with input_schema, max_tokens set by the hold.
      expect(sent).toMatchObject({ system: 'be brief', max_tokens: 4096, tools: [{ name: 'lookup', input_schema: { type: 'object' } }] });
      expect(sent.stream_options).toBeUndefined();
    }

    const call = t1.calls[0]!;
    const t2 = await chatTurn(customer, model, stream, [
      { role: 'user', content: `find it ${mockDirective({ input_tokens: INPUT, output_tokens: OUTPUT, cache_read_tokens: CACHE_READ, cache_write_tokens: 3 })}` },
      { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: 'lookup', arguments: JSON.stringify(call.args) } }] },
      { role: 'tool', tool_call_id: call.id, content: 'the answer is 42' },
    ]);
    expect(t2.stop).toBe('stop');
    expect(t2.text).toBe(mockOutputText(OUTPUT));
    expect(t2.cost).toBe(costOf(model));
    if (model === ANTHROPIC_MODEL) {
      expect((lastUpstreamBody().messages as Json[]).slice(1)).toEqual([
        { role: 'assistant', content: [{ type: 'tool_use', id: call.id, name: 'lookup', input: toolArgs }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'the answer is 42' }] },
      ]);
    }
  });
});

describe.each(matrix)('the Anthropic client, messages, model $model, stream $stream', ({ model, stream }) => {
  it('a tool call, then its result: the answers, usage and cost are those of the native path', async () => {
    const customer = `tm-${model.length}-${String(stream)}`;
    await env.fund(customer, 1_000_000);
    const t1 = await messagesTurn(customer, model, stream, [{ role: 'user', content: `find it ${controls(true)}` }]);
    expect(t1.stop).toBe('tool_use');
    expect(t1.calls).toEqual([{ id: expect.any(String), name: 'lookup', args: toolArgs }]);
    expect(t1.usage).toEqual({ input: INPUT, output: OUTPUT, cacheRead: CACHE_READ, cacheWrite: cacheWriteOf(model) });
    expect(t1.cost).toBe(costOf(model));

    const sent = lastUpstreamBody();
    expect(sent.model).toBe(upstreamModelOf(model));
    if (model === OPENAI_MODEL) {
      // A native chat body: function tools, the hold's limit, and usage asked for when streaming.
      expect(sent).toMatchObject({ max_completion_tokens: 1000, tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }] });
      if (stream) expect(sent.stream_options).toEqual({ include_usage: true });
    }

    const call = t1.calls[0]!;
    const t2 = await messagesTurn(customer, model, stream, [
      { role: 'user', content: `find it ${mockDirective({ input_tokens: INPUT, output_tokens: OUTPUT, cache_read_tokens: CACHE_READ, cache_write_tokens: 3 })}` },
      { role: 'assistant', content: [{ type: 'tool_use', id: call.id, name: 'lookup', input: call.args }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'the answer is 42' }] },
    ]);
    expect(t2.stop).toBe('end_turn');
    expect(t2.text).toBe(mockOutputText(OUTPUT));
    expect(t2.cost).toBe(costOf(model));
    if (model === OPENAI_MODEL) {
      expect((lastUpstreamBody().messages as Json[]).slice(1)).toEqual([
        { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: 'lookup', arguments: JSON.stringify(toolArgs) } }] },
        { role: 'tool', tool_call_id: call.id, content: 'the answer is 42' },
      ]);
    }
  });
});

describe('streams: trailers and inline billing on a translated stream', () => {
  it('chat client, Anthropic model: the trailers and the inline figures carry the native cost; no usage chunk unless asked', async () => {
    await env.fund('ts1', 1_000_000);
    const body = { model: ANTHROPIC_MODEL, stream: true, messages: [{ role: 'user', content: `hi ${controls(false)}` }] };
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
    const body = { model: OPENAI_MODEL, max_tokens: 100, stream: true, messages: [{ role: 'user', content: `hi ${controls(false)}` }] };
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
