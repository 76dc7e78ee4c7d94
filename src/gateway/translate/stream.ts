/**
 * The relay of a translated stream: a StreamRelay (src/gateway/adapters.ts) that reads and
 * bills the upstream's events in their own format, exactly as on the native path, and
 * whose forwarded bytes are then translated event by event: parsed, upstream -> hub ->
 * client, and written again in the client's format (with `event:` names for Anthropic).
 * The inline billing figures the relay adds to the upstream's final usage event go to
 * the client's own usage event.
 */
import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import { billing_field, StreamRelay } from '../adapters.js';
import { isObject, type Json, type Usage, type WireFormat } from '../wire/format.js';
import type { HubEvent, StreamTranslation } from './hub.js';

const EMPTY = new Uint8Array(0);

/**
 * The last event of an upstream stream that has no `[DONE]`: Anthropic's `message_stop`,
 * and the Responses API's final events (each carries the whole response; nothing follows).
 */
const terminal_types: ReadonlySet<string> = new Set(['message_stop', 'response.completed', 'response.incomplete', 'response.failed']);

export interface StreamTranslationParts {
  toHub: StreamTranslation;
  fromHub: StreamTranslation;
  clientFormat: WireFormat;
  /** Whether the client gets the hub's usage chunk (a chat client that asked for it, or inline billing). */
  clientWantsUsage: boolean;
  /** Sets what translation cannot (a chat chunk's `created`). */
  stamp(data: Json): void;
}

export class TranslatingStreamRelay extends StreamRelay {
  private readonly sse: EventSourceParser;
  private out = '';
  private finished = false;

  constructor(
    upstreamFormat: WireFormat,
    inlineBilling: boolean,
    allowance: number | undefined,
    private readonly parts: StreamTranslationParts,
  ) {
    // Always with the upstream's usage: the client's format carries it differently.
    super(upstreamFormat, true, allowance === undefined ? (inlineBilling ? { holdFinal: true } : {}) : { holdFinal: inlineBilling, allowance });
    this.sse = createParser({ onEvent: this.onEvent });
  }

  private readonly onEvent = (event: EventSourceMessage): void => this.translateEvent(event);

  override push(chunk: Uint8Array): Uint8Array {
    return this.translate(super.push(chunk), false);
  }

  override end(): Uint8Array {
    return this.translate(super.end(), true);
  }

  override releaseHeld(billing: Json | null): Uint8Array {
    return this.translate(super.releaseHeld(billing), false);
  }

  override allow(tokens: number): Uint8Array {
    return this.translate(super.allow(tokens), false);
  }

  /** The upstream format's closing events (an incremental hold the wallet ended), translated like the others. */
  override close(usage: Usage, extra: Json | null): Uint8Array {
    return this.translate(super.close(usage, extra), true);
  }

  /** The client's bytes for upstream bytes the relay forwards (complete events; the last one may lack its blank line). */
  private translate(bytes: Uint8Array, last: boolean): Uint8Array {
    if (bytes.length === 0) return EMPTY;
    this.out = '';
    const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8');
    // The relay forwards whole events; those with LF line ends only (every provider's) are
    // read here, the others by the parser, which knows every line end.
    if (text.includes('\r') || !readLfEvents(last ? text + '\n\n' : text, this.onEvent)) this.sse.feed(last ? text + '\n\n' : text);
    return this.out === '' ? EMPTY : Buffer.from(this.out, 'utf8');
  }

  private translateEvent(event: EventSourceMessage): void {
    if (event.data === '[DONE]') {
      this.finish();
      return;
    }
    const text = this.parts.toHub.pushText?.(event.event, event.data);
    if (text) {
      this.writeText(text.text, text.events);
      return;
    }
    let data: unknown;
    try {
      data = JSON.parse(event.data);
    } catch {
      return; // The relay itself marks the stream invalid.
    }
    if (!isObject(data)) return;
    const billing = data[billing_field];
    const events: HubEvent[] = [];
    for (const hub of this.parts.toHub.push({ event: event.event, data })) {
      if (!this.parts.clientWantsUsage && this.parts.clientFormat === 'openai' && isUsageChunk(hub.data)) continue;
      events.push(...this.parts.fromHub.push(hub));
    }
    if (billing !== undefined && events.length > 0) {
      let target = events.length - 1;
      for (let i = target; i >= 0; i--) if (isObject(events[i]!.data.usage)) { target = i; break; }
      events[target]!.data[billing_field] = billing;
    }
    this.write(events);
    if (typeof data.type === 'string' && terminal_types.has(data.type)) this.finish();
  }

  /** The upstream's stream ended cleanly: the client's format closes its own. */
  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    const events: HubEvent[] = [];
    for (const hub of this.parts.toHub.end()) events.push(...this.parts.fromHub.push(hub));
    events.push(...this.parts.fromHub.end());
    this.write(events);
    if (this.parts.clientFormat === 'openai') this.out += 'data: [DONE]\n\n';
  }

  /**
   * The client events of a text delta read by pushText. A chat client's chunk is written
   * from a prefix kept per id, created and model (they rarely change in a stream) with only
   * the text encoded: the same JSON as JSON.stringify of the chunk, at a fraction of its cost.
   */
  private writeText(text: string, hub: HubEvent[]): void {
    const events: HubEvent[] = [];
    for (const h of hub) events.push(...this.parts.fromHub.push(h));
    const only = events.length === 1 ? events[0]! : null;
    if (only === null || this.parts.clientFormat !== 'openai' || only.data !== hub[0]!.data) {
      this.write(events);
      return;
    }
    const d = only.data;
    this.parts.stamp(d);
    if (d.id !== this.prefixOf.id || d.created !== this.prefixOf.created || d.model !== this.prefixOf.model) {
      this.prefixOf = { id: d.id, created: d.created, model: d.model };
      this.textPrefix = `data: {"id":${JSON.stringify(d.id)},"object":"chat.completion.chunk","created":${JSON.stringify(d.created)},"model":${JSON.stringify(d.model)},"choices":[{"index":0,"delta":{"content":`;
    }
    this.out += `${this.textPrefix}${JSON.stringify(text)}},"logprobs":null,"finish_reason":null}]}\n\n`;
  }

  private prefixOf: { id: unknown; created: unknown; model: unknown } = { id: undefined, created: undefined, model: undefined };
  private textPrefix = '';

  private write(events: HubEvent[]): void {
    for (const e of events) {
      this.parts.stamp(e.data);
      this.out += (e.event === undefined ? '' : `event: ${e.event}\n`) + `data: ${JSON.stringify(e.data)}\n\n`;
    }
  }
}

function isUsageChunk(data: Json): boolean {
  return Array.isArray(data.choices) && data.choices.length === 0 && isObject(data.usage);
}

/**
 * Reads whole SSE events with LF line ends (`event:` and `data:` fields; comments, `id:`
 * and `retry:` skipped), as eventsource-parser would, without a second pass of the parser
 * over what StreamRelay already framed: a translated stream reads every event, and the
 * second parse was a tenth of its translation's CPU. False, having read nothing, when the
 * text does not end with an event's blank line.
 */
export function readLfEvents(text: string, onEvent: (event: EventSourceMessage) => void): boolean {
  if (!text.endsWith('\n\n')) return false;
  let start = 0;
  while (start < text.length) {
    const end = text.indexOf('\n\n', start);
    if (end < 0) break;
    let name: string | undefined;
    let data: string | null = null;
    for (let at = start; at < end; ) {
      let lineEnd = text.indexOf('\n', at);
      if (lineEnd < 0 || lineEnd > end) lineEnd = end;
      const colon = text.indexOf(':', at);
      if (colon > at && colon < lineEnd) {
        const field = text.slice(at, colon);
        const value = text.slice(text.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1, lineEnd);
        if (field === 'data') data = data === null ? value : `${data}\n${value}`;
        else if (field === 'event') name = value;
      } else if (colon !== at && lineEnd > at) {
        // A field without a colon: its whole line is its name, its value empty.
        if (text.slice(at, lineEnd) === 'data') data = data === null ? '' : `${data}\n`;
      }
      at = lineEnd + 1;
    }
    if (data !== null) onEvent({ event: name, data, id: undefined });
    start = end + 2;
    // Blank lines between events.
    while (text.charCodeAt(start) === 10) start++;
  }
  return true;
}