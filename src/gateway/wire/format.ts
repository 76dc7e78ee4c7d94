/**
 * The one interface every upstream wire format implements (src/gateway/wire/<name>.ts):
 * where a call goes and how it authenticates, what a client's body must hold, what the
 * gateway changes in it, and how the token usage it bills is read from a whole answer or
 * from the events of a stream (docs/API.md, "Gateway"). The gateway's other modules
 * reach a format only through this interface (src/gateway/adapters.ts picks it), so adding
 * a provider's format is one file. Pure code: no I/O, no clock.
 */
import { ApiError } from '../../errors/catalogue.js';

/** Internal names: `openai` is Chat Completions, `anthropic` Messages, `responses` the OpenAI Responses API. */
export type WireFormat = 'openai' | 'anthropic' | 'responses';


/** Image and file parts counted in a request body (countParts): what the hold adds tokens for (src/gateway/pricing.ts). */
export interface PartCounts {
  images: number;
  files: number;
}

/** Tokens of one call by billing kind; each kind has its own price (a model's four, docs/API.md "Models"). */
export interface Usage {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
}

export type Json = Record<string, unknown>;

/** What a stream told so far; a format's `readEvent` updates it. */
export interface StreamReading {
  /** The latest counts the upstream reported, field by field. */
  counts: Partial<Usage>;
  /** The usage is final (OpenAI's usage chunk, Anthropic's message_delta). */
  complete: boolean;
  /** The stream's last event was seen. */
  terminal: boolean;
  /** The parsed data of the last error event, else null. */
  errorEvent: unknown;
}

/** The fields of a client's body that billing reads (ProviderFormat.readBody). */
export interface BodyFields {
  /** The model the client named (the project's model id). */
  model: string;
  stream: boolean;
  /** The output limit the client asked for, or null; 0 for a call that generates no output (embeddings). */
  limit: number | null;
  /** Answers asked of the upstream (OpenAI `n`), each billed. */
  answers: number;
  /** Image and file parts of the messages: tokens their bytes do not bound (src/gateway/pricing.ts). */
  parts: PartCounts;
}

/**
 * Adds the image and file parts of one message's `content` to `into`: a format's own
 * part types (OpenAI `image_url` and `file`, Anthropic `image` and `document`, also inside
 * a `tool_result`). A part it does not know is text or bounded by its bytes.
 */
export type PartCounter = (content: unknown, into: PartCounts) => void;

/**
 * What a format needs to end a stream itself, cleanly, when the gateway stops relaying
 * before the upstream's end (`X-Service-Hold: incremental` with a wallet that cannot pay
 * for more output): it sees every parsed event the relay forwarded, then writes the events
 * that close the stream in the format, as its SDKs expect them, for an answer cut at its
 * output limit.
 */
export interface StreamCloser {
  /** A parsed event that was forwarded to the client. */
  see(event: Json): void;
  /**
   * The closing events, as SSE text: `usage` the call's billed counts; `extra` fields added
   * to the event that carries them (the inline billing figures), else null;
   * `clientWantsUsage` whether the client asked for OpenAI's usage chunk.
   */
  close(usage: Usage, extra: Json | null, clientWantsUsage: boolean): string;
}

/** What the relay forwards for one event: its bytes as they came, nothing, or the event with this data. */
export type Forward = 'raw' | 'drop' | { data: string };

export interface ProviderFormat {
  readonly name: WireFormat;
  /** The gateway path that serves the format. */
  readonly gatewayPath: '/v1/chat/completions' | '/v1/messages' | '/v1/responses';
  /** Appended to a model's `upstream_base_url`. */
  readonly upstreamPath: string;
  /** The headers that authenticate a call upstream; `clientVersion` is the client's `anthropic-version`. */
  upstreamHeaders(apiKey: string, clientVersion: string | undefined): Record<string, string>;

  /**
   * Reads what billing needs from the client's body: model, messages, stream and the
   * output limits, each refused with the field named (a 400 `invalid_request`). The rest
   * of the body is neither read nor copied: it goes upstream as the client sent it.
   */
  readBody(body: Json): BodyFields;
  /**
   * Each check of `readBody` on its own, in its order, each throwing its field's 400: run
   * only after `readBody` failed, so that the answer lists every invalid field.
   */
  readonly bodyChecks: readonly ((body: Json) => unknown)[];
  /** The output limit the client asked for, or null; a limit that is not a positive integer is a 400 naming its field. */
  requestedMaxTokens(body: Json): number | null;
  /** The body sent upstream (see prepareUpstreamBody in adapters.ts). */
  prepareUpstreamBody(clientBody: Json, opts: { upstreamModel: string; maxTokens: number | null; stream: boolean }): { body: Json; clientWantsUsage: boolean };
  /** Usage of a whole (non-streamed) answer, or null when it has none the gateway can read. */
  usageFromResponse(json: Json): Usage | null;

  /** Event data that ends a stream and is not JSON (OpenAI's `[DONE]`), or null. */
  readonly terminalData: string | null;
  /**
   * Without parsing: what to forward for an event that cannot hold usage, an error nor the
   * end (found by a cheap search of its data and name), or null when it may (it is then
   * parsed and given to `readEvent`).
   */
  plainEvent(eventName: string | undefined, data: string, clientWantsUsage: boolean): Forward | null;
  /** Reads a parsed event into `into`; returns what to forward for it. */
  readEvent(event: Json, dataText: string, into: StreamReading, clientWantsUsage: boolean): Forward;
  /** Characters of generated text in a parsed event (for the output estimate of a cut stream). */
  deltaChars(event: Json): number;
  /** A new closer of one stream (StreamCloser): how the gateway ends it in this format. */
  streamCloser(): StreamCloser;
}

/** One SSE event with `data` (JSON), after an `event:` line when `name` is given. */
export function sseEvent(data: Json, name?: string): string {
  return `${name === undefined ? '' : `event: ${name}\n`}data: ${JSON.stringify(data)}\n\n`;
}

/**
 * A shallow copy of a client's JSON object, for the gateway to add fields to. Node 20 adds
 * a field to a spread copy (`{ ...o }`) through a slow path, about 1 us each; a copy made
 * by Object.assign onto `{}` takes them at the usual cost. Object.assign would turn an own
 * `__proto__` field (JSON.parse makes one) into the copy's prototype, so an object with
 * one is spread instead: either way every field is copied, in order.
 */
export function copyOf(o: Json): Json {
  return Object.hasOwn(o, '__proto__') ? { ...o } : Object.assign({}, o);
}

export function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/** A count the provider may leave out or send as null (then 0); null when it is present but not a count. */
export function optionalCount(v: unknown): number | null {
  if (v === undefined || v === null) return 0;
  return isCount(v) ? v : null;
}

/** An output limit field: null when absent, else a positive safe integer or a 400 naming it. */
export function maxTokensField(body: Json, field: string): number | null {
  const v = body[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw refused(field, `${field} must be a positive integer`);
  return v;
}

/** A 400 naming the body field at fault. */
export function refused(param: string, message: string): ApiError {
  return new ApiError('invalid_request', { param, message });
}

export function readModel(body: Json): string {
  const model = body.model;
  if (typeof model !== 'string' || model.length === 0) throw refused('model', 'model is required');
  return model;
}

function readMessages(body: Json): unknown[] {
  if (!Array.isArray(body.messages)) throw refused('messages', 'messages must be an array');
  return body.messages as unknown[];
}

/** The image and file parts of `messages`, read in the parse's one pass over them (no walk of their text). */
function partsOf(messages: unknown[], countParts: PartCounter): PartCounts {
  const into: PartCounts = { images: 0, files: 0 };
  for (const m of messages) {
    // A string content (the usual message) has no parts.
    if (isObject(m) && Array.isArray(m.content)) countParts(m.content, into);
  }
  return into;
}

export function readStream(body: Json): boolean {
  const stream = body.stream;
  if (stream !== undefined && typeof stream !== 'boolean') throw refused('stream', 'stream must be a boolean');
  return stream === true;
}

function readAnswers(body: Json, answersMax: number): number {
  const n = body.n;
  if (n === undefined || n === null) return 1;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > answersMax) throw refused('n', `n must be an integer from 1 to ${answersMax}`);
  return n;
}

/**
 * The reader of the fields every format reads from a client's body, checked in the order
 * their errors are reported (the first one at fault is named; `bodyChecks` then find the
 * others). `limits` are the output limit fields the format reads, the first one set
 * winning; `answersMax`, for a format that can ask for several answers in one call
 * (OpenAI's `n`), their most; `countParts`, the format's image and file parts (what the
 * hold adds for them, src/gateway/pricing.ts). Plain checks instead of a schema: this runs on every gateway
 * call, and a zod object schema copied every field of the body and cost about 28 us per call.
 */
export function bodyReaderOf(limits: readonly string[], countParts: PartCounter, answersMax: number | null = null): Pick<ProviderFormat, 'readBody' | 'bodyChecks'> {
  const readBody = (body: Json): BodyFields => {
    const model = readModel(body);
    const parts = partsOf(readMessages(body), countParts);
    const stream = readStream(body);
    let limit: number | null = null;
    for (const name of limits) {
      // Every limit field is checked, even past the one that wins.
      const v = maxTokensField(body, name);
      if (limit === null) limit = v;
    }
    const answers = answersMax === null ? 1 : readAnswers(body, answersMax);
    return { model, stream, limit, answers, parts };
  };
  const bodyChecks: ((body: Json) => unknown)[] = [readModel, readMessages, readStream, ...limits.map((name) => (body: Json) => maxTokensField(body, name))];
  if (answersMax !== null) bodyChecks.push((body) => readAnswers(body, answersMax));
  return { readBody, bodyChecks };
}
