/**
 * The Anthropic Translator (src/gateway/translate/anthropic.ts), mapping by mapping: the
 * table of docs/API.md "Any model through any format", both directions, and what is
 * refused with a 400 naming the field.
 */
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors/catalogue.js';
import { anthropicTranslator as t } from '../../src/gateway/translate/anthropic.js';
import type { HubEvent, StreamTranslation } from '../../src/gateway/translate/hub.js';

type Json = Record<string, unknown>;

function refusal(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    return err as ApiError;
  }
  throw new Error('not refused');
}

const run = (s: StreamTranslation, events: HubEvent[]) => [...events.flatMap((e) => s.push(e)), ...s.end()];

describe('requests, Anthropic -> hub', () => {
  it('maps system, text, images, a PDF, tools, tool_choice, tool use and results, limits and metadata', () => {
    const hub = t.requestToHub({
      model: 'm',
      system: 'be brief',
      max_tokens: 100,
      stop_sequences: ['END'],
      temperature: 0.5,
      top_p: 0.9,
      metadata: { user_id: 'u1' },
      stream: true,
      tools: [{ name: 'search', description: 'finds', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
            { type: 'image', source: { type: 'url', url: 'https://x/y.png' } },
            { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBE' }, title: 'a.pdf' },
          ],
        },
        { role: 'assistant', content: [{ type: 'text', text: 'calling' }, { type: 'tool_use', id: 'toolu_1', name: 'search', input: { q: 'x' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'found' }, { type: 'text', text: 'thanks' }] },
      ],
    });
    expect(hub).toEqual({
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
            { type: 'image_url', image_url: { url: 'https://x/y.png' } },
            { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBE', filename: 'a.pdf' } },
          ],
        },
        { role: 'assistant', content: 'calling', tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'search', arguments: '{"q":"x"}' } }] },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'found' },
        { role: 'user', content: [{ type: 'text', text: 'thanks' }] },
      ],
      max_completion_tokens: 100,
      stop: ['END'],
      temperature: 0.5,
      top_p: 0.9,
      user: 'u1',
      stream: true,
      tools: [{ type: 'function', function: { name: 'search', description: 'finds', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }],
      tool_choice: 'required',
      parallel_tool_calls: false,
    });
  });

  it('refuses what chat cannot carry, naming the field', () => {
    const base = { model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] };
    expect(refusal(() => t.requestToHub({ ...base, thinking: { type: 'enabled', budget_tokens: 1000 } })).param).toBe('thinking');
    expect(refusal(() => t.requestToHub({ ...base, top_k: 5 })).param).toBe('top_k');
    const cached = { ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] }] };
    expect(refusal(() => t.requestToHub(cached)).param).toBe('messages[0].content[0].cache_control');
    const server = { ...base, tools: [{ type: 'web_search_20250305', name: 'web_search' }] };
    expect(refusal(() => t.requestToHub(server)).param).toBe('tools[0].type');
    const doc = { ...base, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } }] }] };
    expect(refusal(() => t.requestToHub(doc)).param).toBe('messages[0].content[0].source');
  });
});

describe('requests, hub -> Anthropic', () => {
  it('maps system messages, parts, tool calls and tool messages (merged into one user turn), tools, stop and user', () => {
    const body = t.requestFromHub({
      model: 'm',
      max_completion_tokens: 50,
      stop: 'END',
      user: 'u2',
      stream: true,
      stream_options: { include_usage: true },
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
      parallel_tool_calls: false,
      messages: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,QQ==' } }, { type: 'file', file: { file_data: 'data:application/pdf;base64,JV' } }] },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"x":1}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'r1' },
        { role: 'user', content: 'more' },
      ],
    });
    expect(body).toEqual({
      model: 'm',
      system: 'sys',
      max_tokens: 50,
      stop_sequences: ['END'],
      metadata: { user_id: 'u2' },
      stream: true,
      tools: [{ name: 'f', input_schema: { type: 'object', properties: {} } }],
      tool_choice: { type: 'tool', name: 'f', disable_parallel_tool_use: true },
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: 'QQ==' } },
            { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JV' } },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: 'f', input: { x: 1 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c1', content: 'r1' }, { type: 'text', text: 'more' }] },
      ],
    });
  });

  it('refuses n > 1, logprobs, json_schema, seed and an audio part, naming the field', () => {
    const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
    expect(refusal(() => t.requestFromHub({ ...base, n: 2 })).param).toBe('n');
    expect(refusal(() => t.requestFromHub({ ...base, logprobs: true })).param).toBe('logprobs');
    expect(refusal(() => t.requestFromHub({ ...base, response_format: { type: 'json_schema', json_schema: {} } })).param).toBe('response_format');
    expect(refusal(() => t.requestFromHub({ ...base, seed: 3 })).param).toBe('seed');
    const audio = { ...base, messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'x', format: 'wav' } }] }] };
    expect(refusal(() => t.requestFromHub(audio)).param).toBe('messages[0].content[0].type');
    const badArgs = { ...base, messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{' } }] }] };
    expect(refusal(() => t.requestFromHub(badArgs)).param).toBe('messages[0].tool_calls[0].function.arguments');
  });
});

describe('answers and usage', () => {
  const message = {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'claude',
    content: [{ type: 'text', text: 'hi' }, { type: 'tool_use', id: 'toolu_1', name: 'f', input: { a: 1 } }],
    stop_reason: 'tool_use',
    usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 20, cache_creation_input_tokens: 7 },
  };

  it('an Anthropic message as a chat completion: prompt_tokens counts both cache kinds, writes in cache_write_tokens', () => {
    const hub = t.responseToHub(message);
    expect(hub.choices).toEqual([
      { index: 0, message: { role: 'assistant', content: 'hi', refusal: null, tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] }, logprobs: null, finish_reason: 'tool_calls' },
    ]);
    expect(hub.usage).toEqual({ prompt_tokens: 37, completion_tokens: 5, total_tokens: 42, prompt_tokens_details: { cached_tokens: 20, cache_write_tokens: 7 }, cache_write_tokens: 7 });
  });

  it('round trip: the hub answer back as the same Anthropic usage, content and stop reason', () => {
    const back = t.responseFromHub(t.responseToHub(message));
    expect(back.usage).toEqual(message.usage);
    expect(back.content).toEqual(message.content);
    expect(back.stop_reason).toBe('tool_use');
  });

  it.each([
    ['end_turn', 'stop', 'end_turn'],
    ['max_tokens', 'length', 'max_tokens'],
    ['tool_use', 'tool_calls', 'tool_use'],
    ['stop_sequence', 'stop', 'end_turn'],
  ])('stop_reason %s -> finish_reason %s -> %s', (stop, finish, back) => {
    const hub = t.responseToHub({ ...message, stop_reason: stop });
    expect((hub.choices as Json[])[0]!.finish_reason).toBe(finish);
    expect(t.responseFromHub(hub).stop_reason).toBe(back);
  });
});

describe('errors', () => {
  it('an Anthropic error as the hub error and back, status kept', () => {
    const hub = t.errorToHub(429, { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } });
    expect(hub).toEqual({ status: 429, message: 'slow down', type: 'rate_limit_error' });
    expect(t.errorFromHub({ status: 400, message: 'bad', type: 'invalid_request_error', param: 'x' })).toEqual({
      status: 400,
      body: { type: 'error', error: { type: 'invalid_request_error', message: 'bad' } },
    });
    expect(t.errorToHub(529, null).type).toBe('server_error');
  });
});

describe('streams', () => {
  const anthropicStream: HubEvent[] = [
    { event: 'message_start', data: { type: 'message_start', message: { id: 'msg_1', model: 'claude', usage: { input_tokens: 10, output_tokens: 1, cache_read_input_tokens: 2, cache_creation_input_tokens: 3 } } } },
    { event: 'content_block_start', data: { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } } },
    { event: 'content_block_delta', data: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'hi' } } },
    { event: 'content_block_stop', data: { type: 'content_block_stop', index: 0 } },
    { event: 'content_block_start', data: { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} } } },
    { event: 'content_block_delta', data: { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"a"' } } },
    { event: 'content_block_delta', data: { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: ':1}' } } },
    { event: 'content_block_stop', data: { type: 'content_block_stop', index: 1 } },
    { event: 'message_delta', data: { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 9 } } },
    { event: 'message_stop', data: { type: 'message_stop' } },
  ];

  it('Anthropic events as chat chunks: text, tool call pieces, finish reason, then the usage chunk', () => {
    const chunks = run(t.streamToHub(), anthropicStream).map((e) => e.data);
    const deltas = chunks.filter((c) => (c.choices as Json[]).length > 0).map((c) => (c.choices as Json[])[0]);
    expect(deltas.map((d) => d!.delta)).toEqual([
      { role: 'assistant', content: '' },
      { content: 'hi' },
      { tool_calls: [{ index: 0, id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '{"a"' } }] },
      { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] },
      {},
    ]);
    expect(deltas.at(-1)!.finish_reason).toBe('tool_calls');
    expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 15, completion_tokens: 9, total_tokens: 24, prompt_tokens_details: { cached_tokens: 2, cache_write_tokens: 3 }, cache_write_tokens: 3 });
  });

  it('chat chunks back as Anthropic events: the same blocks, stop reason and usage, closed by message_stop', () => {
    const events = run(t.streamFromHub(), run(t.streamToHub(), anthropicStream));
    expect(events.map((e) => e.event)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const delta = events[8]!.data;
    expect(delta.delta).toEqual({ stop_reason: 'tool_use', stop_sequence: null });
    expect(delta.usage).toEqual({ input_tokens: 10, output_tokens: 9, cache_read_input_tokens: 2, cache_creation_input_tokens: 3 });
    expect(events[4]!.data.content_block).toEqual({ type: 'tool_use', id: 'toolu_1', name: 'f', input: {} });
  });
});
