import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { countInputTokens, mockDirective, mockOutputText } from '../../src/gateway/mock/controls.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';

const KEY = 'sk-mock-test-key';

let mock: MockUpstream;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  mock = await startMockUpstream({ requireKey: KEY });
  openai = new OpenAI({ baseURL: mock.url, apiKey: KEY, maxRetries: 0, timeout: 5_000 });
  // The Anthropic SDK appends /v1/messages itself, so it gets the origin.
  anthropic = new Anthropic({ baseURL: mock.url.replace(/\/v1$/, ''), apiKey: KEY, maxRetries: 0, timeout: 5_000 });
});

afterAll(async () => {
  await mock.close();
});

describe('countInputTokens', () => {
  it('counts words + 3 per message, strips directives, reads system for anthropic', () => {
    expect(
      countInputTokens('openai', {
        messages: [
          { role: 'system', content: 'You are  terse.' },
          { role: 'user', content: [{ type: 'text', text: 'hello world' }, { type: 'image_url', image_url: { url: 'x' } }] },
          { role: 'assistant', content: null },
        ],
      }),
    ).toBe(3 + 2 + 0 + 3 * 3);
    expect(
      countInputTokens('anthropic', {
        system: [{ type: 'text', text: 'be brief' }],
        messages: [{ role: 'user', content: `one two three ${mockDirective({ output_tokens: 4 })}` }],
      }),
    ).toBe(2 + 3 + 3);
  });
});

describe('OpenAI chat completions via the openai SDK', () => {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'You are a mock.' },
    { role: 'user', content: `Say something nice ${mockDirective({ output_tokens: 5, cache_read_tokens: 7 })}` },
  ];
  const input = countInputTokens('openai', { messages });

  it('non-streaming: usage follows the prediction, model is echoed', async () => {
    const res = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages });
    expect(res.id).toMatch(/^chatcmpl-/);
    expect(res.object).toBe('chat.completion');
    expect(res.model).toBe('gpt-4o-mini');
    expect(res.choices[0]!.message.content).toBe('tok1 tok2 tok3 tok4 tok5');
    expect(res.choices[0]!.finish_reason).toBe('stop');
    expect(res.usage).toMatchObject({
      prompt_tokens: input + 7,
      completion_tokens: 5,
      total_tokens: input + 7 + 5,
      prompt_tokens_details: { cached_tokens: 7, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    const last = mock.requests.at(-1)!;
    expect(last.path).toBe('/v1/chat/completions');
    expect(last.headers.authorization).toBe(`Bearer ${KEY}`);
    expect((last.body as { model: string }).model).toBe('gpt-4o-mini');
  });

  it('streaming with include_usage: same text, chunk per token, final usage chunk', async () => {
    const stream = await openai.chat.completions.create({
      model: 'gpt-4o-mini',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    // role chunk + 5 token chunks + finish chunk + usage chunk
    expect(chunks).toHaveLength(8);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(new Set(chunks.map((c) => c.created)).size).toBe(1);
    expect(chunks.every((c) => c.model === 'gpt-4o-mini' && c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0]!.choices[0]!.delta).toMatchObject({ role: 'assistant', content: '' });
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(text).toBe('tok1 tok2 tok3 tok4 tok5');
    expect(chunks[6]!.choices[0]!.finish_reason).toBe('stop');
    const usageChunk = chunks[7]!;
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toMatchObject({
      prompt_tokens: input + 7,
      completion_tokens: 5,
      total_tokens: input + 12,
      prompt_tokens_details: { cached_tokens: 7 },
    });
  });

  it('streaming without include_usage yields no usage at all', async () => {
    const stream = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages, stream: true });
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks).toHaveLength(7);
    expect(chunks.every((c) => c.usage === undefined && c.choices.length === 1)).toBe(true);
  });

  it('chat.completions.stream() helper assembles the same completion', async () => {
    const final = await openai.chat.completions
      .stream({ model: 'gpt-4o-mini', messages, stream_options: { include_usage: true } })
      .finalChatCompletion();
    expect(final.choices[0]!.message.content).toBe('tok1 tok2 tok3 tok4 tok5');
    expect(final.usage?.prompt_tokens).toBe(input + 7);
  });

  it('max_completion_tokens truncates with finish_reason "length"', async () => {
    const res = await openai.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'long answer please' }],
      max_completion_tokens: 4,
    });
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.choices[0]!.message.content).toBe(mockOutputText(4));
    expect(res.usage?.completion_tokens).toBe(4);
    expect(res.usage?.prompt_tokens).toBe(3 + 3);
  });

  it('default output is 12 tokens; max_tokens above it is not a truncation', async () => {
    const res = await openai.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 100,
    });
    expect(res.usage?.completion_tokens).toBe(12);
    expect(res.choices[0]!.finish_reason).toBe('stop');
  });

  it('fail=500 (directive) gives APIError 500 in OpenAI error format', async () => {
    const err = await openai.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: '[[mock fail=500]] hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(500);
    expect((err as InstanceType<typeof OpenAI.APIError>).type).toBe('server_error');
  });

  it('fail=429 (header) gives RateLimitError', async () => {
    const err = await openai.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'x-mock-fail': '429' } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('rate_limit_exceeded');
  });

  it('rejects a wrong key with 401', async () => {
    const bad = new OpenAI({ baseURL: mock.url, apiKey: 'wrong', maxRetries: 0 });
    const err = await bad.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(401);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('invalid_api_key');
  });

  it('midstream failure surfaces as an error after some tokens', async () => {
    const stream = await openai.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: '[[mock fail=midstream output_tokens=10]]' }],
      stream: true,
    });
    let got = '';
    const err = await (async () => {
      for await (const c of stream) got += c.choices[0]?.delta.content ?? '';
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(got).toBe('tok1 tok2 tok3');
  });

  it('models list', async () => {
    const page = await openai.models.list();
    expect(page.data.map((m) => m.id)).toContain('gpt-4o-mini');
  });
});

describe('Anthropic messages via @anthropic-ai/sdk', () => {
  const system = 'You are a careful mock.';
  const messages: Anthropic.MessageParam[] = [
    { role: 'user', content: [{ type: 'text', text: 'first question here' }] },
    { role: 'assistant', content: 'an answer' },
    {
      role: 'user',
      content: `and a follow up ${mockDirective({ output_tokens: 6, cache_read_tokens: 11, cache_write_tokens: 13 })}`,
    },
  ];
  const input = countInputTokens('anthropic', { system, messages });

  it('non-streaming: usage excludes cache tokens from input_tokens', async () => {
    const msg = await anthropic.messages.create({ model: 'claude-sonnet-5-5', max_tokens: 100, system, messages });
    expect(input).toBe(5 + 3 + 2 + 4 + 3 * 3);
    expect(msg.id).toMatch(/^msg_/);
    expect(msg.type).toBe('message');
    expect(msg.role).toBe('assistant');
    expect(msg.model).toBe('claude-sonnet-5-5');
    expect(msg.stop_reason).toBe('end_turn');
    expect(msg.content).toEqual([{ type: 'text', text: mockOutputText(6) }]);
    expect(msg.usage).toMatchObject({
      input_tokens: input,
      output_tokens: 6,
      cache_read_input_tokens: 11,
      cache_creation_input_tokens: 13,
    });
    const last = mock.requests.at(-1)!;
    expect(last.path).toBe('/v1/messages');
    // @anthropic-ai/sdk >= 1.0 sends the key as a bearer token, not x-api-key.
    expect(last.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(last.headers['anthropic-version']).toBeDefined();
  });

  it('messages.stream().finalMessage() matches the non-streaming message', async () => {
    const stream = anthropic.messages.stream({ model: 'claude-sonnet-5-5', max_tokens: 100, system, messages });
    const deltas: string[] = [];
    stream.on('text', (t) => deltas.push(t));
    const final = await stream.finalMessage();
    expect(deltas).toEqual(['tok1', ' tok2', ' tok3', ' tok4', ' tok5', ' tok6']);
    expect(final.content).toEqual([{ type: 'text', text: mockOutputText(6) }]);
    expect(final.stop_reason).toBe('end_turn');
    expect(final.usage).toMatchObject({
      input_tokens: input,
      output_tokens: 6,
      cache_read_input_tokens: 11,
      cache_creation_input_tokens: 13,
    });
  });

  it('raw stream has the exact event sequence', async () => {
    const stream = await anthropic.messages.create({
      model: 'claude-haiku-5-5',
      max_tokens: 3,
      messages: [{ role: 'user', content: 'hello' }],
      stream: true,
    });
    const types: string[] = [];
    let start: Anthropic.RawMessageStartEvent | undefined;
    let delta: Anthropic.RawMessageDeltaEvent | undefined;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'message_start') start = ev;
      if (ev.type === 'message_delta') delta = ev;
    }
    expect(types).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]); // ping is consumed by the SDK
    expect(start!.message.usage.output_tokens).toBe(1);
    expect(start!.message.usage.input_tokens).toBe(1 + 3);
    expect(start!.message.stop_reason).toBeNull();
    expect(delta!.delta.stop_reason).toBe('max_tokens');
    expect(delta!.usage.output_tokens).toBe(3);
  });

  it('missing max_tokens is a 400 in Anthropic error format (x-api-key auth accepted)', async () => {
    const res = await fetch(`${mock.url}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': KEY },
      body: JSON.stringify({ model: 'claude-sonnet-5-5', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: 'max_tokens: Field required' },
    });
  });

  it('fail=500 gives APIError 500 with api_error type', async () => {
    const err = await anthropic.messages
      .create({ model: 'claude-sonnet-5-5', max_tokens: 10, messages: [{ role: 'user', content: '[[mock fail=500]]' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.APIError);
    expect(err).toBeInstanceOf(Anthropic.InternalServerError);
    expect((err as InstanceType<typeof Anthropic.APIError>).status).toBe(500);
    expect((err as InstanceType<typeof Anthropic.APIError>).type).toBe('api_error');
  });

  it('rejects a wrong key with 401 authentication_error', async () => {
    const bad = new Anthropic({ baseURL: mock.url.replace(/\/v1$/, ''), apiKey: 'nope', maxRetries: 0 });
    const err = await bad.messages
      .create({ model: 'claude-sonnet-5-5', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((err as InstanceType<typeof Anthropic.APIError>).type).toBe('authentication_error');
  });

  it('timeout holds the request until the client gives up', async () => {
    const t0 = Date.now();
    const err = await anthropic.messages
      .create(
        { model: 'claude-sonnet-5-5', max_tokens: 10, messages: [{ role: 'user', content: '[[mock fail=timeout]]' }] },
        { timeout: 200 },
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.APIConnectionTimeoutError);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(190);
  });

  it('models list in Anthropic shape', async () => {
    const page = await anthropic.models.list();
    expect(page.data.map((m) => m.id)).toContain('claude-sonnet-5-5');
    expect(page.data[0]!.type).toBe('model');
  });

  it('reset and invalid are client-side failures', async () => {
    const reset = await anthropic.messages
      .create({ model: 'c', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }, { headers: { 'x-mock-fail': 'reset' } })
      .catch((e: unknown) => e);
    expect(reset).toBeInstanceOf(Anthropic.APIConnectionError);
    const invalid = await anthropic.messages
      .create({ model: 'c', max_tokens: 10, messages: [{ role: 'user', content: '[[mock fail=invalid]]' }] })
      .catch((e: unknown) => e);
    expect(invalid).toBeInstanceOf(SyntaxError);
  });
});

describe('controls for what the gateway cannot foresee', () => {
  it('OpenAI n: n answers, whole and streamed, and completion_tokens counts them all', async () => {
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: `hi ${mockDirective({ output_tokens: 4 })}` }];
    const whole = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages, n: 3 });
    expect(whole.choices.map((c) => [c.index, c.message.content])).toEqual([0, 1, 2].map((i) => [i, mockOutputText(4)]));
    expect(whole.usage?.completion_tokens).toBe(12);
    const texts = ['', '', ''];
    let usage: OpenAI.CompletionUsage | null | undefined;
    const stream = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages, n: 3, stream: true, stream_options: { include_usage: true } });
    for await (const chunk of stream) {
      for (const c of chunk.choices) texts[c.index] += c.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(texts).toEqual([mockOutputText(4), mockOutputText(4), mockOutputText(4)]);
    expect(usage?.completion_tokens).toBe(12);
  });

  it('input_tokens replaces the counted input in both formats', async () => {
    const o = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: `x ${mockDirective({ input_tokens: 5000 })}` }] });
    expect(o.usage?.prompt_tokens).toBe(5000);
    const a = await anthropic.messages.create({ model: 'claude-haiku-5-5', max_tokens: 10, messages: [{ role: 'user', content: `x ${mockDirective({ input_tokens: 700 })}` }] });
    expect(a.usage.input_tokens).toBe(700);
  });

  it('no_usage=1: no usage in a JSON answer nor in a stream that asked for it', async () => {
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: `x ${mockDirective({ no_usage: 1 })}` }];
    const whole = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages });
    expect(whole.usage).toBeUndefined();
    let sawUsage = false;
    let text = '';
    const stream = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages, stream: true, stream_options: { include_usage: true } });
    for await (const chunk of stream) {
      if (chunk.usage) sawUsage = true;
      text += chunk.choices[0]?.delta.content ?? '';
    }
    expect(sawUsage).toBe(false);
    expect(text).toBe(mockOutputText(12));
    const events: string[] = [];
    const a = await anthropic.messages.create({ model: 'claude-haiku-5-5', max_tokens: 10, stream: true, messages: [{ role: 'user', content: `x ${mockDirective({ no_usage: 1 })}` }] });
    for await (const e of a) {
      events.push(e.type);
      if (e.type === 'message_delta') expect((e as { usage?: unknown }).usage).toBeUndefined();
    }
    expect(events).toContain('message_stop');
  });
});

describe('latency controls', () => {
  it('latency_ms delays the response; chunk_delay_ms spaces the events', async () => {
    let t0 = Date.now();
    await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '[[mock latency_ms=80]]' }] });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(75);

    t0 = Date.now();
    const stream = await openai.chat.completions.create({
      model: 'm',
      stream: true,
      messages: [{ role: 'user', content: 'x' }],
    }, { headers: { 'x-mock-output-tokens': '3', 'x-mock-chunk_delay_ms': '20' } });
    let n = 0;
    for await (const _ of stream) n++;
    expect(n).toBe(5); // role + 3 tokens + finish
    expect(Date.now() - t0).toBeGreaterThanOrEqual(5 * 20 - 10); // 5 gaps incl. [DONE]
  });

  it('chunk_delay_ms keeps its schedule when a timer fires late: the late time does not add up', async () => {
    const delay = 50;
    // The role chunk, 8 tokens, the finish chunk and [DONE]: 10 gaps, 500 ms on schedule.
    const res = await fetch(`${mock.url}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: mockDirective({ output_tokens: 8, chunk_delay_ms: delay }) }] }),
    });
    const reader = res.body!.getReader();
    const t0 = performance.now();
    await reader.read();
    // The event loop (the mock's too) stalls for 250 ms after the first event: timers chained
    // one after the other would end the stream at least 9 x 50 + 250 = 700 ms later.
    const stalled = performance.now();
    while (performance.now() - stalled < 250);
    let text = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
    const took = performance.now() - t0;
    expect(text).toContain('data: [DONE]');
    expect(took).toBeGreaterThanOrEqual(10 * delay - 10);
    expect(took).toBeLessThan(650);
  });

  it('pause_before/pause_ms: the headers come at once, then silence before event N', async () => {
    const streamed = async (pause_before: number) => {
      const t0 = performance.now();
      const res = await fetch(`${mock.url}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: mockDirective({ output_tokens: 3, pause_before, pause_ms: 200 }) }] }),
      });
      const headers = performance.now() - t0;
      const reader = res.body!.getReader();
      const first = new TextDecoder().decode((await reader.read()).value);
      const firstAt = performance.now() - t0;
      while (!(await reader.read()).done);
      return { headers, firstAt, first, total: performance.now() - t0 };
    };
    const before = await streamed(1);
    expect(before.headers).toBeLessThan(150);
    expect(before.firstAt).toBeGreaterThanOrEqual(190);
    const later = await streamed(3);
    expect(later.firstAt).toBeLessThan(150);
    expect(later.first).toContain('"role":"assistant"');
    expect(later.total).toBeGreaterThanOrEqual(190);
  });

  it('keeps only the last 200 requests', async () => {
    const m = await startMockUpstream();
    const origin = m.url.replace(/\/v1$/, '');
    await Promise.all(
      Array.from({ length: 210 }, (_, i) =>
        fetch(`${origin}/v1/chat/completions`, {
          method: 'POST',
          body: JSON.stringify({ model: `m${i}`, messages: [] }),
        }).then((r) => r.arrayBuffer()),
      ),
    );
    expect(m.requests).toHaveLength(200);
    await m.close();
  });

  it('close() ends held requests and the server without hanging', async () => {
    const m = await startMockUpstream();
    const client = new OpenAI({ baseURL: m.url, apiKey: 'k', maxRetries: 0 });
    const pending = client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: '[[mock fail=timeout]]' }] })
      .catch((e: unknown) => e);
    const slow = client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: '[[mock latency_ms=60000]]' }] })
      .catch((e: unknown) => e);
    // wait until both requests are held by the mock, then close under them
    for (let i = 0; i < 200 && m.requests.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    await m.close();
    expect(await pending).toBeInstanceOf(OpenAI.APIConnectionError);
    expect(await slow).toBeInstanceOf(OpenAI.APIConnectionError);
    expect(m.requests).toHaveLength(2);
  });
});
