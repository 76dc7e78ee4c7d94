/**
 * The translation matrix (issue 22; docs/API.md, "Any model through any format"): each
 * client endpoint, with its official SDK (`openai` chat.completions and responses,
 * `@anthropic-ai/sdk` messages), against a model of each wire format (chat_completions,
 * responses, messages), whole and streamed. Each cell is a tool call the SDK parses, then
 * its result answered with text; the stop reason and usage are the caller's format's; the
 * cost (header, or the ledger when streamed) is the native cell's for the same upstream
 * usage, computed from the prices; the upstream got a body of its own format. Then, per
 * client format, an upstream error in the caller's envelope, unbilled; a stream an
 * incremental hold ends on a small wallet, ended cleanly for the SDK; and the trailers
 * and inline figures of a translated Responses stream.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';
import { ANTHROPIC_MODEL, expectedCost, MAX_OUTPUT_TOKENS, OPENAI_MODEL, rawPost, sseData, startGatewayEnv, type GatewayEnv } from './support.js';
import { clientTurn, type ClientFormat, type TurnInput } from './translate-clients.js';

let env: GatewayEnv;
const RESPONSES_MODEL = 'gpt-responses-matrix';
beforeAll(async () => {
  env = await startGatewayEnv();
  await env.putModel(RESPONSES_MODEL, { provider: 'openai', wire_format: 'responses' });
});
afterAll(async () => {
  await env?.close();
});

type Json = Record<string, unknown>;
type ModelFormat = 'chat_completions' | 'responses' | 'messages';
const MODEL: Record<ModelFormat, string> = { chat_completions: OPENAI_MODEL, responses: RESPONSES_MODEL, messages: ANTHROPIC_MODEL };
const UPSTREAM_PATH: Record<ModelFormat, string> = { chat_completions: '/v1/chat/completions', responses: '/v1/responses', messages: '/v1/messages' };
const NATIVE: Record<ClientFormat, ModelFormat> = { chat: 'chat_completions', responses: 'responses', messages: 'messages' };

const INPUT = 41;
const OUTPUT = 7;
const CACHE_READ = 5;
const CACHE_WRITE = 3;
/** The mock reports cache writes in Anthropic answers only. */
const cacheWriteOf = (format: ModelFormat) => (format === 'messages' ? CACHE_WRITE : 0);
const costOf = (format: ModelFormat) => expectedCost({ input: INPUT, output: OUTPUT, cacheRead: CACHE_READ, cacheWrite: cacheWriteOf(format) });
const controls = (tool: boolean) => mockDirective({ input_tokens: INPUT, output_tokens: OUTPUT, cache_read_tokens: CACHE_READ, cache_write_tokens: CACHE_WRITE, ...(tool ? { tool_call: 1 } : {}) });
const toolArgs = { query: mockOutputText(OUTPUT) };
const RESULT = 'the answer is 42';

/** The stop reasons each client format gives a tool call and an answer that ended. */
const STOP: Record<ClientFormat, { tool: string; end: string }> = {
  chat: { tool: 'tool_calls', end: 'stop' },
  responses: { tool: 'completed', end: 'completed' },
  messages: { tool: 'tool_use', end: 'end_turn' },
};

const lastUpstream = () => env.mock.requests.at(-1)!;

async function ledgerCost(customer: string, txid: string): Promise<number> {
  const entry = (await env.ledger(customer, 'GATEWAY')).find((e) => e.transaction_id === txid);
  expect(entry, 'a GATEWAY ledger entry').toBeDefined();
  return entry!.amount;
}

/** The first turn's body as the upstream's own format: system prompt, tools, the output limit. */
function expectFirstBody(format: ModelFormat, body: Json, client: ClientFormat, stream: boolean): void {
  const native = NATIVE[client] === format;
  // The output limit: the messages client's own max_tokens, else the hold's (the model's maximum).
  const limit = client === 'messages' ? 1000 : MAX_OUTPUT_TOKENS;
  switch (format) {
    case 'chat_completions':
      // A stream's usage is asked for, whatever the client asked: billing reads it.
      if (stream) expect(body.stream_options).toEqual({ include_usage: true });
      expect(body.max_completion_tokens ?? body.max_tokens).toBe(limit);
      expect(body.messages).toEqual([{ role: 'system', content: 'be brief' }, { role: 'user', content: expect.stringContaining('find it') }]);
      expect(body.tools).toEqual([expect.objectContaining({ type: 'function', function: expect.objectContaining({ name: 'lookup', parameters: expect.objectContaining({ type: 'object' }) }) })]);
      break;
    case 'responses':
      // The client's own `instructions`, natively; translated, the hub's system message as a system input item.
      if (native) expect(body).toMatchObject({ instructions: 'be brief', input: [{ role: 'user' }] });
      else expect(body.input).toEqual([{ role: 'system', content: 'be brief' }, expect.objectContaining({ role: 'user' })]);
      expect(body.tools).toEqual([expect.objectContaining({ type: 'function', name: 'lookup', parameters: expect.objectContaining({ type: 'object' }) })]);
      expect(body.max_output_tokens).toBe(limit);
      break;
    case 'messages':
      expect(body.system).toBe('be brief');
      expect(body.stream_options).toBeUndefined();
      expect(body.tools).toEqual([expect.objectContaining({ name: 'lookup', input_schema: expect.objectContaining({ type: 'object' }) })]);
      expect(body.max_tokens).toBe(limit);
      break;
  }
}

/** The second turn's tool call and result as the upstream's own format. */
function expectResultBody(format: ModelFormat, body: Json, callId: string): void {
  switch (format) {
    case 'chat_completions':
      expect(body.messages).toContainEqual({ role: 'assistant', content: null, tool_calls: [{ id: callId, type: 'function', function: { name: 'lookup', arguments: JSON.stringify(toolArgs) } }] });
      expect(body.messages).toContainEqual({ role: 'tool', tool_call_id: callId, content: RESULT });
      break;
    case 'responses':
      expect(body.input).toContainEqual(expect.objectContaining({ type: 'function_call', call_id: callId, name: 'lookup', arguments: JSON.stringify(toolArgs) }));
      expect(body.input).toContainEqual(expect.objectContaining({ type: 'function_call_output', call_id: callId, output: RESULT }));
      break;
    case 'messages':
      expect(body.messages).toContainEqual({ role: 'assistant', content: [{ type: 'tool_use', id: callId, name: 'lookup', input: toolArgs }] });
      expect(body.messages).toContainEqual({ role: 'user', content: [{ type: 'tool_result', tool_use_id: callId, content: RESULT }] });
      break;
  }
}

/** Each cell's cost, by model format and cell name, for the comparison with the native cell. */
const costs = new Map<ModelFormat, Map<string, number>>();

const clients: ClientFormat[] = ['chat', 'responses', 'messages'];
const formats: ModelFormat[] = ['chat_completions', 'responses', 'messages'];
const matrix = clients.flatMap((client) => formats.flatMap((format) => [false, true].map((stream) => ({ client, format, stream, native: NATIVE[client] === format }))));

describe.each(matrix)('$client client x $format model, stream $stream (native $native)', ({ client, format, stream }) => {
  it('a tool call, then its result: the SDK parses both; stop reasons, usage and cost are right; the upstream got its own format', async () => {
    const customer = `mx-${client}-${format}-${String(stream)}`;
    await env.fund(customer, 1_000_000);
    const input: TurnInput = { env, customer, model: MODEL[format], stream };

    const t1 = await clientTurn(client, { ...input, turn: { kind: 'ask', system: 'be brief', text: `find it ${controls(true)}` } });
    expect(t1.stop).toBe(STOP[client].tool);
    expect(t1.calls).toEqual([{ id: expect.any(String), name: 'lookup', args: toolArgs }]);
    expect(t1.usage).toEqual({ input: INPUT, output: OUTPUT, cacheRead: CACHE_READ, cacheWrite: cacheWriteOf(format) });
    expect(t1.cost).toBe(costOf(format));
    expect(await ledgerCost(customer, t1.txid)).toBe(costOf(format));
    expect(lastUpstream().path).toBe(UPSTREAM_PATH[format]);
    expectFirstBody(format, lastUpstream().body as Json, client, stream);

    const call = t1.calls[0]!;
    const t2 = await clientTurn(client, { ...input, turn: { kind: 'result', text: `find it ${controls(false)}`, call: { id: call.id, name: 'lookup', args: toolArgs }, result: RESULT } });
    expect(t2.stop).toBe(STOP[client].end);
    expect(t2.calls).toEqual([]);
    expect(t2.text).toBe(mockOutputText(OUTPUT));
    expect(t2.cost).toBe(costOf(format));
    expect(await ledgerCost(customer, t2.txid)).toBe(costOf(format));
    expectResultBody(format, lastUpstream().body as Json, call.id);

    const byCell = costs.get(format) ?? new Map<string, number>();
    byCell.set(`${client}/${String(stream)}`, t1.cost + t2.cost);
    costs.set(format, byCell);
  });
});

describe('every cell of a model costs what its native cell costs', () => {
  it.each(formats)('%s', (format) => {
    const byCell = costs.get(format)!;
    expect(byCell.size).toBe(clients.length * 2);
    const native = byCell.get(`${clients.find((c) => NATIVE[c] === format)!}/false`);
    expect(native).toBe(2 * costOf(format));
    for (const cost of byCell.values()) expect(cost).toBe(native);
  });
});

describe('an upstream error, in the caller envelope and status, unbilled', () => {
  it('chat client, Responses model: a 429 is the openai RateLimitError', async () => {
    await env.fund('mxe-chat', 1_000_000);
    const err = await env
      .openai({ customer: 'mxe-chat' })
      .chat.completions.create({ model: RESPONSES_MODEL, messages: [{ role: 'user', content: `hi ${mockDirective({ fail: 429 })}` }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    // The Responses API's error envelope is chat's: it passes as the upstream wrote it.
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ code: 'rate_limit_exceeded', message: expect.stringContaining('Rate limit') });
    expect(await env.ledger('mxe-chat', 'GATEWAY')).toEqual([]);
    expect(await env.balance('mxe-chat')).toMatchObject({ used: 0, frozen: 0 });
  });

  it('Responses client, messages model: a 500 is the openai InternalServerError, in the Responses envelope', async () => {
    await env.fund('mxe-resp', 1_000_000);
    const err = await env
      .openai({ customer: 'mxe-resp' })
      .responses.create({ model: ANTHROPIC_MODEL, input: `hi ${mockDirective({ fail: 500 })}` })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ message: expect.any(String) });
    expect(await env.ledger('mxe-resp', 'GATEWAY')).toEqual([]);
    expect(await env.balance('mxe-resp')).toMatchObject({ used: 0, frozen: 0 });
  });

  it('messages client, Responses model: a 429 is the Anthropic RateLimitError', async () => {
    await env.fund('mxe-msg', 1_000_000);
    const err = await env
      .anthropic({ customer: 'mxe-msg' })
      .messages.create({ model: RESPONSES_MODEL, max_tokens: 100, messages: [{ role: 'user', content: `hi ${mockDirective({ fail: 429 })}` }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    expect((err as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
    expect(await env.ledger('mxe-msg', 'GATEWAY')).toEqual([]);
    expect(await env.balance('mxe-msg')).toMatchObject({ used: 0, frozen: 0 });
  });
});

describe('an incremental hold the wallet ends, on a translated stream', () => {
  const incremental = { 'X-Service-Hold': 'incremental' };
  /** More output than the wallet pays for: the mock's 20 000 tokens cost 50 000 credits. */
  const long = `write at length ${mockDirective({ output_tokens: 20_000 })}`;
  const DEPOSIT = 8_000;

  async function expectBilledWithinHold(customer: string, txid: string): Promise<void> {
    await env.svc.drained();
    const r = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect(r.status).toBe(200);
    const receipt = r.body as { cost_credits: number; reserved_credits: number };
    expect(receipt.cost_credits).toBeGreaterThan(0);
    expect(receipt.cost_credits).toBeLessThanOrEqual(receipt.reserved_credits);
    expect(await ledgerCost(customer, txid)).toBe(receipt.cost_credits);
    const balance = await env.balance(customer);
    expect(balance).toMatchObject({ used: receipt.cost_credits, frozen: 0 });
    expect(balance.available).toBeGreaterThanOrEqual(0);
  }

  it('chat client, messages model: chat.completions.stream ends with finish_reason length and its usage', async () => {
    await env.fund('mxi-chat', DEPOSIT);
    const stream = env
      .openai({ customer: 'mxi-chat', headers: incremental })
      .chat.completions.stream({ model: ANTHROPIC_MODEL, max_tokens: 30_000, messages: [{ role: 'user', content: long }], stream_options: { include_usage: true } });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0]!.finish_reason).toBe('length');
    const text = final.choices[0]!.message.content!;
    expect(text.length).toBeGreaterThan(0);
    expect(mockOutputText(20_000).startsWith(text)).toBe(true);
    expect(final.usage!.completion_tokens).toBeGreaterThan(0);
    const txid = (await env.ledger('mxi-chat', 'GATEWAY'))[0]!.transaction_id;
    await expectBilledWithinHold('mxi-chat', txid);
  });

  it('Responses client, chat model: responses.stream ends with response.incomplete (max_output_tokens) and its usage', async () => {
    await env.fund('mxi-resp', DEPOSIT);
    const stream = env
      .openai({ customer: 'mxi-resp', headers: incremental })
      .responses.stream({ model: OPENAI_MODEL, max_output_tokens: 30_000, input: long });
    const types: string[] = [];
    stream.on('event', (e) => types.push(e.type));
    const final = await stream.finalResponse();
    expect(final.status).toBe('incomplete');
    expect(final.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(final.output_text.length).toBeGreaterThan(0);
    expect(mockOutputText(20_000).startsWith(final.output_text)).toBe(true);
    expect(final.usage!.output_tokens).toBeGreaterThan(0);
    expect(types.at(-1)).toBe('response.incomplete');
    expect(types).toEqual(expect.arrayContaining(['response.output_text.done', 'response.content_part.done', 'response.output_item.done']));
    const txid = (await env.ledger('mxi-resp', 'GATEWAY'))[0]!.transaction_id;
    await expectBilledWithinHold('mxi-resp', txid);
  });

  it('Responses client, Responses model (native, the ResponsesCloser): responses.stream ends with response.incomplete', async () => {
    await env.fund('mxi-native', DEPOSIT);
    const stream = env
      .openai({ customer: 'mxi-native', headers: incremental })
      .responses.stream({ model: RESPONSES_MODEL, max_output_tokens: 30_000, input: long });
    const types: string[] = [];
    stream.on('event', (e) => types.push(e.type));
    const final = await stream.finalResponse();
    expect(final.status).toBe('incomplete');
    expect(final.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(final.output).toEqual([expect.objectContaining({ type: 'message', status: 'incomplete' })]);
    expect(mockOutputText(20_000).startsWith(final.output_text)).toBe(true);
    expect(final.output_text.length).toBeGreaterThan(0);
    expect(final.usage!.output_tokens).toBeGreaterThan(0);
    expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    const txid = (await env.ledger('mxi-native', 'GATEWAY'))[0]!.transaction_id;
    await expectBilledWithinHold('mxi-native', txid);
  });

  it('messages client, Responses model: messages.stream ends with stop_reason max_tokens', async () => {
    await env.fund('mxi-msg', DEPOSIT);
    const message = await env
      .anthropic({ customer: 'mxi-msg', headers: incremental })
      .messages.stream({ model: RESPONSES_MODEL, max_tokens: 30_000, messages: [{ role: 'user', content: long }] })
      .finalMessage();
    expect(message.stop_reason).toBe('max_tokens');
    const block = message.content[0]!;
    expect(block.type).toBe('text');
    expect(mockOutputText(20_000).startsWith(block.type === 'text' ? block.text : '')).toBe(true);
    const txid = (await env.ledger('mxi-msg', 'GATEWAY'))[0]!.transaction_id;
    await expectBilledWithinHold('mxi-msg', txid);
  });
});

describe('a translated Responses stream: trailers and inline billing', () => {
  it('Responses client, messages model: response.completed carries the inline figures; the trailers the native cost', async () => {
    await env.fund('mxs', 1_000_000);
    const body = { model: ANTHROPIC_MODEL, stream: true, input: `hi ${controls(false)}` };
    const res = await rawPost(env.svc.url, '/v1/responses', { key: env.p.projectKey, headers: { 'x-service-customer': 'mxs', 'x-service-stream-billing': 'inline' }, body });
    expect(res.status).toBe(200);
    expect(res.text).toMatch(/^event: response\.created\n/);
    const events = sseData(res.text) as Json[];
    const last = events.at(-1)!;
    expect(last.type).toBe('response.completed');
    expect(last.service_billing).toMatchObject({ cost_credits: costOf('messages'), usage_estimated: false });
    expect((last.response as Json).usage).toMatchObject({ input_tokens: INPUT + CACHE_READ + CACHE_WRITE, input_tokens_details: { cached_tokens: CACHE_READ }, output_tokens: OUTPUT });
    expect(res.trailers['x-service-cost-credits']).toBe(String(costOf('messages')));
  });

  it('chat client, Responses model: the stream ends with [DONE] after the finish chunk, the trailers the native cost', async () => {
    await env.fund('mxs2', 1_000_000);
    const body = { model: RESPONSES_MODEL, stream: true, messages: [{ role: 'user', content: `hi ${controls(false)}` }] };
    const res = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers: { 'x-service-customer': 'mxs2' }, body });
    const chunks = sseData(res.text);
    expect(chunks.at(-1)).toBe('[DONE]');
    expect((chunks.at(-2) as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason).toBe('stop');
    expect(res.trailers['x-service-cost-credits']).toBe(String(costOf('responses')));
  });
});
