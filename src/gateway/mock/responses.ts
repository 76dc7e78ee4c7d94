/**
 * The OpenAI Responses API wire format of the mock upstream (`POST /v1/responses`): the
 * texts it counts, the response object, and the named SSE events of a stream, each with
 * its `sequence_number`, as the `openai` package types them
 * (resources/responses/responses.d.ts). A function tool call is answered instead of text
 * when the request has a function tool and the `tool_call=1` control.
 */
import { countWords, mockOutputText, type MockControls } from './controls.js';
import { base62 } from './plan.js';

/** What the mock answers one Responses call with. */
export interface ResponsesPlan {
  model: string;
  input: number;
  cacheRead: number;
  /** Output tokens of the visible answer (text, or the tool call's arguments). */
  output: number;
  /** Reasoning tokens, counted in `output_tokens` besides the answer's. */
  reasoning: number;
  usage: boolean;
  /** `max_output_tokens` cut the answer: status `incomplete`. */
  truncated: boolean;
  /** The function tool to call, or null for a text answer. */
  tool: string | null;
  body: Record<string, unknown>;
}

function pushText(content: unknown, texts: string[]): void {
  if (typeof content === 'string') texts.push(content);
  else if (Array.isArray(content)) {
    for (const part of content) {
      const p = part as { type?: unknown; text?: unknown } | null;
      if (p && typeof p === 'object' && (p.type === 'input_text' || p.type === 'output_text' || p.type === 'text') && typeof p.text === 'string') texts.push(p.text);
    }
  }
}

/** The texts of `instructions` and `input` (a string, or the `content` of its items), and the number of input items. */
export function responsesTexts(body: unknown): { texts: string[]; items: number } {
  const texts: string[] = [];
  if (!body || typeof body !== 'object') return { texts, items: 0 };
  const b = body as { instructions?: unknown; input?: unknown };
  if (typeof b.instructions === 'string') texts.push(b.instructions);
  if (typeof b.input === 'string') {
    texts.push(b.input);
    return { texts, items: 1 };
  }
  if (!Array.isArray(b.input)) return { texts, items: 0 };
  for (const item of b.input) if (item && typeof item === 'object') pushText((item as { content?: unknown }).content, texts);
  return { texts, items: b.input.length };
}

/** Input tokens as the chat mock counts them: words of the texts + 3 per input item (a string input is one). */
export function responsesInputTokens(body: unknown): number {
  const { texts, items } = responsesTexts(body);
  let words = 0;
  for (const t of texts) words += countWords(t);
  return words + 3 * items;
}

/** Why the provider would refuse the body (400: message, param), or null. */
export function invalidResponses(b: Record<string, unknown>): [string, string] | null {
  const m = b.max_output_tokens;
  if (m !== undefined && m !== null && (typeof m !== 'number' || !Number.isInteger(m) || m < 16)) return ["Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16.", 'max_output_tokens'];
  if (b.input !== undefined && typeof b.input !== 'string' && !Array.isArray(b.input)) return ["Invalid type for 'input': expected one of a string or array of input items.", 'input'];
  return null;
}

/** The first function tool of the request, when the controls ask for a tool call. */
function toolOf(b: Record<string, unknown>, controls: MockControls): string | null {
  if (controls.tool_call !== 1 || !Array.isArray(b.tools)) return null;
  for (const t of b.tools) {
    const tool = t as { type?: unknown; name?: unknown } | null;
    if (tool && tool.type === 'function' && typeof tool.name === 'string') return tool.name;
  }
  return null;
}

export function responsesPlan(b: Record<string, unknown> & { model: string }, controls: MockControls, defaultOutput: number): ResponsesPlan {
  const max = typeof b.max_output_tokens === 'number' ? b.max_output_tokens : undefined;
  const reasoning = controls.reasoning_tokens ?? 0;
  const wanted = controls.output_tokens ?? defaultOutput;
  // Reasoning comes first and counts against the limit, as OpenAI's does.
  const output = max === undefined ? wanted : Math.max(0, Math.min(wanted, max - reasoning));
  return {
    model: b.model,
    input: controls.input_tokens ?? responsesInputTokens(b),
    cacheRead: controls.cache_read_tokens ?? 0,
    output,
    reasoning,
    usage: controls.no_usage !== 1,
    truncated: max !== undefined && wanted + reasoning > max,
    tool: toolOf(b, controls),
    body: b,
  };
}

function usageOf(p: ResponsesPlan) {
  const input = p.input + p.cacheRead;
  const output = p.output + p.reasoning;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: p.cacheRead },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: p.reasoning },
    total_tokens: input + output,
  };
}

/** The answer's one output item, as it is when done. */
function outputItem(p: ResponsesPlan, ids: { item: string; call: string }) {
  if (p.tool !== null) {
    return { id: ids.item, type: 'function_call', status: 'completed', arguments: toolArguments(p), call_id: ids.call, name: p.tool };
  }
  return { id: ids.item, type: 'message', status: p.truncated ? 'incomplete' : 'completed', content: [{ type: 'output_text', annotations: [], logprobs: [], text: mockOutputText(p.output) }], role: 'assistant' };
}

function toolArguments(p: ResponsesPlan): string {
  return JSON.stringify({ query: mockOutputText(p.output) });
}

function responseObject(p: ResponsesPlan, id: string, createdAt: number, status: 'in_progress' | 'completed' | 'incomplete', output: unknown[]) {
  const b = p.body;
  const done = status !== 'in_progress';
  return {
    id,
    object: 'response',
    created_at: createdAt,
    status,
    background: false,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: typeof b.instructions === 'string' ? b.instructions : null,
    max_output_tokens: typeof b.max_output_tokens === 'number' ? b.max_output_tokens : null,
    model: p.model,
    output,
    parallel_tool_calls: true,
    previous_response_id: typeof b.previous_response_id === 'string' ? b.previous_response_id : null,
    reasoning: { effort: null, summary: null },
    service_tier: 'default',
    store: b.store !== false,
    temperature: 1,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: Array.isArray(b.tools) ? b.tools : [],
    top_p: 1,
    truncation: 'disabled',
    usage: done && p.usage ? usageOf(p) : null,
    user: null,
    metadata: {},
  };
}

function newIds(p: ResponsesPlan) {
  return { response: `resp_${base62(48)}`, item: p.tool === null ? `msg_${base62(48)}` : `fc_${base62(48)}`, call: `call_${base62(24)}` };
}

const finalStatus = (p: ResponsesPlan) => (p.truncated ? 'incomplete' : 'completed');

export function responsesJson(p: ResponsesPlan): string {
  const ids = newIds(p);
  return JSON.stringify(responseObject(p, ids.response, Math.floor(Date.now() / 1000), finalStatus(p), [outputItem(p, ids)]));
}

/** The SSE events of a streamed answer, and how many come before the first delta. */
export function responsesEvents(p: ResponsesPlan): { events: string[]; preamble: number } {
  const ids = newIds(p);
  const createdAt = Math.floor(Date.now() / 1000);
  const events: string[] = [];
  const emit = (type: string, fields: Record<string, unknown>) => {
    events.push(`event: ${type}\ndata: ${JSON.stringify({ type, ...fields, sequence_number: events.length })}\n\n`);
  };
  const item = outputItem(p, ids);
  const at = { item_id: ids.item, output_index: 0 };
  emit('response.created', { response: responseObject(p, ids.response, createdAt, 'in_progress', []) });
  emit('response.in_progress', { response: responseObject(p, ids.response, createdAt, 'in_progress', []) });
  if (item.type === 'function_call') {
    emit('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', arguments: '' } });
    const args = toolArguments(p);
    // The arguments in pieces of a few characters, as a model writes them.
    for (let i = 0; i < args.length; i += 8) emit('response.function_call_arguments.delta', { ...at, delta: args.slice(i, i + 8) });
    emit('response.function_call_arguments.done', { ...at, arguments: args });
  } else {
    emit('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', content: [] } });
    emit('response.content_part.added', { ...at, content_index: 0, part: { type: 'output_text', annotations: [], logprobs: [], text: '' } });
    for (let i = 1; i <= p.output; i++) emit('response.output_text.delta', { ...at, content_index: 0, delta: `${i === 1 ? '' : ' '}tok${i}`, logprobs: [] });
    const text = mockOutputText(p.output);
    emit('response.output_text.done', { ...at, content_index: 0, text, logprobs: [] });
    emit('response.content_part.done', { ...at, content_index: 0, part: { type: 'output_text', annotations: [], logprobs: [], text } });
  }
  emit('response.output_item.done', { output_index: 0, item });
  const status = finalStatus(p);
  emit(`response.${status}`, { response: responseObject(p, ids.response, createdAt, status, [item]) });
  return { events, preamble: 4 };
}
