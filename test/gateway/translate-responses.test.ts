/**
 * The Responses API translator (src/gateway/translate/responses.ts), requests, whole
 * answers and errors, both ways; pure code, so no service. Streams are in
 * translate-responses-stream.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { ChatCompletionCreateParams } from 'openai/resources/chat/completions';
import type { ResponseCreateParams } from 'openai/resources/responses/responses';
import { ApiError } from '../../src/errors/catalogue.js';
import { responsesTranslator as t } from '../../src/gateway/translate/responses.js';
import type { Json } from '../../src/gateway/wire/format.js';

const json = (value: unknown): Json => value as Json;

/** The refusal a translation throws: a 400 invalid_request naming the field; the body it read is left as it was. */
function refusal(translate: (body: Json) => unknown, body: Json): ApiError {
  const before = structuredClone(body);
  let caught: unknown = null;
  try {
    translate(body);
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(ApiError);
  const err = caught as ApiError;
  expect(err.status).toBe(400);
  expect(err.code).toBe('invalid_request');
  expect(err.message).toContain(err.param);
  expect(body).toEqual(before);
  return err;
}

const weather = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

const chatRequest: ChatCompletionCreateParams = {
  model: 'm-1',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'developer', content: 'Answer in French.' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is in this image, and the weather?' },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'low' } },
        { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' } },
        { type: 'file', file: { file_id: 'file-123' } },
      ],
    },
    { role: 'assistant', content: 'Let me check.', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    { role: 'assistant', content: null, tool_calls: [
      { id: 'call_2', type: 'function', function: { name: 'weather', arguments: '{"city":"Lyon"}' } },
      { id: 'call_3', type: 'function', function: { name: 'weather', arguments: '{"city":"Nice"}' } },
    ] },
    { role: 'tool', tool_call_id: 'call_2', content: 'rain' },
    { role: 'tool', tool_call_id: 'call_3', content: 'cloudy' },
  ],
  tools: [{ type: 'function', function: { name: 'weather', description: 'The weather of a city', parameters: weather, strict: true } }],
  tool_choice: { type: 'function', function: { name: 'weather' } },
  max_completion_tokens: 300,
  temperature: 0.2,
  top_p: 0.9,
  user: 'u-1',
  metadata: { order: '42' },
  parallel_tool_calls: false,
  reasoning_effort: 'low',
  response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: weather, strict: true } },
  stream: true,
  stream_options: { include_usage: true },
};

describe('Responses request -> hub', () => {
  it('maps instructions, a string input and the sampling and output fields', () => {
    const body: ResponseCreateParams = {
      model: 'm-1',
      instructions: 'Be brief.',
      input: 'Hello',
      max_output_tokens: 100,
      temperature: 0.5,
      top_p: 1,
      user: 'u-1',
      metadata: { a: 'b' },
      parallel_tool_calls: true,
      reasoning: { effort: 'high' },
      text: { format: { type: 'json_schema', name: 'out', schema: weather, strict: true }, verbosity: 'low' },
      store: false,
      stream: true,
    };
    expect(t.requestToHub(json(body))).toEqual({
      model: 'm-1',
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }],
      max_completion_tokens: 100,
      temperature: 0.5,
      top_p: 1,
      user: 'u-1',
      metadata: { a: 'b' },
      parallel_tool_calls: true,
      reasoning_effort: 'high',
      verbosity: 'low',
      response_format: { type: 'json_schema', json_schema: { name: 'out', schema: weather, strict: true } },
      stream: true,
      // The hub's stream must end with usage, whatever the client asked.
      stream_options: { include_usage: true },
    });
  });

  it('maps message items and their parts, assistant answers, function calls (merged into the assistant message) and their outputs', () => {
    const body: ResponseCreateParams = {
      model: 'm-1',
      input: [
        { role: 'developer', content: 'Answer in French.' },
        { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'Be brief.' }] },
        { type: 'message', role: 'user', content: [
          { type: 'input_text', text: 'Look' },
          { type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'high' },
          { type: 'input_file', file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' },
          { type: 'input_file', file_id: 'file-9' },
        ] },
        { type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Checking.', annotations: [] }] },
        { type: 'function_call', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call', call_id: 'call_2', name: 'weather', arguments: '{"city":"Lyon"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
        { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: 'rain' }] },
        { type: 'function_call', call_id: 'call_3', name: 'weather', arguments: '{}' },
      ],
      tools: [{ type: 'function', name: 'weather', description: 'The weather', parameters: weather, strict: false }],
      tool_choice: 'required',
    };
    expect(t.requestToHub(json(body))).toEqual({
      model: 'm-1',
      messages: [
        { role: 'developer', content: 'Answer in French.' },
        { role: 'system', content: [{ type: 'text', text: 'Be brief.' }] },
        { role: 'user', content: [
          { type: 'text', text: 'Look' },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'high' } },
          { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' } },
          { type: 'file', file: { file_id: 'file-9' } },
        ] },
        { role: 'assistant', content: 'Checking.', tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_2', type: 'function', function: { name: 'weather', arguments: '{"city":"Lyon"}' } },
        ] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: 'rain' }] },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_3', type: 'function', function: { name: 'weather', arguments: '{}' } }] },
      ],
      tools: [{ type: 'function', function: { name: 'weather', description: 'The weather', parameters: weather, strict: false } }],
      tool_choice: 'required',
    });
  });

  it.each([
    ['previous_response_id', { previous_response_id: 'resp_1' }],
    ['conversation', { conversation: 'conv_1' }],
    ['store', { store: true }],
    ['background', { background: true }],
    ['truncation', { truncation: 'auto' }],
    ['include', { include: ['reasoning.encrypted_content'] }],
    ['prompt', { prompt: { id: 'pmpt_1' } }],
    ['tools[1].type', { tools: [{ type: 'function', name: 'f', parameters: {}, strict: true }, { type: 'web_search' }] }],
    ['tools[0].type', { tools: [{ type: 'file_search', vector_store_ids: ['vs_1'] }] }],
    ['tool_choice', { tool_choice: { type: 'web_search_preview' } }],
    ['reasoning.summary', { reasoning: { effort: 'low', summary: 'auto' } }],
    ['tools[0].defer_loading', { tools: [{ type: 'function', name: 'f', parameters: {}, strict: true, defer_loading: true }] }],
    ['text.stop', { text: { stop: 'x' } }],
    ['input[0].content[1].file_id', { input: [{ role: 'user', content: [{ type: 'input_text', text: 'x' }, { type: 'input_image', file_id: 'file-1', detail: 'auto' }] }] }],
    ['input[0].content[0].file_url', { input: [{ role: 'user', content: [{ type: 'input_file', file_url: 'https://example.com/a.pdf' }] }] }],
    ['input[0].content[0].detail', { input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file-1', detail: 'high' }] }] }],
    ['input[1].type', { input: [{ role: 'user', content: 'x' }, { type: 'reasoning', id: 'rs_1', summary: [] }] }],
    ['input[0].type', { input: [{ type: 'item_reference', id: 'msg_1' }] }],
    ['input[0].content[0].type', { input: [{ role: 'system', content: [{ type: 'input_image', image_url: 'https://example.com/a.png', detail: 'auto' }] }] }],
    ['input[0].content[0].type', { input: [{ type: 'message', role: 'assistant', content: [{ type: 'refusal', refusal: 'no' }] }] }],
  ])('refuses %s, which chat cannot carry', (param, fields) => {
    expect(refusal(t.requestToHub, json({ model: 'm-1', input: 'hi', ...fields })).param).toBe(param);
  });

  it('accepts the defaults of the refused features (store false, background false, null ids)', () => {
    const hub = t.requestToHub(json({ model: 'm-1', input: 'hi', store: false, background: false, previous_response_id: null, truncation: 'disabled', include: [] }));
    expect(hub).toEqual({ model: 'm-1', messages: [{ role: 'user', content: 'hi' }] });
  });
});

describe('hub request -> Responses', () => {
  it('maps every message kind, part, tool and option', () => {
    expect(t.requestFromHub(json(chatRequest))).toEqual({
      store: false,
      model: 'm-1',
      input: [
        { role: 'system', content: 'Be brief.' },
        { role: 'developer', content: 'Answer in French.' },
        { role: 'user', content: [
          { type: 'input_text', text: 'What is in this image, and the weather?' },
          { type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'low' },
          { type: 'input_file', file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' },
          { type: 'input_file', file_id: 'file-123' },
        ] },
        { role: 'assistant', content: 'Let me check.' },
        { type: 'function_call', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
        { type: 'function_call', call_id: 'call_2', name: 'weather', arguments: '{"city":"Lyon"}' },
        { type: 'function_call', call_id: 'call_3', name: 'weather', arguments: '{"city":"Nice"}' },
        { type: 'function_call_output', call_id: 'call_2', output: 'rain' },
        { type: 'function_call_output', call_id: 'call_3', output: 'cloudy' },
      ],
      tools: [{ type: 'function', name: 'weather', description: 'The weather of a city', parameters: weather, strict: true }],
      tool_choice: { type: 'function', name: 'weather' },
      max_output_tokens: 300,
      temperature: 0.2,
      top_p: 0.9,
      user: 'u-1',
      metadata: { order: '42' },
      parallel_tool_calls: false,
      reasoning: { effort: 'low' },
      text: { format: { type: 'json_schema', name: 'answer', schema: weather, strict: true } },
      stream: true,
    });
  });

  it('takes the deprecated max_tokens as the output limit, and gives a tool without strict the chat default', () => {
    const out = t.requestFromHub(json({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 50, tools: [{ type: 'function', function: { name: 'f' } }] }));
    expect(out).toMatchObject({ max_output_tokens: 50, tools: [{ type: 'function', name: 'f', parameters: null, strict: false }] });
  });

  it.each([
    ['n', { n: 2 }],
    ['logprobs', { logprobs: true }],
    ['top_logprobs', { top_logprobs: 3 }],
    ['audio', { audio: { voice: 'alloy', format: 'mp3' } }],
    ['modalities', { modalities: ['text', 'audio'] }],
    ['store', { store: true }],
    ['stop', { stop: ['\n'] }],
    ['frequency_penalty', { frequency_penalty: 0.5 }],
    ['seed', { seed: 1 }],
    ['tools[0].type', { tools: [{ type: 'custom', custom: { name: 'c' } }] }],
    ['messages[0].content[0].type', { messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AA', format: 'wav' } }] }] }],
    ['messages[0].role', { messages: [{ role: 'function', name: 'f', content: 'x' }] }],
    ['messages[0].content[0].image_url.uuid', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png', uuid: 'u' } }] }] }],
    ['messages[0].name', { messages: [{ role: 'user', name: 'ann', content: 'x' }] }],
    ['tools[0].function.output_schema', { tools: [{ type: 'function', function: { name: 'f', output_schema: {} } }] }],
    ['messages[1].refusal', { messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: null, refusal: 'no' }] }],
  ])('refuses %s, which the Responses API cannot carry', (param, fields) => {
    expect(refusal(t.requestFromHub, json({ model: 'm-1', messages: [{ role: 'user', content: 'hi' }], ...fields })).param).toBe(param);
  });

  it('accepts n: 1, logprobs: false and text-only modalities', () => {
    const out = t.requestFromHub(json({ model: 'm', messages: [{ role: 'user', content: 'hi' }], n: 1, logprobs: false, modalities: ['text'] }));
    expect(out).toEqual({ store: false, model: 'm', input: [{ role: 'user', content: 'hi' }] });
  });
});

describe('request round trips', () => {
  it('chat -> Responses -> chat keeps what both carry', () => {
    expect(t.requestToHub(t.requestFromHub(json(chatRequest)))).toEqual(chatRequest);
  });

  it('Responses -> chat -> Responses keeps what both carry', () => {
    const body = {
      model: 'm-1',
      input: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'input_text', text: 'Look' }, { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'auto' }] },
        { role: 'assistant', content: 'Checking.' },
        { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'ok' },
      ],
      tools: [{ type: 'function', name: 'f', parameters: weather, strict: true }],
      tool_choice: 'auto',
      max_output_tokens: 64,
      reasoning: { effort: 'medium' },
      text: { format: { type: 'json_object' } },
      stream: true,
      store: false,
    };
    expect(t.requestFromHub(t.requestToHub(json(body)))).toEqual(body);
  });
});

const response = {
  id: 'resp_1',
  object: 'response',
  created_at: 1_700_000_000,
  model: 'm-1',
  status: 'completed',
  output: [
    { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'thinking about weather' }] },
    { type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Checking ', annotations: [] }, { type: 'output_text', text: 'now.', annotations: [] }] },
    { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}', status: 'completed' },
  ],
  usage: {
    input_tokens: 120,
    input_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 },
    output_tokens: 30,
    output_tokens_details: { reasoning_tokens: 12 },
    total_tokens: 150,
  },
};

describe('whole answers', () => {
  it('Response -> chat completion: text, tool calls, finish reason and usage (reasoning has no place in chat)', () => {
    expect(t.responseToHub(json(response))).toEqual({
      id: 'resp_1',
      object: 'chat.completion',
      created: 1_700_000_000,
      model: 'm-1',
      choices: [{
        index: 0,
        message: { role: 'assistant', content: 'Checking now.', refusal: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }] },
        finish_reason: 'tool_calls',
        logprobs: null,
      }],
      usage: {
        prompt_tokens: 120,
        completion_tokens: 30,
        total_tokens: 150,
        prompt_tokens_details: { cached_tokens: 100 },
        completion_tokens_details: { reasoning_tokens: 12 },
        cache_write_tokens: 20,
      },
    });
  });

  it.each([
    ['max_output_tokens', 'length'],
    ['content_filter', 'content_filter'],
  ])('an incomplete Response (%s) finishes with %s', (reason, finish) => {
    const hub = t.responseToHub(json({ ...response, status: 'incomplete', incomplete_details: { reason } })) as { choices: { finish_reason: string }[] };
    expect(hub.choices[0].finish_reason).toBe(finish);
  });

  it('a refusal is chat message.refusal, with content null', () => {
    const hub = t.responseToHub(json({ ...response, output: [{ type: 'message', id: 'm', role: 'assistant', status: 'completed', content: [{ type: 'refusal', refusal: 'I cannot.' }] }] })) as { choices: { message: Json; finish_reason: string }[] };
    expect(hub.choices[0]).toMatchObject({ message: { content: null, refusal: 'I cannot.' }, finish_reason: 'stop' });
  });

  it('chat completion -> Response: items, status and usage, cache writes in input_tokens_details', () => {
    const chat = t.responseToHub(json(response));
    const back = t.responseFromHub(chat);
    expect(back).toMatchObject({
      id: 'resp_1',
      object: 'response',
      created_at: 1_700_000_000,
      model: 'm-1',
      status: 'completed',
      error: null,
      incomplete_details: null,
      output: [
        { type: 'message', id: 'msg_1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Checking now.', annotations: [] }] },
        { type: 'function_call', id: 'fc_call_1', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}', status: 'completed' },
      ],
      usage: response.usage,
    });
    // output_text is the SDK's convenience, never on the wire.
    expect(back).not.toHaveProperty('output_text');
  });

  it('a chat answer cut at its limit is an incomplete Response (max_output_tokens)', () => {
    const chat = { id: 'c1', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'partial', refusal: null }, finish_reason: 'length', logprobs: null }], usage: { prompt_tokens: 5, completion_tokens: 10, total_tokens: 15 } };
    expect(t.responseFromHub(json(chat))).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      usage: { input_tokens: 5, output_tokens: 10, total_tokens: 15, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
    });
  });
});

describe('errors', () => {
  it('an upstream Responses error is the hub error with the same fields and status', () => {
    const body = { error: { message: 'Rate limit reached', type: 'rate_limit_error', param: null, code: 'rate_limit_exceeded' } };
    expect(t.errorToHub(429, json(body))).toEqual({ status: 429, message: 'Rate limit reached', type: 'rate_limit_error', param: null, code: 'rate_limit_exceeded' });
  });

  it('a body that is not an error envelope still gives an error, typed by its status', () => {
    expect(t.errorToHub(502, null)).toEqual({ status: 502, message: 'the upstream answered 502', type: 'api_error', param: null, code: null });
    expect(t.errorToHub(400, json({ detail: 'x' }))).toMatchObject({ status: 400, type: 'invalid_request_error' });
  });

  it('the hub error in the Responses envelope (OpenAI\'s, param and code null when absent)', () => {
    expect(t.errorFromHub({ status: 400, message: 'bad max_output_tokens', type: 'invalid_request_error', param: 'max_output_tokens' })).toEqual({
      status: 400,
      body: { error: { message: 'bad max_output_tokens', type: 'invalid_request_error', param: 'max_output_tokens', code: null } },
    });
  });
});
