/**
 * The relay of a gateway call whose hold applied: sends it upstream, relays the answer
 * (whole, or streamed event by event through StreamRelay), and hands billing the outcome:
 * settle the usage (exact, or estimated for a cut stream or a client that left) or
 * release the hold when nothing is billed (an upstream error, no usage).
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type { Response } from 'express';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import { StreamRelay, usageFromResponse, type Usage } from './adapters.js';
import { billingHeaderNames, type GatewayBilling, type SettleResult } from './billing.js';
import { budget_remaining_header } from './budget.js';
import type { Call } from './call.js';
import { FailedAnswer, failsOver, type UpstreamRouter } from './failover.js';
import type { UpstreamClient, UpstreamResponse, UpstreamTarget } from './upstream.js';
import { embeddings_upstream_path, embeddingsUsage } from './wire/embeddings.js';

export class GatewayRelay {
  constructor(private readonly deps: { upstream: UpstreamClient; router: UpstreamRouter; billing: GatewayBilling; logger: Logger }) {}

  /**
   * Sends the call to one of its model's upstreams, and to the next when one fails before
   * anything reached the client (src/gateway/failover.ts): `opening` reads what must come
   * before the first byte goes out (nothing for a whole answer, the first events of a
   * stream) and throws to fail over. The hold is the call's, whatever the attempts: it is
   * settled or released once, here or by the caller. A boolean when the call is already
   * answered: true when the client left before the upstream answered (settled as aborted:
   * the request went out, and the provider bills the input it read), false when the last
   * upstream's 429 or 5xx was relayed as it came (the hold released).
   */
  private async send<T>(
    res: Response,
    call: Call,
    body: Record<string, unknown>,
    anthropicVersion: string | undefined,
    watch: ClientWatch,
    opening: (r: UpstreamResponse) => Promise<T>,
  ): Promise<T | boolean> {
    call.upstreamStartedAt = performance.now();
    const path = call.endpoint === 'embeddings' ? embeddings_upstream_path : undefined;
    const several = call.model.upstreams.length > 1;
    const sendOpts = { stream: call.stream, signal: watch, anthropicVersion, timeouts: call.model.timeouts };
    try {
      const { value } = await this.deps.router.route(
        { projectId: call.scope.projectId, modelId: call.model.id, upstreams: call.model.upstreams },
        async (u) => {
          if (several) body.model = u.upstreamModel;
          const r = await this.deps.upstream.send({ format: call.format, baseUrl: u.baseUrl, apiKey: u.apiKey, path }, body, sendOpts);
          call.upstream = u.id;
          if (failsOver(r.status)) throw new FailedAnswer(r.status, r.headers, await readAll(r.body).catch(() => Buffer.alloc(0)));
          return opening(r);
        },
        call.attempts,
        () => !watch.gone,
      );
      if (call.upstream !== null) res.setHeader(upstream_header, call.upstream);
      return value;
    } catch (err) {
      if (watch.aborted) {
        await this.deps.billing.settleAborted(call, null, null);
        return true;
      }
      if (err instanceof FailedAnswer) {
        await this.deps.billing.release(call, err.status);
        if (call.upstream !== null) res.setHeader(upstream_header, call.upstream);
        sendRelayed(res, err, err.bytes);
        return false;
      }
      await this.deps.billing.release(call, null);
      throw upstreamError(err);
    }
  }

  /**
   * Relays a call that nothing bills (`POST /v1/messages/count_tokens`): the upstream's
   * status and body as they are, or 502 `upstream_error` / 504 `upstream_timeout` when
   * none came. The upstream call is aborted when the client leaves.
   */
  async unbilled(res: Response, target: UpstreamTarget, body: Record<string, unknown>, anthropicVersion: string | undefined): Promise<void> {
    const watch = new ClientWatch(res);
    try {
      const upstream = await this.deps.upstream.send(target, body, { stream: false, signal: watch, anthropicVersion });
      const bytes = await readAll(upstream.body);
      if (!watch.gone) sendRelayed(res, upstream, bytes);
    } catch (err) {
      if (!watch.gone) throw upstreamError(err);
    } finally {
      watch.stop();
    }
  }

  /** Relays a whole answer; true when the call was settled, false when its hold was released. */
  async whole(res: Response, call: Call, body: Record<string, unknown>, anthropicVersion: string | undefined): Promise<boolean> {
    const watch = new ClientWatch(res);
    let upstream: UpstreamResponse;
    let bytes: Buffer;
    try {
      // A whole answer fails over only until its headers: once a 2xx came, the upstream did the work.
      const sent = await this.send(res, call, body, anthropicVersion, watch, async (r) => r);
      if (typeof sent === 'boolean') return sent;
      upstream = sent;
      try {
        bytes = await readAll(upstream.body);
      } catch (err) {
        // The client left while the answer was coming: the upstream did the work.
        if (watch.gone && upstream.status < 400) {
          await this.deps.billing.settleAborted(call, null, upstream.status);
          return true;
        }
        await this.deps.billing.release(call, upstream.status);
        throw upstreamError(err);
      }
    } finally {
      watch.stop();
    }
    if (upstream.status >= 400) {
      await this.deps.billing.release(call, upstream.status);
      sendRelayed(res, upstream, bytes);
      return false;
    }
    let usage: Usage | null;
    try {
      const json: unknown = JSON.parse(bytes.toString('utf8'));
      usage = call.endpoint === 'embeddings' ? embeddingsUsage(json) : usageFromResponse(call.format, json);
    } catch {
      usage = null;
    }
    if (usage === null) {
      await this.deps.billing.release(call, upstream.status);
      throw new ApiError('upstream_error', { message: 'the upstream answered without a valid response body or usage' });
    }
    // A client that left as the whole answer arrived is billed it in full.
    const settled = await this.deps.billing.settle(call, usage, watch.gone ? 'client_aborted' : 'settled', false, upstream.status);
    if (watch.gone) return true;
    for (const [name, value] of this.deps.billing.billingHeaders(settled)) res.setHeader(name, value);
    sendRelayed(res, upstream, bytes);
    return true;
  }

  /**
   * Relays a streamed answer; true when the call was settled, false when its hold was
   * released. With `inlineBilling` (X-Service-Stream-Billing: inline) the final usage
   * event (OpenAI's usage chunk, which the client then gets even without asking for
   * usage; Anthropic's `message_delta`) is held back with what follows it until the call
   * is settled, and goes out with the billing figures added (GatewayBilling.inlineBilling).
   */
  async stream(
    res: Response,
    call: Call,
    body: Record<string, unknown>,
    clientWantsUsage: boolean,
    anthropicVersion: string | undefined,
    inlineBilling = false,
  ): Promise<boolean> {
    const watch = new ClientWatch(res);
    const sent = await this.send(res, call, body, anthropicVersion, watch, (r) => openStream(r, call, clientWantsUsage, inlineBilling, watch));
    if (typeof sent === 'boolean') {
      watch.stop();
      return sent;
    }
    const { upstream, relay, chunks, first, ended } = sent;
    if (relay === null) {
      const bytes = await readAll(upstream.body).catch(() => Buffer.alloc(0));
      await this.deps.billing.release(call, upstream.status);
      watch.stop();
      sendRelayed(res, upstream, bytes);
      return false;
    }
    if (sent.clientLeft) {
      watch.stop();
      // The client left before the first event: the upstream read the prompt all the same.
      await this.settleEstimate(call, relay, 'client_aborted', upstream.status);
      return true;
    }
    if (!watch.gone && (relay.invalid() || (first.length === 0 && !relay.holding()))) {
      watch.stop();
      await this.deps.billing.release(call, upstream.status);
      throw new ApiError('upstream_error', { message: 'the upstream stream is not a valid event stream' });
    }

    // The headers go out with the first events, in one write: flushing them on their own
    // cost a socket write (a system call) per streamed call.
    res.statusCode = 200;
    res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
    res.setHeader('Cache-Control', 'no-cache');
    res.setHeader('Trailer', call.budget === null ? trailerHeader : budgetTrailerHeader);

    const cork = new TurnCork(res.socket);
    try {
      return await this.relayEvents(res, call, upstream.status, relay, chunks, first, ended, watch, cork);
    } finally {
      cork.release();
    }
  }

  /** The rest of `stream` once its headers are set: the events, then the settlement and the trailers. */
  private async relayEvents(
    res: Response,
    call: Call,
    upstreamStatus: number,
    relay: StreamRelay,
    chunks: AsyncIterator<unknown>,
    first: Uint8Array[],
    ended: boolean,
    watch: ClientWatch,
    cork: TurnCork,
  ): Promise<boolean> {
    let upstreamFailed = false;
    try {
      cork.hold();
      for (const out of first) if (!watch.gone) res.write(out);
      if (ended) cork.keep();
      while (!ended && !watch.gone && !relay.invalid()) {
        const next = await chunks.next();
        if (next.done) {
          const tail = relay.end();
          cork.hold();
          if (tail.length > 0) res.write(tail);
          cork.keep();
          break;
        }
        const out = relay.push(next.value as Uint8Array);
        if (out.length > 0 && !watch.gone) {
          cork.hold();
          res.write(out);
        }
      }
    } catch (err) {
      if (!watch.gone) {
        upstreamFailed = true;
        this.deps.logger.warn({ err, transactionId: call.transactionId }, 'upstream stream failed');
      }
    } finally {
      watch.stop();
    }

    // The client left: the input and the output already relayed are charged (estimated).
    if (watch.gone) {
      await this.settleEstimate(call, relay, 'client_aborted', upstreamStatus);
      return true;
    }
    const usage = relay.usage();
    const exact = !upstreamFailed && usage !== null && relay.usageComplete() && !relay.invalid() && relay.error() === null && relay.sawTerminal();
    if (relay.holding()) return this.settleHeld(res, call, upstreamStatus, relay, exact ? usage : null, cork);
    let settled: SettleResult;
    if (exact) {
      settled = await this.deps.billing.settle(call, usage, 'settled', false, upstreamStatus);
    } else if (relay.relayedOutputEstimate() > 0) {
      // The client has (part of) an answer but the upstream gave no usage for it (it broke
      // off, or it ignores stream_options): charged as estimated, not served for free.
      settled = await this.settleEstimate(call, relay, 'settled', upstreamStatus);
    } else {
      await this.deps.billing.release(call, upstreamStatus);
      res.end();
      return false;
    }
    res.addTrailers(this.deps.billing.billingHeaders(settled));
    res.end();
    return true;
  }

  /**
   * The end of relayEvents for a stream whose final usage event is held back (inline
   * billing): settled as relayEvents would (`exactUsage` when it would bill it exactly),
   * then the held events go out, the final one with the billing figures added, and the
   * trailers. A release or a failed settlement sends them as they came.
   */
  private async settleHeld(res: Response, call: Call, upstreamStatus: number, relay: StreamRelay, exactUsage: Usage | null, cork: TurnCork): Promise<boolean> {
    let settled: SettleResult;
    try {
      if (exactUsage !== null) {
        settled = await this.deps.billing.settle(call, exactUsage, 'settled', false, upstreamStatus);
      } else if (relay.relayedOutputEstimate() > 0) {
        settled = await this.settleEstimate(call, relay, 'settled', upstreamStatus);
      } else {
        await this.deps.billing.release(call, upstreamStatus);
        res.end(relay.releaseHeld(null));
        return false;
      }
    } catch (err) {
      if (!res.destroyed) res.write(relay.releaseHeld(null));
      throw err;
    }
    cork.hold();
    res.write(relay.releaseHeld(this.deps.billing.inlineBilling(call, settled, exactUsage === null)));
    res.addTrailers(this.deps.billing.billingHeaders(settled));
    res.end();
    return true;
  }

  /** Settles a stream that did not end with complete usage, from what its relay saw. */
  private settleEstimate(call: Call, relay: StreamRelay, status: 'settled' | 'client_aborted', upstreamStatus: number): Promise<SettleResult> {
    return this.deps.billing.settleEstimate(call, relay.usage(), relay.relayedOutputEstimate(), status, upstreamStatus);
  }
}

/** Names the upstream (its id in the model) whose answer this is. */
const upstream_header = 'X-Service-Upstream';

/** A stream's opening: what was read of it before anything goes to the client (openStream). */
interface StreamOpening {
  upstream: UpstreamResponse;
  /** The upstream's status, as the attempt's outcome (src/gateway/failover.ts). */
  status: number;
  /** Null for an answer that is not a stream (a 4xx relayed as it came). */
  relay: StreamRelay | null;
  chunks: AsyncIterator<unknown>;
  first: Uint8Array[];
  ended: boolean;
  /** The client left while the opening was read. */
  clientLeft: boolean;
}

/**
 * Reads a streamed answer until its first event can be forwarded, so that an upstream
 * answering garbage still gets a clean 502 before any header goes out, and one that fails
 * before its first event (connection lost, idle timeout) can be failed over: its error is
 * thrown, the next upstream tried.
 */
async function openStream(upstream: UpstreamResponse, call: Call, clientWantsUsage: boolean, inlineBilling: boolean, watch: ClientWatch): Promise<StreamOpening> {
  const chunks = upstream.body[Symbol.asyncIterator]();
  const opening: StreamOpening = { upstream, status: upstream.status, relay: null, chunks, first: [], ended: false, clientLeft: false };
  if (upstream.status >= 400) return opening;
  const relay = inlineBilling ? new StreamRelay(call.format, true, { holdFinal: true }) : new StreamRelay(call.format, clientWantsUsage);
  opening.relay = relay;
  const { first } = opening;
  try {
    while (first.length === 0 && !relay.invalid() && !watch.gone && !relay.holding()) {
      const next = await chunks.next();
      if (next.done) {
        opening.ended = true;
        const tail = relay.end();
        if (tail.length > 0) first.push(tail);
        break;
      }
      const out = relay.push(next.value as Uint8Array);
      if (out.length > 0) first.push(out);
    }
  } catch (err) {
    if (!watch.gone) {
      upstream.body.destroy();
      throw err;
    }
    opening.clientLeft = true;
  }
  return opening;
}

const trailerHeader = billingHeaderNames.join(', ');
/** Under a budget the trailers say what it has left too. */
const budgetTrailerHeader = `${trailerHeader}, ${budget_remaining_header}`;

/**
 * The Content-Type of a relayed answer, by the upstream's: what Express's `res.type`
 * makes of it (a charset added to a type that has one, `application/json; charset=utf-8`
 * for `application/json`), computed once per distinct upstream type instead of on every
 * answer. At most content_types_remembered types are kept.
 */
const relayedTypes = new Map<string, string>();
const content_types_remembered = 64;

function relayedContentType(res: Response, upstreamType: string): string {
  let type = relayedTypes.get(upstreamType);
  if (type === undefined) {
    res.type(upstreamType);
    type = String(res.getHeader('Content-Type'));
    if (relayedTypes.size >= content_types_remembered) relayedTypes.clear();
    relayedTypes.set(upstreamType, type);
  }
  return type;
}

/**
 * Answers with the upstream's status and body, as Express's res.status().type().send(bytes)
 * would with this app's settings (no ETag; a POST, so never fresh), without its settings
 * lookups and header re-reads on every call.
 */
function sendRelayed(res: Response, upstream: { status: number; headers: UpstreamResponse['headers'] }, bytes: Buffer): void {
  res.statusCode = upstream.status;
  res.setHeader('Content-Type', relayedContentType(res, String(upstream.headers['content-type'] ?? 'application/json')));
  res.setHeader('Content-Length', bytes.length);
  res.end(bytes);
}

async function readAll(body: AsyncIterable<unknown>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of body) parts.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(parts);
}

function upstreamError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const kind = (err as { kind?: string }).kind;
  if (kind === 'timeout') return new ApiError('upstream_timeout');
  // The model's own configuration is at fault, not the provider: the message says what.
  if (kind === 'refused') return new ApiError('upstream_error', { message: (err as Error).message });
  return new ApiError('upstream_error');
}

/** The longest a relayed event waits in the socket for the answer's end (TurnCork.keep). */
const held_events_ms_max = 10;

/**
 * Holds the relayed events in the response's socket until the end of the event loop's
 * turn (setImmediate), instead of the end of the tick as Node's own cork does. When the
 * upstream's end arrives in the same turn as its last events, as it does for an answer the
 * upstream sent at once, `keep` holds them on until the answer's end, whose trailers wait
 * for the settlement (a Redis round trip), and they go out together in one write instead
 * of two (a socket write was 6% of the API's CPU per streamed call). They wait
 * held_events_ms_max at most, whatever the settlement does. Every path must `release`:
 * a socket left corked would hold the next answer on its connection.
 */
class TurnCork {
  private corked = false;
  private kept: NodeJS.Timeout | null = null;

  constructor(private readonly socket: Socket | null) {}

  /** Before a write: the socket is corked until the end of this turn. */
  hold(): void {
    if (this.corked || this.socket === null) return;
    this.socket.cork();
    this.corked = true;
    setImmediate(this.endOfTurn);
  }

  /** The upstream ended: what this turn wrote waits for the answer's end. */
  keep(): void {
    if (this.corked && this.kept === null) this.kept = setTimeout(this.release, held_events_ms_max);
  }

  /** Writes what is held. */
  readonly release = (): void => {
    if (this.kept !== null) clearTimeout(this.kept);
    this.kept = null;
    if (!this.corked) return;
    this.corked = false;
    this.socket!.uncork();
  };

  private readonly endOfTurn = (): void => {
    if (this.kept === null) this.release();
  };
}

/**
 * Watches for the client leaving before its answer is written: `gone` says so, and the
 * upstream call, whose abort signal this is (undici takes an EventEmitter that emits
 * `abort` and says `aborted`), is aborted. An AbortController and undici's listeners on
 * its EventTarget cost about 4.6 us per call, this about 0.2. `stop` once the answer no
 * longer needs it.
 */
class ClientWatch extends EventEmitter {
  gone = false;
  private readonly onClose = (): void => {
    if (this.res.writableFinished) return;
    this.gone = true;
    this.emit('abort');
  };

  constructor(private readonly res: Response) {
    super();
    res.on('close', this.onClose);
  }

  get aborted(): boolean {
    return this.gone;
  }

  stop(): void {
    this.res.off('close', this.onClose);
  }
}
