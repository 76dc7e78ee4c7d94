/** Anthropic Messages (`POST /v1/messages`), whole and streamed. */
import { bodyReaderOf, copyOf, isCount, isObject, maxTokensField, optionalCount, sseEvent, type Forward, type Json, type PartCounter, type ProviderFormat, type StreamCloser, type StreamReading, type Usage } from './format.js';
import type { PartCounts } from './format.js';

/** The API version sent upstream when the client names none. */
export const ANTHROPIC_VERSION_DEFAULT = '2023-06-01';

/** Events that carry neither usage, nor the end, nor an error. */
const plainEvents = new Set(['content_block_delta', 'content_block_start', 'content_block_stop', 'ping']);
/** Data that may hold usage, an error or a message event: one scan instead of three. */
const usageErrorOrMessage = /"(?:usage"|error"|message_)/;

/** `usage`: `input_tokens` already excludes both cache kinds. */
function usageOf(u: unknown): Usage | null {
  if (!isObject(u) || !isCount(u.input_tokens) || !isCount(u.output_tokens)) return null;
  const cacheRead = optionalCount(u.cache_read_input_tokens);
  const cacheWrite = optionalCount(u.cache_creation_input_tokens);
  if (cacheRead === null || cacheWrite === null) return null;
  return { input: u.input_tokens, output: u.output_tokens, cacheRead, cacheWrite };
}

/** Characters of generated text in a `content_block_delta`: text, tool input, thinking. */
function deltaChars(event: Json): number {
  if (event.type !== 'content_block_delta') return 0;
  const delta = event.delta;
  if (!isObject(delta)) return 0;
  for (const field of ['text', 'partial_json', 'thinking'] as const) {
    if (typeof delta[field] === 'string') return (delta[field] as string).length;
  }
  return 0;
}

/** One `image` or `document` block: a document of plain text (`source.type: "text"`) is bounded by its bytes, one of `content` blocks by its images. */
function countBlock(block: Json, into: PartCounts): void {
  if (block.type === 'image') {
    into.images++;
  } else if (block.type === 'document') {
    const source = isObject(block.source) ? block.source : null;
    if (source?.type === 'text') return;
    if (source?.type === 'content' && Array.isArray(source.content)) {
      for (const inner of source.content as unknown[]) if (isObject(inner) && inner.type === 'image') into.images++;
      return;
    }
    into.files++;
  }
}

/**
 * Content blocks: `image` and `document` (a URL, a file id or base64: a PDF's pages are
 * read as text and images), also inside a `tool_result`'s content (one level: a
 * tool_result holds no tool_result).
 */
const countParts: PartCounter = (content, into) => {
  for (const block of content as unknown[]) {
    if (!isObject(block)) continue;
    if (block.type === 'tool_result' && Array.isArray(block.content)) {
      for (const inner of block.content as unknown[]) if (isObject(inner)) countBlock(inner, into);
    } else {
      countBlock(block, into);
    }
  }
};

/**
 * Ends a Messages stream as the provider ends one cut at `max_tokens`: `content_block_stop`
 * for a block still open, `message_delta` with `stop_reason: "max_tokens"` and the usage,
 * then `message_stop`.
 */
class MessagesCloser implements StreamCloser {
  private openBlock: number | null = null;

  see(event: Json): void {
    if (event.type === 'content_block_start' && typeof event.index === 'number') this.openBlock = event.index;
    else if (event.type === 'content_block_stop') this.openBlock = null;
  }

  close(usage: Usage, extra: Json | null): string {
    let out = this.openBlock === null ? '' : sseEvent({ type: 'content_block_stop', index: this.openBlock }, 'content_block_stop');
    const u = { input_tokens: usage.input, cache_creation_input_tokens: usage.cacheWrite, cache_read_input_tokens: usage.cacheRead, output_tokens: usage.output };
    out += sseEvent({ type: 'message_delta', delta: { stop_reason: 'max_tokens', stop_sequence: null }, usage: u, ...extra }, 'message_delta');
    return out + sseEvent({ type: 'message_stop' }, 'message_stop');
  }
}

export const anthropic: ProviderFormat = {
  name: 'anthropic',
  gatewayPath: '/v1/messages',
  upstreamPath: '/messages',
  upstreamHeaders: (apiKey, clientVersion) => ({ 'x-api-key': apiKey, 'anthropic-version': clientVersion ?? ANTHROPIC_VERSION_DEFAULT }),

  ...bodyReaderOf(['max_tokens'], countParts),

  requestedMaxTokens: (body) => maxTokensField(body, 'max_tokens'),

  /** The limit goes in `max_tokens`; a stream always carries usage, so nothing else changes. */
  prepareUpstreamBody(clientBody, opts) {
    const body = copyOf(clientBody);
    body.model = opts.upstreamModel;
    if (opts.stream || 'stream' in clientBody) body.stream = opts.stream;
    if (opts.maxTokens !== null) body.max_tokens = opts.maxTokens;
    return { body, clientWantsUsage: true };
  },

  usageFromResponse: (json) => usageOf(json.usage),

  terminalData: null,

  /** By the SSE event name, when the data does not look like usage, an error or a message event. */
  plainEvent(eventName, data): Forward | null {
    if (eventName === undefined || !plainEvents.has(eventName)) return null;
    if (usageErrorOrMessage.test(data)) return null;
    return 'raw';
  },

  /**
   * `message_start` carries the input and cache counts; `message_delta` updates them
   * field by field (its `output_tokens` is the running total, latest wins) and makes them
   * final; `message_stop` ends the stream. Every event is forwarded as it came.
   */
  readEvent(event, _dataText, into: StreamReading): Forward {
    switch (event.type) {
      case 'message_start': {
        const usage = isObject(event.message) ? usageOf(event.message.usage) : null;
        if (usage !== null) into.counts = usage;
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
        for (const [kind, value] of fields) if (isCount(value)) into.counts[kind] = value;
        into.complete = true;
        break;
      }
      case 'message_stop':
        into.terminal = true;
        break;
      case 'error':
        into.errorEvent = event;
        break;
    }
    return 'raw';
  },

  deltaChars,

  streamCloser: () => new MessagesCloser(),
};
