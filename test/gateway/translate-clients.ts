/**
 * One turn of a conversation through each client endpoint with its official SDK, whole or
 * streamed, read back the same way for every format (translate-matrix.test.ts): the text,
 * the tool calls the SDK parsed, the stop reason in the client's format, the usage by
 * billing kind, and the call's cost (the cost header of a whole answer, the GATEWAY
 * ledger entry of a stream, whose header was sent before its cost was known).
 */
import type Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import { expect } from 'vitest';
import type { GatewayEnv } from './support.js';

export type ClientFormat = 'chat' | 'responses' | 'messages';

/** The first turn asks (with a system prompt); the second sends the tool call's result. */
export type Turn =
  | { kind: 'ask'; system: string; text: string }
  | { kind: 'result'; text: string; call: { id: string; name: string; args: unknown }; result: string };

export interface TurnInput {
  env: GatewayEnv;
  customer: string;
  model: string;
  stream: boolean;
}

export interface TurnResult {
  text: string;
  calls: { id: string; name: string; args: unknown }[];
  stop: string | null;
  usage: { input: number; output: number; cacheRead: number; cacheWrite: number };
  txid: string;
  cost: number;
}

export function clientTurn(client: ClientFormat, input: TurnInput & { turn: Turn }): Promise<TurnResult> {
  switch (client) {
    case 'chat':
      return chatTurn(input);
    case 'responses':
      return responsesTurn(input);
    case 'messages':
      return messagesTurn(input);
  }
}

async function costOf(input: TurnInput, response: Response): Promise<{ txid: string; cost: number }> {
  const txid = response.headers.get('x-service-transaction-id')!;
  if (!input.stream) return { txid, cost: Number(response.headers.get('x-service-cost-credits')) };
  const entry = (await input.env.ledger(input.customer, 'GATEWAY')).find((e) => e.transaction_id === txid);
  expect(entry, 'a GATEWAY ledger entry').toBeDefined();
  return { txid, cost: entry!.amount };
}

const parameters = { type: 'object', properties: { query: { type: 'string' } } };

// ---------------------------------------------------------------- openai chat.completions

const chatTools: OpenAI.ChatCompletionTool[] = [{ type: 'function', function: { name: 'lookup', description: 'looks up', parameters } }];

function chatMessages(turn: Turn): OpenAI.ChatCompletionMessageParam[] {
  if (turn.kind === 'ask') return [{ role: 'system', content: turn.system }, { role: 'user', content: turn.text }];
  return [
    { role: 'user', content: turn.text },
    { role: 'assistant', content: null, tool_calls: [{ id: turn.call.id, type: 'function', function: { name: turn.call.name, arguments: JSON.stringify(turn.call.args) } }] },
    { role: 'tool', tool_call_id: turn.call.id, content: turn.result },
  ];
}

/** Chat's usage by billing kind: prompt_tokens counts the cached reads and writes. */
function chatUsage(u: OpenAI.CompletionUsage & { cache_write_tokens?: number }): TurnResult['usage'] {
  const cacheRead = u.prompt_tokens_details?.cached_tokens ?? 0;
  const cacheWrite = u.cache_write_tokens ?? 0;
  return { input: u.prompt_tokens - cacheRead - cacheWrite, output: u.completion_tokens, cacheRead, cacheWrite };
}

async function chatTurn(input: TurnInput & { turn: Turn }): Promise<TurnResult> {
  const client = input.env.openai({ customer: input.customer });
  const params = { model: input.model, messages: chatMessages(input.turn), tools: chatTools };
  if (!input.stream) {
    const { data, response } = await client.chat.completions.create(params).withResponse();
    const choice = data.choices[0]!;
    return {
      text: choice.message.content ?? '',
      calls: (choice.message.tool_calls ?? []).map((c) => (c.type === 'function' ? { id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) as unknown } : { id: c.id, name: '', args: null })),
      stop: choice.finish_reason,
      usage: chatUsage(data.usage!),
      ...(await costOf(input, response)),
    };
  }
  const { data, response } = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }).withResponse();
  let text = '';
  let stop: string | null = null;
  let usage: TurnResult['usage'] | null = null;
  const calls: { id: string; name: string; args: string }[] = [];
  for await (const chunk of data) {
    const choice = chunk.choices[0];
    if (choice?.delta.content) text += choice.delta.content;
    for (const c of choice?.delta.tool_calls ?? []) {
      if (c.id) calls[c.index] = { id: c.id, name: c.function?.name ?? '', args: '' };
      calls[c.index]!.args += c.function?.arguments ?? '';
    }
    if (choice?.finish_reason) stop = choice.finish_reason;
    if (chunk.usage) usage = chatUsage(chunk.usage);
  }
  return { text, calls: calls.map((c) => ({ ...c, args: JSON.parse(c.args) as unknown })), stop, usage: usage!, ...(await costOf(input, response)) };
}

// ---------------------------------------------------------------- openai responses

const responsesTools: OpenAI.Responses.FunctionTool[] = [{ type: 'function', name: 'lookup', description: 'looks up', parameters, strict: false }];

function responsesInput(turn: Turn): { instructions?: string; input: OpenAI.Responses.ResponseInput } {
  if (turn.kind === 'ask') return { instructions: turn.system, input: [{ role: 'user', content: turn.text }] };
  return {
    input: [
      { role: 'user', content: turn.text },
      { type: 'function_call', call_id: turn.call.id, name: turn.call.name, arguments: JSON.stringify(turn.call.args) },
      { type: 'function_call_output', call_id: turn.call.id, output: turn.result },
    ],
  };
}

/**
 * A Response read back: `status` as the stop reason (`completed`, or `incomplete` with
 * its reason); input_tokens counts the cached reads and the cache writes (the
 * gateway's `input_tokens_details.cache_write_tokens`, docs/API.md).
 */
function fromResponse(r: OpenAI.Responses.Response): Omit<TurnResult, 'txid' | 'cost'> {
  const details = (r.usage?.input_tokens_details ?? {}) as { cached_tokens?: number; cache_write_tokens?: number };
  const cacheRead = details.cached_tokens ?? 0;
  const cacheWrite = details.cache_write_tokens ?? 0;
  return {
    // Not `output_text`: the SDK adds it to a whole answer only, not to a stream's response.
    text: r.output.flatMap((item) => (item.type === 'message' ? item.content.map((c) => (c.type === 'output_text' ? c.text : '')) : [])).join(''),
    calls: r.output.flatMap((item) => (item.type === 'function_call' ? [{ id: item.call_id, name: item.name, args: JSON.parse(item.arguments) as unknown }] : [])),
    stop: r.status === 'incomplete' ? `incomplete:${r.incomplete_details?.reason ?? ''}` : (r.status ?? null),
    usage: { input: r.usage!.input_tokens - cacheRead - cacheWrite, output: r.usage!.output_tokens, cacheRead, cacheWrite },
  };
}

async function responsesTurn(input: TurnInput & { turn: Turn }): Promise<TurnResult> {
  const client = input.env.openai({ customer: input.customer });
  const params = { model: input.model, tools: responsesTools, ...responsesInput(input.turn) };
  if (!input.stream) {
    const { data, response } = await client.responses.create(params).withResponse();
    return { ...fromResponse(data), ...(await costOf(input, response)) };
  }
  const { data, response } = await client.responses.create({ ...params, stream: true }).withResponse();
  let final: OpenAI.Responses.Response | null = null;
  let streamed = '';
  for await (const event of data) {
    if (event.type === 'response.output_text.delta') streamed += event.delta;
    if (event.type === 'response.completed' || event.type === 'response.incomplete') final = event.response;
  }
  expect(final, 'the stream ends with its response').not.toBeNull();
  const result = fromResponse(final!);
  expect(streamed).toBe(result.text);
  return { ...result, ...(await costOf(input, response)) };
}

// ---------------------------------------------------------------- @anthropic-ai/sdk messages

const messagesTools: Anthropic.Tool[] = [{ name: 'lookup', description: 'looks up', input_schema: parameters as Anthropic.Tool.InputSchema }];

function anthropicMessages(turn: Turn): { system?: string; messages: Anthropic.MessageParam[] } {
  if (turn.kind === 'ask') return { system: turn.system, messages: [{ role: 'user', content: turn.text }] };
  return {
    messages: [
      { role: 'user', content: turn.text },
      { role: 'assistant', content: [{ type: 'tool_use', id: turn.call.id, name: turn.call.name, input: turn.call.args }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: turn.call.id, content: turn.result }] },
    ],
  };
}

async function messagesTurn(input: TurnInput & { turn: Turn }): Promise<TurnResult> {
  const client = input.env.anthropic({ customer: input.customer });
  const params = { model: input.model, max_tokens: 1000, tools: messagesTools, ...anthropicMessages(input.turn) };
  let message: Anthropic.Message;
  let response: Response;
  if (input.stream) {
    const s = client.messages.stream(params);
    response = (await s.withResponse()).response;
    message = await s.finalMessage();
  } else {
    ({ data: message, response } = await client.messages.create(params).withResponse());
  }
  const u = message.usage;
  return {
    text: message.content.map((b) => (b.type === 'text' ? b.text : '')).join(''),
    calls: message.content.flatMap((b) => (b.type === 'tool_use' ? [{ id: b.id, name: b.name, args: b.input }] : [])),
    stop: message.stop_reason,
    usage: { input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens ?? 0, cacheWrite: u.cache_creation_input_tokens ?? 0 },
    ...(await costOf(input, response)),
  };
}
