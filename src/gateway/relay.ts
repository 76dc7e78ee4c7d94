/**
 * The relay of a gateway call whose hold applied: sends it upstream, relays the answer
 * (whole, or streamed event by event through StreamRelay), and hands billing the outcome:
 * settle the usage (exact, or estimated for a cut stream or a client that left) or
 * release the hold when nothing is billed (an upstream error, no usage).
 */
import type { Response } from 'express';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import { billing_field, StreamRelay, usageFromResponse, type Usage } from './adapters.js';
import { billingHeaderNames, estimatedUsage, type GatewayBilling, type SettleResult } from './billing.js';
import { hold_exhausted_trailer, HoldExtender } from './incremental.js';
import { budget_remaining_header } from './budget.js';
import type { Call } from './call.js';
import type { LedgerService } from '../ledger/service.js';
import { ClientWatch, TurnCork } from './relay-io.js';
import { FailedAnswer, failsOver, triedAttempts, triedList, type Attempt, type UpstreamRouter } from './failover.js';
import type { UpstreamClient, UpstreamResponse, UpstreamTarget } from './upstream.js';
import { embeddings_upstream_path, embeddingsUsage } from './wire/embeddings.js';
import type { CallTranslation } from './translate/call.js';
import { sendRelayed } from './relay-answer.js';

export class GatewayRelay {
  constructor(private readonly deps: { upstream: UpstreamClient; router: UpstreamRouter; billing: GatewayBilling; ledger: LedgerService; logger: Logger }) {}

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
    translation: CallTranslation | null,
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
      // The upstream tried last (not one skipped) is the one whose failure is answered.
      const last = triedAttempts(call.attempts).at(-1);
      if (last !== undefined) res.setHeader(upstream_header, last.upstream);
      if (err instanceof FailedAnswer) {
        await this.deps.billing.release(call, err.status);
        sendRelayed(res, err, err.bytes, translation);
        return false;
      }
      await this.deps.billing.release(call, null);
      throw several && last !== undefined ? naming(upstreamError(err), call.attempts) : upstreamError(err);
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

  /**
   * Relays a whole answer; true when the call was settled, false when its hold was
   * released. With a `translation` (a cross-format call) the answer or error the client
   * gets is translated to its format; billing reads the upstream's own.
   */
  async whole(res: Response, call: Call, body: Record<string, unknown>, anthropicVersion: string | undefined, translation: CallTranslation | null = null): Promise<boolean> {
    const watch = new ClientWatch(res);
    let upstream: UpstreamResponse;
    let bytes: Buffer;
    try {
      // A whole answer fails over only until its headers: once a 2xx came, the upstream did the work.
      const sent = await this.send(res, call, body, anthropicVersion, watch, async (r) => r, translation);
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
      sendRelayed(res, upstream, bytes, translation);
      return false;
    }
    let usage: Usage | null;
    try {
      const json: unknown = JSON.parse(bytes.toString('utf8'));
      usage = call.endpoint === 'embeddings' ? embeddingsUsage(json) : usageFromResponse(call.format, json);
      if (translation !== null && usage !== null) bytes = translation.answer(json as Record<string, unknown>);
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
    translation: CallTranslation | null = null,
  ): Promise<boolean> {
    const watch = new ClientWatch(res);
    const extender = call.incremental === null ? null : new HoldExtender(this.deps, call, call.incremental);
    // One relay per attempt (a failed attempt forwarded nothing).
    const newRelay = () =>
      translation !== null ? translation.streamRelay(inlineBilling, extender?.allowance())
      : extender !== null ? new StreamRelay(call.format, inlineBilling || clientWantsUsage, { holdFinal: inlineBilling, allowance: extender.allowance() })
      : inlineBilling ? new StreamRelay(call.format, true, { holdFinal: true })
      : new StreamRelay(call.format, clientWantsUsage);
    const sent = await this.send(res, call, body, anthropicVersion, watch, (r) => openStream(r, newRelay, watch), translation);
    if (typeof sent === 'boolean') {
      watch.stop();
      return sent;
    }
    const { upstream, relay, chunks, first, ended } = sent;
    if (relay === null) {
      const bytes = await readAll(upstream.body).catch(() => Buffer.alloc(0));
      await this.deps.billing.release(call, upstream.status);
      watch.stop();
      sendRelayed(res, upstream, bytes, translation);
      return false;
    }
    if (sent.clientLeft) {
      watch.stop();
      // The client left before the first event: the upstream read the prompt all the same.
      await this.settleEstimate(call, relay, 'client_aborted', upstream.status);
      return true;
    }
    if (!watch.gone && (relay.invalid() || (first.length === 0 && !relay.holding() && !relay.gated()))) {
      watch.stop();
      await this.deps.billing.release(call, upstream.status);
      throw new ApiError('upstream_error', { message: 'the upstream stream is not a valid event stream' });
    }

    // The headers go out with the first events, in one write: flushing them on their own
    // cost a socket write (a system call) per streamed call.
    res.statusCode = 200;
    res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
    res.setHeader('Cache-Control', 'no-cache');
    const trailers = call.budget === null ? trailerHeader : budgetTrailerHeader;
    res.setHeader('Trailer', extender === null ? trailers : `${trailers}, ${hold_exhausted_trailer}`);

    const cork = new TurnCork(res.socket);
    try {
      return await this.relayEvents(res, call, upstream.status, relay, chunks, first, ended, watch, cork, extender);
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
    extender: HoldExtender | null,
  ): Promise<boolean> {
    let upstreamFailed = false;
    let exhausted = false;
    try {
      cork.hold();
      for (const out of first) if (!watch.gone) res.write(out);
      if (extender !== null) {
        exhausted = await this.relayMetered(res, relay, chunks, ended, watch, cork, extender);
        ended = true;
      }
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
    if (exhausted) return this.endExhausted(res, call, upstreamStatus, relay, cork);
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
    res.addTrailers(this.trailersOf(call, settled, false));
    res.end();
    return true;
  }

  /**
   * relayEvents for an incremental hold: relays the upstream's events up to what is held
   * (the relay's allowance), asks for an extension in the background as the output passes
   * half the last slice, and, when the relay stops at the allowance, waits for the
   * extension before it reads more of the upstream (its bytes wait in the socket
   * meanwhile). True when an extension was refused at the allowance: the upstream call is
   * then aborted, and endExhausted ends the stream.
   */
  private async relayMetered(res: Response, relay: StreamRelay, chunks: AsyncIterator<unknown>, ended: boolean, watch: ClientWatch, cork: TurnCork, extender: HoldExtender): Promise<boolean> {
    const write = (out: Uint8Array) => {
      if (out.length === 0 || watch.gone) return;
      cork.hold();
      res.write(out);
    };
    while (!watch.gone && !relay.invalid()) {
      if (relay.gated()) {
        if (!(await extender.extend())) {
          watch.cutUpstream();
          void chunks.return?.().catch(() => undefined);
          return true;
        }
        write(relay.allow(extender.allowance()));
        continue;
      }
      if (ended) return false;
      if (extender.due(relay.outputEstimate())) void extender.extend();
      const next = await chunks.next();
      if (next.done) {
        write(relay.end());
        ended = true;
      } else {
        write(relay.push(next.value as Uint8Array));
      }
      // An extension granted meanwhile raises the allowance.
      write(relay.allow(extender.allowance()));
    }
    return false;
  }

  /**
   * The end of a stream whose wallet could not pay for more output (an incremental hold's
   * extension refused): billed as estimated what was relayed (never more than the hold),
   * then the format's closing events (the usage in them, with the inline billing figures
   * when asked), and the trailers with X-Service-Hold-Exhausted: true.
   */
  private async endExhausted(res: Response, call: Call, upstreamStatus: number, relay: StreamRelay, cork: TurnCork): Promise<boolean> {
    const usage = estimatedUsage(call, relay.usage(), relay.relayedOutputEstimate());
    const settled = await this.deps.billing.settle(call, usage, 'settled', true, upstreamStatus, true);
    cork.hold();
    const inline = relay.holdsFinal() ? { [billing_field]: this.deps.billing.inlineBilling(call, settled, true, true) } : null;
    res.write(relay.close(usage, inline));
    res.addTrailers(this.trailersOf(call, settled, true));
    res.end();
    return true;
  }

  /** The billing trailers, and for an incremental hold whether the wallet ended the stream. */
  private trailersOf(call: Call, settled: SettleResult, exhausted: boolean): [string, string][] {
    const trailers = this.deps.billing.billingHeaders(settled);
    if (call.incremental !== null) trailers.push([hold_exhausted_trailer, String(exhausted)]);
    return trailers;
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
    res.addTrailers(this.trailersOf(call, settled, false));
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
async function openStream(upstream: UpstreamResponse, newRelay: () => StreamRelay, watch: ClientWatch): Promise<StreamOpening> {
  const chunks = upstream.body[Symbol.asyncIterator]();
  const opening: StreamOpening = { upstream, status: upstream.status, relay: null, chunks, first: [], ended: false, clientLeft: false };
  if (upstream.status >= 400) return opening;
  const relay = newRelay();
  opening.relay = relay;
  const { first } = opening;
  try {
    while (first.length === 0 && !relay.invalid() && !watch.gone && !relay.holding() && !relay.gated()) {
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

async function readAll(body: AsyncIterable<unknown>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of body) parts.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(parts);
}

/** A failed call's error, its message naming the upstreams it tried (the failover's). */
function naming(err: ApiError, attempts: readonly Attempt[]): ApiError {
  return new ApiError(err.code, { message: `${err.message}; tried: ${triedList(attempts)}`, status: err.status, headers: err.headers });
}

function upstreamError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const kind = (err as { kind?: string }).kind;
  if (kind === 'timeout') return new ApiError('upstream_timeout');
  // The model's own configuration is at fault, not the provider: the message says what.
  if (kind === 'refused') return new ApiError('upstream_error', { message: (err as Error).message });
  return new ApiError('upstream_error');
}
