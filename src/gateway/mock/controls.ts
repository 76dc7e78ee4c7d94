/**
 * The mock upstream's per-request controls and token accounting: `[[mock key=value ...]]`
 * directives in message text and `x-mock-<key>` headers (docs/MOCK_UPSTREAM.md), and the
 * deterministic counts of input and output tokens. Pure; exported for tests.
 */
import type { IncomingHttpHeaders } from 'node:http';

export type MockFormat = 'openai' | 'anthropic';

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
  /** Responses API: reasoning tokens, reported in `output_tokens` and its details. */
  reasoning_tokens?: number;
  latency_ms?: number;
  chunk_delay_ms?: number;
  /** Streams: a pause of `pause_ms` before event N (1: the first, the headers sent before it). */
  pause_before?: number;
  pause_ms?: number;
  /** 1: answer with a call of the request's first tool (arguments streamed in pieces) instead of text. */
  tool_call?: number;
  fail?: MockFailMode;
  /** Seconds sent as `retry-after` with a `fail` of a status (a provider's 429). */
  retry_after?: number;
}

const NUMERIC_KEYS = ['output_tokens', 'input_tokens', 'no_usage', 'cache_read_tokens', 'cache_write_tokens', 'reasoning_tokens', 'tool_call', 'latency_ms', 'chunk_delay_ms', 'pause_before', 'pause_ms', 'retry_after'] as const;
type NumericKey = (typeof NUMERIC_KEYS)[number];
const FAIL_WORDS = new Set(['timeout', 'reset', 'invalid', 'midstream']);

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
export function parseDirectives(text: string, out: MockControls): void {
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
export function collectTexts(format: MockFormat, body: unknown): { texts: string[]; messageCount: number } {
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

/** Whitespace-separated words of `text`, its `[[mock ...]]` directives removed. */
export function countWords(text: string): number {
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

export function headerControls(headers: IncomingHttpHeaders, out: MockControls): void {
  for (const key of [...NUMERIC_KEYS, 'fail']) {
    const v = headers[`x-mock-${key}`] ?? headers[`x-mock-${key.replace(/_/g, '-')}`];
    const value = Array.isArray(v) ? v[v.length - 1] : v;
    if (value !== undefined) setControl(out, key, value);
  }
}

/** The name of a request's first tool (OpenAI `tools[0].function.name`, Anthropic `tools[0].name`), or null. */
export function firstToolName(format: MockFormat, body: Record<string, unknown>): string | null {
  const tool: unknown = Array.isArray(body.tools) ? body.tools[0] : undefined;
  if (!tool || typeof tool !== 'object') return null;
  const t = tool as { name?: unknown; function?: { name?: unknown } };
  const name = format === 'anthropic' ? t.name : t.function?.name;
  return typeof name === 'string' ? name : null;
}

/** The arguments of the mock's tool call of `n` output tokens, and their pieces as streamed (three, split anywhere). */
export function mockToolArguments(n: number): { json: string; pieces: string[] } {
  const json = JSON.stringify({ query: mockOutputText(n) });
  const a = Math.floor(json.length / 3);
  return { json, pieces: [json.slice(0, a), json.slice(a, 2 * a), json.slice(2 * a)] };
}
