/**
 * The OpenAI Responses API (`POST /v1/responses`), whole and streamed. A streamed answer
 * is a sequence of named events (`response.created`, `response.output_text.delta`, ...);
 * its usage comes once, in the response object of the last one (`response.completed`,
 * `response.incomplete` or `response.failed`). Pure code: no I/O, no clock.
 */
import { ResponsesCloser } from './responses-closer.js';
import { copyOf, isCount, isObject, maxTokensField, optionalCount, readModel, readStream, refused, type BodyFields, type Forward, type Json, type PartCounts, type ProviderFormat, type StreamReading, type Usage } from './format.js';

/** The events whose response carries the usage, and that end a stream. */
const final_events: ReadonlySet<string> = new Set(['response.completed', 'response.incomplete', 'response.failed']);
/** Without an event name (an upstream that sends data lines only): the same, or an error, found by a cheap search of the data. */
const finalOrError = /"(?:response\.(?:completed|incomplete|failed)|error)"/;

/**
 * Responses `usage`: `input_tokens` includes the cached ones
 * (`input_tokens_details.cached_tokens`), billed at the cache read price and not again as
 * input; `output_tokens` includes the reasoning tokens
 * (`output_tokens_details.reasoning_tokens`), billed as output like the rest.
 */
function usageOf(u: unknown): Usage | null {
  if (!isObject(u) || !isCount(u.input_tokens) || !isCount(u.output_tokens)) return null;
  const details = isObject(u.input_tokens_details) ? u.input_tokens_details : {};
  const cacheRead = optionalCount(details.cached_tokens);
  if (cacheRead === null || cacheRead > u.input_tokens) return null;
  return { input: u.input_tokens - cacheRead, output: u.output_tokens, cacheRead, cacheWrite: 0 };
}

/** Adds the `input_image` and `input_file` parts of an item's `content` (a message) or `output` (a tool call's output) to `into`. */
function countItemParts(item: unknown, into: PartCounts): void {
  if (!isObject(item)) return;
  // An item may itself be a part (the shorthand of a one-part message).
  countPart(item, into);
  for (const list of [item.content, item.output]) {
    if (Array.isArray(list)) for (const part of list) if (isObject(part)) countPart(part, into);
  }
}

function countPart(part: Json, into: PartCounts): void {
  if (part.type === 'input_image') into.images++;
  else if (part.type === 'input_file') into.files++;
}

/** `input`: a string (one user message) or an array of items; absent with `previous_response_id` or a stored prompt. */
function readInput(body: Json): PartCounts {
  const into: PartCounts = { images: 0, files: 0 };
  const input = body.input;
  if (input === undefined || input === null || typeof input === 'string') return into;
  if (!Array.isArray(input)) throw refused('input', 'input must be a string or an array of input items');
  for (const item of input) countItemParts(item, into);
  return into;
}

function readInstructions(body: Json): void {
  const v = body.instructions;
  if (v !== undefined && v !== null && typeof v !== 'string') throw refused('instructions', 'instructions must be a string');
}

/**
 * `background: true` is refused: the upstream answers at once with a queued response and
 * no usage, and the call's cost is known only later by polling, which the gateway does not
 * do (docs/API.md, "POST /v1/responses").
 */
function readBackground(body: Json): void {
  const v = body.background;
  if (v === true) throw refused('background', 'background responses are not served: the gateway bills a call when its answer comes (send background: false or leave it out)');
  if (v !== undefined && v !== null && v !== false) throw refused('background', 'background must be a boolean');
}

const readLimit = (body: Json) => maxTokensField(body, 'max_output_tokens');

function readBody(body: Json): BodyFields {
  const model = readModel(body);
  const parts = readInput(body);
  readInstructions(body);
  const stream = readStream(body);
  const limit = readLimit(body);
  readBackground(body);
  // No `n`: one answer per call.
  return { model, stream, limit, answers: 1, parts };
}

/** Characters of generated text in an event: any text delta (output text, refusal, tool-call arguments, reasoning summary). */
function deltaChars(event: Json): number {
  return typeof event.delta === 'string' && typeof event.type === 'string' && event.type.endsWith('.delta') ? event.delta.length : 0;
}

export const responses: ProviderFormat = {
  name: 'responses',
  gatewayPath: '/v1/responses',
  upstreamPath: '/responses',
  upstreamHeaders: (apiKey) => ({ authorization: `Bearer ${apiKey}` }),
  streamCloser: () => new ResponsesCloser(),

  readBody,
  bodyChecks: [readModel, readInput, readInstructions, readStream, readLimit, readBackground],
  requestedMaxTokens: readLimit,

  /**
   * The client's body with the upstream's model name, `max_output_tokens` the hold's output
   * limit, and `stream`. `store` and `previous_response_id` go as sent: the upstream keeps
   * stored responses, the gateway keeps only the usage record.
   */
  prepareUpstreamBody(clientBody, opts) {
    const body = copyOf(clientBody);
    body.model = opts.upstreamModel;
    if (opts.stream || 'stream' in clientBody) body.stream = opts.stream;
    if (opts.maxTokens !== null) body.max_output_tokens = opts.maxTokens;
    // The usage always comes (in the final event of a stream): nothing to add or drop.
    return { body, clientWantsUsage: true };
  },

  usageFromResponse: (json) => usageOf(json.usage),

  terminalData: null,

  /**
   * Every event but the final ones and errors goes out as it came, unparsed: by its name
   * (one set lookup), or, for an event without a name, a search of its data.
   */
  plainEvent(eventName, data): Forward | null {
    if (eventName !== undefined) return final_events.has(eventName) || eventName === 'error' ? null : 'raw';
    return finalOrError.test(data) ? null : 'raw';
  },

  /**
   * `response.completed` and `response.incomplete` (the output limit or a content filter
   * stopped it) end the stream with its exact usage; `response.failed` ends it with the
   * usage it has, as an error (billed as estimated); an `error` event is an error.
   */
  readEvent(event, _dataText, into: StreamReading): Forward {
    const type = event.type;
    if (typeof type === 'string' && final_events.has(type)) {
      into.terminal = true;
      const usage = isObject(event.response) ? usageOf(event.response.usage) : null;
      if (usage !== null) {
        into.counts = usage;
        into.complete = true;
      }
      if (type === 'response.failed') into.errorEvent = event;
    } else if (type === 'error' || (event.error !== undefined && event.error !== null && !isObject(event.response))) {
      into.errorEvent = event;
    }
    return 'raw';
  },

  deltaChars,
};
