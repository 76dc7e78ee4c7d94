/**
 * UpstreamClient against the mock upstream: the request each format gets, upstream HTTP
 * errors relayed untouched, failures classified by kind (unreachable, timeout, aborted),
 * errors on the body stream, connection reuse counted at a TCP proxy in front of the
 * mock, and private addresses refused after DNS resolution (a resolver passed to the
 * client maps public-looking names to 127.0.0.1).
 */
import net from 'node:net';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { StreamRelay } from '../../src/gateway/adapters.js';
import { mockDirective, mockOutputText, type MockControls } from '../../src/gateway/mock/controls.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { publicOnlyLookup } from '../../src/gateway/private-network.js';
import { ANTHROPIC_VERSION_DEFAULT, UpstreamClient, UpstreamError, type UpstreamTarget } from '../../src/gateway/upstream.js';

const KEY = 'sk-upstream-test';
/** The mock listens on 127.0.0.1, which a client refuses unless private upstreams are allowed. */
const onLoopback = { allowPrivate: true };

let mock: MockUpstream;
let client: UpstreamClient;

beforeAll(async () => {
  mock = await startMockUpstream({ requireKey: KEY });
  client = new UpstreamClient({ ...onLoopback, headersTimeoutMs: 2_000, bodyTimeoutMs: 2_000 });
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
    const quick = new UpstreamClient({ ...onLoopback, headersTimeoutMs: 150 });
    const started = Date.now();
    const err = await failure(quick.send(target('openai'), body('openai', { fail: 'timeout' }), { stream: false }));
    expect(err).toBeInstanceOf(UpstreamError);
    expect(err).toMatchObject({ kind: 'timeout' });
    // undici checks parser timeouts on a timer of about one second resolution.
    expect(Date.now() - started).toBeLessThan(2_500);
    await quick.close();
  });

  it('a stream that stalls longer than bodyTimeoutMs fails on the body with kind timeout', async () => {
    const quick = new UpstreamClient({ ...onLoopback, bodyTimeoutMs: 150 });
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
    const pooled = new UpstreamClient(onLoopback);
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
      const other = new UpstreamClient(onLoopback);
      await readAll((await other.send(target('openai', proxy.url), body('openai', {}), { stream: false })).body);
      await other.close();
      expect(proxy.connections()).toBe(before + 1);
    } finally {
      await pooled.close();
      await proxy.close();
    }
  });
});

describe('many streams at once', () => {
  it('opens a connection for each of 300 streams in flight to one upstream: none waits for another to end', async () => {
    const many = new UpstreamClient(onLoopback);
    const streams = 300;
    let firstEnd = Infinity;
    let lastHeaders = 0;
    try {
      // Each answer lasts about 4.5 s (4 events 1.5 s apart); one that waited for a free
      // connection (256 per origin before) would get its headers only after one had ended.
      const statuses = await Promise.all(
        Array.from({ length: streams }, async () => {
          const res = await many.send(target('openai'), body('openai', { output_tokens: 1, chunk_delay_ms: 1_500 }, { stream: true }), { stream: true });
          lastHeaders = Math.max(lastHeaders, performance.now());
          await readAll(res.body);
          firstEnd = Math.min(firstEnd, performance.now());
          return res.status;
        }),
      );
      expect(statuses.every((s) => s === 200)).toBe(true);
      expect(lastHeaders).toBeLessThan(firstEnd);
    } finally {
      await many.close();
    }
  });
});

/** A resolver that answers these names with these addresses, and ENOTFOUND otherwise. */
function resolver(names: Record<string, string[]>): net.LookupFunction {
  return (hostname, options, callback) => {
    const all = (names[hostname] ?? []).map((address) => ({ address, family: net.isIP(address) }));
    if (all.length === 0) return callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }), '');
    if (options.all) return callback(null, all);
    return callback(null, all[0].address, all[0].family);
  };
}

describe('private addresses', () => {
  const names = resolver({
    'api.example.test': ['127.0.0.1'],
    'mixed.example.test': ['93.184.215.14', '10.0.0.7'],
    'metadata.example.test': ['::ffff:169.254.169.254'],
    'public.example.test': ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c'],
  });

  it('a public-looking name that resolves to 127.0.0.1 is refused at connect time, and no connection is made', async () => {
    const proxy = await countingProxy();
    const port = new URL(proxy.url).port;
    const guarded = new UpstreamClient({ lookup: names });
    try {
      for (const [format, stream] of [['openai', false], ['anthropic', true]] as const) {
        const err = await failure(guarded.send(target(format, `http://api.example.test:${port}/v1`), body(format, {}), { stream }));
        expect(err).toBeInstanceOf(UpstreamError);
        expect(err).toMatchObject({
          kind: 'refused',
          message: 'upstream_base_url points at api.example.test (resolves to 127.0.0.1), a loopback address; the gateway calls only public addresses (set UPSTREAM_ALLOW_PRIVATE=1 to allow private ones)',
        });
      }
      // A literal address makes no lookup; it is refused all the same.
      expect(await failure(guarded.send(target('openai', proxy.url), body('openai', {}), { stream: false }))).toMatchObject({ kind: 'refused' });
      expect(proxy.connections()).toBe(0);

      // With private upstreams allowed, the same name reaches the mock as before.
      const allowed = new UpstreamClient({ ...onLoopback, lookup: names });
      const res = await allowed.send(target('openai', `http://api.example.test:${port}/v1`), body('openai', { output_tokens: 2 }), { stream: false });
      expect(res.status).toBe(200);
      await readAll(res.body);
      await allowed.close();
      expect(proxy.connections()).toBe(1);
    } finally {
      await guarded.close();
      await proxy.close();
    }
  });

  it('the connect-time lookup refuses a name when any of its addresses is private, in either lookup mode', async () => {
    const lookup = publicOnlyLookup(names);
    const resolve = (host: string, all: boolean) =>
      new Promise<unknown>((done) => lookup(host, { all }, (err, address, family) => done(err ? { code: (err as { code?: string }).code } : { address, family })));
    for (const all of [true, false]) {
      expect(await resolve('mixed.example.test', all)).toEqual({ code: 'ERR_UPSTREAM_PRIVATE_ADDRESS' });
      expect(await resolve('metadata.example.test', all)).toEqual({ code: 'ERR_UPSTREAM_PRIVATE_ADDRESS' });
      expect(await resolve('nowhere.example.test', all)).toEqual({ code: 'ENOTFOUND' });
    }
    expect(await resolve('public.example.test', false)).toEqual({ address: '93.184.215.14', family: 4 });
    expect(await resolve('public.example.test', true)).toEqual({
      address: [
        { address: '93.184.215.14', family: 4 },
        { address: '2606:2800:21f:cb07:6820:80da:af6b:8b2c', family: 6 },
      ],
      family: undefined,
    });
  });

  it('a base URL whose name resolves to a private address is refused when the model is configured', async () => {
    const guarded = new UpstreamClient({ lookup: names });
    expect(await guarded.baseUrlRefusal('https://api.example.test/v1')).toMatch(/^upstream_base_url points at api\.example\.test \(resolves to 127\.0\.0\.1\), a loopback address/);
    expect(await guarded.baseUrlRefusal('https://mixed.example.test/v1')).toMatch(/resolves to 10\.0\.0\.7\), a private address/);
    expect(await guarded.baseUrlRefusal('https://metadata.example.test/v1')).toMatch(/a link-local \(cloud metadata\) address/);
    expect(await guarded.baseUrlRefusal('https://public.example.test/v1')).toBeNull();
    // Not resolvable now: accepted, and checked again at every connection.
    expect(await guarded.baseUrlRefusal('https://nowhere.example.test/v1')).toBeNull();
    expect(await new UpstreamClient({ ...onLoopback, lookup: names }).baseUrlRefusal('https://api.example.test/v1')).toBeNull();
    await guarded.close();
  });
});
