/**
 * The gateway's wire-format layer for the two upstream formats, OpenAI Chat Completions
 * and Anthropic Messages: what the gateway changes in a client's request before it goes
 * upstream, how it reads the token usage it bills (CONTRACT.md sections 4 and 8), and a
 * relay for streamed answers that forwards the upstream's events unchanged while it
 * reads their usage. Pure code: no I/O, no clock.
 */
import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import { ApiError } from '../errors/catalogue.js';
import { SseFramer } from './sse.js';

export type WireFormat = 'openai' | 'anthropic';

/** Tokens of one call by billing kind (CONTRACT.md section 8); each kind has its own price. */
export interface Usage {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/** A count the provider may leave out or send as null (then 0); null when it is present but not a count. */
function optionalCount(v: unknown): number | null {
  if (v === undefined || v === null) return 0;
  return isCount(v) ? v : null;
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

function maxTokensField(body: Json, field: string): number | null {
  const v = body[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) {
    throw new ApiError('invalid_request', { param: field, message: `${field} must be a positive integer` });
  }
  return v;
}

/**
 * The output limit the client asked for, or null when it gave none. OpenAI reads
 * `max_completion_tokens`, then the older `max_tokens`, as OpenAI itself does; Anthropic
 * reads `max_tokens`. A limit that is not a positive integer is a 400 `invalid_request`
 * naming the field, since the hold cannot be bounded by it.
 */
export function requestedMaxTokens(format: WireFormat, body: Record<string, unknown>): number | null {
  if (format === 'anthropic') return maxTokensField(body, 'max_tokens');
  const completion = maxTokensField(body, 'max_completion_tokens');
  const legacy = maxTokensField(body, 'max_tokens');
  return completion ?? legacy;
}

/**
 * The body sent upstream: a shallow copy of everything the client sent (fields the
 * gateway does not know included, nested values shared, the client's object untouched),
 * with these changes only:
 * - `model` is the upstream's model name;
 * - with a non-null `maxTokens`, the output limit is that value. OpenAI: every limit field
 *   the client set (`max_completion_tokens`, `max_tokens`, or both) gets it, so the
 *   upstream honours it whichever it reads; when the client set neither, it goes in
 *   `max_completion_tokens`, the field OpenAI documents (and the only one its reasoning
 *   models accept). Anthropic: `max_tokens`;
 * - `stream` is `opts.stream` when streaming or when the client sent the field;
 * - OpenAI streaming: `stream_options.include_usage` is true (the client's other
 *   `stream_options` kept), so every stream is billed from the upstream's own usage.
 *
 * `clientWantsUsage` says whether the client asked for the usage chunk itself (OpenAI
 * streaming only; an Anthropic stream always carries usage, and a whole answer always
 * has it), so the relay can drop it when it did not.
 */
export function prepareUpstreamBody(
  format: WireFormat,
  clientBody: Record<string, unknown>,
  opts: { upstreamModel: string; maxTokens: number | null; stream: boolean },
): { body: Record<string, unknown>; clientWantsUsage: boolean } {
  const body: Json = { ...clientBody, model: opts.upstreamModel };
  if (opts.stream || 'stream' in clientBody) body.stream = opts.stream;
  if (opts.maxTokens !== null) {
    if (format === 'anthropic') {
      body.max_tokens = opts.maxTokens;
    } else {
      const hasCompletion = clientBody.max_completion_tokens !== undefined && clientBody.max_completion_tokens !== null;
      const hasLegacy = clientBody.max_tokens !== undefined && clientBody.max_tokens !== null;
      if (hasCompletion || !hasLegacy) body.max_completion_tokens = opts.maxTokens;
      if (hasLegacy) body.max_tokens = opts.maxTokens;
    }
  }
  if (format === 'anthropic' || !opts.stream) return { body, clientWantsUsage: true };
  const clientOptions = clientBody.stream_options;
  const clientWantsUsage = isObject(clientOptions) && clientOptions.include_usage === true;
  body.stream_options = { ...(isObject(clientOptions) ? clientOptions : {}), include_usage: true };
  return { body, clientWantsUsage };
}

// ---------------------------------------------------------------------------
// Usage
// ---------------------------------------------------------------------------

/**
 * OpenAI `usage`: `prompt_tokens` includes the cached tokens (`prompt_tokens_details.
 * cached_tokens`) and, when the upstream reports them, the tokens written to its cache
 * (`cache_write_tokens`, "the unadjusted number of prompt tokens written to cache" in the
 * openai types). Each prompt token is billed once, at the price of its kind, so input is
 * what remains. Without `cache_write_tokens` this is exactly CONTRACT.md section 8:
 * input = prompt_tokens - cached_tokens.
 */
function openaiUsage(u: unknown): Usage | null {
  if (!isObject(u) || !isCount(u.prompt_tokens) || !isCount(u.completion_tokens)) return null;
  const details = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const cacheRead = optionalCount(details.cached_tokens);
  const cacheWrite = optionalCount(details.cache_write_tokens);
  if (cacheRead === null || cacheWrite === null || cacheRead + cacheWrite > u.prompt_tokens) return null;
  return { input: u.prompt_tokens - cacheRead - cacheWrite, output: u.completion_tokens, cacheRead, cacheWrite };
}

/** Anthropic `usage`: `input_tokens` already excludes both cache kinds. */
function anthropicUsage(u: unknown): Usage | null {
  if (!isObject(u) || !isCount(u.input_tokens) || !isCount(u.output_tokens)) return null;
  const cacheRead = optionalCount(u.cache_read_input_tokens);
  const cacheWrite = optionalCount(u.cache_creation_input_tokens);
  if (cacheRead === null || cacheWrite === null) return null;
  return { input: u.input_tokens, output: u.output_tokens, cacheRead, cacheWrite };
}

/** Usage of a whole (non-streamed) answer, or null when it has none the gateway can read. */
export function usageFromResponse(format: WireFormat, json: unknown): Usage | null {
  if (!isObject(json)) return null;
  return format === 'openai' ? openaiUsage(json.usage) : anthropicUsage(json.usage);
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

const EMPTY = new Uint8Array(0);
const DEFAULT_EVENT_BYTES_MAX = 4 * 1024 * 1024;
const OPENAI_USAGE_NULL_TAIL = ',"usage":null}';
/**
 * Characters of event data whose generated text is counted later (see StreamRelay): past
 * this, they are counted at once, so a long stream holds at most this much.
 */
export const deferred_data_chars_max = 64 * 1024;
/** Anthropic events that carry neither usage, nor a terminal, nor an error. */
const anthropicPlainEvents = new Set(['content_block_delta', 'content_block_start', 'content_block_stop', 'ping']);

/** Whether `data` is shaped as a JSON object: the cheap check of an event that is not parsed. */
function looksLikeObject(data: string): boolean {
  const t = data.trim();
  return t.startsWith('{') && t.endsWith('}');
}

/** The JSON object in `data`, or null when it is not one. */
function parseObject(data: string): Json | null {
  try {
    const v: unknown = JSON.parse(data);
    return isObject(v) ? v : null;
  } catch {
    return null;
  }
}

/** Characters of generated text in an OpenAI chunk: content, refusals and tool-call arguments. */
function openaiDeltaChars(chunk: Json): number {
  if (!Array.isArray(chunk.choices)) return 0;
  let chars = 0;
  for (const choice of chunk.choices) {
    if (!isObject(choice) || !isObject(choice.delta)) continue;
    const delta = choice.delta;
    if (typeof delta.content === 'string') chars += delta.content.length;
    if (typeof delta.refusal === 'string') chars += delta.refusal.length;
    const calls: unknown[] = Array.isArray(delta.tool_calls) ? [...delta.tool_calls] : [];
    if (isObject(delta.function_call)) calls.push({ function: delta.function_call });
    for (const call of calls) {
      if (!isObject(call) || !isObject(call.function)) continue;
      if (typeof call.function.name === 'string') chars += call.function.name.length;
      if (typeof call.function.arguments === 'string') chars += call.function.arguments.length;
    }
  }
  return chars;
}

/** Characters of generated text in an Anthropic `content_block_delta`: text, tool input, thinking. */
function anthropicDeltaChars(event: Json): number {
  const delta = event.delta;
  if (!isObject(delta)) return 0;
  for (const field of ['text', 'partial_json', 'thinking'] as const) {
    if (typeof delta[field] === 'string') return (delta[field] as string).length;
  }
  return 0;
}

/** Replaces the data of an SSE event's text by `data` (one line), keeping its other lines and line ends. */
function replaceEventData(eventText: string, oldData: string, data: string): string {
  // The usual event: one data line and nothing else.
  if (eventText === `data: ${oldData}\n\n`) return `data: ${data}\n\n`;
  let out = '';
  let replaced = false;
  for (const m of eventText.matchAll(/([^\r\n]*)(\r\n|\r|\n|$)/g)) {
    const [whole, line, lineEnd] = m as unknown as [string, string, string];
    if (whole === '') continue;
    if (line === 'data' || line.startsWith('data:')) {
      if (!replaced) out += (line.startsWith('data: ') ? 'data: ' : 'data:') + data + lineEnd;
      replaced = true;
    } else {
      out += whole;
    }
  }
  return out;
}

/**
 * Relays one streamed answer: feed it the upstream's bytes as they come, forward what it
 * returns. It forwards complete events only, each byte-identical to the upstream's, with
 * one exception: for an OpenAI stream whose client did not ask for usage
 * (`clientWantsUsage` false, the gateway having added `include_usage` upstream),
 * - the usage chunk (`choices: []` with a non-null `usage`) is dropped, and
 * - the `usage` field is removed from every other chunk that has one (OpenAI adds
 *   `"usage":null` to each chunk once usage is asked for). The exact text
 *   `,"usage":null}` at the end of the data is cut; any other placement of the field
 *   re-serializes that chunk's JSON without it.
 * That is what the client would have received from the provider directly.
 *
 * While relaying it reads the usage to bill, counts the output already forwarded (for a
 * client that leaves mid-stream), and notes the terminal event and error events.
 * An event whose data is not a JSON object (other than OpenAI's `[DONE]`), or that grows
 * past `eventBytesMax`, makes the stream invalid: `invalid()` says why, and from then on
 * nothing more is forwarded. The events before it were already returned.
 *
 * Only the events that can matter to billing are parsed as they pass: the first one (so a
 * stream of garbage is refused before anything is forwarded), and those whose text can
 * hold usage, an error or the end (a cheap search for `"usage"`, `"error"`, Anthropic's
 * event name). The others (the text deltas, nearly all of a stream) get a cheap check of
 * their shape (`{...}`) and are forwarded as they are; their generated text is counted
 * only when the output estimate is asked for (a stream that did not end with its usage),
 * or once they add up to deferred_data_chars_max. So a delta whose data looks like an
 * object but does not parse is found only then: it was forwarded, as the upstream wrote
 * it, and the stream is then invalid (billed as estimated).
 */
export class StreamRelay {
  private readonly framer = new SseFramer();
  private readonly parser: EventSourceParser;
  private readonly eventBytesMax: number;
  private parsed: EventSourceMessage | null = null;
  private counts: Partial<Usage> = {};
  private complete = false;
  private outputChars = 0;
  private deltaEvents = 0;
  private terminal = false;
  private errorEvent: unknown = null;
  private invalidReason: string | null = null;
  /** Events with data seen so far. */
  private dataEvents = 0;
  /** Data of forwarded events whose generated text is not counted yet, and its length. */
  private deferred: string[] = [];
  private deferredChars = 0;

  constructor(
    private readonly format: WireFormat,
    private readonly clientWantsUsage: boolean,
    opts: { eventBytesMax?: number } = {},
  ) {
    this.eventBytesMax = opts.eventBytesMax ?? DEFAULT_EVENT_BYTES_MAX;
    this.parser = createParser({
      onEvent: (event) => {
        this.parsed = event;
      },
    });
  }

  /** Takes raw upstream bytes; returns the bytes to forward to the client now (possibly none). */
  push(chunk: Uint8Array): Uint8Array {
    if (this.invalidReason !== null) return EMPTY;
    const out: Uint8Array[] = [];
    for (const event of this.framer.push(chunk)) {
      const forwarded = this.relayEvent(event, false);
      if (this.invalidReason !== null) break;
      if (forwarded.length > 0) out.push(forwarded);
    }
    if (this.invalidReason === null && this.framer.pendingBytes() > this.eventBytesMax) {
      this.invalidReason = `an upstream event is longer than ${this.eventBytesMax} bytes`;
    }
    if (out.length === 0) return EMPTY;
    return out.length === 1 ? out[0]! : Buffer.concat(out);
  }

  /**
   * Call once the upstream body has ended cleanly (not after an error: a cut-off event
   * must not reach the client). Returns a last event the upstream sent without its
   * closing blank line, forwarded as it is, and reads it all the same so that a usage
   * chunk at the very end is still billed.
   */
  end(): Uint8Array {
    const rest = this.framer.end();
    if (rest.length === 0 || this.invalidReason !== null) return EMPTY;
    const forwarded = this.relayEvent(rest, true);
    return this.invalidReason === null ? forwarded : EMPTY;
  }

  /**
   * The latest token counts the upstream reported, or null before any: OpenAI's usage
   * chunk; Anthropic's `message_start` usage updated field by field by `message_delta`
   * (whose `output_tokens` is the running total, latest wins). Before `usageComplete()`
   * an Anthropic value already has the exact input and cache counts, but not the output.
   */
  usage(): Usage | null {
    const c = this.counts;
    if (c.input === undefined || c.output === undefined) return null;
    return { input: c.input, output: c.output, cacheRead: c.cacheRead ?? 0, cacheWrite: c.cacheWrite ?? 0 };
  }

  /** Whether `usage()` is final: OpenAI's usage chunk or Anthropic's `message_delta` usage was seen. */
  usageComplete(): boolean {
    return this.complete && this.usage() !== null;
  }

  /**
   * Output tokens already forwarded, estimated from the generated text of the delta
   * events forwarded: ceil(characters / 4), but at least one per delta that carried text.
   */
  relayedOutputEstimate(): number {
    this.countDeferred();
    return Math.max(Math.ceil(this.outputChars / 4), this.deltaEvents);
  }

  /** Whether the stream's last event was seen: OpenAI `[DONE]`, Anthropic `message_stop`. */
  sawTerminal(): boolean {
    return this.terminal;
  }

  /** The parsed data of the last error event (Anthropic `event: error`, an OpenAI chunk with `error`), else null. */
  error(): unknown {
    return this.errorEvent;
  }

  /** Why the upstream's stream is not a valid stream of its format, else null. */
  invalid(): string | null {
    return this.invalidReason;
  }

  /** Reads one complete event and returns the bytes to forward for it. */
  private relayEvent(raw: Buffer, last: boolean): Uint8Array {
    const text = raw.toString('utf8');
    this.parsed = null;
    // A lone CR at the end is a complete line end, but the parser waits for a possible LF
    // after it; at the end of the stream the event also needs its blank line.
    this.parser.feed(last ? text + '\n\n' : text.endsWith('\r') ? text + '\n' : text);
    const event = this.parsed as EventSourceMessage | null;
    if (event === null || event.data === '') return raw;
    if (this.format === 'openai' && event.data === '[DONE]') {
      this.terminal = true;
      return raw;
    }
    if (!looksLikeObject(event.data)) return this.invalidate();
    if (this.dataEvents++ > 0) {
      const forwarded = this.format === 'openai' ? this.plainOpenaiChunk(raw, text, event.data) : this.plainAnthropicEvent(raw, event);
      if (forwarded !== null) return forwarded;
    }
    const data = parseObject(event.data);
    if (data === null) return this.invalidate();
    this.countDelta(data);
    return this.format === 'openai' ? this.openaiChunk(raw, text, event.data, data) : this.anthropicEvent(raw, data);
  }

  private invalidate(): Uint8Array {
    this.invalidReason = 'an upstream event has data that is not a JSON object';
    return EMPTY;
  }

  /**
   * The bytes to forward for an OpenAI chunk that cannot hold usage nor an error, its text
   * counted later; null when it may hold either (it is then parsed). A `"usage":null` at
   * the very end, the only `"usage"` in it, holds no usage: cut when the client did not
   * ask for usage, as openaiChunk would.
   */
  private plainOpenaiChunk(raw: Buffer, text: string, data: string): Uint8Array | null {
    const usageAt = data.indexOf('"usage"');
    const usageNull = usageAt >= 0;
    if (usageNull && usageAt !== data.length - OPENAI_USAGE_NULL_TAIL.length + 1) return null;
    if (usageNull && !data.endsWith(OPENAI_USAGE_NULL_TAIL)) return null;
    if (data.includes('"error"')) return null;
    this.defer(data);
    if (!usageNull || this.clientWantsUsage) return raw;
    return Buffer.from(replaceEventData(text, data, data.slice(0, -OPENAI_USAGE_NULL_TAIL.length) + '}'), 'utf8');
  }

  /** The bytes of an Anthropic text delta, block start or stop, or ping (counted later); null for any other event. */
  private plainAnthropicEvent(raw: Buffer, event: EventSourceMessage): Uint8Array | null {
    if (event.event === undefined || !anthropicPlainEvents.has(event.event)) return null;
    const d = event.data;
    if (d.includes('"usage"') || d.includes('"error"') || d.includes('"message_')) return null;
    this.defer(d);
    return raw;
  }

  private defer(data: string): void {
    this.deferred.push(data);
    this.deferredChars += data.length;
    if (this.deferredChars > deferred_data_chars_max) this.countDeferred();
  }

  /** Counts the generated text of the deferred events; one that does not parse makes the stream invalid. */
  private countDeferred(): void {
    const pending = this.deferred;
    if (pending.length === 0) return;
    this.deferred = [];
    this.deferredChars = 0;
    for (const data of pending) {
      const parsed = parseObject(data);
      if (parsed === null) {
        this.invalidate();
        return;
      }
      this.countDelta(parsed);
    }
  }

  /** Adds the generated text of one event to what was forwarded. */
  private countDelta(event: Json): void {
    const chars = this.format === 'openai' ? openaiDeltaChars(event) : event.type === 'content_block_delta' ? anthropicDeltaChars(event) : 0;
    if (chars > 0) {
      this.outputChars += chars;
      this.deltaEvents++;
    }
  }

  private openaiChunk(raw: Buffer, text: string, dataText: string, chunk: Json): Uint8Array {
    if (chunk.error !== undefined && chunk.error !== null) this.errorEvent = chunk;
    const usage = chunk.usage === undefined || chunk.usage === null ? null : openaiUsage(chunk.usage);
    if (usage !== null) {
      this.counts = usage;
      this.complete = true;
    }
    if (this.clientWantsUsage || !('usage' in chunk)) return raw;
    if (chunk.usage !== null && Array.isArray(chunk.choices) && chunk.choices.length === 0) return EMPTY;
    let data: string;
    if (chunk.usage === null && dataText.endsWith(OPENAI_USAGE_NULL_TAIL)) {
      data = dataText.slice(0, -OPENAI_USAGE_NULL_TAIL.length) + '}';
    } else {
      const { usage: _dropped, ...rest } = chunk;
      data = JSON.stringify(rest);
    }
    return Buffer.from(replaceEventData(text, dataText, data), 'utf8');
  }

  private anthropicEvent(raw: Buffer, event: Json): Uint8Array {
    switch (event.type) {
      case 'message_start': {
        const usage = isObject(event.message) ? anthropicUsage(event.message.usage) : null;
        if (usage !== null) this.counts = usage;
        break;
      }
      case 'message_delta': {
        if (!isObject(event.usage)) break;
        const u = event.usage;
        const fields = [
          ['input', u.input_tokens],
          ['output', u.output_tokens],
          ['cacheRead', u.cache_read_input_tokens],
          ['cacheWrite', u.cache_creation_input_tokens],
        ] as const;
        for (const [kind, value] of fields) if (isCount(value)) this.counts[kind] = value;
        this.complete = true;
        break;
      }
      case 'message_stop':
        this.terminal = true;
        break;
      case 'error':
        this.errorEvent = event;
        break;
    }
    return raw;
  }
}
