/**
 * Anthropic whole answers, usage, stop reasons and errors to and from the hub (chat
 * completions): the answer half of the Anthropic Translator (./anthropic.ts).
 */
import { isObject, type Json } from '../wire/format.js';
import type { HubError } from './hub.js';
import { clientId } from './ids.js';
import { anthropicTypeOfStatus } from '../../errors/anthropic.js';

const finishOfStop: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};
const stopOfFinish: Record<string, string> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use', function_call: 'tool_use', content_filter: 'refusal' };

export function finishReasonOf(stopReason: unknown): string | null {
  return typeof stopReason === 'string' ? (finishOfStop[stopReason] ?? 'stop') : null;
}

export function stopReasonOf(finishReason: unknown): string | null {
  return typeof finishReason === 'string' ? (stopOfFinish[finishReason] ?? 'end_turn') : null;
}

const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

/**
 * Anthropic usage as chat usage. Anthropic's `input_tokens` excludes cache reads and
 * writes; chat's `prompt_tokens` counts every input token, so it is their sum, with the
 * reads in `prompt_tokens_details.cached_tokens` and the writes in `cache_write_tokens`.
 */
export function usageToHub(u: Json): Json {
  const input = count(u.input_tokens);
  const cacheRead = count(u.cache_read_input_tokens);
  const cacheWrite = count(u.cache_creation_input_tokens);
  const output = count(u.output_tokens);
  const prompt = input + cacheRead + cacheWrite;
  return {
    prompt_tokens: prompt,
    completion_tokens: output,
    total_tokens: prompt + output,
    prompt_tokens_details: { cached_tokens: cacheRead, cache_write_tokens: cacheWrite },
    cache_write_tokens: cacheWrite,
  };
}

/** Chat usage as Anthropic usage: `input_tokens` is what remains of `prompt_tokens` once both cache kinds are taken out. */
export function usageFromHub(u: Json): Json {
  const details = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const cacheRead = count(details.cached_tokens);
  const cacheWrite = count(u.cache_write_tokens ?? details.cache_write_tokens);
  return {
    input_tokens: Math.max(0, count(u.prompt_tokens) - cacheRead - cacheWrite),
    output_tokens: count(u.completion_tokens),
    cache_read_input_tokens: cacheRead,
    cache_creation_input_tokens: cacheWrite,
  };
}

/** An Anthropic message as a chat completion (`created` 0: translation reads no clock; the gateway sets it). */
export function answerToHub(message: Json): Json {
  let text: string | null = null;
  const calls: Json[] = [];
  for (const block of Array.isArray(message.content) ? (message.content as unknown[]) : []) {
    if (!isObject(block)) continue;
    if (block.type === 'text' && typeof block.text === 'string') text = (text ?? '') + block.text;
    else if (block.type === 'tool_use') calls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) } });
  }
  const msg: Json = { role: 'assistant', content: text, refusal: null };
  if (calls.length > 0) msg.tool_calls = calls;
  const answer: Json = {
    id: message.id,
    object: 'chat.completion',
    created: 0,
    model: message.model,
    choices: [{ index: 0, message: msg, logprobs: null, finish_reason: finishReasonOf(message.stop_reason) ?? 'stop' }],
  };
  if (isObject(message.usage)) answer.usage = usageToHub(message.usage);
  return answer;
}

function parsedArguments(args: unknown): unknown {
  if (typeof args !== 'string' || args === '') return {};
  try {
    return JSON.parse(args);
  } catch {
    // A model's malformed arguments, kept readable rather than lost.
    return { _raw_arguments: args };
  }
}

/** A chat completion (its first choice: `n` > 1 is refused on the way up) as an Anthropic message. */
export function answerFromHub(answer: Json): Json {
  const choice = Array.isArray(answer.choices) && isObject(answer.choices[0]) ? answer.choices[0] : {};
  const msg = isObject(choice.message) ? choice.message : {};
  const content: Json[] = [];
  if (typeof msg.content === 'string' && msg.content !== '') content.push({ type: 'text', text: msg.content });
  for (const c of Array.isArray(msg.tool_calls) ? (msg.tool_calls as unknown[]) : []) {
    if (!isObject(c) || !isObject(c.function)) continue;
    content.push({ type: 'tool_use', id: c.id, name: c.function.name, input: parsedArguments(c.function.arguments) });
  }
  return {
    id: clientId('msg_', answer.id),
    type: 'message',
    role: 'assistant',
    model: answer.model,
    content,
    stop_reason: stopReasonOf(choice.finish_reason) ?? 'end_turn',
    stop_sequence: null,
    usage: isObject(answer.usage) ? usageFromHub(answer.usage) : { input_tokens: 0, output_tokens: 0 },
  };
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/** Anthropic error types as OpenAI's (`error.type`). */
const openaiTypeOf: Record<string, string> = {
  invalid_request_error: 'invalid_request_error',
  authentication_error: 'authentication_error',
  permission_error: 'permission_error',
  not_found_error: 'not_found_error',
  rate_limit_error: 'rate_limit_error',
  billing_error: 'insufficient_quota',
  request_too_large: 'invalid_request_error',
  timeout_error: 'timeout_error',
  api_error: 'server_error',
  overloaded_error: 'server_error',
};

export function errorToHub(status: number, body: Json | null): HubError {
  const error = body !== null && isObject(body.error) ? body.error : {};
  const type = typeof error.type === 'string' ? error.type : anthropicTypeOfStatus(status);
  return { status, message: typeof error.message === 'string' ? error.message : `upstream error (HTTP ${status})`, type: openaiTypeOf[type] ?? 'api_error' };
}

export function errorFromHub(error: HubError): { status: number; body: Json } {
  return { status: error.status, body: { type: 'error', error: { type: anthropicTypeOfStatus(error.status), message: error.message } } };
}
