/**
 * The one interface every upstream wire format implements (src/gateway/wire/<name>.ts):
 * where a call goes and how it authenticates, what a client's body must hold, what the
 * gateway changes in it, and how the token usage it bills is read from a whole answer or
 * from the events of a stream (CONTRACT.md sections 4 and 8). The gateway's other modules
 * reach a format only through this interface (src/gateway/adapters.ts picks it), so adding
 * a provider's format is one file. Pure code: no I/O, no clock.
 */
import { z } from 'zod';
import { ApiError } from '../../errors/catalogue.js';

export type WireFormat = 'openai' | 'anthropic';

/** Tokens of one call by billing kind (CONTRACT.md section 8); each kind has its own price. */
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

/** What the relay forwards for one event: its bytes as they came, nothing, or the event with this data. */
export type Forward = 'raw' | 'drop' | { data: string };

export interface ProviderFormat {
  readonly name: WireFormat;
  /** The gateway path that serves the format. */
  readonly gatewayPath: '/v1/chat/completions' | '/v1/messages';
  /** Appended to a model's `upstream_base_url`. */
  readonly upstreamPath: string;
  /** The headers that authenticate a call upstream; `clientVersion` is the client's `anthropic-version`. */
  upstreamHeaders(apiKey: string, clientVersion: string | undefined): Record<string, string>;

  /**
   * What the client's body must hold (zod, unknown fields passed through): model,
   * messages, stream and the output limits, each refused with the field named. The
   * output is `limit` (the output limit the client asked for, or null) and `answers`.
   */
  readonly bodySchema: z.ZodType<{ model: string; stream: boolean; limit: number | null; answers: number }, z.ZodTypeDef, unknown>;
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
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) {
    throw new ApiError('invalid_request', { param: field, message: `${field} must be a positive integer` });
  }
  return v;
}

/** A field that passes `ok`, refused with `message` (the field named as `param`). */
function field<T>(ok: (v: unknown) => boolean, message: string) {
  return z.custom<T>(ok, { message });
}

const positiveLimit = (name: string) =>
  field<number | null | undefined>((v) => v === undefined || v === null || (typeof v === 'number' && Number.isSafeInteger(v) && v >= 1), `${name} must be a positive integer`);

/**
 * The fields every format reads from a client's body, in the order their errors are
 * reported; the others pass through untouched. `limits` are the output limit fields the
 * format reads, the first one set winning; `answersMax`, for a format that can ask for
 * several answers in one call (OpenAI's `n`), their most.
 */
export function bodySchemaOf(limits: readonly string[], answersMax: number | null = null) {
  const shape: z.ZodRawShape = {
    model: field<string>((v) => typeof v === 'string' && v.length > 0, 'model is required'),
    messages: field<unknown[]>((v) => Array.isArray(v), 'messages must be an array'),
    stream: field<boolean | undefined>((v) => v === undefined || typeof v === 'boolean', 'stream must be a boolean'),
  };
  for (const name of limits) shape[name] = positiveLimit(name);
  if (answersMax !== null) {
    shape.n = field<number | null | undefined>(
      (v) => v === undefined || v === null || (typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= answersMax),
      `n must be an integer from 1 to ${answersMax}`,
    );
  }
  return z
    .object(shape)
    .passthrough()
    .transform((b: Json) => ({
      model: b.model as string,
      stream: b.stream === true,
      limit: limits.map((name) => b[name] as number | null | undefined).find((v) => v !== undefined && v !== null) ?? null,
      answers: answersMax !== null && typeof b.n === 'number' ? b.n : 1,
    }));
}
