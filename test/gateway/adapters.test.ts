/**
 * The wire-format layer against the mock upstream, which writes both formats (JSON and
 * SSE) the way the providers do: request preparation, usage reading, and the stream
 * relay (byte identity, usage, the OpenAI usage chunk, arbitrary chunk boundaries, line
 * ends, partial streams, error and invalid events).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { ApiError } from '../../src/errors/catalogue.js';
import {
  formatOf,
  prepareUpstreamBody,
  requestedMaxTokens,
  deferred_data_chars_max,
  StreamRelay,
  usageFromResponse,
  type WireFormat,
} from '../../src/gateway/adapters.js';
import { countInputTokens, mockDirective, mockOutputText, type MockControls } from '../../src/gateway/mock/controls.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';

let mock: MockUpstream;

beforeAll(async () => {
  mock = await startMockUpstream();
});

afterAll(async () => {
  await mock.close();
});

const MODEL: Record<WireFormat, string> = { openai: 'gpt-4o-mini', anthropic: 'claude-haiku-4-5', responses: 'gpt-4o-mini' };

function clientBody(format: WireFormat, controls: MockControls, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const messages = [
    { role: 'user', content: 'what is the weather like' },
    { role: 'assistant', content: 'sunny' },
    { role: 'user', content: `and tomorrow ${mockDirective(controls)}` },
  ];
  return format === 'openai'
    ? { model: MODEL.openai, messages, ...extra }
    : { model: MODEL.anthropic, max_tokens: 64, system: 'be brief', messages, ...extra };
}

/** The mock's raw answer to `body`, as bytes (what a direct client of the provider receives). */
async function rawFetch(format: WireFormat, body: Record<string, unknown>): Promise<Buffer> {
  const res = await fetch(`${mock.url}${format === 'openai' ? '/chat/completions' : '/messages'}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  return Buffer.from(await res.arrayBuffer());
}

function sseEvents(bytes: Uint8Array): EventSourceMessage[] {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => events.push(e) });
  parser.feed(Buffer.from(bytes).toString('utf8'));
  return events;
}

/** Ids and timestamps differ between two answers of the mock; everything else is deterministic. */
function withoutIds(text: string): string {
  return text
    .replace(/chatcmpl-[A-Za-z0-9]+/g, 'chatcmpl-ID')
    .replace(/msg_01[A-Za-z0-9]+/g, 'msg_ID')
    .replace(/"created":\d+/g, '"created":0');
}

/** Feeds `bytes` to a new relay in slices of the given sizes (cycled), then ends it. */
function relay(format: WireFormat, wantsUsage: boolean, bytes: Buffer, sizes: number[] = [bytes.length]): { out: Buffer; r: StreamRelay } {
  const r = new StreamRelay(format, wantsUsage);
  const parts: Uint8Array[] = [];
  for (let at = 0, i = 0; at < bytes.length; i++) {
    const size = Math.max(1, sizes[i % sizes.length]!);
    parts.push(r.push(bytes.subarray(at, at + size)));
    at += size;
  }
  parts.push(r.end());
  return { out: Buffer.concat(parts), r };
}

/** The stream for `client` as the gateway would request it, and the usage of the same request answered whole. */
async function streamAndWholeUsage(format: WireFormat, client: Record<string, unknown>) {
  const prepared = prepareUpstreamBody(format, client, { upstreamModel: MODEL[format], maxTokens: null, stream: true });
  const upstream = await rawFetch(format, prepared.body);
  const wholeBody = prepareUpstreamBody(format, client, { upstreamModel: MODEL[format], maxTokens: null, stream: false }).body;
  const whole = usageFromResponse(format, JSON.parse((await rawFetch(format, wholeBody)).toString('utf8')));
  return { prepared, upstream, whole };
}

describe('requestedMaxTokens', () => {
  it('OpenAI reads max_completion_tokens, then max_tokens; Anthropic reads max_tokens', () => {
    expect(requestedMaxTokens('openai', { max_completion_tokens: 7, max_tokens: 9 })).toBe(7);
    expect(requestedMaxTokens('openai', { max_completion_tokens: null, max_tokens: 9 })).toBe(9);
    expect(requestedMaxTokens('openai', {})).toBeNull();
    expect(requestedMaxTokens('anthropic', { max_tokens: 5, max_completion_tokens: 3 })).toBe(5);
    expect(requestedMaxTokens('anthropic', {})).toBeNull();
  });

  it.each([
    ['openai', { max_completion_tokens: 0 }, 'max_completion_tokens'],
    ['openai', { max_tokens: 1.5 }, 'max_tokens'],
    ['openai', { max_completion_tokens: 4, max_tokens: '4' }, 'max_tokens'],
    ['anthropic', { max_tokens: -1 }, 'max_tokens'],
  ] as const)('%s %j is a 400 invalid_request naming %s', (format, body, param) => {
    const err = (() => {
      try {
        requestedMaxTokens(format, body);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ code: 'invalid_request', status: 400, param });
  });
});

describe('readBody', () => {
  const messages = [{ role: 'user', content: 'hi' }];

  it('reads the model, stream, the winning output limit and the answers, and leaves the body as it was', () => {
    const body = { model: 'm', messages, stream: true, max_completion_tokens: null, max_tokens: 9, n: 3, extra: { nested: [1] } };
    const before = structuredClone(body);
    expect(formatOf('openai').readBody(body)).toEqual({ model: 'm', stream: true, limit: 9, answers: 3, parts: { images: 0, files: 0 } });
    expect(body).toEqual(before);
    expect(formatOf('openai').readBody({ model: 'm', messages, max_completion_tokens: 7, max_tokens: 9 })).toEqual({ model: 'm', stream: false, limit: 7, answers: 1, parts: { images: 0, files: 0 } });
    expect(formatOf('anthropic').readBody({ model: 'm', messages, max_tokens: 5, max_completion_tokens: 3, n: 4 })).toEqual({ model: 'm', stream: false, limit: 5, answers: 1, parts: { images: 0, files: 0 } });
    expect(formatOf('anthropic').readBody({ model: 'm', messages, stream: false })).toEqual({ model: 'm', stream: false, limit: null, answers: 1, parts: { images: 0, files: 0 } });
  });

  it('counts the image and file parts of each format, where the hold adds their bounds', () => {
    const openaiBody = {
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image_url', image_url: { url: 'https://x/1.png' } }, { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] },
        { role: 'user', content: [{ type: 'file', file: { file_id: 'file-1' } }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }, null, 'text'] },
        // The other format's part names are not this format's parts.
        { role: 'user', content: [{ type: 'image', source: {} }, { type: 'document', source: {} }] },
      ],
    };
    expect(formatOf('openai').readBody(openaiBody).parts).toEqual({ images: 2, files: 1 });
    const anthropicBody = {
      model: 'm',
      system: [{ type: 'text', text: 'be brief' }],
      messages: [
        { role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://x/1.png' } }, { type: 'document', source: { type: 'file', file_id: 'f' } }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'n', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'image', source: {} }, { type: 'document', source: {} }, { type: 'text', text: 'x' }] }, { type: 'tool_result', tool_use_id: 't', content: 'plain' }] },
        { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/2.png' } }, { type: 'file', file: {} }] },
        { role: 'user', content: 'hi' },
        // Plain text is bounded by its bytes; a document of content blocks by its images.
        { role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'words' } }, { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'a' }, { type: 'image', source: {} }] } }] },
      ],
    };
    expect(formatOf('anthropic').readBody(anthropicBody).parts).toEqual({ images: 3, files: 2 });
  });

  it.each([
    ['openai', {}, 'model', 'model is required'],
    ['openai', { model: '', messages: 'x' }, 'model', 'model is required'],
    ['anthropic', { model: 7, messages }, 'model', 'model is required'],
    ['openai', { model: 'm', messages: {}, stream: 'yes' }, 'messages', 'messages must be an array'],
    ['anthropic', { model: 'm', messages, stream: null, max_tokens: 0 }, 'stream', 'stream must be a boolean'],
    ['openai', { model: 'm', messages, max_completion_tokens: 0, n: 0 }, 'max_completion_tokens', 'max_completion_tokens must be a positive integer'],
    // Every limit field is checked, also past the one that wins.
    ['openai', { model: 'm', messages, max_completion_tokens: 4, max_tokens: '4' }, 'max_tokens', 'max_tokens must be a positive integer'],
    ['anthropic', { model: 'm', messages, max_tokens: 1.5 }, 'max_tokens', 'max_tokens must be a positive integer'],
    ['openai', { model: 'm', messages, n: 129 }, 'n', 'n must be an integer from 1 to 128'],
    ['openai', { model: 'm', messages, n: 1.5 }, 'n', 'n must be an integer from 1 to 128'],
  ] as const)('%s %j is a 400 invalid_request naming the first field at fault (%s)', (format, body, param, message) => {
    let err: unknown;
    try {
      formatOf(format).readBody(body as Record<string, unknown>);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ code: 'invalid_request', status: 400, param, message });
  });
});

describe('prepareUpstreamBody', () => {
  it('copies every field, unknown and nested ones included, without touching the client body', () => {
    const nested = { deep: { list: [1, { x: 'y' }] } };
    const client = { ...clientBody('openai', {}), temperature: 0.2, x_vendor_flag: true, metadata: nested, tools: [{ type: 'function' }] };
    const before = structuredClone(client);
    const { body } = prepareUpstreamBody('openai', client, { upstreamModel: 'gpt-4.1-mini', maxTokens: null, stream: false });
    expect(body).toEqual({ ...before, model: 'gpt-4.1-mini' });
    expect(body.metadata).toBe(nested);
    expect(client).toEqual(before);
  });

  it('sends every field in the client\'s order, an own __proto__ field (JSON.parse makes one) and fields added by the gateway included', () => {
    for (const format of ['openai', 'anthropic'] as const) {
      const text = `{"__proto__":{"x":1},"model":"client-model","messages":[],"stream_options":{"__proto__":{"y":2}},"z":3}`;
      const client = JSON.parse(text) as Record<string, unknown>;
      const { body } = prepareUpstreamBody(format, client, { upstreamModel: 'm', maxTokens: 7, stream: true });
      expect(Object.getPrototypeOf(body)).toBe(Object.prototype);
      const sent = JSON.parse(JSON.stringify(body)) as Record<string, unknown>;
      expect(Object.keys(sent).slice(0, 5)).toEqual(['__proto__', 'model', 'messages', 'stream_options', 'z']);
      expect(Object.getOwnPropertyDescriptor(sent, '__proto__')?.value).toEqual({ x: 1 });
      expect(sent).toMatchObject({ model: 'm', stream: true });
      if (format === 'openai') expect(JSON.stringify(sent.stream_options)).toBe('{"__proto__":{"y":2},"include_usage":true}');
    }
  });

  it('puts the output limit in the field the client used (OpenAI), else max_completion_tokens', () => {
    const base = clientBody('openai', {});
    const prep = (extra: Record<string, unknown>) =>
      prepareUpstreamBody('openai', { ...base, ...extra }, { upstreamModel: 'm', maxTokens: 3, stream: false }).body;
    expect(prep({ max_tokens: 50 })).toMatchObject({ max_tokens: 3 });
    expect(prep({ max_tokens: 50 })).not.toHaveProperty('max_completion_tokens');
    expect(prep({ max_completion_tokens: 50 })).toMatchObject({ max_completion_tokens: 3 });
    expect(prep({ max_completion_tokens: 50 })).not.toHaveProperty('max_tokens');
    expect(prep({})).toMatchObject({ max_completion_tokens: 3 });
    expect(prep({ max_completion_tokens: 50, max_tokens: 60 })).toMatchObject({ max_completion_tokens: 3, max_tokens: 3 });
    expect(prepareUpstreamBody('openai', { ...base, max_tokens: 50 }, { upstreamModel: 'm', maxTokens: null, stream: false }).body.max_tokens).toBe(50);
    expect(prepareUpstreamBody('anthropic', clientBody('anthropic', {}), { upstreamModel: 'm', maxTokens: 3, stream: false }).body.max_tokens).toBe(3);
  });

  it('OpenAI streaming forces include_usage, keeps other stream_options and reports what the client asked', () => {
    const client = { ...clientBody('openai', {}), stream: true, stream_options: { include_obfuscation: false } };
    const asked = prepareUpstreamBody('openai', client, { upstreamModel: 'm', maxTokens: null, stream: true });
    expect(asked.body.stream_options).toEqual({ include_obfuscation: false, include_usage: true });
    expect(asked.clientWantsUsage).toBe(false);
    expect(client.stream_options).toEqual({ include_obfuscation: false });
    const withUsage = { ...client, stream_options: { include_usage: true } };
    expect(prepareUpstreamBody('openai', withUsage, { upstreamModel: 'm', maxTokens: null, stream: true }).clientWantsUsage).toBe(true);
    const whole = prepareUpstreamBody('openai', clientBody('openai', {}), { upstreamModel: 'm', maxTokens: null, stream: false });
    expect(whole.body).not.toHaveProperty('stream_options');
    expect(whole.body).not.toHaveProperty('stream');
    const anthropic = prepareUpstreamBody('anthropic', { ...clientBody('anthropic', {}), stream: true }, { upstreamModel: 'm', maxTokens: null, stream: true });
    expect(anthropic).toMatchObject({ clientWantsUsage: true, body: { stream: true } });
    expect(anthropic.body).not.toHaveProperty('stream_options');
  });

  it('the mock answers a prepared body with the upstream model and the lowered limit', async () => {
    for (const format of ['openai', 'anthropic'] as const) {
      const client = clientBody(format, { output_tokens: 9 }, format === 'openai' ? { max_tokens: 50 } : {});
      const { body } = prepareUpstreamBody(format, client, { upstreamModel: format === 'openai' ? 'gpt-4o' : 'claude-opus-5-5', maxTokens: 4, stream: false });
      const json = JSON.parse((await rawFetch(format, body)).toString('utf8'));
      expect(json.model).toBe(body.model);
      expect(usageFromResponse(format, json)?.output).toBe(4);
    }
  });
});

describe('usageFromResponse', () => {
  it('OpenAI: input excludes the cached tokens, which are billed as cache reads', async () => {
    const client = clientBody('openai', { output_tokens: 5, cache_read_tokens: 7 });
    const json = JSON.parse((await rawFetch('openai', client)).toString('utf8'));
    expect(usageFromResponse('openai', json)).toEqual({ input: countInputTokens('openai', client), output: 5, cacheRead: 7, cacheWrite: 0 });
  });

  it('Anthropic: input, cache read, cache creation and output each as reported', async () => {
    const client = clientBody('anthropic', { output_tokens: 6, cache_read_tokens: 11, cache_write_tokens: 13 });
    const json = JSON.parse((await rawFetch('anthropic', client)).toString('utf8'));
    expect(usageFromResponse('anthropic', json)).toEqual({ input: countInputTokens('anthropic', client), output: 6, cacheRead: 11, cacheWrite: 13 });
  });

  it('OpenAI cache_write_tokens are billed as cache writes, once', () => {
    const usage = { prompt_tokens: 100, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 20, cache_write_tokens: 30 } };
    expect(usageFromResponse('openai', { usage })).toEqual({ input: 50, output: 3, cacheRead: 20, cacheWrite: 30 });
  });

  it.each([
    ['openai', { id: 'x' }],
    ['openai', { usage: { prompt_tokens: 5, completion_tokens: -1 } }],
    ['openai', { usage: { prompt_tokens: 5, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 6 } } }],
    ['anthropic', { usage: { input_tokens: 5 } }],
    ['anthropic', { usage: { input_tokens: 5, output_tokens: 1, cache_read_input_tokens: '2' } }],
    ['anthropic', 'not an object'],
  ] as const)('%s %j has no usage the gateway can bill', (format, json) => {
    expect(usageFromResponse(format, json)).toBeNull();
  });
});

describe('StreamRelay, OpenAI', () => {
  const controls = { output_tokens: 6, cache_read_tokens: 4 };

  it('client without include_usage: gets exactly what the provider sends it, and the call is still billed exactly', async () => {
    const client = clientBody('openai', controls, { stream: true });
    const { prepared, upstream, whole } = await streamAndWholeUsage('openai', client);
    expect(prepared.clientWantsUsage).toBe(false);
    const { out, r } = relay('openai', false, upstream);
    const direct = await rawFetch('openai', client);
    expect(withoutIds(out.toString('utf8'))).toBe(withoutIds(direct.toString('utf8')));
    expect(sseEvents(out).map((e) => JSON.parse(e.data === '[DONE]' ? 'null' : e.data)?.usage)).not.toContain(null);
    // The upstream did send the usage chunk; the relay read it.
    expect(sseEvents(upstream)).toHaveLength(sseEvents(out).length + 1);
    expect(whole).not.toBeNull();
    expect(r.usage()).toEqual(whole);
    expect(r.usageComplete()).toBe(true);
    expect(r.sawTerminal()).toBe(true);
    expect(r.error()).toBeNull();
    expect(r.invalid()).toBeNull();
  });

  it('client with include_usage: every byte as the upstream sent it, usage chunk included', async () => {
    const client = clientBody('openai', controls, { stream: true, stream_options: { include_usage: true } });
    const { prepared, upstream, whole } = await streamAndWholeUsage('openai', client);
    expect(prepared.clientWantsUsage).toBe(true);
    const { out, r } = relay('openai', true, upstream);
    expect(out.equals(upstream)).toBe(true);
    const usageChunk = sseEvents(out).map((e) => (e.data === '[DONE]' ? null : JSON.parse(e.data))).find((c) => c?.usage);
    expect(usageChunk.choices).toEqual([]);
    expect(r.usage()).toEqual(whole);
  });

  it('parses only the first event and the ones that can hold usage or an error, and bills the same', async () => {
    for (const wantsUsage of [false, true]) {
      const client = clientBody('openai', { output_tokens: 20 }, { stream: true, ...(wantsUsage ? { stream_options: { include_usage: true } } : {}) });
      const { upstream, whole } = await streamAndWholeUsage('openai', client);
      const parse = vi.spyOn(JSON, 'parse');
      try {
        const { r } = relay('openai', wantsUsage, upstream);
        // The first chunk and the usage chunk; not the 20 text deltas (each with "usage":null).
        expect(parse.mock.calls.length, `wantsUsage ${wantsUsage}`).toBe(2);
        expect(r.usage()).toEqual(whole);
        expect(r.relayedOutputEstimate()).toBe(Math.max(Math.ceil(mockOutputText(20).length / 4), 20));
      } finally {
        parse.mockRestore();
      }
    }
  });

  it('a delta that only looks like JSON is forwarded as it is, and found when the output is estimated', () => {
    const first = 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n';
    const good = 'data: {"choices":[{"index":0,"delta":{"content":"abcd"}}]}\n\n';
    const bad = 'data: {"choices":[{"index":0,"delta":{"content":"x"}}\n\n';
    const r = new StreamRelay('openai', true);
    const out = Buffer.from(r.push(Buffer.from(first + good + bad))).toString('utf8');
    expect(out).toBe(first + good + bad);
    expect(r.invalid()).toBeNull();
    expect(r.relayedOutputEstimate()).toBe(1);
    expect(r.invalid()).toMatch(/not a JSON object/);
    expect(r.push(Buffer.from(good))).toHaveLength(0);
  });

  it('counts deferred deltas once they pass the bound, so a long stream holds at most that much', () => {
    const delta = `data: {"choices":[{"index":0,"delta":{"content":"${'y'.repeat(1000)}"}}]}\n\n`;
    const n = Math.ceil(deferred_data_chars_max / 1000) + 2;
    const r = new StreamRelay('openai', true);
    const parse = vi.spyOn(JSON, 'parse');
    try {
      for (let i = 0; i < n; i++) r.push(Buffer.from(delta));
      // The first event, then every deferred one once their data passed the bound.
      expect(parse.mock.calls.length).toBeGreaterThan(n / 2);
    } finally {
      parse.mockRestore();
    }
    expect(r.relayedOutputEstimate()).toBe(Math.ceil((n * 1000) / 4));
  });

  it('any chunk boundaries and any line ends give the same output and usage', async () => {
    const client = clientBody('openai', controls, { stream: true });
    const { upstream, whole } = await streamAndWholeUsage('openai', client);
    const lf = upstream.toString('utf8');
    for (const wantsUsage of [false, true]) {
      for (const lineEnd of ['\n', '\r\n', '\r']) {
        const bytes = Buffer.from(lf.replaceAll('\n', lineEnd));
        const expected = relay('openai', wantsUsage, bytes).out;
        if (wantsUsage) expect(expected.equals(bytes)).toBe(true);
        else expect(expected.toString('utf8')).toBe(relay('openai', false, upstream).out.toString('utf8').replaceAll('\n', lineEnd));
        fc.assert(
          fc.property(fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 40 }), (sizes) => {
            const { out, r } = relay('openai', wantsUsage, bytes, sizes);
            expect(out.equals(expected)).toBe(true);
            expect(r.usage()).toEqual(whole);
            expect(r.sawTerminal()).toBe(true);
          }),
          { numRuns: 15 },
        );
      }
    }
  });

  it('forwards complete events only, and estimates the output already forwarded', async () => {
    const n = 9;
    const upstream = (await streamAndWholeUsage('openai', clientBody('openai', { output_tokens: n }, { stream: true }))).upstream;
    const events = upstream.toString('utf8').split('\n\n');
    for (const k of [0, 1, 4, n]) {
      // The role chunk, then k token chunks, then half of the next event.
      const cut = Buffer.byteLength(events.slice(0, 1 + k).join('\n\n') + '\n\n') + Math.floor(events[1 + k]!.length / 2);
      const r = new StreamRelay('openai', false);
      const out = r.push(upstream.subarray(0, cut));
      expect(sseEvents(out)).toHaveLength(1 + k);
      expect(Buffer.from(out).toString('utf8').endsWith('\n\n')).toBe(true);
      expect(r.relayedOutputEstimate()).toBe(Math.max(Math.ceil(mockOutputText(k).length / 4), k));
      expect(r.sawTerminal()).toBe(false);
      expect(r.usage()).toBeNull();
    }
  });

  it('a stream the upstream cuts mid-way: what came is relayed, no usage, no terminal', async () => {
    const res = await fetch(`${mock.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(prepareUpstreamBody('openai', clientBody('openai', { fail: 'midstream', output_tokens: 10 }, { stream: true }), { upstreamModel: MODEL.openai, maxTokens: null, stream: true }).body),
    });
    const r = new StreamRelay('openai', false);
    const parts: Uint8Array[] = [];
    await expect(
      (async () => {
        for await (const chunk of res.body!) parts.push(r.push(chunk));
      })(),
    ).rejects.toThrow();
    const text = sseEvents(Buffer.concat(parts)).map((e) => JSON.parse(e.data).choices[0].delta.content).join('');
    expect(text).toBe(mockOutputText(3));
    expect(r.relayedOutputEstimate()).toBe(Math.max(Math.ceil(mockOutputText(3).length / 4), 3));
    expect(r.usage()).toBeNull();
    expect(r.sawTerminal()).toBe(false);
  });

  it('removes a usage field placed elsewhere by re-serializing that chunk only', () => {
    const chunk = { usage: null, id: 'c1', choices: [{ index: 0, delta: { content: 'h\u00e9 "q"' } }] };
    const other = 'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"x"}}]}\n\n';
    const r = new StreamRelay('openai', false);
    const out = Buffer.from(r.push(Buffer.from(`id: 7\ndata: ${JSON.stringify(chunk)}\n\n${other}`))).toString('utf8');
    const { usage: _omitted, ...rest } = chunk;
    expect(out).toBe(`id: 7\ndata: ${JSON.stringify(rest)}\n\n${other}`);
  });

  it('an error chunk is forwarded and reported', () => {
    const bytes = Buffer.from('data: {"error":{"message":"overloaded","type":"server_error"}}\n\n');
    const r = new StreamRelay('openai', false);
    expect(Buffer.from(r.push(bytes)).equals(bytes)).toBe(true);
    expect(r.error()).toEqual({ error: { message: 'overloaded', type: 'server_error' } });
  });

  it('data that is not JSON makes the stream invalid and stops the relay', async () => {
    const bytes = await rawFetch('openai', clientBody('openai', { fail: 'invalid' }, { stream: true }));
    const r = new StreamRelay('openai', true);
    expect(r.push(bytes)).toHaveLength(0);
    expect(r.end()).toHaveLength(0);
    expect(r.invalid()).toMatch(/not a JSON object/);
    expect(r.usage()).toBeNull();
  });

  it('an event longer than the limit makes the stream invalid', () => {
    const r = new StreamRelay('openai', true, { eventBytesMax: 64 });
    const first = Buffer.from('data: {"choices":[]}\n\n');
    expect(Buffer.from(r.push(Buffer.concat([first, Buffer.from(`data: "${'x'.repeat(80)}`)]))).equals(first)).toBe(true);
    expect(r.invalid()).toMatch(/longer than 64 bytes/);
    expect(r.push(Buffer.from('"\n\n'))).toHaveLength(0);
  });
});

describe('StreamRelay, Anthropic', () => {
  const controls = { output_tokens: 7, cache_read_tokens: 11, cache_write_tokens: 13 };

  it('every byte as the upstream sent it, the same events as a direct call, usage equal to the whole answer', async () => {
    const client = clientBody('anthropic', controls, { stream: true });
    const { upstream, whole } = await streamAndWholeUsage('anthropic', client);
    const { out, r } = relay('anthropic', true, upstream);
    expect(out.equals(upstream)).toBe(true);
    const direct = await rawFetch('anthropic', client);
    expect(sseEvents(out).map((e) => [e.event, withoutIds(e.data)])).toEqual(sseEvents(direct).map((e) => [e.event, withoutIds(e.data)]));
    expect(whole).not.toBeNull();
    expect(r.usage()).toEqual(whole);
    expect(r.usageComplete()).toBe(true);
    expect(r.sawTerminal()).toBe(true);
    expect(r.relayedOutputEstimate()).toBe(Math.max(Math.ceil(mockOutputText(7).length / 4), 7));
  });

  it('any chunk boundaries and any line ends give the same output and usage', async () => {
    const { upstream, whole } = await streamAndWholeUsage('anthropic', clientBody('anthropic', controls, { stream: true }));
    for (const lineEnd of ['\n', '\r\n', '\r']) {
      const bytes = Buffer.from(upstream.toString('utf8').replaceAll('\n', lineEnd));
      fc.assert(
        fc.property(fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 40 }), (sizes) => {
          const { out, r } = relay('anthropic', true, bytes, sizes);
          expect(out.equals(bytes)).toBe(true);
          expect(r.usage()).toEqual(whole);
          expect(r.sawTerminal()).toBe(true);
        }),
        { numRuns: 15 },
      );
    }
  });

  it('parses only message_start, message_delta, message_stop and errors, not the text deltas', async () => {
    const client = clientBody('anthropic', { output_tokens: 20 }, { stream: true });
    const { upstream, whole } = await streamAndWholeUsage('anthropic', client);
    const parse = vi.spyOn(JSON, 'parse');
    try {
      const { r } = relay('anthropic', true, upstream);
      expect(parse.mock.calls.length).toBe(3);
      expect(r.usage()).toEqual(whole);
      expect(r.sawTerminal()).toBe(true);
      expect(r.relayedOutputEstimate()).toBe(Math.max(Math.ceil(mockOutputText(20).length / 4), 20));
    } finally {
      parse.mockRestore();
    }
  });

  it('after message_start only: exact input and cache counts, output not final', async () => {
    const client = clientBody('anthropic', controls, { stream: true });
    const { upstream, whole } = await streamAndWholeUsage('anthropic', client);
    const firstEvent = upstream.subarray(0, upstream.indexOf('\n\n') + 2);
    const r = new StreamRelay('anthropic', true);
    expect(Buffer.from(r.push(firstEvent)).equals(firstEvent)).toBe(true);
    expect(r.usage()).toEqual({ ...whole, output: 1 });
    expect(r.usageComplete()).toBe(false);
    expect(r.relayedOutputEstimate()).toBe(0);
  });

  it('a last event without its blank line is forwarded and read by end()', async () => {
    const { upstream } = await streamAndWholeUsage('anthropic', clientBody('anthropic', controls, { stream: true }));
    const truncated = upstream.subarray(0, upstream.length - 1);
    const r = new StreamRelay('anthropic', true);
    const head = Buffer.from(r.push(truncated));
    expect(r.sawTerminal()).toBe(false);
    const tail = Buffer.from(r.end());
    expect(tail.toString('utf8')).toBe('event: message_stop\ndata: {"type":"message_stop"}\n');
    expect(Buffer.concat([head, tail]).equals(truncated)).toBe(true);
    expect(r.sawTerminal()).toBe(true);
  });

  it('an error event is forwarded and reported', async () => {
    const { upstream } = await streamAndWholeUsage('anthropic', clientBody('anthropic', controls, { stream: true }));
    const start = upstream.subarray(0, upstream.indexOf('\n\n') + 2);
    const error = { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } };
    const bytes = Buffer.concat([start, Buffer.from(`event: error\ndata: ${JSON.stringify(error)}\n\n`)]);
    const { out, r } = relay('anthropic', true, bytes, [3]);
    expect(out.equals(bytes)).toBe(true);
    expect(r.error()).toEqual(error);
    expect(r.sawTerminal()).toBe(false);
    expect(r.usageComplete()).toBe(false);
  });

  it('counts tool input and thinking deltas as output', () => {
    const delta = (d: Record<string, unknown>) => `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: d })}\n\n`;
    const r = new StreamRelay('anthropic', true);
    r.push(Buffer.from(delta({ type: 'thinking_delta', thinking: 'abcdefgh' }) + delta({ type: 'input_json_delta', partial_json: '{"a":1}' }) + delta({ type: 'signature_delta', signature: 'zzzz' })));
    expect(r.relayedOutputEstimate()).toBe(Math.max(Math.ceil((8 + 7) / 4), 2));
  });
});
