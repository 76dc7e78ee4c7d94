/** OpenAI Chat Completions (`POST /v1/chat/completions`), whole and streamed. */
import { bodyReaderOf, copyOf, isCount, isObject, maxTokensField, optionalCount, sseEvent, type Forward, type Json, type PartCounter, type ProviderFormat, type StreamCloser, type StreamReading, type Usage } from './format.js';

/** OpenAI's own limit on `n`. */
export const answers_max = 128;

const USAGE_NULL_TAIL = ',"usage":null}';
const usageOrError = /"(?:usage|error)"/;
/** The `u` of `"usage"`. */
const USAGE_U = 0x75;

/**
 * OpenAI `usage`: `prompt_tokens` includes the cached tokens (`prompt_tokens_details.
 * cached_tokens`) and, when the upstream reports them, the tokens written to its cache
 * (`cache_write_tokens`, "the unadjusted number of prompt tokens written to cache" in the
 * openai types). Each prompt token is billed once, at the price of its kind, so input is
 * what remains. Without `cache_write_tokens` this is input = prompt_tokens -
 * cached_tokens.
 */
function usageOf(u: unknown): Usage | null {
  if (!isObject(u) || !isCount(u.prompt_tokens) || !isCount(u.completion_tokens)) return null;
  const details = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const cacheRead = optionalCount(details.cached_tokens);
  const cacheWrite = optionalCount(details.cache_write_tokens);
  if (cacheRead === null || cacheWrite === null || cacheRead + cacheWrite > u.prompt_tokens) return null;
  return { input: u.prompt_tokens - cacheRead - cacheWrite, output: u.completion_tokens, cacheRead, cacheWrite };
}

/** Characters of generated text in a chunk: content, refusals and tool-call arguments. */
function deltaChars(chunk: Json): number {
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

/**
 * A chunk whose client did not ask for usage (the gateway added `include_usage`
 * upstream) loses its `usage`: the exact text `,"usage":null}` at the end of the data is
 * cut; any other placement of the field re-serializes the chunk's JSON without it.
 */
function withoutUsage(dataText: string, chunk: Json): string {
  if (chunk.usage === null && dataText.endsWith(USAGE_NULL_TAIL)) return dataText.slice(0, -USAGE_NULL_TAIL.length) + '}';
  const { usage: _dropped, ...rest } = chunk;
  return JSON.stringify(rest);
}

/**
 * Chat content parts: `image_url` (a URL or a data URL: either may cost more tokens than
 * its bytes) and `file` (a file id, or a PDF whose pages are read as text and images).
 * `input_audio` carries its audio inline, base64: its bytes bound its tokens.
 */
const countParts: PartCounter = (content, into) => {
  for (const part of content as unknown[]) {
    if (!isObject(part)) continue;
    if (part.type === 'image_url') into.images++;
    else if (part.type === 'file') into.files++;
  }
};

/** The chunk fields every chunk of a stream repeats, which the SDKs copy into the answer. */
const chunkFields = ['id', 'object', 'created', 'model', 'service_tier', 'system_fingerprint'] as const;

/**
 * Ends a chat stream as the provider ends one cut at its output limit: per answer still
 * open, a chunk with an empty delta and `finish_reason: "length"`; then the usage chunk
 * (`choices: []`) when the client asked for usage; then `[DONE]`. Each chunk repeats the
 * stream's own id, model and creation time: the SDKs' stream helpers copy them.
 */
class ChatCloser implements StreamCloser {
  private head: Json | null = null;
  /** Answer indexes seen, and those the upstream already finished. */
  private readonly open = new Set<number>();

  see(chunk: Json): void {
    if (this.head === null && typeof chunk.id === 'string') {
      this.head = {};
      for (const f of chunkFields) if (chunk[f] !== undefined) this.head[f] = chunk[f];
    }
    if (!Array.isArray(chunk.choices)) return;
    for (const c of chunk.choices) {
      if (!isObject(c) || typeof c.index !== 'number') continue;
      if (c.finish_reason === null || c.finish_reason === undefined) this.open.add(c.index);
      else this.open.delete(c.index);
    }
  }

  close(usage: Usage, extra: Json | null, clientWantsUsage: boolean): string {
    const head = this.head ?? { object: 'chat.completion.chunk' };
    if (this.open.size === 0) this.open.add(0);
    let out = '';
    for (const index of [...this.open].sort((a, b) => a - b)) {
      out += sseEvent({ ...head, choices: [{ index, delta: {}, logprobs: null, finish_reason: 'length' }], ...(clientWantsUsage ? { usage: null } : {}) });
    }
    if (clientWantsUsage) {
      const prompt = usage.input + usage.cacheRead + usage.cacheWrite;
      const u = { prompt_tokens: prompt, completion_tokens: usage.output, total_tokens: prompt + usage.output, prompt_tokens_details: { cached_tokens: usage.cacheRead } };
      out += sseEvent({ ...head, choices: [], usage: u, ...extra });
    }
    return out + 'data: [DONE]\n\n';
  }
}

export const openai: ProviderFormat = {
  name: 'openai',
  gatewayPath: '/v1/chat/completions',
  upstreamPath: '/chat/completions',
  upstreamHeaders: (apiKey) => ({ authorization: `Bearer ${apiKey}` }),

  ...bodyReaderOf(['max_completion_tokens', 'max_tokens'], countParts, answers_max),

  /** `max_completion_tokens`, then the older `max_tokens`, as OpenAI itself reads them. */
  requestedMaxTokens(body) {
    const completion = maxTokensField(body, 'max_completion_tokens');
    const legacy = maxTokensField(body, 'max_tokens');
    return completion ?? legacy;
  },

  /**
   * Every limit field the client set (`max_completion_tokens`, `max_tokens`, or both) gets
   * the limit, so the upstream honours it whichever it reads; when the client set neither,
   * it goes in `max_completion_tokens`, the field OpenAI documents (and the only one its
   * reasoning models accept). Streaming: `stream_options.include_usage` is true (the
   * client's other `stream_options` kept), so every stream is billed from the upstream's
   * own usage, and `clientWantsUsage` says whether the client asked for it itself.
   */
  prepareUpstreamBody(clientBody, opts) {
    const body = copyOf(clientBody);
    body.model = opts.upstreamModel;
    if (opts.stream || 'stream' in clientBody) body.stream = opts.stream;
    if (opts.maxTokens !== null) {
      const hasCompletion = clientBody.max_completion_tokens !== undefined && clientBody.max_completion_tokens !== null;
      const hasLegacy = clientBody.max_tokens !== undefined && clientBody.max_tokens !== null;
      if (hasCompletion || !hasLegacy) body.max_completion_tokens = opts.maxTokens;
      if (hasLegacy) body.max_tokens = opts.maxTokens;
    }
    if (!opts.stream) return { body, clientWantsUsage: true };
    const clientOptions = clientBody.stream_options;
    const clientWantsUsage = isObject(clientOptions) && clientOptions.include_usage === true;
    const options = isObject(clientOptions) ? copyOf(clientOptions) : {};
    options.include_usage = true;
    body.stream_options = options;
    return { body, clientWantsUsage };
  },

  usageFromResponse: (json) => usageOf(json.usage),

  terminalData: '[DONE]',

  /**
   * A chunk without `"error"` and without `"usage"`, or whose only `"usage"` is the
   * `"usage":null` at its very end (OpenAI adds it to every chunk once usage is asked for).
   */
  plainEvent(_eventName, data, clientWantsUsage): Forward | null {
    // One search for either name (a regular expression scans once; two indexOf scanned the
    // data twice, the largest cost of relaying a text delta).
    const at = data.search(usageOrError);
    if (at < 0) return 'raw';
    // The first found is "usage" as the `"usage":null` that ends the data, after which neither can come.
    const usageNullTail = data.charCodeAt(at + 1) === USAGE_U && at === data.length - USAGE_NULL_TAIL.length + 1 && data.endsWith(USAGE_NULL_TAIL);
    if (!usageNullTail) return null;
    if (clientWantsUsage) return 'raw';
    return { data: data.slice(0, -USAGE_NULL_TAIL.length) + '}' };
  },

  /**
   * The usage chunk (`choices: []` with a non-null `usage`) sets the counts; a client that
   * did not ask for usage gets neither that chunk nor the `usage` field of the others:
   * what it would have received from the provider directly.
   */
  readEvent(chunk, dataText, into: StreamReading, clientWantsUsage): Forward {
    if (chunk.error !== undefined && chunk.error !== null) into.errorEvent = chunk;
    const usage = chunk.usage === undefined || chunk.usage === null ? null : usageOf(chunk.usage);
    if (usage !== null) {
      into.counts = usage;
      into.complete = true;
    }
    if (clientWantsUsage || !('usage' in chunk)) return 'raw';
    if (chunk.usage !== null && Array.isArray(chunk.choices) && chunk.choices.length === 0) return 'drop';
    return { data: withoutUsage(dataText, chunk) };
  },

  deltaChars,

  streamCloser: () => new ChatCloser(),
};
