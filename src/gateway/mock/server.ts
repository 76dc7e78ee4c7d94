/**
 * Mock LLM upstream: speaks the OpenAI Chat Completions and Anthropic Messages
 * wire formats (JSON and SSE streaming) closely enough for the official `openai`
 * and `@anthropic-ai/sdk` clients, with deterministic token accounting and
 * per-request fault injection. Built on node:http only, no per-request logging,
 * so it can sit behind benchmarks. See docs/MOCK_UPSTREAM.md.
 */
import http from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomBytes } from 'node:crypto';

export type MockFormat = 'openai' | 'anthropic';

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

type MockFailMode = number | 'timeout' | 'reset' | 'invalid' | 'midstream';

/** Per-request controls, from `x-mock-<key>` headers or `[[mock key=value ...]]` directives in message text. */
export interface MockControls {
  output_tokens?: number;
  /** Input tokens reported instead of the counted ones (images, documents, tools: what the count skips). */
  input_tokens?: number;
  /** 1: no usage anywhere (an OpenAI-compatible server that ignores stream_options, a broken one). */
  no_usage?: number;
  cache_read_tokens?: number;
  cache_write_tokens?: number;
  latency_ms?: number;
  chunk_delay_ms?: number;
  fail?: MockFailMode;
}

const MAX_RECORDED = 200;
const MAX_BODY_BYTES = 32 * 1024 * 1024;
const DEFAULT_OUTPUT_TOKENS = 12;
const MIDSTREAM_TOKENS = 3;
const SYSTEM_FINGERPRINT = 'fp_mock0a1b2c3';
const NUMERIC_KEYS = ['output_tokens', 'input_tokens', 'no_usage', 'cache_read_tokens', 'cache_write_tokens', 'latency_ms', 'chunk_delay_ms'] as const;
type NumericKey = (typeof NUMERIC_KEYS)[number];
const FAIL_WORDS = new Set(['timeout', 'reset', 'invalid', 'midstream']);
const MODELS = ['gpt-4o-mini', 'gpt-4.1-mini', 'gpt-4o', 'claude-haiku-5-5', 'claude-sonnet-5-5', 'claude-opus-5-5', 'claude-haiku-4-5', 'claude-sonnet-4-5'];

// ---------------------------------------------------------------------------
// Directives and token accounting (pure, exported for tests)
// ---------------------------------------------------------------------------

const DIRECTIVE_RE = /\[\[mock((?:\s+[A-Za-z_][A-Za-z0-9_-]*=[^\s\]]*)*)\s*\]\]/g;

/** Builds a directive string, e.g. `[[mock output_tokens=5 fail=500]]`. */
export function mockDirective(controls: MockControls): string {
  const parts = Object.entries(controls)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${String(v)}`);
  return `[[mock${parts.length ? ' ' + parts.join(' ') : ''}]]`;
}

function setControl(out: MockControls, rawKey: string, rawValue: string): void {
  const key = rawKey.toLowerCase().replace(/-/g, '_');
  const value = rawValue.trim();
  if (key === 'fail') {
    const lower = value.toLowerCase();
    if (FAIL_WORDS.has(lower)) out.fail = lower as MockFailMode;
    else if (/^\d{3}$/.test(value) && +value >= 400 && +value <= 599) out.fail = +value;
    return;
  }
  if ((NUMERIC_KEYS as readonly string[]).includes(key) && /^\d+$/.test(value)) {
    out[key as NumericKey] = Number(value);
  }
}

/** Parses every `[[mock ...]]` directive in `text` into `out` (later ones win). */
function parseDirectives(text: string, out: MockControls): void {
  if (!text.includes('[[mock')) return;
  DIRECTIVE_RE.lastIndex = 0;
  for (let m = DIRECTIVE_RE.exec(text); m; m = DIRECTIVE_RE.exec(text)) {
    for (const pair of m[1]!.trim().split(/\s+/)) {
      const eq = pair.indexOf('=');
      if (eq > 0) setControl(out, pair.slice(0, eq), pair.slice(eq + 1));
    }
  }
}

function pushTextContent(content: unknown, texts: string[]): void {
  if (typeof content === 'string') {
    texts.push(content);
  } else if (Array.isArray(content)) {
    for (const part of content) {
      if (part && typeof part === 'object' && (part as { type?: unknown }).type === 'text') {
        const text = (part as { text?: unknown }).text;
        if (typeof text === 'string') texts.push(text);
      }
    }
  }
}

/** All text the mock reads for token counting and directives, plus the number of messages. */
function collectTexts(format: MockFormat, body: unknown): { texts: string[]; messageCount: number } {
  const texts: string[] = [];
  let messageCount = 0;
  if (!body || typeof body !== 'object') return { texts, messageCount };
  const b = body as { system?: unknown; messages?: unknown };
  if (format === 'anthropic') pushTextContent(b.system, texts);
  if (Array.isArray(b.messages)) {
    for (const msg of b.messages) {
      messageCount++;
      if (msg && typeof msg === 'object') pushTextContent((msg as { content?: unknown }).content, texts);
    }
  }
  return { texts, messageCount };
}

function countWords(text: string): number {
  const stripped = text.includes('[[mock') ? text.replace(DIRECTIVE_RE, ' ') : text;
  return stripped.match(/\S+/g)?.length ?? 0;
}

/**
 * Deterministic (uncached) input tokens of a request: whitespace-separated words
 * in all message text + 3 per element of `messages`. `[[mock ...]]` directives
 * are stripped before counting, so controls never change the count.
 * - openai: `messages[].content` (string, or parts of type "text").
 * - anthropic: top-level `system` (string or text blocks) + `messages[].content`
 *   (string or text blocks). `system` adds words only, not the +3.
 * Other content (images, tool blocks, ...) counts 0 words.
 */
export function countInputTokens(format: MockFormat, body: unknown): number {
  const { texts, messageCount } = collectTexts(format, body);
  let words = 0;
  for (const t of texts) words += countWords(t);
  return words + 3 * messageCount;
}

/** The text the mock answers with when it emits `n` tokens: "tok1 tok2 ... tokN". */
export function mockOutputText(n: number): string {
  let s = '';
  for (let i = 1; i <= n; i++) s += i === 1 ? 'tok1' : ` tok${i}`;
  return s;
}

function headerControls(headers: IncomingHttpHeaders, out: MockControls): void {
  for (const key of [...NUMERIC_KEYS, 'fail']) {
    const v = headers[`x-mock-${key}`] ?? headers[`x-mock-${key.replace(/_/g, '-')}`];
    const value = Array.isArray(v) ? v[v.length - 1] : v;
    if (value !== undefined) setControl(out, key, value);
  }
}

// ---------------------------------------------------------------------------
// Ids and error bodies
// ---------------------------------------------------------------------------

const B62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
function base62(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += B62[bytes[i]! % 62];
  return s;
}

function openaiErrorBody(status: number, message?: string, code?: string | null, param: string | null = null): string {
  let type = 'invalid_request_error';
  let defCode: string | null = null;
  let defMsg = `Mock upstream error (HTTP ${status}).`;
  if (status === 401) {
    defCode = 'invalid_api_key';
    defMsg = 'Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.';
  } else if (status === 404) {
    defCode = 'model_not_found';
    defMsg = 'The model does not exist or you do not have access to it.';
  } else if (status === 429) {
    type = 'requests';
    defCode = 'rate_limit_exceeded';
    defMsg = 'Rate limit reached for requests (mock). Please try again in 1s.';
  } else if (status >= 500) {
    type = 'server_error';
    defMsg = 'The server had an error while processing your request. Sorry about that!';
  }
  return JSON.stringify({ error: { message: message ?? defMsg, type, param, code: code === undefined ? defCode : code } });
}

function anthropicErrorType(status: number): string {
  switch (status) {
    case 401: return 'authentication_error';
    case 402: return 'billing_error';
    case 403: return 'permission_error';
    case 404: return 'not_found_error';
    case 408: case 504: return 'timeout_error';
    case 409: return 'conflict_error';
    case 429: return 'rate_limit_error';
    case 529: return 'overloaded_error';
    default: return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

function anthropicErrorBody(status: number, requestId: string, message?: string): string {
  const type = anthropicErrorType(status);
  const defMsg =
    status === 401 ? 'invalid x-api-key'
    : status === 429 ? 'Number of requests has exceeded your rate limit (mock).'
    : status === 529 ? 'Overloaded'
    : status >= 500 ? 'Internal server error'
    : `Mock upstream error (HTTP ${status}).`;
  return JSON.stringify({ type: 'error', error: { type, message: message ?? defMsg }, request_id: requestId });
}

// ---------------------------------------------------------------------------
// Response builders
// ---------------------------------------------------------------------------

interface Plan {
  model: string;
  input: number;
  /** Output tokens of each answer. */
  output: number;
  /** Answers generated (OpenAI `n`); usage counts the output of all of them. */
  answers: number;
  usage: boolean;
  cacheRead: number;
  cacheWrite: number;
  truncated: boolean;
  stream: boolean;
  includeUsage: boolean;
}

function openaiUsage(p: Plan) {
  const prompt = p.input + p.cacheRead;
  const completion = p.output * p.answers;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: p.cacheRead, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

function openaiJson(p: Plan): string {
  return JSON.stringify({
    id: `chatcmpl-${base62(29)}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: p.model,
    choices: Array.from({ length: p.answers }, (_, index) => ({
      index,
      message: { role: 'assistant', content: mockOutputText(p.output), refusal: null, annotations: [] },
      logprobs: null,
      finish_reason: p.truncated ? 'length' : 'stop',
    })),
    ...(p.usage ? { usage: openaiUsage(p) } : {}),
    service_tier: 'default',
    system_fingerprint: SYSTEM_FINGERPRINT,
  });
}

/** Returns the SSE events and how many of them come before the first token delta. */
function openaiEvents(p: Plan): { events: string[]; preamble: number } {
  const head =
    `data: {"id":"chatcmpl-${base62(29)}","object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},` +
    `"model":${JSON.stringify(p.model)},"service_tier":"default","system_fingerprint":"${SYSTEM_FINGERPRINT}","choices":`;
  const tail = p.includeUsage ? ',"usage":null}\n\n' : '}\n\n';
  const choice = (index: number, delta: string, finish: string | null) =>
    `[{"index":${index},"delta":${delta},"logprobs":null,"finish_reason":${finish === null ? 'null' : `"${finish}"`}}]`;
  const events: string[] = [];
  // Each answer in turn, as OpenAI may send them (the index tells them apart).
  for (let a = 0; a < p.answers; a++) {
    events.push(head + choice(a, '{"role":"assistant","content":"","refusal":null}', null) + tail);
    for (let i = 1; i <= p.output; i++) {
      events.push(head + choice(a, `{"content":"${i === 1 ? '' : ' '}tok${i}"}`, null) + tail);
    }
    events.push(head + choice(a, '{}', p.truncated ? 'length' : 'stop') + tail);
  }
  if (p.includeUsage && p.usage) events.push(head + '[],"usage":' + JSON.stringify(openaiUsage(p)) + '}\n\n');
  events.push('data: [DONE]\n\n');
  return { events, preamble: 1 };
}

function anthropicUsage(p: Plan, outputTokens: number) {
  return {
    input_tokens: p.input,
    cache_creation_input_tokens: p.cacheWrite,
    cache_read_input_tokens: p.cacheRead,
    cache_creation: { ephemeral_5m_input_tokens: p.cacheWrite, ephemeral_1h_input_tokens: 0 },
    output_tokens: outputTokens,
    service_tier: 'standard',
  };
}

function anthropicMessage(p: Plan, streamingStart: boolean) {
  return {
    id: `msg_01${base62(22)}`,
    type: 'message',
    role: 'assistant',
    model: p.model,
    content: streamingStart ? [] : [{ type: 'text', text: mockOutputText(p.output) }],
    stop_reason: streamingStart ? null : p.truncated ? 'max_tokens' : 'end_turn',
    stop_sequence: null,
    stop_details: null,
    container: null,
    diagnostics: null,
    ...(p.usage ? { usage: anthropicUsage(p, streamingStart ? Math.min(1, p.output) : p.output) } : {}),
  };
}

function sse(type: string, json: string): string {
  return `event: ${type}\ndata: ${json}\n\n`;
}

function anthropicEvents(p: Plan): { events: string[]; preamble: number } {
  const events = [
    sse('message_start', JSON.stringify({ type: 'message_start', message: anthropicMessage(p, true) })),
    sse('content_block_start', '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'),
    sse('ping', '{"type": "ping"}'),
  ];
  for (let i = 1; i <= p.output; i++) {
    events.push(
      sse('content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"${i === 1 ? '' : ' '}tok${i}"}}`),
    );
  }
  events.push(sse('content_block_stop', '{"type":"content_block_stop","index":0}'));
  events.push(
    sse(
      'message_delta',
      JSON.stringify({
        type: 'message_delta',
        delta: { stop_reason: p.truncated ? 'max_tokens' : 'end_turn', stop_sequence: null, stop_details: null, container: null },
        ...(p.usage
          ? {
              usage: {
                input_tokens: p.input,
                cache_creation_input_tokens: p.cacheWrite,
                cache_read_input_tokens: p.cacheRead,
                output_tokens: p.output,
              },
            }
          : {}),
      }),
    ),
  );
  events.push(sse('message_stop', '{"type":"message_stop"}'));
  return { events, preamble: 3 };
}

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

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

function bearer(headers: IncomingHttpHeaders): string | undefined {
  const auth = headers.authorization;
  if (!auth) return undefined;
  const m = /^bearer\s+(.*)$/i.exec(auth);
  return m ? m[1]!.trim() : undefined;
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
  ) => {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      ...reqIdHeader,
    });
    const n = cutAt ?? events.length;
    if (delayMs <= 0) {
      const body = n === events.length ? events.join('') : events.slice(0, n).join('');
      if (cutAt === undefined) res.end(body);
      else destroyAfter(res, body);
      return;
    }
    for (let i = 0; i < n; i++) {
      if (i > 0) await sleep(delayMs);
      if (res.destroyed || closed) return;
      if (cutAt !== undefined && i === n - 1) destroyAfter(res, events[i]!);
      else res.write(events[i]!);
    }
    if (cutAt === undefined) res.end();
    else if (n === 0) res.socket?.destroy();
  };

  const handleCompletion = async (req: IncomingMessage, res: ServerResponse, format: MockFormat, path: string) => {
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

    const raw = await readBody(req);
    if (closed) return;
    if (raw === null) {
      record({ path, headers: req.headers, body: undefined });
      return fail(413, 'Request body too large.');
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
    const controls: MockControls = {};
    if (jsonOk) for (const t of collectTexts(format, body).texts) parseDirectives(t, controls);
    headerControls(req.headers, controls);

    const latency = controls.latency_ms ?? defaults.latencyMs;
    if (latency > 0) await sleep(latency);
    if (closed || res.destroyed) return;

    if (requireKey !== undefined) {
      // Anthropic: `x-api-key` is the classic header, but @anthropic-ai/sdk >= 1.0
      // (API version 2026-10-21) sends the key as `Authorization: Bearer`, so both pass.
      const ok = bearer(req.headers) === requireKey || (isAnthropic && req.headers['x-api-key'] === requireKey);
      if (!ok) return fail(401);
    }

    if (!jsonOk || body === null || typeof body !== 'object' || Array.isArray(body)) {
      return isAnthropic
        ? fail(400, 'The request body is not valid JSON.')
        : fail(400, 'We could not parse the JSON body of your request. (HINT: This likely means you aren\'t using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)', null);
    }
    const b = body as Record<string, unknown>;
    if (typeof b.model !== 'string' || !b.model) {
      return isAnthropic ? fail(400, 'model: Field required') : fail(400, 'you must provide a model parameter', null);
    }
    if (!Array.isArray(b.messages)) {
      return isAnthropic
        ? fail(400, 'messages: Field required')
        : fail(400, "Missing required parameter: 'messages'.", 'missing_required_parameter', 'messages');
    }
    let max: number | undefined;
    if (isAnthropic) {
      if (b.max_tokens === undefined) return fail(400, 'max_tokens: Field required');
      if (!isInt(b.max_tokens)) return fail(400, 'max_tokens: Input should be a valid integer');
      max = b.max_tokens;
    } else {
      const m = b.max_completion_tokens ?? b.max_tokens;
      if (m !== undefined && m !== null) {
        if (!isInt(m)) return fail(400, `Invalid 'max_completion_tokens': expected an integer.`, 'invalid_type', 'max_completion_tokens');
        max = m;
      }
    }

    const mode = controls.fail;
    if (typeof mode === 'number') return fail(mode);
    if (mode === 'timeout') return; // hold the socket open; close() or the client ends it
    if (mode === 'reset') {
      res.socket?.destroy();
      return;
    }

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
    return streamEvents(res, events, delay, cut, idHeader);
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
    if (method === 'POST' && path === '/v1/messages') {
      void handleCompletion(req, res, 'anthropic', url).catch(() => res.socket?.destroy());
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
    server.listen(opts.port ?? 0, host, () => {
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
