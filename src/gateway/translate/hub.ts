/**
 * Cross-format calls (issue 22, docs/API.md "Any model through any format"): a client may
 * call a model through an endpoint whose wire format is not the model's own. The gateway
 * then translates the request, the answer (whole or streamed) and the errors through one
 * hub: the OpenAI chat-completions JSON. Each other format has one Translator, to and from
 * the hub, so n formats need n - 1 translators, not n x (n - 1) direct mappings; a call from
 * format X to a model of format Y goes X -> hub -> Y, and its answer Y -> hub -> X.
 *
 * The hub is chat completions as the `openai` package types it (ChatCompletionCreateParams,
 * ChatCompletion, ChatCompletionChunk), with one addition the chat format lacks:
 * `usage.cache_write_tokens` (tokens written to a prompt cache, Anthropic's
 * `cache_creation_input_tokens`). As in chat, `usage.prompt_tokens` counts every input
 * token, cached reads (`usage.prompt_tokens_details.cached_tokens`) and cache writes included.
 *
 * Billing never reads the hub: it reads the upstream's own answer with the upstream
 * format's reader (src/gateway/wire/), so a translated call costs what the native call
 * costs. Translation is pure code: no I/O, no clock. A feature with no counterpart in the
 * target format is refused with a 400 `invalid_request` naming the field, never dropped.
 */
import type { Json } from '../wire/format.js';

/** One server-sent event: its `event:` name (Anthropic and Responses streams name theirs) and its parsed data. */
export interface HubEvent {
  event?: string;
  data: Json;
}

/**
 * A stream's translation, one direction, stateful (a tool call's arguments arrive in
 * pieces; a stream's first event opens a message the last one closes).
 */
export interface StreamTranslation {
  /** The events to send for one event received (often one, sometimes none or several). */
  push(event: HubEvent): HubEvent[];
  /** The events that close the stream once the input ended (none when the input closed it). */
  end(): HubEvent[];
  /**
   * Optional, upstream formats only: the hub events of an event that carries nothing but
   * generated text (most of a stream), read by a cheap search of its data instead of a
   * parse of the whole event; null when the event is not such a one (it then goes to push).
   */
  pushText?(eventName: string | undefined, data: string): { text: string; events: HubEvent[] } | null;
}

/** An upstream's error as the hub carries it: HTTP status, and the chat-completions error envelope's fields. */
export interface HubError {
  status: number;
  message: string;
  /** OpenAI's `error.type` (`invalid_request_error`, `rate_limit_error`, `api_error`, ...). */
  type: string;
  param?: string | null;
  code?: string | null;
}

/** One wire format's translation to and from the hub (chat completions). */
export interface Translator {
  /** A client's request in this format, as the hub's request. Throws a 400 naming the field for what the hub cannot carry. */
  requestToHub(body: Json): Json;
  /** The hub's request as this format's request, sent upstream. Throws a 400 naming the (client's) field for what this format cannot carry. */
  requestFromHub(body: Json): Json;
  /** An upstream's whole answer in this format, as the hub's answer. */
  responseToHub(answer: Json): Json;
  /** The hub's answer as this format's answer, for the client. */
  responseFromHub(answer: Json): Json;
  /** An upstream stream in this format, as hub chunks (`data` only, no event names). */
  streamToHub(): StreamTranslation;
  /** Hub chunks as this format's stream, for the client. */
  streamFromHub(): StreamTranslation;
  /** An upstream error answer in this format (status and parsed body, null when not JSON), as the hub's error. */
  errorToHub(status: number, body: Json | null): HubError;
  /** The hub's error in this format's error envelope: the status and body sent to the client. */
  errorFromHub(error: HubError): { status: number; body: Json };
}
