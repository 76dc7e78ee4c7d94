/**
 * The relay of a gateway call whose hold applied: sends it upstream, relays the answer
 * (whole, or streamed event by event through StreamRelay), and hands billing the outcome:
 * settle the usage (exact, or estimated for a cut stream or a client that left) or
 * release the hold when nothing is billed (an upstream error, no usage).
 */
import type { Response } from 'express';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import { StreamRelay, usageFromResponse, type Usage } from './adapters.js';
import { billingHeaderNames, type Call, type GatewayBilling, type SettleResult } from './billing.js';
import type { UpstreamClient } from './upstream.js';

export class GatewayRelay {
  constructor(private readonly deps: { upstream: UpstreamClient; billing: GatewayBilling; logger: Logger }) {}

  /**
   * Sends the call upstream. Null when the client left before the upstream answered: the
   * call is then settled as aborted (the request went out, and the provider bills the
   * input it read).
   */
  private async send(call: Call, body: Record<string, unknown>, anthropicVersion: string | undefined, signal: AbortSignal) {
    try {
      return await this.deps.upstream.send(
        { format: call.format, baseUrl: call.model.upstreamBaseUrl, apiKey: call.model.upstreamKey! },
        body,
        { stream: call.stream, signal, anthropicVersion },
      );
    } catch (err) {
      if (signal.aborted) {
        await this.deps.billing.settleAborted(call, null, null);
        return null;
      }
      await this.deps.billing.release(call, null);
      throw upstreamError(err);
    }
  }

  /** Relays a whole answer; true when the call was settled, false when its hold was released. */
  async whole(res: Response, call: Call, body: Record<string, unknown>, anthropicVersion: string | undefined): Promise<boolean> {
    const abort = new AbortController();
    let clientGone = false;
    const onClose = () => {
      if (!res.writableFinished) {
        clientGone = true;
        abort.abort();
      }
    };
    res.once('close', onClose);
    let upstream: NonNullable<Awaited<ReturnType<GatewayRelay['send']>>>;
    let bytes: Buffer;
    try {
      const sent = await this.send(call, body, anthropicVersion, abort.signal);
      if (sent === null) return true;
      upstream = sent;
      try {
        bytes = await readAll(upstream.body);
      } catch (err) {
        // The client left while the answer was coming: the upstream did the work.
        if (clientGone && upstream.status < 400) {
          await this.deps.billing.settleAborted(call, null, upstream.status);
          return true;
        }
        await this.deps.billing.release(call, upstream.status);
        throw upstreamError(err);
      }
    } finally {
      res.off('close', onClose);
    }
    const contentType = String(upstream.headers['content-type'] ?? 'application/json');
    if (upstream.status >= 400) {
      await this.deps.billing.release(call, upstream.status);
      res.status(upstream.status).type(contentType).send(bytes);
      return false;
    }
    let usage: Usage | null = null;
    try {
      usage = usageFromResponse(call.format, JSON.parse(bytes.toString('utf8')));
    } catch {
      usage = null;
    }
    if (usage === null) {
      await this.deps.billing.release(call, upstream.status);
      throw new ApiError('upstream_error', { message: 'the upstream answered without a valid response body or usage' });
    }
    // A client that left as the whole answer arrived is billed it in full.
    const settled = await this.deps.billing.settle(call, usage, clientGone ? 'client_aborted' : 'settled', false, upstream.status);
    if (clientGone) return true;
    res.set(this.deps.billing.billingHeaders(settled));
    res.status(upstream.status).type(contentType).send(bytes);
    return true;
  }

  /** Relays a streamed answer; true when the call was settled, false when its hold was released. */
  async stream(res: Response, call: Call, body: Record<string, unknown>, clientWantsUsage: boolean, anthropicVersion: string | undefined): Promise<boolean> {
    const abort = new AbortController();
    let clientGone = false;
    const onClose = () => {
      if (!res.writableFinished) {
        clientGone = true;
        abort.abort();
      }
    };
    res.once('close', onClose);
    const upstream = await this.send(call, body, anthropicVersion, abort.signal);
    if (upstream === null) {
      res.off('close', onClose);
      return true;
    }
    if (upstream.status >= 400) {
      const bytes = await readAll(upstream.body).catch(() => Buffer.alloc(0));
      await this.deps.billing.release(call, upstream.status);
      res.off('close', onClose);
      res.status(upstream.status).type(String(upstream.headers['content-type'] ?? 'application/json')).send(bytes);
      return false;
    }
    // Read until the first event can be forwarded, so that an upstream answering garbage
    // still gets a clean 502 before any header goes out.
    const relay = new StreamRelay(call.format, clientWantsUsage);
    const chunks = upstream.body[Symbol.asyncIterator]();
    const first: Uint8Array[] = [];
    let ended = false;
    try {
      while (first.length === 0 && !relay.invalid() && !clientGone) {
        const next = await chunks.next();
        if (next.done) {
          ended = true;
          const tail = relay.end();
          if (tail.length > 0) first.push(tail);
          break;
        }
        const out = relay.push(next.value as Uint8Array);
        if (out.length > 0) first.push(out);
      }
    } catch (err) {
      res.off('close', onClose);
      // The client left before the first event: the upstream read the prompt all the same.
      if (clientGone) {
        await this.settleEstimate(call, relay, 'client_aborted', upstream.status);
        return true;
      }
      await this.deps.billing.release(call, upstream.status);
      throw upstreamError(err);
    }
    if (!clientGone && (relay.invalid() || first.length === 0)) {
      res.off('close', onClose);
      await this.deps.billing.release(call, upstream.status);
      throw new ApiError('upstream_error', { message: 'the upstream stream is not a valid event stream' });
    }

    res.status(200);
    res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
    res.setHeader('Cache-Control', 'no-cache');
    res.setHeader('Trailer', billingHeaderNames.join(', '));
    res.flushHeaders();

    let upstreamFailed = false;
    try {
      for (const out of first) if (!clientGone) res.write(out);
      while (!ended && !clientGone && !relay.invalid()) {
        const next = await chunks.next();
        if (next.done) {
          const tail = relay.end();
          if (tail.length > 0) res.write(tail);
          break;
        }
        const out = relay.push(next.value as Uint8Array);
        if (out.length > 0 && !clientGone) res.write(out);
      }
    } catch (err) {
      if (!clientGone) {
        upstreamFailed = true;
        this.deps.logger.warn({ err, transactionId: call.transactionId }, 'upstream stream failed');
      }
    } finally {
      res.off('close', onClose);
    }

    // The client left: the input and the output already relayed are charged (estimated).
    if (clientGone) {
      await this.settleEstimate(call, relay, 'client_aborted', upstream.status);
      return true;
    }
    const usage = relay.usage();
    const exact = !upstreamFailed && usage !== null && relay.usageComplete() && !relay.invalid() && relay.error() === null && relay.sawTerminal();
    let settled: SettleResult;
    if (exact) {
      settled = await this.deps.billing.settle(call, usage, 'settled', false, upstream.status);
    } else if (relay.relayedOutputEstimate() > 0) {
      // The client has (part of) an answer but the upstream gave no usage for it (it broke
      // off, or it ignores stream_options): charged as estimated, not served for free.
      settled = await this.settleEstimate(call, relay, 'settled', upstream.status);
    } else {
      await this.deps.billing.release(call, upstream.status);
      res.end();
      return false;
    }
    res.addTrailers(this.deps.billing.billingHeaders(settled));
    res.end();
    return true;
  }

  /** Settles a stream that did not end with complete usage, from what its relay saw. */
  private settleEstimate(call: Call, relay: StreamRelay, status: 'settled' | 'client_aborted', upstreamStatus: number): Promise<SettleResult> {
    return this.deps.billing.settleEstimate(call, relay.usage(), relay.relayedOutputEstimate(), status, upstreamStatus);
  }
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
