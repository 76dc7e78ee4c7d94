/**
 * Mock LLM upstream: speaks the OpenAI Chat Completions, Responses and Embeddings and the Anthropic
 * Messages (and token count) wire formats (JSON and SSE streaming) closely enough for the official `openai`
 * and `@anthropic-ai/sdk` clients, with deterministic token accounting and
 * per-request fault injection. Built on node:http only, no per-request logging,
 * so it can sit behind benchmarks. See docs/MOCK_UPSTREAM.md. This file is the HTTP
 * server; the wire formats are in openai.ts, responses.ts, embeddings.ts and anthropic.ts, the controls and token
 * counts in controls.ts.
 */
import http from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { collectTexts, countInputTokens, firstToolName, headerControls, parseDirectives, type MockControls, type MockFormat } from './controls.js';
import { base62, type Plan } from './plan.js';
import { openaiErrorBody, openaiEvents, openaiJson } from './openai.js';
import { anthropicErrorBody, anthropicEvents, anthropicMessage } from './anthropic.js';
import { invalidResponses, responsesEvents, responsesJson, responsesPlan, responsesTexts } from './responses.js';
import { embeddingInputs, embeddingsJson, embeddingTexts, embeddingTokens, invalidEmbeddings } from './embeddings.js';

export interface MockUpstreamOptions {
  /** Port to listen on; 0 (default) picks a free port. */
  port?: number;
  /** Interface to bind; default 127.0.0.1. */
  host?: string;
  /** Default delay before the response headers, per request (ms). Default 0. */
  latencyMs?: number;
  /** Default delay between SSE events of a streamed response (ms). Default 0. */
  chunkDelayMs?: number;
  /** When set, OpenAI routes need `Authorization: Bearer <key>`, Anthropic routes `x-api-key: <key>`. */
  requireKey?: string;
  /** Output tokens when the request carries no `output_tokens` control. Default 12. */
  defaultOutputTokens?: number;
  /**
   * Controls of every request, under the request's own: one mock of several upstreams
   * that fails (`{ fail: 503 }`, `{ fail: 429, retry_after: 2 }`) while another serves.
   */
  controls?: MockControls;
}

interface RecordedRequest {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

export interface MockUpstream {
  /** Base URL including `/v1`, e.g. http://127.0.0.1:4010/v1 (OpenAI SDK `baseURL`). The Anthropic SDK wants it without `/v1`. */
  url: string;
  port: number;
  /** The last {@link MAX_RECORDED} requests (oldest first), excluding GET /health. */
  requests: RecordedRequest[];
  close(): Promise<void>;
}

const MAX_RECORDED = 200;
const MAX_BODY_BYTES = 32 * 1024 * 1024;
const DEFAULT_OUTPUT_TOKENS = 12;
const MIDSTREAM_TOKENS = 3;
const MODELS = ['gpt-4o-mini', 'gpt-4.1-mini', 'gpt-4o', 'claude-haiku-5-5', 'claude-sonnet-5-5', 'claude-opus-5-5', 'claude-haiku-4-5', 'claude-sonnet-4-5'];

function readBody(req: IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) tooBig = true;
      else chunks.push(c);
    });
    req.on('end', () => resolve(tooBig ? null : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.on('error', () => resolve(null));
  });
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

/** A 400 (or other status) the mock answers: status, message, OpenAI's code and param. */
type Refusal = [status: number, message?: string, code?: string | null, param?: string | null];

/** Why a completion request is refused as the provider would (400), or null. */
function invalidCompletion(format: MockFormat, b: Record<string, unknown>): Refusal | null {
  if (format === 'anthropic') {
    if (!Array.isArray(b.messages)) return [400, 'messages: Field required'];
    if (b.max_tokens === undefined) return [400, 'max_tokens: Field required'];
    if (!isInt(b.max_tokens)) return [400, 'max_tokens: Input should be a valid integer'];
    return null;
  }
  if (!Array.isArray(b.messages)) return [400, "Missing required parameter: 'messages'.", 'missing_required_parameter', 'messages'];
  const m = b.max_completion_tokens ?? b.max_tokens;
  if (m !== undefined && m !== null && !isInt(m)) return [400, `Invalid 'max_completion_tokens': expected an integer.`, 'invalid_type', 'max_completion_tokens'];
  return null;
}

function bearer(headers: IncomingHttpHeaders): string | undefined {
  const auth = headers.authorization;
  if (!auth) return undefined;
  const m = /^bearer\s+(.*)$/i.exec(auth);
  return m ? m[1]!.trim() : undefined;
}

/** A pause of a stream before one of its events (`pause_before`, 1 = the first, after the headers). */
interface StreamPause {
  before: number;
  ms: number;
}

function pauseOf(c: MockControls): StreamPause | null {
  return c.pause_before !== undefined && c.pause_before > 0 && (c.pause_ms ?? 0) > 0 ? { before: c.pause_before, ms: c.pause_ms! } : null;
}

function urlHost(host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

export async function startMockUpstream(opts: MockUpstreamOptions = {}): Promise<MockUpstream> {
  const host = opts.host ?? '127.0.0.1';
  const defaults = {
    latencyMs: opts.latencyMs ?? 0,
    chunkDelayMs: opts.chunkDelayMs ?? 0,
    outputTokens: opts.defaultOutputTokens ?? DEFAULT_OUTPUT_TOKENS,
  };
  const requireKey = opts.requireKey;
  const requests: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let closed = false;

  /** Resolves after `ms`; never resolves once the server is closed (its timer is cleared). */
  const sleep = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      if (closed) return;
      const t = setTimeout(() => {
        timers.delete(t);
        resolve();
      }, ms);
      timers.add(t);
    });

  const record = (r: RecordedRequest) => {
    requests.push(r);
    if (requests.length > MAX_RECORDED) requests.splice(0, requests.length - MAX_RECORDED);
  };

  const sendJson = (res: ServerResponse, status: number, body: string, extra?: Record<string, string>) => {
    if (res.destroyed) return;
    res.writeHead(status, http.STATUS_CODES[status] ?? (status === 529 ? 'Overloaded' : 'Error'), {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...extra,
    });
    res.end(body);
  };

  const destroyAfter = (res: ServerResponse, data: string) => {
    res.write(data, () => res.socket?.destroy());
  };

  const streamEvents = async (
    res: ServerResponse,
    events: string[],
    delayMs: number,
    cutAt: number | undefined,
    reqIdHeader: Record<string, string>,
    pause: StreamPause | null = null,
  ) => {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      ...reqIdHeader,
    });
    const n = cutAt ?? events.length;
    const pauseAt = pause === null ? -1 : pause.before - 1;
    if (delayMs <= 0 && pauseAt < 0) {
      const body = n === events.length ? events.join('') : events.slice(0, n).join('');
      if (cutAt === undefined) res.end(body);
      else destroyAfter(res, body);
      return;
    }
    // Event i is due i x delayMs after the first: a timer that fires late (a busy event
    // loop, thousands of streams) delays its event, not every event after it.
    let first = performance.now();
    for (let i = 0; i < n; i++) {
      if (i === pauseAt) {
        // Headers out, then silence: an upstream that went quiet (a model's idle_ms).
        if (i === 0) res.flushHeaders();
        await sleep(pause!.ms);
        first += pause!.ms;
      }
      const wait = first + i * delayMs - performance.now();
      if (i > 0 && wait > 0) await sleep(wait);
      if (res.destroyed || closed) return;
      if (cutAt !== undefined && i === n - 1) destroyAfter(res, events[i]!);
      else res.write(events[i]!);
    }
    if (cutAt === undefined) res.end();
    else if (n === 0) res.socket?.destroy();
  };

  /**
   * What every POST route does first, in the order docs/MOCK_UPSTREAM.md gives: reads and
   * records the body, takes the controls (directives in the texts `textsOf` finds, then
   * headers), waits the latency, checks the key and that the body is a JSON object, and
   * answers a `fail` of a status, `timeout` or `reset`. Null when it answered (or never will).
   */
  const begin = async (
    req: IncomingMessage,
    res: ServerResponse,
    format: MockFormat,
    path: string,
    textsOf: (body: unknown) => string[],
    invalid: (b: Record<string, unknown>) => Refusal | null,
  ) => {
    const isAnthropic = format === 'anthropic';
    const requestId = isAnthropic ? `req_011C${base62(20)}` : `req_${randomBytes(16).toString('hex')}`;
    const idHeader: Record<string, string> = isAnthropic ? { 'request-id': requestId } : { 'x-request-id': requestId };
    const fail = (status: number, message?: string, code?: string | null, param?: string | null) =>
      sendJson(
        res,
        status,
        isAnthropic ? anthropicErrorBody(status, requestId, message) : openaiErrorBody(status, message, code, param),
        idHeader,
      );
    const refuse = (...r: Refusal): null => {
      fail(...r);
      return null;
    };

    const raw = await readBody(req);
    if (closed) return null;
    if (raw === null) {
      record({ path, headers: req.headers, body: undefined });
      return refuse(413, 'Request body too large.');
    }
    const text = raw.toString('utf8');
    let body: unknown;
    let jsonOk = true;
    try {
      body = text.length ? JSON.parse(text) : undefined;
    } catch {
      body = text;
      jsonOk = false;
    }
    record({ path, headers: req.headers, body });

    // Controls: server defaults < directives in message text < x-mock-* headers.
    const controls: MockControls = { ...opts.controls };
    if (jsonOk) for (const t of textsOf(body)) parseDirectives(t, controls);
    headerControls(req.headers, controls);

    const latency = controls.latency_ms ?? defaults.latencyMs;
    if (latency > 0) await sleep(latency);
    if (closed || res.destroyed) return null;

    if (requireKey !== undefined) {
      // Anthropic: `x-api-key` is the classic header, but @anthropic-ai/sdk >= 1.0
      // (API version 2026-10-21) sends the key as `Authorization: Bearer`, so both pass.
      const ok = bearer(req.headers) === requireKey || (isAnthropic && req.headers['x-api-key'] === requireKey);
      if (!ok) return refuse(401);
    }

    if (!jsonOk || body === null || typeof body !== 'object' || Array.isArray(body)) {
      return isAnthropic
        ? refuse(400, 'The request body is not valid JSON.')
        : refuse(400, 'We could not parse the JSON body of your request. (HINT: This likely means you aren\'t using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)', null);
    }
    const b = body as Record<string, unknown>;
    if (typeof b.model !== 'string' || !b.model) {
      return isAnthropic ? refuse(400, 'model: Field required') : refuse(400, 'you must provide a model parameter', null);
    }
    const refusal = invalid(b);
    if (refusal !== null) return refuse(...refusal);
    const mode = controls.fail;
    if (typeof mode === 'number') {
      if (controls.retry_after !== undefined) idHeader['retry-after'] = String(controls.retry_after);
      // A provider's 429 says which of its limits ran out, as each provider names them.
      if (mode === 429) Object.assign(idHeader, isAnthropic ? anthropicLimitHeaders() : openaiLimitHeaders());
      return refuse(mode);
    }
    if (mode === 'timeout') return null; // hold the socket open; close() or the client ends it
    if (mode === 'reset') {
      res.socket?.destroy();
      return null;
    }
    return { b: b as Record<string, unknown> & { model: string }, body, controls, fail, idHeader, mode };
  };

  const handleCompletion = async (req: IncomingMessage, res: ServerResponse, format: MockFormat, path: string) => {
    const isAnthropic = format === 'anthropic';
    const call = await begin(req, res, format, path, (body) => collectTexts(format, body).texts, (b) => invalidCompletion(format, b));
    if (call === null) return;
    const { b, body, controls, idHeader, mode } = call;
    const m = isAnthropic ? b.max_tokens : b.max_completion_tokens ?? b.max_tokens;
    const max = isInt(m) ? m : undefined;

    const wanted = controls.output_tokens ?? defaults.outputTokens;
    const output = max === undefined ? wanted : Math.min(max, wanted);
    const streamOptions = b.stream_options as { include_usage?: unknown } | null | undefined;
    const plan: Plan = {
      model: b.model,
      input: controls.input_tokens ?? countInputTokens(format, body),
      output,
      answers: !isAnthropic && isInt(b.n) && b.n > 1 ? b.n : 1,
      usage: controls.no_usage !== 1,
      cacheRead: controls.cache_read_tokens ?? 0,
      cacheWrite: isAnthropic ? controls.cache_write_tokens ?? 0 : 0,
      truncated: max !== undefined && wanted > max,
      stream: b.stream === true,
      includeUsage: !isAnthropic && streamOptions?.include_usage === true,
      tool: controls.tool_call === 1 ? firstToolName(format, b) : null,
    };

    if (!plan.stream) {
      const json = isAnthropic ? JSON.stringify(anthropicMessage(plan, false)) : openaiJson(plan);
      if (mode === 'invalid') return sendJson(res, 200, `<html>upstream garbage ${json.slice(0, 20)}`, idHeader);
      if (mode === 'midstream') {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), ...idHeader });
        return destroyAfter(res, json.slice(0, Math.floor(json.length / 2)));
      }
      return sendJson(res, 200, json, idHeader);
    }

    const delay = controls.chunk_delay_ms ?? defaults.chunkDelayMs;
    if (mode === 'invalid') {
      const junk = isAnthropic ? 'event: message_start\ndata: {not json\n\n' : 'data: {not json\n\n';
      return streamEvents(res, [junk], 0, undefined, idHeader);
    }
    const { events, preamble } = isAnthropic ? anthropicEvents(plan) : openaiEvents(plan);
    const cut = mode === 'midstream' ? preamble + Math.min(MIDSTREAM_TOKENS, Math.floor(plan.output / 2)) : undefined;
    return streamEvents(res, events, delay, cut, idHeader, pauseOf(controls));
  };

  /** POST /v1/responses: the Responses API, whole or streamed (named events). */
  const handleResponses = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    const call = await begin(req, res, 'openai', path, (body) => responsesTexts(body).texts, (b) => {
      const why = invalidResponses(b);
      return why === null ? null : [400, why[0], 'invalid_value', why[1]];
    });
    if (call === null) return;
    const { b, controls, idHeader, mode } = call;
    const plan = responsesPlan(b, controls, defaults.outputTokens);
    if (b.stream !== true) {
      const json = responsesJson(plan);
      if (mode === 'invalid') return sendJson(res, 200, `<html>upstream garbage ${json.slice(0, 20)}`, idHeader);
      if (mode === 'midstream') {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), ...idHeader });
        return destroyAfter(res, json.slice(0, Math.floor(json.length / 2)));
      }
      return sendJson(res, 200, json, idHeader);
    }
    if (mode === 'invalid') return streamEvents(res, ['event: response.created\ndata: {not json\n\n'], 0, undefined, idHeader);
    const { events, preamble } = responsesEvents(plan);
    const cut = mode === 'midstream' ? preamble + Math.min(MIDSTREAM_TOKENS, Math.floor(plan.output / 2)) : undefined;
    return streamEvents(res, events, controls.chunk_delay_ms ?? defaults.chunkDelayMs, cut, idHeader, pauseOf(controls));
  };

  /** POST /v1/embeddings: one vector per input; usage counts the input only. */
  const handleEmbeddings = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    const call = await begin(req, res, 'openai', path, embeddingTexts, (b) => {
      const why = invalidEmbeddings(b);
      return why === null ? null : [400, why[0], null, why[1]];
    });
    if (call === null) return;
    const { b, controls, idHeader, mode } = call;
    const inputs = embeddingInputs(b.input)!;
    const json = embeddingsJson(b, inputs, controls.no_usage === 1 ? null : controls.input_tokens ?? embeddingTokens(inputs));
    if (mode === 'invalid') return sendJson(res, 200, `<html>upstream garbage ${json.slice(0, 20)}`, idHeader);
    sendJson(res, 200, json, idHeader);
  };

  /** POST /v1/messages/count_tokens: the input tokens a messages request would have. */
  const handleCountTokens = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    const call = await begin(req, res, 'anthropic', path, (body) => collectTexts('anthropic', body).texts, (b) =>
      Array.isArray(b.messages) ? null : [400, 'messages: Field required'],
    );
    if (call === null) return;
    const { body, controls, idHeader, mode } = call;
    const json = JSON.stringify({ input_tokens: controls.input_tokens ?? countInputTokens('anthropic', body) });
    if (mode === 'invalid') return sendJson(res, 200, `<html>upstream garbage ${json.slice(0, 20)}`, idHeader);
    sendJson(res, 200, json, idHeader);
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const method = req.method ?? 'GET';

    if (method === 'POST' && path === '/v1/chat/completions') {
      void handleCompletion(req, res, 'openai', url).catch(() => res.socket?.destroy());
      return;
    }
    if (method === 'POST' && path === '/v1/responses') {
      void handleResponses(req, res, url).catch(() => res.socket?.destroy());
      return;
    }
    if (method === 'POST' && path === '/v1/messages') {
      void handleCompletion(req, res, 'anthropic', url).catch(() => res.socket?.destroy());
      return;
    }
    if (method === 'POST' && path === '/v1/embeddings') {
      void handleEmbeddings(req, res, url).catch(() => res.socket?.destroy());
      return;
    }
    if (method === 'POST' && path === '/v1/messages/count_tokens') {
      void handleCountTokens(req, res, url).catch(() => res.socket?.destroy());
      return;
    }
    if (method === 'GET' && path === '/health') {
      return sendJson(res, 200, '{"status":"ok"}');
    }

    record({ path: url, headers: req.headers, body: undefined });
    const anthropicish =
      path.startsWith('/v1/messages') || req.headers['anthropic-version'] !== undefined || req.headers['x-api-key'] !== undefined;

    if (method === 'GET' && path === '/v1/models') {
      if (requireKey !== undefined) {
        if (req.headers['x-api-key'] !== requireKey && bearer(req.headers) !== requireKey) {
          return sendJson(res, 401, anthropicish ? anthropicErrorBody(401, `req_011C${base62(20)}`) : openaiErrorBody(401));
        }
      }
      if (anthropicish) {
        const data = MODELS.filter((m) => m.startsWith('claude')).map((id) => ({
          type: 'model',
          id,
          display_name: id,
          created_at: '2025-01-01T00:00:00Z',
        }));
        return sendJson(
          res,
          200,
          JSON.stringify({ data, has_more: false, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null }),
        );
      }
      const data = MODELS.map((id) => ({ id, object: 'model', created: 1_700_000_000, owned_by: 'mock-upstream' }));
      return sendJson(res, 200, JSON.stringify({ object: 'list', data }));
    }

    if (anthropicish) return sendJson(res, 404, anthropicErrorBody(404, `req_011C${base62(20)}`, 'Not Found'));
    return sendJson(res, 404, openaiErrorBody(404, `Invalid URL (${method} ${path})`, null));
  };

  const server = http.createServer({ noDelay: true }, handle);
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  server.on('clientError', (_err, socket) => {
    if (!socket.destroyed) socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // As the API's (src/server.ts): 1,000 streams opened at once overflow Node's 511.
    server.listen({ port: opts.port ?? 0, host, backlog: 4_096 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : (opts.port ?? 0);

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    if (closing) return closing;
    closed = true;
    for (const t of timers) clearTimeout(t);
    timers.clear();
    closing = new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
      for (const s of sockets) s.destroy();
      sockets.clear();
    });
    return closing;
  };

  return { url: `http://${urlHost(host)}:${port}/v1`, port, requests, close };
}

/** The request limit headers of OpenAI's 429 (its token limit headers left out). */
function openaiLimitHeaders(): Record<string, string> {
  return { 'x-ratelimit-limit-requests': '500', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '1s' };
}

/** The request limit headers of Anthropic's 429 (its reset an RFC 3339 time). */
function anthropicLimitHeaders(): Record<string, string> {
  const reset = new Date(Math.ceil(Date.now() / 1000) * 1000 + 1000).toISOString().replace('.000Z', 'Z');
  return { 'anthropic-ratelimit-requests-limit': '50', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': reset };
}
