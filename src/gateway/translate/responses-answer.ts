/**
 * Whole answers and errors between the OpenAI Responses API and the hub (chat
 * completions), both ways (docs/API.md, "Responses API <-> chat completions"). An answer
 * cannot be refused, so what one side cannot carry is dropped here, each case named in
 * the docs: a Response's reasoning items (chat has no place for them). Cache writes do
 * map: the hub's `usage.cache_write_tokens` is Responses' `input_tokens_details.cache_write_tokens`
 * (both counted inside the input tokens, as the `openai` package types them).
 */
import type { Response, ResponseFunctionToolCall, ResponseOutputItem, ResponseOutputMessage, ResponseUsage } from 'openai/resources/responses/responses';
import type { ChatCompletion, ChatCompletionMessageFunctionToolCall } from 'openai/resources/chat/completions';
import type { CompletionUsage } from 'openai/resources/completions';
import type { HubError } from './hub.js';
import type { Json } from '../wire/format.js';
import { asNumber, asString, isRecord } from './responses-shared.js';
import { clientId } from './ids.js';

type FinishReason = ChatCompletion.Choice['finish_reason'];

// ---------------------------------------------------------------- Responses -> hub

export function responsesAnswerToHub(answer: Json): Json {
  const output = Array.isArray(answer.output) ? answer.output.filter(isRecord) : [];
  let text = '';
  let refusal = '';
  const toolCalls: ChatCompletionMessageFunctionToolCall[] = [];
  for (const item of output) {
    if (item.type === 'message' && Array.isArray(item.content)) {
      for (const part of item.content.filter(isRecord)) {
        if (part.type === 'output_text') text += asString(part.text);
        if (part.type === 'refusal') refusal += asString(part.refusal);
      }
    } else if (item.type === 'function_call') {
      toolCalls.push({ id: asString(item.call_id), type: 'function', function: { name: asString(item.name), arguments: asString(item.arguments) } });
    }
    // reasoning (and any other item): chat has no place for it; docs/API.md says so.
  }
  const message: ChatCompletion.Choice['message'] = { role: 'assistant', content: text === '' && (toolCalls.length > 0 || refusal !== '') ? null : text, refusal: refusal === '' ? null : refusal };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  const completion: ChatCompletion = {
    id: asString(answer.id),
    object: 'chat.completion',
    created: asNumber(answer.created_at),
    model: asString(answer.model),
    choices: [{ index: 0, message, finish_reason: finishReasonOf(answer, toolCalls.length > 0), logprobs: null }],
  };
  if (isRecord(answer.usage)) completion.usage = usageToHub(answer.usage);
  return completion as unknown as Json;
}

/** A Response's stop, as chat's finish_reason: why it is incomplete, else whether it called a function. */
export function finishReasonOf(response: Json, calledTools: boolean): FinishReason {
  if (response.status === 'incomplete') {
    const reason = isRecord(response.incomplete_details) ? response.incomplete_details.reason : null;
    return reason === 'content_filter' ? 'content_filter' : 'length';
  }
  return calledTools ? 'tool_calls' : 'stop';
}

/** Responses usage as the hub's: both count cached reads and writes in the input, reasoning in the output. */
export function usageToHub(usage: Json): CompletionUsage & { cache_write_tokens?: number } {
  const input = isRecord(usage.input_tokens_details) ? usage.input_tokens_details : {};
  const output = isRecord(usage.output_tokens_details) ? usage.output_tokens_details : {};
  const prompt = asNumber(usage.input_tokens);
  const completion = asNumber(usage.output_tokens);
  const hub: CompletionUsage & { cache_write_tokens?: number } = {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: asNumber(usage.total_tokens) || prompt + completion,
    prompt_tokens_details: { cached_tokens: asNumber(input.cached_tokens) },
    completion_tokens_details: { reasoning_tokens: asNumber(output.reasoning_tokens) },
  };
  if (typeof input.cache_write_tokens === 'number') hub.cache_write_tokens = input.cache_write_tokens;
  return hub;
}

// ---------------------------------------------------------------- hub -> Responses

/**
 * The fields a Response echoes from its request. The answer's translation does not see
 * the request, so they are the Responses defaults; the whole answer's content, status
 * and usage are exact.
 */
export function responseShell(id: string, createdAt: number, model: string): Response {
  return {
    id,
    object: 'response',
    created_at: createdAt,
    model,
    status: 'in_progress',
    output: [],
    output_text: '',
    error: null,
    incomplete_details: null,
    instructions: null,
    metadata: {},
    parallel_tool_calls: true,
    temperature: null,
    tool_choice: 'auto',
    tools: [],
    top_p: null,
  };
}

export function responsesAnswerFromHub(answer: Json): Json {
  const choice = Array.isArray(answer.choices) && isRecord(answer.choices[0]) ? answer.choices[0] : {};
  const message = isRecord(choice.message) ? choice.message : {};
  const id = clientId('resp_', answer.id);
  const output: ResponseOutputItem[] = [];
  const text = typeof message.content === 'string' ? message.content : '';
  const refusal = typeof message.refusal === 'string' ? message.refusal : '';
  if (text !== '' || refusal !== '') output.push(messageItem(clientId('msg_', answer.id), text, refusal, 'completed'));
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isRecord) : [];
  for (const call of calls) {
    const fn = isRecord(call.function) ? call.function : {};
    output.push(functionCallItem(asString(call.id), asString(fn.name), asString(fn.arguments), 'completed'));
  }
  const response = responseShell(id, asNumber(answer.created), asString(answer.model));
  finish(response, output, choice.finish_reason, isRecord(answer.usage) ? answer.usage : null);
  // output_text is the SDK's convenience, not a field of the wire's answer.
  const { output_text: _sdkOnly, ...wire } = response;
  return wire as unknown as Json;
}

function messageItem(id: string, text: string, refusal: string, status: ResponseOutputMessage['status']): ResponseOutputMessage {
  const content: ResponseOutputMessage['content'] = [];
  if (text !== '') content.push({ type: 'output_text', text, annotations: [] });
  if (refusal !== '') content.push({ type: 'refusal', refusal });
  return { id, type: 'message', role: 'assistant', status, content };
}

function functionCallItem(callId: string, name: string, args: string, status: ResponseFunctionToolCall['status']): ResponseFunctionToolCall {
  return { id: `fc_${callId}`, type: 'function_call', call_id: callId, name, arguments: args, status };
}

/** Sets a Response's outcome from the hub's finish_reason and usage: completed, or incomplete and why. */
export function finish(response: Response, output: ResponseOutputItem[], finishReason: unknown, usage: Json | null): void {
  response.output = output;
  response.output_text = output
    .flatMap((item) => (item.type === 'message' ? item.content : []))
    .map((part) => (part.type === 'output_text' ? part.text : ''))
    .join('');
  if (finishReason === 'length' || finishReason === 'content_filter') {
    response.status = 'incomplete';
    response.incomplete_details = { reason: finishReason === 'length' ? 'max_output_tokens' : 'content_filter' };
  } else response.status = 'completed';
  if (usage) response.usage = usageFromHub(usage);
}

/** The hub's usage as Responses': the hub's top-level cache_write_tokens (else chat's prompt_tokens_details one) goes in input_tokens_details. */
function usageFromHub(usage: Json): ResponseUsage {
  const prompt = isRecord(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const completion = isRecord(usage.completion_tokens_details) ? usage.completion_tokens_details : {};
  return {
    input_tokens: asNumber(usage.prompt_tokens),
    input_tokens_details: { cached_tokens: asNumber(prompt.cached_tokens), cache_write_tokens: asNumber(usage.cache_write_tokens ?? prompt.cache_write_tokens) },
    output_tokens: asNumber(usage.completion_tokens),
    output_tokens_details: { reasoning_tokens: asNumber(completion.reasoning_tokens) },
    total_tokens: asNumber(usage.total_tokens),
  };
}

// ---------------------------------------------------------------- errors

/** Responses errors use chat's envelope and statuses: `{error: {message, type, param, code}}`. */
export function responsesErrorToHub(status: number, body: Json | null): HubError {
  const error = body && isRecord(body.error) ? body.error : null;
  if (!error) return { status, message: `the upstream answered ${status}`, type: status >= 500 ? 'api_error' : 'invalid_request_error', param: null, code: null };
  return {
    status,
    message: asString(error.message) || `the upstream answered ${status}`,
    type: asString(error.type) || (status >= 500 ? 'api_error' : 'invalid_request_error'),
    param: typeof error.param === 'string' ? error.param : null,
    code: typeof error.code === 'string' ? error.code : null,
  };
}

export function responsesErrorFromHub(error: HubError): { status: number; body: Json } {
  return { status: error.status, body: { error: { message: error.message, type: error.type, param: error.param ?? null, code: error.code ?? null } } };
}
