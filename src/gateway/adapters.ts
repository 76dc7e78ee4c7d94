/**
 * The gateway's door to the upstream wire formats (src/gateway/wire/): picks a format's
 * module by name, and relays streamed answers for any of them. What the gateway changes
 * in a client's request, and how it reads the token usage it bills (docs/API.md,
 * "Gateway"), is each format's own; the relay forwards the upstream's events unchanged
 * while the format reads their usage. Pure code: no I/O, no clock.
 */
import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import { SseFramer } from './sse.js';
import { anthropic } from './wire/anthropic.js';
import { isObject, type Forward, type Json, type ProviderFormat, type StreamCloser, type StreamReading, type Usage, type WireFormat } from './wire/format.js';
import { openai } from './wire/openai.js';
import { responses } from './wire/responses.js';

export type { Usage, WireFormat } from './wire/format.js';

const formats: Record<WireFormat, ProviderFormat> = { openai, anthropic, responses };

/** The module of a wire format. */
export function formatOf(name: WireFormat): ProviderFormat {
  return formats[name];
}

/**
 * The output limit the client asked for, or null when it gave none. OpenAI reads
 * `max_completion_tokens`, then the older `max_tokens`, as OpenAI itself does; Anthropic
 * reads `max_tokens`. A limit that is not a positive integer is a 400 `invalid_request`
 * naming the field, since the hold cannot be bounded by it.
 */
export function requestedMaxTokens(format: WireFormat, body: Record<string, unknown>): number | null {
  return formats[format].requestedMaxTokens(body);
}

/**
 * The body sent upstream: a shallow copy of everything the client sent (fields the
 * gateway does not know included, nested values shared, the client's object untouched),
 * with these changes only:
 * - `model` is the upstream's model name;
 * - with a non-null `maxTokens`, the output limit is that value, in the field(s) the
 *   format reads (src/gateway/wire/<format>.ts);
 * - `stream` is `opts.stream` when streaming or when the client sent the field;
 * - OpenAI streaming: `stream_options.include_usage` is true, so every stream is billed
 *   from the upstream's own usage.
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
  return formats[format].prepareUpstreamBody(clientBody, opts);
}

/** Usage of a whole (non-streamed) answer, or null when it has none the gateway can read. */
export function usageFromResponse(format: WireFormat, json: unknown): Usage | null {
  if (!isObject(json)) return null;
  return formats[format].usageFromResponse(json);
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

const EMPTY = new Uint8Array(0);
const DEFAULT_EVENT_BYTES_MAX = 4 * 1024 * 1024;
/**
 * Characters of event data whose generated text is counted later (see StreamRelay): past
 * this, they are counted at once, so a long stream holds at most this much.
 */
export const deferred_data_chars_max = 64 * 1024;
/** Characters of generated text per output token, for the estimate of output forwarded (a rough English average). */
const chars_per_token_estimate = 4;

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

/** The field that `X-Service-Stream-Billing: inline` adds to a stream's final usage event. */
export const billing_field = 'service_billing';

/**
 * `data` (the JSON object `parsed`, as text) with `name: value` added as its last field:
 * the text as it came with the field spliced in before its closing brace, or, when the
 * text spans lines (an SSE data field cannot hold a line end), the object serialized
 * again on one line.
 */
function withField(data: string, parsed: Json, name: string, value: unknown): string {
  const field = `${JSON.stringify(name)}:${JSON.stringify(value)}`;
  if (/[\r\n]/.test(data)) return JSON.stringify({ ...parsed, [name]: value });
  const close = data.lastIndexOf('}');
  const empty = data.slice(0, close).trimEnd().endsWith('{');
  return `${data.slice(0, close)}${empty ? '' : ','}${field}${data.slice(close)}`;
}

/**
 * Where a metered StreamRelay stopped: the bytes of the event that went past its allowance
 * (counted, not forwarded), the counts before it (what was forwarded), and the events that
 * came after it, not read yet.
 */
interface Gate {
  out: Uint8Array;
  chars: number;
  events: number;
  unread: { raw: Buffer; last: boolean }[];
}

/** Appends `next` to `out`, as one view with the last part when it follows it in the same memory. */
function appendJoined(out: Uint8Array[], next: Uint8Array): void {
  const last = out.at(-1);
  if (last !== undefined && last.buffer === next.buffer && last.byteOffset + last.length === next.byteOffset) {
    out[out.length - 1] = Buffer.from(last.buffer, last.byteOffset, last.length + next.length);
  } else {
    out.push(next);
  }
}

/**
 * Relays one streamed answer: feed it the upstream's bytes as they come, forward what it
 * returns. It forwards complete events only, each byte-identical to the upstream's, with
 * one exception: for an OpenAI stream whose client did not ask for usage
 * (`clientWantsUsage` false, the gateway having added `include_usage` upstream), the
 * usage chunk is dropped and the `usage` field is removed from the other chunks
 * (src/gateway/wire/openai.ts). That is what the client would have received from the
 * provider directly.
 *
 * While relaying it reads the usage to bill, counts the output already forwarded (for a
 * client that leaves mid-stream), and notes the terminal event and error events.
 * An event whose data is not a JSON object (other than OpenAI's `[DONE]`), or that grows
 * past `eventBytesMax`, makes the stream invalid: `invalid()` says why, and from then on
 * nothing more is forwarded. The events before it were already returned.
 *
 * Only the events that can matter to billing are parsed as they pass: the first one (so a
 * stream of garbage is refused before anything is forwarded), and those whose text can
 * hold usage, an error or the end (the format's `plainEvent`: a cheap search for
 * `"usage"`, `"error"`, Anthropic's event name). The others (the text deltas, nearly all
 * of a stream) get a cheap check of their shape (`{...}`) and are forwarded as they are,
 * or as the format rewrites them without parsing; their generated text is counted
 * only when the output estimate is asked for (a stream that did not end with its usage),
 * or once they add up to deferred_data_chars_max. So a delta whose data looks like an
 * object but does not parse is found only then: it was forwarded, as the upstream wrote
 * it, and the stream is then invalid (billed as estimated).
 */
export class StreamRelay {
  private readonly framer = new SseFramer();
  private readonly parser: EventSourceParser;
  private readonly eventBytesMax: number;
  private readonly wire: ProviderFormat;
  private parsed: EventSourceMessage | null = null;
  private readonly reading: StreamReading = { counts: {}, complete: false, terminal: false, errorEvent: null };
  private outputChars = 0;
  private deltaEvents = 0;
  private invalidReason: string | null = null;
  /** Events with data seen so far. */
  private dataEvents = 0;
  /** Data of forwarded events whose generated text is not counted yet, and its length. */
  private deferred: string[] = [];
  private deferredChars = 0;
  /** holdFinal: the final usage event, held back with what follows it (releaseHeld). */
  private readonly holdFinal: boolean;
  private final: { bytes: Buffer; text: string; data: string; parsed: Json } | null = null;
  /** The bytes to forward after the final usage event, once it is held; else null. */
  private held: Buffer[] | null = null;
  /**
   * Metered (`X-Service-Hold: incremental`): the output tokens the relay may forward (what
   * is held); every event is parsed and counted before it goes out, and the closer sees it.
   * Infinity and null when not metered: the default path pays one branch per event.
   */
  private allowance = Infinity;
  private readonly closer: StreamCloser | null;
  /** Metered and past the allowance: where the relay stopped (Gate); null while it forwards. */
  private gate: Gate | null = null;

  constructor(
    format: WireFormat,
    private readonly clientWantsUsage: boolean,
    opts: { eventBytesMax?: number; holdFinal?: boolean; allowance?: number } = {},
  ) {
    this.wire = formats[format];
    this.eventBytesMax = opts.eventBytesMax ?? DEFAULT_EVENT_BYTES_MAX;
    this.holdFinal = opts.holdFinal === true;
    this.closer = opts.allowance === undefined ? null : this.wire.streamCloser();
    if (opts.allowance !== undefined) this.allowance = opts.allowance;
    this.parser = createParser({
      onEvent: (event) => {
        this.parsed = event;
      },
    });
  }

  /**
   * Takes raw upstream bytes; returns the bytes to forward to the client now (possibly
   * none). Events forwarded as they came are consecutive bytes of the framer's buffer, so
   * a run of them is returned as one view of it, not copied.
   */
  push(chunk: Uint8Array): Uint8Array {
    if (this.invalidReason !== null) return EMPTY;
    const out: Uint8Array[] = [];
    for (const event of this.framer.push(chunk)) {
      if (this.gate !== null) {
        // A copy: `event` may be a view of the upstream's chunk.
        this.gate.unread.push({ raw: Buffer.from(event), last: false });
        continue;
      }
      const forwarded = this.closer === null ? this.relayEvent(event, false) : this.meteredEvent(event, false);
      if (this.invalidReason !== null) break;
      if (forwarded.length > 0) this.emit(out, forwarded);
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
    if (this.gate !== null) {
      this.gate.unread.push({ raw: Buffer.from(rest), last: true });
      return EMPTY;
    }
    const forwarded = this.closer === null ? this.relayEvent(rest, true) : this.meteredEvent(rest, true);
    if (this.invalidReason !== null) return EMPTY;
    if (this.held !== null && forwarded.length > 0) {
      this.held.push(Buffer.from(forwarded));
      return EMPTY;
    }
    return forwarded;
  }

  private emit(out: Uint8Array[], forwarded: Uint8Array): void {
    if (this.held === null) appendJoined(out, forwarded);
    else this.held.push(Buffer.from(forwarded));
  }

  /**
   * Metered: one event, counted before it goes out; past the allowance it is kept with
   * the gate (the count before it noted) instead of returned.
   */
  private meteredEvent(raw: Buffer, last: boolean): Uint8Array {
    const chars = this.outputChars;
    const events = this.deltaEvents;
    const forwarded = this.relayEvent(raw, last);
    if (this.outputEstimate() <= this.allowance) return forwarded;
    this.gate = { out: Buffer.from(forwarded), chars, events, unread: [] };
    return EMPTY;
  }

  /** Metered: whether the relay stopped at its allowance (the events after it wait: allow). */
  gated(): boolean {
    return this.gate !== null;
  }

  private stoppedAt(): Gate | null {
    return this.gate;
  }

  /**
   * Metered: raises the allowance to `tokens` and returns what it lets out, in order: the
   * event that stopped at the gate, then the unread ones, until the allowance stops one
   * again (gated() then says so).
   */
  allow(tokens: number): Uint8Array {
    this.allowance = tokens;
    const gate = this.gate;
    if (gate === null || this.outputEstimate() > tokens) return EMPTY;
    this.gate = null;
    const out: Uint8Array[] = [];
    if (gate.out.length > 0) this.emit(out, gate.out);
    for (let i = 0; i < gate.unread.length; i++) {
      const { raw, last } = gate.unread[i]!;
      const forwarded = this.meteredEvent(raw, last);
      if (this.invalidReason !== null) break;
      if (forwarded.length > 0) this.emit(out, forwarded);
      // A method, not the field: the compiler keeps `this.gate` narrowed to null here.
      const again = this.stoppedAt();
      if (again !== null) {
        again.unread = gate.unread.slice(i + 1);
        break;
      }
    }
    if (out.length === 0) return EMPTY;
    return out.length === 1 ? out[0]! : Buffer.concat(out);
  }

  /**
   * Metered, once the gateway ends the stream itself: the closing events of the format
   * (StreamCloser), for `usage` billed, with `extra` fields on the one that carries it.
   * What waits at the gate is dropped.
   */
  close(usage: Usage, extra: Json | null): Uint8Array {
    this.gate = null;
    return Buffer.from(this.closer!.close(usage, extra, this.clientWantsUsage), 'utf8');
  }

  /** Whether the relay holds back the final usage event when it comes (holdFinal: inline billing). */
  holdsFinal(): boolean {
    return this.holdFinal;
  }

  /** Whether the final usage event is held back (holdFinal): releaseHeld gives it and what followed it. */
  holding(): boolean {
    return this.held !== null;
  }

  /**
   * The bytes held back since the final usage event (holdFinal), once, in order: that
   * event with `billing` added to its data's object as the field `billing_field` (when
   * `billing` is given), then the events that followed it as they came. Empty when
   * nothing is held.
   */
  releaseHeld(billing: Json | null): Uint8Array {
    const final = this.final;
    const held = this.held;
    if (final === null || held === null) return EMPTY;
    this.final = null;
    this.held = null;
    const first = billing === null ? final.bytes : Buffer.from(replaceEventData(final.text, final.data, withField(final.data, final.parsed, billing_field, billing)), 'utf8');
    return held.length === 0 ? first : Buffer.concat([first, ...held]);
  }

  /**
   * The latest token counts the upstream reported, or null before any: OpenAI's usage
   * chunk; Anthropic's `message_start` usage updated field by field by `message_delta`
   * (whose `output_tokens` is the running total, latest wins). Before `usageComplete()`
   * an Anthropic value already has the exact input and cache counts, but not the output.
   */
  usage(): Usage | null {
    const c = this.reading.counts;
    if (c.input === undefined || c.output === undefined) return null;
    return { input: c.input, output: c.output, cacheRead: c.cacheRead ?? 0, cacheWrite: c.cacheWrite ?? 0 };
  }

  /** Whether `usage()` is final: OpenAI's usage chunk or Anthropic's `message_delta` usage was seen. */
  usageComplete(): boolean {
    return this.reading.complete && this.usage() !== null;
  }

  /**
   * Output tokens already forwarded, estimated from the generated text of the delta
   * events forwarded: ceil(characters / 4), but at least one per delta that carried text.
   */
  relayedOutputEstimate(): number {
    this.countDeferred();
    // Metered and gated: the event at the gate was counted but not forwarded.
    if (this.gate !== null) return Math.max(Math.ceil(this.gate.chars / chars_per_token_estimate), this.gate.events);
    return this.outputEstimate();
  }

  /** The output estimate of the events counted (metered: the one stopped at the allowance too). */
  outputEstimate(): number {
    return Math.max(Math.ceil(this.outputChars / chars_per_token_estimate), this.deltaEvents);
  }

  /** Whether the stream's last event was seen: OpenAI `[DONE]`, Anthropic `message_stop`. */
  sawTerminal(): boolean {
    return this.reading.terminal;
  }

  /** The parsed data of the last error event (Anthropic `event: error`, an OpenAI chunk with `error`), else null. */
  error(): unknown {
    return this.reading.errorEvent;
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
    if (event.data === this.wire.terminalData) {
      this.reading.terminal = true;
      return raw;
    }
    if (!looksLikeObject(event.data)) return this.invalidate();
    if (this.dataEvents++ > 0 && this.closer === null) {
      const plain = this.wire.plainEvent(event.event, event.data, this.clientWantsUsage);
      if (plain !== null) {
        this.defer(event.data);
        return this.forward(plain, raw, text, event.data);
      }
    }
    const data = parseObject(event.data);
    if (data === null) return this.invalidate();
    this.countDelta(data);
    this.closer?.see(data);
    if (this.holdFinal && !this.reading.complete) return this.readMaybeFinal(data, raw, text, event.data);
    return this.forward(this.wire.readEvent(data, event.data, this.reading, this.clientWantsUsage), raw, text, event.data);
  }

  /**
   * holdFinal, before the final usage: reads the event, and holds it back when it is the
   * one that made the usage final (OpenAI's usage chunk, Anthropic's `message_delta`).
   */
  private readMaybeFinal(data: Json, raw: Buffer, text: string, dataText: string): Uint8Array {
    const what = this.wire.readEvent(data, dataText, this.reading, this.clientWantsUsage);
    if (!this.reading.complete || what === 'drop') return this.forward(what, raw, text, dataText);
    // A copy: `raw` may be a view of the upstream's chunk.
    const bytes = Buffer.from(this.forward(what, raw, text, dataText));
    this.final = { bytes, text: what === 'raw' ? text : bytes.toString('utf8'), data: what === 'raw' ? dataText : what.data, parsed: data };
    this.held = [];
    return EMPTY;
  }

  private forward(what: Forward, raw: Buffer, text: string, dataText: string): Uint8Array {
    if (what === 'raw') return raw;
    if (what === 'drop') return EMPTY;
    return Buffer.from(replaceEventData(text, dataText, what.data), 'utf8');
  }

  private invalidate(): Uint8Array {
    this.invalidReason = 'an upstream event has data that is not a JSON object';
    return EMPTY;
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
    const chars = this.wire.deltaChars(event);
    if (chars > 0) {
      this.outputChars += chars;
      this.deltaEvents++;
    }
  }
}
