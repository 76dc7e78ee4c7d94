/**
 * The Responses API translator's streams (src/gateway/translate/responses-stream.ts),
 * both ways, checked as the official `openai` SDK sees them: the emitted events are
 * written as server-sent events and read by the SDK's own stream helpers
 * (`client.responses.stream()`, `client.chat.completions.stream()`) through a fetch
 * that answers them, no server. What the helpers assemble is what a client gets.
 */
import OpenAI, { APIError } from 'openai';
import { describe, expect, it } from 'vitest';
import type { HubEvent, StreamTranslation } from '../../src/gateway/translate/hub.js';
import { responsesTranslator as t } from '../../src/gateway/translate/responses.js';
import type { Json } from '../../src/gateway/wire/format.js';

function run(translation: StreamTranslation, events: HubEvent[]): HubEvent[] {
  return [...events.flatMap((e) => translation.push(e)), ...translation.end()];
}

/** Events as the bytes of an SSE stream; a chat stream ends with `data: [DONE]` (the relay's part). */
function sse(events: HubEvent[], done: boolean): string {
  const frames = events.map((e) => `${e.event ? `event: ${e.event}\n` : ''}data: ${JSON.stringify(e.data)}\n\n`);
  return frames.join('') + (done ? 'data: [DONE]\n\n' : '');
}

function clientAnswering(body: string): OpenAI {
  const fetch = async () => new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } });
  return new OpenAI({ apiKey: 'test', baseURL: 'http://translate.test/v1', maxRetries: 0, fetch });
}

const chatOf = (events: HubEvent[]) => clientAnswering(sse(events, true)).chat.completions.stream({ model: 'm-1', messages: [{ role: 'user', content: 'hi' }] });
const responsesOf = (events: HubEvent[]) => clientAnswering(sse(events, false)).responses.stream({ model: 'm-1', input: 'hi' });

/** An upstream Responses stream as OpenAI sends it: reasoning, text in two deltas, a function call in pieces, the usage at the end. */
function upstreamResponses(last: 'response.completed' | 'response.incomplete' = 'response.completed'): HubEvent[] {
  const shell = { id: 'resp_1', object: 'response', created_at: 1_700_000_000, model: 'm-1', status: 'in_progress', output: [], error: null, incomplete_details: null, instructions: null, metadata: {}, parallel_tool_calls: true, temperature: 1, tool_choice: 'auto', tools: [], top_p: 1, usage: null };
  const message = { id: 'msg_1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hello world', annotations: [] }] };
  const call = { id: 'fc_1', type: 'function_call', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}', status: 'completed' };
  const reasoning = { id: 'rs_1', type: 'reasoning', summary: [] };
  const data: Json[] = [
    { type: 'response.created', response: shell },
    { type: 'response.in_progress', response: shell },
    { type: 'response.output_item.added', output_index: 0, item: reasoning },
    { type: 'response.output_item.done', output_index: 0, item: reasoning },
    { type: 'response.output_item.added', output_index: 1, item: { ...message, status: 'in_progress', content: [] } },
    { type: 'response.content_part.added', item_id: 'msg_1', output_index: 1, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } },
    { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 1, content_index: 0, delta: 'Hello', logprobs: [] },
    { type: 'response.output_text.delta', item_id: 'msg_1', output_index: 1, content_index: 0, delta: ' world', logprobs: [] },
    { type: 'response.output_text.done', item_id: 'msg_1', output_index: 1, content_index: 0, text: 'Hello world', logprobs: [] },
    { type: 'response.content_part.done', item_id: 'msg_1', output_index: 1, content_index: 0, part: message.content[0] },
    { type: 'response.output_item.done', output_index: 1, item: message },
    { type: 'response.output_item.added', output_index: 2, item: { ...call, arguments: '', status: 'in_progress' } },
    { type: 'response.function_call_arguments.delta', item_id: 'fc_1', output_index: 2, delta: '{"city":' },
    { type: 'response.function_call_arguments.delta', item_id: 'fc_1', output_index: 2, delta: '"Paris"}' },
    { type: 'response.function_call_arguments.done', item_id: 'fc_1', output_index: 2, name: 'weather', arguments: call.arguments },
    { type: 'response.output_item.done', output_index: 2, item: call },
    {
      type: last,
      response: {
        ...shell,
        status: last === 'response.completed' ? 'completed' : 'incomplete',
        incomplete_details: last === 'response.completed' ? null : { reason: 'max_output_tokens' },
        output: [reasoning, message, call],
        usage: { input_tokens: 120, input_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 }, output_tokens: 30, output_tokens_details: { reasoning_tokens: 12 }, total_tokens: 150 },
      },
    },
  ];
  return data.map((d, i) => ({ event: String(d.type), data: { ...d, sequence_number: i } }));
}

/** A hub (chat) stream as OpenAI sends it with include_usage: role first, text, two tool calls in pieces, the finish chunk, the usage chunk. */
function hubChunks(finish: 'tool_calls' | 'length' = 'tool_calls'): HubEvent[] {
  const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'm-1' };
  const delta = (d: Json, finishReason: string | null = null) => ({ data: { ...base, choices: [{ index: 0, delta: d, finish_reason: finishReason, logprobs: null }] } });
  return [
    delta({ role: 'assistant', content: '', refusal: null }),
    delta({ content: 'Hello' }),
    delta({ content: ' world' }),
    delta({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'weather', arguments: '' } }] }),
    delta({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
    delta({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
    delta({ tool_calls: [{ index: 1, id: 'call_2', type: 'function', function: { name: 'weather', arguments: '{"city":"Lyon"}' } }] }),
    delta({}, finish),
    { data: { ...base, choices: [], usage: { prompt_tokens: 120, completion_tokens: 30, total_tokens: 150, prompt_tokens_details: { cached_tokens: 100 }, completion_tokens_details: { reasoning_tokens: 12 }, cache_write_tokens: 20 } } },
  ];
}

describe('Responses stream -> hub chunks, read by client.chat.completions.stream()', () => {
  it('assembles the text, the tool call, the finish reason and the usage', async () => {
    const chunks = run(t.streamToHub(), upstreamResponses());
    expect(chunks.every((c) => c.event === undefined)).toBe(true);
    const final = await chatOf(chunks).finalChatCompletion();
    expect(final.choices[0]).toMatchObject({
      finish_reason: 'tool_calls',
      message: { role: 'assistant', content: 'Hello world', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }] },
    });
    expect(final.usage).toEqual({ prompt_tokens: 120, completion_tokens: 30, total_tokens: 150, prompt_tokens_details: { cached_tokens: 100 }, completion_tokens_details: { reasoning_tokens: 12 }, cache_write_tokens: 20 });
    expect(final).toMatchObject({ id: 'resp_1', model: 'm-1', created: 1_700_000_000 });
  });

  it('ends with the finish chunk then the usage chunk (empty choices), as the hub requires', () => {
    const chunks = run(t.streamToHub(), upstreamResponses()).map((c) => c.data as { choices: { finish_reason: string | null }[]; usage?: unknown });
    expect(chunks.at(-2)?.choices[0].finish_reason).toBe('tool_calls');
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 120 } });
    expect(chunks.slice(0, -2).every((c) => c.choices[0].finish_reason === null)).toBe(true);
  });

  it('an incomplete response (max_output_tokens) finishes with length', async () => {
    const final = await chatOf(run(t.streamToHub(), upstreamResponses('response.incomplete'))).finalChatCompletion();
    expect(final.choices[0].finish_reason).toBe('length');
  });

  it('response.failed and an error event become an error chunk the SDK raises as an APIError', async () => {
    const created = upstreamResponses()[0];
    const failed = { event: 'response.failed', data: { type: 'response.failed', sequence_number: 1, response: { id: 'resp_1', status: 'failed', error: { code: 'server_error', message: 'The model failed' } } } };
    const chunks = run(t.streamToHub(), [created, failed]);
    expect(chunks.at(-1)?.data).toEqual({ error: { message: 'The model failed', type: 'api_error', param: null, code: 'server_error' } });
    const err = await chatOf(chunks).finalChatCompletion().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).message).toContain('The model failed');

    const errorEvent = { event: 'error', data: { type: 'error', sequence_number: 1, code: 'rate_limit_exceeded', message: 'Slow down', param: null } };
    expect(run(t.streamToHub(), [created, errorEvent]).at(-1)?.data).toEqual({ error: { message: 'Slow down', type: 'rate_limit_error', param: null, code: 'rate_limit_exceeded' } });
  });
});

describe('hub chunks -> Responses stream, read by client.responses.stream()', () => {
  it('assembles the message, both function calls, the status and the usage', async () => {
    const events = run(t.streamFromHub(), hubChunks());
    const final = await responsesOf(events).finalResponse();
    expect(final.status).toBe('completed');
    expect(final.output_text).toBe('Hello world');
    expect(final.output).toMatchObject([
      { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hello world' }] },
      { type: 'function_call', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}', status: 'completed' },
      { type: 'function_call', call_id: 'call_2', name: 'weather', arguments: '{"city":"Lyon"}', status: 'completed' },
    ]);
    expect(final.usage).toEqual({ input_tokens: 120, input_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 }, output_tokens: 30, output_tokens_details: { reasoning_tokens: 12 }, total_tokens: 150 });
    // Ids of the client format's shape, from the upstream's: the message item's is the whole answer's (responses-answer.ts).
    expect(final).toMatchObject({ id: 'resp_1', model: 'm-1', created_at: 1_700_000_000 });
    expect(final.output[0]?.id).toBe('msg_1');
  });

  it('names every event, numbers them 0, 1, 2, ..., opens with created and in_progress and closes with completed', () => {
    const events = run(t.streamFromHub(), hubChunks());
    expect(events.map((e) => (e.data as { sequence_number: number }).sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.every((e) => e.event === (e.data as { type: string }).type)).toBe(true);
    const types = events.map((e) => e.event);
    expect(types.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
    expect(types.at(-1)).toBe('response.completed');
    // Each item is added before its deltas and done before the response completes.
    expect(types.filter((x) => x === 'response.output_item.added')).toHaveLength(3);
    expect(types.filter((x) => x === 'response.output_item.done')).toHaveLength(3);
  });

  it('the SDK sees the text and argument deltas with their snapshots', async () => {
    const stream = responsesOf(run(t.streamFromHub(), hubChunks()));
    const snapshots: string[] = [];
    stream.on('response.output_text.delta', (e) => snapshots.push(e.snapshot));
    stream.on('response.function_call_arguments.delta', (e) => snapshots.push(e.snapshot));
    await stream.finalResponse();
    expect(snapshots).toEqual(['Hello', 'Hello world', '{"city":', '{"city":"Paris"}', '{"city":"Lyon"}']);
  });

  it('a chat answer cut at its limit ends with response.incomplete (max_output_tokens)', async () => {
    const events = run(t.streamFromHub(), hubChunks('length'));
    expect(events.at(-1)?.event).toBe('response.incomplete');
    const final = await responsesOf(events).finalResponse();
    expect(final).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
  });

  it('a stream without a usage chunk still ends, at end()', () => {
    const translation = t.streamFromHub();
    const pushed = hubChunks().slice(0, -1).flatMap((e) => translation.push(e));
    expect(pushed.map((e) => e.event)).not.toContain('response.completed');
    expect(translation.end().map((e) => e.event)).toEqual(['response.completed']);
  });

  it('a refusal streams as a refusal part', async () => {
    const base = { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm' };
    const chunks = [
      { data: { ...base, choices: [{ index: 0, delta: { role: 'assistant', refusal: 'I cannot' }, finish_reason: null }] } },
      { data: { ...base, choices: [{ index: 0, delta: { refusal: ' help.' }, finish_reason: 'stop' }] } },
      { data: { ...base, choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } } },
    ];
    const final = await responsesOf(run(t.streamFromHub(), chunks)).finalResponse();
    expect(final.output).toMatchObject([{ type: 'message', content: [{ type: 'refusal', refusal: 'I cannot help.' }] }]);
  });

  it('a hub error chunk is an error event, which the SDK raises', async () => {
    const chunks = [hubChunks()[1], { data: { error: { message: 'Overloaded', type: 'api_error', param: null, code: 'overloaded' } } }];
    const events = run(t.streamFromHub(), chunks);
    expect(events.at(-1)).toMatchObject({ event: 'error', data: { type: 'error', code: 'overloaded', message: 'Overloaded', param: null } });
    await expect(responsesOf(events).finalResponse()).rejects.toMatchObject({ type: 'error', message: 'Overloaded' });
  });

  it('an error chunk first still opens the stream with response.created, so the SDK raises the error itself', async () => {
    const events = run(t.streamFromHub(), [{ data: { error: { message: 'Overloaded', type: 'api_error', param: null, code: null } } }]);
    expect(events.map((e) => e.event)).toEqual(['response.created', 'response.in_progress', 'error']);
    await expect(responsesOf(events).finalResponse()).rejects.toMatchObject({ type: 'error', message: 'Overloaded' });
  });
});

describe('stream round trips', () => {
  it('chat chunks -> Responses events -> chat chunks assemble the same completion', async () => {
    const direct = await chatOf(hubChunks()).finalChatCompletion();
    const twice = await chatOf(run(t.streamToHub(), run(t.streamFromHub(), hubChunks()))).finalChatCompletion();
    // The id takes the Responses shape on the way (resp_1); the chat client's translator gives it back its chat shape.
    expect(twice).toEqual({ ...direct, id: 'resp_1' });
  });

  it('Responses events -> chat chunks -> Responses events assemble the same output and usage', async () => {
    const direct = await responsesOf(upstreamResponses()).finalResponse();
    const twice = await responsesOf(run(t.streamFromHub(), run(t.streamToHub(), upstreamResponses()))).finalResponse();
    // Reasoning has no place in chat (docs/API.md); item ids are the translator's own.
    const shape = (r: typeof direct) => r.output.filter((o) => o.type !== 'reasoning').map(({ id: _id, ...rest }) => rest);
    expect(shape(twice)).toEqual(shape(direct));
    expect(twice.usage).toEqual(direct.usage);
    expect(twice.output_text).toBe(direct.output_text);
  });
});
