/**
 * Streams between the OpenAI Responses API and the hub (chat completions), both ways
 * (docs/API.md, "Responses API <-> chat completions"). Each direction is one stateful
 * object per call: a Responses stream names its items (ids, output_index,
 * content_index, a sequence_number per event) and repeats the whole response in its
 * first and last events, where chat sends bare deltas; the translation keeps what the
 * other side needs to rebuild, and nothing more (no JSON parsing: the caller parsed).
 * A chat stream's closing `data: [DONE]` is not an event: the relay writes it.
 */
import type { Response, ResponseFunctionToolCall, ResponseOutputItem, ResponseOutputMessage } from 'openai/resources/responses/responses';
import type { HubEvent, StreamTranslation } from './hub.js';
import type { Json } from '../wire/format.js';
import { finish, finishReasonOf, responseShell, usageToHub } from './responses-answer.js';
import { asNumber, asString, isRecord } from './responses-shared.js';
import { clientId } from './ids.js';

// ---------------------------------------------------------------- Responses -> hub

/** A Responses error (a `response.failed`'s `error`, an `error` event) as the chat stream's error chunk. */
function errorChunk(code: unknown, message: unknown, param: unknown): HubEvent {
  const type = code === 'rate_limit_exceeded' ? 'rate_limit_error' : code === 'server_error' || code === null || code === undefined ? 'api_error' : 'invalid_request_error';
  return { data: { error: { message: asString(message) || 'the upstream failed', type, param: typeof param === 'string' ? param : null, code: typeof code === 'string' ? code : null } } };
}

class ResponsesToHub implements StreamTranslation {
  private id = '';
  private model = '';
  private created = 0;
  /** A function_call item's output_index -> its index in chat's tool_calls. */
  private readonly toolIndexes = new Map<number, number>();

  push({ data }: HubEvent): HubEvent[] {
    switch (data.type) {
      case 'response.created': {
        const response = isRecord(data.response) ? data.response : {};
        this.id = asString(response.id);
        this.model = asString(response.model);
        this.created = asNumber(response.created_at);
        return [this.chunk({ role: 'assistant', content: '' })];
      }
      case 'response.output_item.added': {
        const item = isRecord(data.item) ? data.item : {};
        if (item.type !== 'function_call') return [];
        const index = this.toolIndexes.size;
        this.toolIndexes.set(asNumber(data.output_index), index);
        const call = { index, id: asString(item.call_id), type: 'function', function: { name: asString(item.name), arguments: asString(item.arguments) } };
        return [this.chunk({ tool_calls: [call] })];
      }
      case 'response.output_text.delta':
        return data.delta ? [this.chunk({ content: data.delta })] : [];
      case 'response.refusal.delta':
        return data.delta ? [this.chunk({ refusal: data.delta })] : [];
      case 'response.function_call_arguments.delta': {
        const index = this.toolIndexes.get(asNumber(data.output_index));
        return index === undefined || !data.delta ? [] : [this.chunk({ tool_calls: [{ index, function: { arguments: data.delta } }] })];
      }
      case 'response.completed':
      case 'response.incomplete':
        return this.finish(isRecord(data.response) ? data.response : {});
      case 'response.failed': {
        const error = isRecord(data.response) && isRecord(data.response.error) ? data.response.error : {};
        return [errorChunk(error.code, error.message, null)];
      }
      case 'error':
        return [errorChunk(data.code, data.message, data.param)];
      default:
        // The rest (in_progress, *.done, content_part.*, reasoning) carries nothing chat sends.
        return [];
    }
  }

  end(): HubEvent[] {
    return [];
  }

  /** The finish chunk, then the usage chunk (empty choices), as the hub's streams end. */
  private finish(response: Json): HubEvent[] {
    const events = [this.chunk({}, finishReasonOf(response, this.toolIndexes.size > 0))];
    if (isRecord(response.usage)) events.push({ data: { ...this.base(), choices: [], usage: usageToHub(response.usage) } });
    return events;
  }

  private base(): Json {
    return { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.model };
  }

  private chunk(delta: Json, finishReason: string | null = null): HubEvent {
    return { data: { ...this.base(), choices: [{ index: 0, delta, finish_reason: finishReason, logprobs: null }] } };
  }
}

// ---------------------------------------------------------------- hub -> Responses

type PartKind = 'output_text' | 'refusal';

interface OpenMessage {
  index: number;
  id: string;
  parts: { kind: PartKind; value: string }[];
}

interface OpenCall {
  index: number;
  item: ResponseFunctionToolCall;
}

class HubToResponses implements StreamTranslation {
  private sequence = 0;
  private response: Response | null = null;
  /** The output items so far, at their output_index; each is replaced by its final form when it closes. */
  private readonly output: ResponseOutputItem[] = [];
  private message: OpenMessage | null = null;
  /** Chat's tool_calls index -> the function_call item it opened. */
  private readonly calls = new Map<number, OpenCall>();
  private openCall: OpenCall | null = null;
  private finishReason: string | null = null;
  private usage: Json | null = null;
  private closed = false;

  push({ data }: HubEvent): HubEvent[] {
    if (this.closed) return [];
    const events: HubEvent[] = [];
    if (!this.response) {
      this.response = responseShell(clientId('resp_', data.id), asNumber(data.created), asString(data.model));
      events.push(this.event('response.created', { response: structuredClone(this.response) }));
      events.push(this.event('response.in_progress', { response: structuredClone(this.response) }));
    }
    // An error chunk ends the stream; it still comes after response.created, which the SDK's accumulator needs first.
    if (isRecord(data.error)) {
      this.closed = true;
      const error = data.error;
      events.push(this.event('error', { code: typeof error.code === 'string' ? error.code : null, message: asString(error.message), param: typeof error.param === 'string' ? error.param : null }));
      return events;
    }
    const choice = Array.isArray(data.choices) && isRecord(data.choices[0]) ? data.choices[0] : null;
    const delta = choice && isRecord(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string' && delta.content !== '') this.text('output_text', delta.content, events);
    if (typeof delta.refusal === 'string' && delta.refusal !== '') this.text('refusal', delta.refusal, events);
    if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls.filter(isRecord)) this.toolCall(call, events);
    if (choice && typeof choice.finish_reason === 'string') {
      this.finishReason = choice.finish_reason;
      const status = choice.finish_reason === 'length' || choice.finish_reason === 'content_filter' ? 'incomplete' : 'completed';
      this.closeMessage(status, events);
      for (const call of this.calls.values()) this.closeCall(call, status, events);
    }
    if (isRecord(data.usage)) this.usage = data.usage;
    // The hub's usage chunk follows the finish chunk (include_usage); the response ends with it.
    if (this.finishReason !== null && this.usage) events.push(...this.terminal());
    return events;
  }

  /** A stream that ended after its finish chunk but without usage still gets its last event. */
  end(): HubEvent[] {
    return this.finishReason !== null && !this.closed ? this.terminal() : [];
  }

  private event(type: string, fields: Json): HubEvent {
    return { event: type, data: { type, sequence_number: this.sequence++, ...fields } };
  }

  /** A text or refusal delta: into the open message's last part if of its kind, else a new part (and message). */
  private text(kind: PartKind, delta: string, events: HubEvent[]): void {
    this.closeCurrentCall(events);
    const message = this.message ?? this.openMessage(events);
    let part = message.parts.at(-1);
    if (part?.kind !== kind) {
      if (part) this.closePart(message, message.parts.length - 1, events);
      part = { kind, value: '' };
      message.parts.push(part);
      const empty = kind === 'output_text' ? { type: kind, text: '', annotations: [] } : { type: kind, refusal: '' };
      events.push(this.event('response.content_part.added', { item_id: message.id, output_index: message.index, content_index: message.parts.length - 1, part: empty }));
    }
    part.value += delta;
    const where = { item_id: message.id, output_index: message.index, content_index: message.parts.length - 1 };
    if (kind === 'output_text') events.push(this.event('response.output_text.delta', { ...where, delta, logprobs: [] }));
    else events.push(this.event('response.refusal.delta', { ...where, delta }));
  }

  private openMessage(events: HubEvent[]): OpenMessage {
    // The first message item's id is the whole answer's (responses-answer.ts); a later one's adds its output index.
    const itemId = clientId('msg_', this.response?.id);
    const message: OpenMessage = { index: this.output.length, id: this.output.length === 0 ? itemId : `${itemId}_${this.output.length}`, parts: [] };
    const item: ResponseOutputMessage = { id: message.id, type: 'message', role: 'assistant', status: 'in_progress', content: [] };
    this.output.push(item);
    this.message = message;
    events.push(this.event('response.output_item.added', { output_index: message.index, item: structuredClone(item) }));
    return message;
  }

  private partOf(kind: PartKind, value: string): ResponseOutputMessage['content'][number] {
    return kind === 'output_text' ? { type: kind, text: value, annotations: [] } : { type: kind, refusal: value };
  }

  private closePart(message: OpenMessage, j: number, events: HubEvent[]): void {
    const { kind, value } = message.parts[j];
    const where = { item_id: message.id, output_index: message.index, content_index: j };
    if (kind === 'output_text') events.push(this.event('response.output_text.done', { ...where, text: value, logprobs: [] }));
    else events.push(this.event('response.refusal.done', { ...where, refusal: value }));
    events.push(this.event('response.content_part.done', { ...where, part: this.partOf(kind, value) }));
  }

  private closeMessage(status: ResponseOutputMessage['status'], events: HubEvent[]): void {
    const message = this.message;
    if (!message) return;
    this.message = null;
    if (message.parts.length > 0) this.closePart(message, message.parts.length - 1, events);
    const item: ResponseOutputMessage = { id: message.id, type: 'message', role: 'assistant', status, content: message.parts.map((p) => this.partOf(p.kind, p.value)) };
    this.output[message.index] = item;
    events.push(this.event('response.output_item.done', { output_index: message.index, item: structuredClone(item) }));
  }

  /** A tool_calls delta: the first for an index carries id and name (a new function_call item), the rest argument pieces. */
  private toolCall(call: Json, events: HubEvent[]): void {
    const index = asNumber(call.index);
    const fn = isRecord(call.function) ? call.function : {};
    let open = this.calls.get(index);
    if (!open) {
      this.closeMessage('completed', events);
      this.closeCurrentCall(events);
      const callId = asString(call.id);
      const item: ResponseFunctionToolCall = { id: `fc_${callId}`, type: 'function_call', call_id: callId, name: asString(fn.name), arguments: '', status: 'in_progress' };
      open = { index: this.output.length, item };
      this.output.push(structuredClone(item));
      this.calls.set(index, open);
      this.openCall = open;
      events.push(this.event('response.output_item.added', { output_index: open.index, item: structuredClone(item) }));
    }
    const piece = asString(fn.arguments);
    if (piece === '') return;
    open.item.arguments += piece;
    events.push(this.event('response.function_call_arguments.delta', { item_id: open.item.id, output_index: open.index, delta: piece }));
  }

  /** Chat streams one tool call after the other: a new one (or text) closes the one before. */
  private closeCurrentCall(events: HubEvent[]): void {
    if (this.openCall) this.closeCall(this.openCall, 'completed', events);
  }

  private closeCall(call: OpenCall, status: ResponseFunctionToolCall['status'], events: HubEvent[]): void {
    if (call.item.status !== 'in_progress') return;
    if (this.openCall === call) this.openCall = null;
    call.item.status = status;
    const where = { item_id: call.item.id, output_index: call.index };
    events.push(this.event('response.function_call_arguments.done', { ...where, name: call.item.name, arguments: call.item.arguments }));
    this.output[call.index] = structuredClone(call.item);
    events.push(this.event('response.output_item.done', { output_index: call.index, item: structuredClone(call.item) }));
  }

  /** The last event: the whole response, completed or incomplete, with its usage. */
  private terminal(): HubEvent[] {
    this.closed = true;
    const response = this.response ?? responseShell('', 0, '');
    finish(response, this.output, this.finishReason, this.usage);
    const type = response.status === 'incomplete' ? 'response.incomplete' : 'response.completed';
    return [this.event(type, { response: structuredClone(response) })];
  }
}

export function responsesStreamToHub(): StreamTranslation {
  return new ResponsesToHub();
}

export function responsesStreamFromHub(): StreamTranslation {
  return new HubToResponses();
}
