/**
 * A cross-format gateway call (hub.ts): the translators by format, the upstream format of
 * a model, and one call's translation of its request, whole answer, error and stream.
 * The native path never reaches this module: the service compares the two formats once
 * (src/gateway/service.ts) and the relay takes a null translation.
 */
import { ApiError } from '../../errors/catalogue.js';
import { StreamRelay } from '../adapters.js';
import type { GatewayModel } from '../models.js';
import { isObject, type Json, type WireFormat } from '../wire/format.js';
import { anthropicTranslator } from './anthropic.js';
import { chatTranslator } from './chat.js';
import { responsesTranslator } from './responses.js';
import type { Translator } from './hub.js';
import { TranslatingStreamRelay } from './stream.js';

/** One Translator per format; chat completions, the hub, is the identity. */
const translators: Record<WireFormat, Translator> = { openai: chatTranslator, anthropic: anthropicTranslator, responses: responsesTranslator };

/** The wire format a model's upstream speaks: what its answers are read (and billed) with. */
export function upstreamFormatOf(model: GatewayModel): WireFormat {
  return model.wireFormat;
}

export class CallTranslation {
  private readonly client: Translator;
  private readonly upstream: Translator;

  /** `clientWantsUsage`: the client's own wish for a stream's usage (OpenAI `stream_options.include_usage`). */
  private constructor(
    readonly clientFormat: WireFormat,
    readonly upstreamFormat: WireFormat,
    private readonly clientWantsUsage: boolean,
  ) {
    this.client = translators[clientFormat];
    this.upstream = translators[upstreamFormat];
  }

  /**
   * The call's translation and its request in the upstream's format (client -> hub ->
   * upstream), before any hold: a field without counterpart is a 400 naming it.
   */
  static of(clientFormat: WireFormat, upstreamFormat: WireFormat, clientBody: Json): { translation: CallTranslation; body: Json } {
    if (upstreamFormat === 'responses') refuseSmallLimit(clientFormat, clientBody);
    const options = clientBody.stream_options;
    const wantsUsage = clientFormat !== 'openai' || (isObject(options) && options.include_usage === true);
    const translation = new CallTranslation(clientFormat, upstreamFormat, wantsUsage);
    const body = translation.upstream.requestFromHub(translation.client.requestToHub(clientBody));
    return { translation, body };
  }

  private created: number | null = null;

  /** When the client's answer was made (Unix seconds), one value for every event of a stream. */
  private createdAt(): number {
    this.created ??= Math.floor(Date.now() / 1000);
    return this.created;
  }

  /** An upstream whole answer (parsed) as the client's answer's bytes. */
  answer(json: Json): Buffer {
    const answer = this.client.responseFromHub(this.upstream.responseToHub(json));
    stampCreated(this.clientFormat, answer, this.createdAt());
    return Buffer.from(JSON.stringify(answer), 'utf8');
  }

  /** An upstream error answer as the client's envelope, same status. */
  error(status: number, bytes: Buffer): { status: number; bytes: Buffer } {
    let body: Json | null = null;
    try {
      const parsed: unknown = JSON.parse(bytes.toString('utf8'));
      if (isObject(parsed)) body = parsed;
    } catch {
      // Not JSON: the hub error says the status only.
    }
    const out = this.client.errorFromHub(this.upstream.errorToHub(status, body));
    return { status: out.status, bytes: Buffer.from(JSON.stringify(out.body), 'utf8') };
  }

  /**
   * The relay of a stream: it reads (and bills) the upstream's events in their own format,
   * always with their usage, and sends the client its format. With inline billing the
   * client gets the usage event (it carries the figures), as on the native path. With an
   * `allowance` (an incremental hold) the relay is metered, and the closing events of a
   * stream the wallet ended are the upstream format's, translated like the others.
   */
  streamRelay(inlineBilling: boolean, allowance?: number): StreamRelay {
    return new TranslatingStreamRelay(this.upstreamFormat, inlineBilling, allowance, {
      toHub: this.upstream.streamToHub(),
      fromHub: this.client.streamFromHub(),
      clientFormat: this.clientFormat,
      clientWantsUsage: inlineBilling || this.clientWantsUsage,
      stamp: (data) => stampCreated(this.clientFormat, data, this.createdAt()),
    });
  }
}

/**
 * A chat answer or chunk, or a Response (whole, or in a stream's response.* events),
 * translated from a format that did not say when it was made, says it: translation reads no clock.
 */
function stampCreated(format: WireFormat, data: Json, created: number): void {
  if (format === 'openai') {
    if (data.created === 0) data.created = created;
  } else if (format === 'responses') {
    if (data.created_at === 0) data.created_at = created;
    else if (isObject(data.response) && data.response.created_at === 0) data.response.created_at = created;
  }
}

/** The Responses API's least `max_output_tokens`: its upstream refuses less, naming a field the client never sent. */
export const responses_min_output_tokens = 16;

/** A chat or messages client's output limit below what a Responses-format model accepts: a 400 naming the client's own field. */
function refuseSmallLimit(clientFormat: WireFormat, body: Json): void {
  const field = clientFormat === 'openai' && body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
  const limit = body[field];
  if (typeof limit === 'number' && limit < responses_min_output_tokens) {
    throw new ApiError('invalid_request', { param: field, message: `${field} must be at least ${responses_min_output_tokens} for a Responses-format model (got ${limit})` });
  }
}
