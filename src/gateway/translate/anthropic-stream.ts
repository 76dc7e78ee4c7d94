/**
 * Anthropic streams to and from hub chunks (chat completion chunks), event by event: the
 * stream half of the Anthropic Translator (./anthropic.ts). Stateful: a tool call's
 * arguments come in pieces, a stream's first event opens the message its end closes.
 */
import { isObject, type Json } from '../wire/format.js';
import { finishReasonOf, stopReasonOf, usageFromHub, usageToHub } from './anthropic-answer.js';
import type { HubEvent, StreamTranslation } from './hub.js';
import { clientId } from './ids.js';
import { anthropicTypeOfStatus } from '../../errors/anthropic.js';

/** Anthropic events -> hub chunks. */
export class AnthropicToHub implements StreamTranslation {
  private id = '';
  private model = '';
  private usage: Json = {};
  /** Anthropic content block index -> chat tool_calls index. */
  private readonly tools = new Map<number, number>();

  private chunk(delta: Json, finish: string | null = null): HubEvent {
    return { data: { id: this.id, object: 'chat.completion.chunk', created: 0, model: this.model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] } };
  }

  /** A text delta as Anthropic writes it (fields in this order), its text a JSON string. */
  private static readonly textDelta = /^\{"type":"content_block_delta","index":\d+,"delta":\{"type":"text_delta","text":("(?:[^"\\]|\\.)*")\}\}$/;

  pushText(eventName: string | undefined, data: string): { text: string; events: HubEvent[] } | null {
    if (eventName !== 'content_block_delta') return null;
    const m = AnthropicToHub.textDelta.exec(data);
    if (m === null) return null;
    const text = JSON.parse(m[1]!) as string;
    return { text, events: [this.chunk({ content: text })] };
  }

  push(event: HubEvent): HubEvent[] {
    const e = event.data;
    switch (e.type) {
      case 'message_start': {
        const m = isObject(e.message) ? e.message : {};
        this.id = typeof m.id === 'string' ? m.id : '';
        this.model = typeof m.model === 'string' ? m.model : '';
        if (isObject(m.usage)) this.usage = { ...m.usage };
        return [this.chunk({ role: 'assistant', content: '' })];
      }
      case 'content_block_start': {
        const b = isObject(e.content_block) ? e.content_block : {};
        if (b.type === 'text' && typeof b.text === 'string' && b.text !== '') return [this.chunk({ content: b.text })];
        if (b.type !== 'tool_use') return [];
        const index = this.tools.size;
        this.tools.set(Number(e.index), index);
        return [this.chunk({ tool_calls: [{ index, id: b.id, type: 'function', function: { name: b.name, arguments: '' } }] })];
      }
      case 'content_block_delta': {
        const d = isObject(e.delta) ? e.delta : {};
        if (d.type === 'text_delta') return [this.chunk({ content: d.text })];
        if (d.type === 'input_json_delta') {
          const index = this.tools.get(Number(e.index));
          if (index === undefined) return [];
          return [this.chunk({ tool_calls: [{ index, function: { arguments: d.partial_json } }] })];
        }
        return [];
      }
      case 'message_delta': {
        // Field by field, as Anthropic updates them: output_tokens is the running total.
        if (isObject(e.usage)) for (const [k, v] of Object.entries(e.usage)) if (v !== null && v !== undefined) this.usage[k] = v;
        const d = isObject(e.delta) ? e.delta : {};
        const out = [this.chunk({}, finishReasonOf(d.stop_reason) ?? 'stop')];
        out.push({ data: { id: this.id, object: 'chat.completion.chunk', created: 0, model: this.model, choices: [], usage: usageToHub(this.usage) } });
        return out;
      }
      case 'error': {
        const err = isObject(e.error) ? e.error : {};
        return [{ data: { error: { message: err.message, type: err.type, param: null, code: null } } }];
      }
      default:
        // ping, content_block_stop, message_stop: nothing in chat.
        return [];
    }
  }

  end(): HubEvent[] {
    return [];
  }
}

/** Hub chunks -> Anthropic events (`event:` names set). */
export class AnthropicFromHub implements StreamTranslation {
  private started = false;
  /** The open content block: its index and whether it is text; null when none is open. */
  private open: { index: number; text: boolean } | null = null;
  private blocks = 0;
  private stopReason: string | null = null;
  private usage: Json | null = null;
  private deltaSent = false;
  private stopped = false;

  private static ev(name: string, data: Json): HubEvent {
    return { event: name, data: { type: name, ...data } };
  }

  private close(out: HubEvent[]): void {
    if (this.open === null) return;
    out.push(AnthropicFromHub.ev('content_block_stop', { index: this.open.index }));
    this.open = null;
  }

  private start(chunk: Json, out: HubEvent[]): void {
    if (this.started) return;
    this.started = true;
    const message = { id: clientId('msg_', chunk.id), type: 'message', role: 'assistant', model: chunk.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 0, output_tokens: 0 } };
    out.push(AnthropicFromHub.ev('message_start', { message }));
  }

  private messageDelta(out: HubEvent[]): void {
    if (this.deltaSent) return;
    this.deltaSent = true;
    out.push(AnthropicFromHub.ev('message_delta', { delta: { stop_reason: this.stopReason ?? 'end_turn', stop_sequence: null }, usage: this.usage ?? { output_tokens: 0 } }));
  }

  push(event: HubEvent): HubEvent[] {
    const c = event.data;
    const out: HubEvent[] = [];
    if (isObject(c.error)) {
      const status = typeof c.error.status === 'number' ? c.error.status : 500;
      return [AnthropicFromHub.ev('error', { error: { type: anthropicTypeOfStatus(status), message: c.error.message } })];
    }
    this.start(c, out);
    const choice = Array.isArray(c.choices) && isObject(c.choices[0]) ? c.choices[0] : null;
    const delta = choice !== null && isObject(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string' && delta.content !== '') {
      if (this.open === null || !this.open.text) {
        this.close(out);
        this.open = { index: this.blocks++, text: true };
        out.push(AnthropicFromHub.ev('content_block_start', { index: this.open.index, content_block: { type: 'text', text: '' } }));
      }
      out.push(AnthropicFromHub.ev('content_block_delta', { index: this.open.index, delta: { type: 'text_delta', text: delta.content } }));
    }
    for (const raw of Array.isArray(delta.tool_calls) ? (delta.tool_calls as unknown[]) : []) {
      if (!isObject(raw)) continue;
      const fn = isObject(raw.function) ? raw.function : {};
      if (typeof raw.id === 'string') {
        this.close(out);
        this.open = { index: this.blocks++, text: false };
        out.push(AnthropicFromHub.ev('content_block_start', { index: this.open.index, content_block: { type: 'tool_use', id: raw.id, name: fn.name, input: {} } }));
      }
      if (this.open !== null && typeof fn.arguments === 'string' && fn.arguments !== '') {
        out.push(AnthropicFromHub.ev('content_block_delta', { index: this.open.index, delta: { type: 'input_json_delta', partial_json: fn.arguments } }));
      }
    }
    if (choice !== null && choice.finish_reason !== null && choice.finish_reason !== undefined) {
      this.stopReason = stopReasonOf(choice.finish_reason);
      this.close(out);
    }
    // The usage chunk comes after the finish: message_delta carries both.
    if (isObject(c.usage)) {
      this.usage = usageFromHub(c.usage);
      this.close(out);
      this.messageDelta(out);
    }
    return out;
  }

  end(): HubEvent[] {
    if (this.stopped) return [];
    this.stopped = true;
    const out: HubEvent[] = [];
    this.close(out);
    this.messageDelta(out);
    out.push(AnthropicFromHub.ev('message_stop', {}));
    return out;
  }
}
