/**
 * UpstreamClient against the mock upstream: the request each format gets, upstream HTTP
 * errors relayed untouched, failures classified by kind (unreachable, timeout, aborted),
 * errors on the body stream, and connection reuse counted at a TCP proxy in front of the
 * mock.
 */
import net from 'node:net';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { StreamRelay } from '../../src/gateway/adapters.js';
import { mockDirective, mockOutputText, startMockUpstream, type MockControls, type MockUpstream } from '../../src/gateway/mock/server.js';
import { ANTHROPIC_VERSION_DEFAULT, UpstreamClient, UpstreamError, type UpstreamTarget } from '../../src/gateway/upstream.js';

const KEY = 'sk-upstream-test';

let mock: MockUpstream;
let client: UpstreamClient;

beforeAll(async () => {
  mock = await startMockUpstream({ requireKey: KEY });
  client = new UpstreamClient({ headersTimeoutMs: 2_000, bodyTimeoutMs: 2_000 });
});

afterAll(async () => {
  await client.close();
  await mock.close();
});

function target(format: 'openai' | 'anthropic', baseUrl = mock.url, apiKey = KEY): UpstreamTarget {
  return { format, baseUrl, apiKey };
}

function body(format: 'openai' | 'anthropic', controls: MockControls, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const messages = [{ role: 'user', content: `hello there ${mockDirective(controls)}` }];
  return format === 'openai' ? { model: 'gpt-4o-mini', messages, ...extra } : { model: 'claude-haiku-4-5', max_tokens: 32, messages, ...extra };
}

async function readAll(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a failure');
}

function sseEvents(bytes: Buffer): EventSourceMessage[] {
  const events: EventSourceMessage[] = [];
  createParser({ onEvent: (e) => events.push(e) }).feed(bytes.toString('utf8'));
  return events;
}

/** A TCP proxy to the mock that counts the connections made to it. */
async function countingProxy(): Promise<{ url: string; connections: () => number; close: () => Promise<void> }> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((inbound) => {
    connections++;
    const outbound = net.connect(mock.port, '127.0.0.1');
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => {
        inbound.destroy();
        outbound.destroy();
      });
      s.on('close', () => sockets.delete(s));
    }
    inbound.pipe(outbound).pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe('requests', () => {
  it('OpenAI: /chat/completions with a bearer key, the body as given', async () => {
    const sent = body('openai', { output_tokens: 3 }, { x_unknown: { nested: [1, 2] } });
    const res = await client.send(target('openai'), sent, { stream: false });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('application/json');
    expect(JSON.parse((await readAll(res.body)).toString('utf8')).choices[0].message.content).toBe(mockOutputText(3));
    const seen = mock.requests.at(-1)!;
    expect(seen.path).toBe('/v1/chat/completions');
    expect(seen.headers).toMatchObject({ authorization: `Bearer ${KEY}`, 'content-type': 'application/json', accept: 'application/json' });
    expect(seen.headers['x-api-key']).toBeUndefined();
    expect(seen.body).toEqual(sent);
  });

  it('Anthropic: /messages with x-api-key and anthropic-version (the client\'s, else the default), streamed', async () => {
    for (const version of [undefined, '2026-10-21']) {
      const res = await client.send(target('anthropic', `${mock.url}/`), body('anthropic', { output_tokens: 2 }, { stream: true }), {
        stream: true,
        anthropicVersion: version,
        extraHeaders: { 'anthropic-beta': 'tools-2099' },
      });
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
      const events = sseEvents(await readAll(res.body));
      expect(events.at(-1)?.event).toBe('message_stop');
      const seen = mock.requests.at(-1)!;
      expect(seen.path).toBe('/v1/messages');
      expect(seen.headers).toMatchObject({
        'x-api-key': KEY,
        'anthropic-version': version ?? ANTHROPIC_VERSION_DEFAULT,
        'anthropic-beta': 'tools-2099',
        accept: 'text/event-stream',
      });
      expect(seen.headers.authorization).toBeUndefined();
    }
  });

  it('a stream read through StreamRelay ends with the terminal event and usage', async () => {
    const res = await client.send(target('openai'), body('openai', { output_tokens: 4 }, { stream: true, stream_options: { include_usage: true } }), { stream: true });
    const relay = new StreamRelay('openai', true);
    for await (const chunk of res.body) relay.push(chunk as Uint8Array);
    relay.end();
    expect(relay.sawTerminal()).toBe(true);
    expect(relay.usage()?.output).toBe(4);
  });
});

describe('upstream HTTP errors are answers, relayed as they are', () => {
  it.each([
    ['openai', 500, 'server_error'],
    ['openai', 429, 'rate_limit_exceeded'],
    ['anthropic', 429, 'rate_limit_error'],
    ['anthropic', 529, 'overloaded_error'],
  ] as const)('%s fail=%i', async (format, status, code) => {
    const res = await client.send(target(format), body(format, { fail: status }), { stream: false });
    expect(res.status).toBe(status);
    expect(res.headers[format === 'openai' ? 'x-request-id' : 'request-id']).toBeTruthy();
    const json = JSON.parse((await readAll(res.body)).toString('utf8'));
    expect(format === 'openai' ? json.error.code ?? json.error.type : json.error.type).toBe(code);
  });

  it('a wrong upstream key: the provider\'s 401', async () => {
    const res = await client.send(target('openai', mock.url, 'wrong'), body('openai', {}), { stream: false });
    expect(res.status).toBe(401);
    expect(JSON.parse((await readAll(res.body)).toString('utf8')).error.code).toBe('invalid_api_key');
  });
});

describe('failures by kind', () => {
  it('a closed port is unreachable', async () => {
    const spare = net.createServer();
    await new Promise<void>((resolve) => spare.listen(0, '127.0.0.1', resolve));
    const { port } = spare.address() as net.AddressInfo;
    await new Promise<void>((resolve) => spare.close(() => resolve()));
    const err = await failure(client.send(target('openai', `http://127.0.0.1:${port}/v1`), body('openai', {}), { stream: false }));
    expect(err).toBeInstanceOf(UpstreamError);
    expect(err).toMatchObject({ kind: 'unreachable' });
  });

  it('a connection reset before any answer is unreachable', async () => {
    const err = await failure(client.send(target('anthropic'), body('anthropic', { fail: 'reset' }), { stream: false }));
    expect(err).toMatchObject({ kind: 'unreachable' });
  });

  it('no headers within headersTimeoutMs is a timeout', async () => {
    const quick = new UpstreamClient({ headersTimeoutMs: 150 });
    const started = Date.now();
    const err = await failure(quick.send(target('openai'), body('openai', { fail: 'timeout' }), { stream: false }));
    expect(err).toBeInstanceOf(UpstreamError);
    expect(err).toMatchObject({ kind: 'timeout' });
    // undici checks parser timeouts on a timer of about one second resolution.
    expect(Date.now() - started).toBeLessThan(2_500);
    await quick.close();
  });

  it('a stream that stalls longer than bodyTimeoutMs fails on the body with kind timeout', async () => {
    const quick = new UpstreamClient({ bodyTimeoutMs: 150 });
    const res = await quick.send(target('anthropic'), body('anthropic', { chunk_delay_ms: 5_000 }, { stream: true }), { stream: true });
    expect(res.status).toBe(200);
    expect(await failure(readAll(res.body))).toMatchObject({ kind: 'timeout' });
    await quick.close();
  });

  it('a stream cut mid-way fails on the body with kind unreachable, after the first events', async () => {
    const res = await client.send(target('openai'), body('openai', { fail: 'midstream', output_tokens: 10 }, { stream: true }), { stream: true });
    expect(res.status).toBe(200);
    const parts: Buffer[] = [];
    const err = await failure(
      (async () => {
        for await (const chunk of res.body) parts.push(chunk as Buffer);
      })(),
    );
    expect(err).toMatchObject({ kind: 'unreachable' });
    expect(sseEvents(Buffer.concat(parts)).length).toBeGreaterThan(1);
  });

  it('the caller\'s signal aborts before and after the headers with kind aborted', async () => {
    const before = new AbortController();
    const pending = client.send(target('openai'), body('openai', { latency_ms: 2_000 }), { stream: false, signal: before.signal });
    setImmediate(() => before.abort());
    expect(await failure(pending)).toMatchObject({ kind: 'aborted' });

    const after = new AbortController();
    const res = await client.send(target('openai'), body('openai', { chunk_delay_ms: 2_000 }, { stream: true }), { stream: true, signal: after.signal });
    const reading = readAll(res.body);
    after.abort(new Error('client went away'));
    expect(await failure(reading)).toMatchObject({ kind: 'aborted' });
  });

  it('a closed client refuses new calls', async () => {
    const closed = new UpstreamClient();
    await closed.close();
    await expect(closed.send(target('openai'), body('openai', {}), { stream: false })).rejects.toThrow(/closed/);
  });
});

describe('connections', () => {
  it('sequential calls to one upstream share a kept-alive connection', async () => {
    const proxy = await countingProxy();
    const pooled = new UpstreamClient();
    try {
      for (let i = 0; i < 20; i++) {
        const stream = i % 2 === 0;
        const format = i % 3 === 0 ? 'anthropic' : 'openai';
        const res = await pooled.send(target(format, proxy.url), body(format, { output_tokens: 2 }, { stream }), { stream });
        expect(res.status).toBe(200);
        await readAll(res.body);
      }
      expect(proxy.connections()).toBeGreaterThanOrEqual(1);
      expect(proxy.connections()).toBeLessThanOrEqual(2);
      // A second client has its own pool, hence its own connection.
      const before = proxy.connections();
      const other = new UpstreamClient();
      await readAll((await other.send(target('openai', proxy.url), body('openai', {}), { stream: false })).body);
      await other.close();
      expect(proxy.connections()).toBe(before + 1);
    } finally {
      await pooled.close();
      await proxy.close();
    }
  });
});
