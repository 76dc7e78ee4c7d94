/**
 * One gateway call, end to end: resolve customer and model, count the plan operation,
 * hold an upper bound of the cost (lua/gateway_hold-6.lua), relay to the upstream (as a
 * whole or as a stream), settle the exact cost from the upstream's usage
 * (lua/gateway_settle-6.lua) or release the hold when nothing is billed
 * (lua/gateway_release-6.lua). The usage record and receipt travel with the settlement's
 * outbox entry to the workers.
 */
import type { Request, Response } from 'express';
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import type { AuthContext } from '../http/auth.js';
import { creditsToCents, creditsToUsd } from '../ledger/amounts.js';
import type { LedgerService, ProjectScope } from '../ledger/service.js';
import { walletNameSchema } from '../ledger/schemas.js';
import type { UsageRecordInput } from '../ledger/queries.js';
import { gateway_reservation_ms, type PlanService, type Reservation } from '../plans/service.js';
import { projectKeys } from '../redis/keys.js';
import { ScriptStatus, type ScriptReply } from '../redis/scripts.js';
import { prepareUpstreamBody, requestedMaxTokens, StreamRelay, usageFromResponse, type Usage, type WireFormat } from './adapters.js';
import { newId } from '../ids.js';
import { afterApplied, provesNothingSent } from '../redis/sent.js';
import type { GatewayModel, ModelCache } from './models.js';
import { costOf, inputCostBound } from './pricing.js';
import type { UpstreamClient } from './upstream.js';

export type Endpoint = 'chat.completions' | 'messages';

/** A hold outlives its call only when the API process died mid-call; then it is released. */
export const hold_ttl_seconds = 3_600;
/** Request bytes per input token when the upstream sent no count (a rough English average). */
export const request_bytes_per_token_estimate = 4;
/** OpenAI's own limit on `n`. */
export const answers_max = 128;
/**
 * Tries of a settlement whose reply did not come (a timeout, a dropped connection) while
 * the call waits for it. The script is idempotent, so a retry of one that did apply
 * answers its stored result. Past them the settlement goes on in the background.
 */
export const settle_attempts_max = 3;
export const settle_retry_pause_ms = 100;
/**
 * A gateway script whose outcome must become known, sent again in the background until
 * Redis answers: a settlement that could not be confirmed while the call waited, or the
 * release of a hold whose outcome was unknown when its call failed. Pauses double from
 * background_retry_pause_ms up to background_retry_pause_max_ms, and a try also waits for
 * the Redis generation guard, so it goes out within a second of Redis being back: the
 * sooner it lands, the shorter the time in which the death of this process would leave
 * the call unbilled. For background_retry_total_ms in all: well under the hold's one-hour
 * TTL, so a settlement sent late still finds its hold in most cases (and when the TTL
 * released it first, the settlement charges the available credits, down to zero).
 */
export const background_retry_pause_ms = 100;
export const background_retry_pause_max_ms = 1_000;
export const background_retry_total_ms = 10 * 60_000;

export const billingHeaderNames = [
  'X-Service-Cost-Credits',
  'X-Service-Cost-Cents',
  'X-Service-Cost-Usd',
  'X-Service-Balance-Credits',
  'X-Service-Balance-Usd',
] as const;

interface SettleResult {
  cost: number;
  returned: number;
  reserved: number;
  balanceAfter: number;
}

interface Call {
  auth: AuthContext;
  scope: ProjectScope;
  endpoint: Endpoint;
  format: WireFormat;
  customerId: string;
  wallet: string;
  traceId: string | null;
  model: GatewayModel;
  stream: boolean;
  transactionId: string;
  /** Answers asked of the upstream (OpenAI `n`). */
  answers: number;
  startedAt: number;
  reservation: Reservation;
  hold: number;
  outputTokens: number;
  requestBytes: number;
  /** A settlement was sent: the call may be billed even if no reply came. */
  settleTried?: boolean;
}

function headerValue(req: Request, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export class GatewayService {
  constructor(
    private readonly deps: {
      ledger: LedgerService;
      plans: PlanService;
      models: ModelCache;
      upstream: UpstreamClient;
      redis: RedisClient;
      prefix: string;
      logger: Logger;
    },
  ) {}

  async handle(req: Request, res: Response, auth: AuthContext, endpoint: Endpoint, rawBytes: number): Promise<void> {
    // The Redis generation guard, before any command of the call (src/redis/generation.ts).
    await this.deps.ledger.ready();
    const body = req.body as Record<string, unknown>;
    const format: WireFormat = endpoint === 'messages' ? 'anthropic' : 'openai';
    const { scope } = auth;

    if (typeof body.model !== 'string' || body.model.length === 0) throw new ApiError('invalid_request', { param: 'model', message: 'model is required' });
    if (!Array.isArray(body.messages)) throw new ApiError('invalid_request', { param: 'messages', message: 'messages must be an array' });
    if (body.stream !== undefined && typeof body.stream !== 'boolean') throw new ApiError('invalid_request', { param: 'stream', message: 'stream must be a boolean' });
    const stream = body.stream === true;
    const explicitMax = requestedMaxTokens(format, body);
    if (explicitMax !== null && (!Number.isInteger(explicitMax) || explicitMax < 1)) {
      throw new ApiError('invalid_request', { param: 'max_tokens', message: 'the output token limit must be a positive integer' });
    }
    // OpenAI's `n`: that many answers, each up to the output limit, all billed.
    const answers = format === 'openai' && body.n !== undefined && body.n !== null ? body.n : 1;
    if (typeof answers !== 'number' || !Number.isInteger(answers) || answers < 1 || answers > answers_max) {
      throw new ApiError('invalid_request', { param: 'n', message: `n must be an integer from 1 to ${answers_max}` });
    }

    const customerId = auth.key.type === 'customer' ? auth.key.customer_id! : headerValue(req, 'x-service-customer');
    if (!customerId) throw new ApiError('customer_required');
    const walletHeader = headerValue(req, 'x-service-wallet');
    if (walletHeader !== undefined && !walletNameSchema.safeParse(walletHeader).success) {
      throw new ApiError('invalid_request', { param: 'X-Service-Wallet', message: 'X-Service-Wallet is not a valid wallet name' });
    }
    const wallet = walletHeader ?? (auth.variant === 'A' ? 'default' : 'credits');
    const traceId = headerValue(req, 'x-service-trace-id') ?? null;
    if (traceId !== null && (traceId.length === 0 || traceId.length > 256)) {
      throw new ApiError('invalid_request', { param: 'X-Service-Trace-Id', message: 'X-Service-Trace-Id must be 1-256 characters' });
    }

    const model = await this.deps.models.get(scope.projectId, body.model);
    if (!model || !model.active) throw new ApiError('model_not_found', { param: 'model' });
    if (auth.key.allowed_models && !auth.key.allowed_models.includes(model.id)) throw new ApiError('model_not_allowed', { param: 'model' });
    if (model.provider !== format) {
      throw new ApiError('invalid_request', { param: 'model', message: `model ${model.id} is served at ${model.provider === 'openai' ? '/v1/chat/completions' : '/v1/messages'}` });
    }
    if (!model.upstreamKey) throw new ApiError('byok_key_required');
    if (stream && !model.supportsStreaming) throw new ApiError('invalid_request', { param: 'stream', message: `model ${model.id} does not support streaming` });

    const transactionId = newId('gw');
    // Keys are the customer's own: one customer's key never blocks, nor reveals the call
    // of, another customer of the project (customer-scoped keys reach end users).
    const idempotencyKey = headerValue(req, 'idempotency-key');
    const idemIndex = `${projectKeys(this.deps.prefix, scope.projectId).txIndex}:gwidem`;
    const idemField = idempotencyKey === undefined ? undefined : JSON.stringify([customerId, idempotencyKey]);
    if (idemField !== undefined) {
      const first = await this.claimIdempotencyKey(idemIndex, idemField, transactionId);
      if (first !== transactionId) {
        throw new ApiError('idempotency_key_reused', { extra: { transaction_id: first } });
      }
    }

    let call: Call | undefined;
    let settled: boolean;
    try {
      call = await this.hold({ auth, scope, endpoint, format, customerId, wallet, traceId, model, stream, transactionId, explicitMax, answers, rawBytes });
      res.setHeader('X-Service-Transaction-Id', transactionId);
      if (traceId !== null) res.setHeader('X-Service-Trace-Id', traceId);
      res.setHeader('X-Service-Reserved-Credits', String(call.hold));
      res.setHeader('X-Service-Max-Tokens', String(call.outputTokens));
      const upstreamBody = prepareUpstreamBody(format, body, { upstreamModel: model.upstreamModel, maxTokens: call.outputTokens, stream });
      settled = stream
        ? await this.relayStream(req, res, call, upstreamBody.body, upstreamBody.clientWantsUsage)
        : await this.relayWhole(req, res, call, upstreamBody.body);
    } catch (err) {
      // The key is freed only when nothing can have been billed: no answer went out and
      // no settlement was tried (one whose reply was lost may have charged the call).
      if (idemField !== undefined && !(call && (res.headersSent || call.settleTried))) await this.freeIdempotencyKey(idemIndex, idemField);
      // Once the hold applied, a later step that never reached Redis (a settlement or a
      // release) does not make the call "nothing applied".
      throw call ? afterApplied(err) : err;
    }
    // An upstream HTTP error relayed as it is, or a stream the upstream broke off before
    // any answer, was answered without an error of ours but billed nothing: the same key
    // may retry it.
    if (!settled && idemField !== undefined) await this.freeIdempotencyKey(idemIndex, idemField);
  }

  /** Nothing was billed under this key: the same key may retry. */
  private async freeIdempotencyKey(index: string, key: string): Promise<void> {
    await this.deps.redis.hdel(index, key).catch(() => undefined);
  }

  private async claimIdempotencyKey(index: string, key: string, transactionId: string): Promise<string> {
    const [[, created], [, owner]] = (await this.deps.redis.multi().hsetnx(index, key, transactionId).hget(index, key).exec()) as [
      [Error | null, number],
      [Error | null, string],
    ];
    return created ? transactionId : owner;
  }

  private async hold(c: Omit<Call, 'startedAt' | 'reservation' | 'hold' | 'outputTokens' | 'requestBytes'> & { explicitMax: number | null; rawBytes: number }): Promise<Call> {
    const startedAt = Date.now();
    const reservation = await this.deps.plans.reserve(c.scope.organizationId, gateway_reservation_ms);
    const txIndex = projectKeys(this.deps.prefix, c.scope.projectId).txIndex;
    let ok = false;
    // True once the hold may exist: its script applied, or its reply was lost.
    let holdMayExist = false;
    try {
      const prices = c.model.prices;
      const wanted = c.explicitMax ?? c.model.maxOutputTokens;
      // Receipts find the customer of a gateway transaction through the project index. The
      // entry is written beside the hold, in the same round trip (auto-pipelined), instead
      // of after it: the transaction id is new, and an entry whose transaction does not
      // exist reads as no receipt, so a failed hold only has to take its entry back.
      const [held, indexed] = await Promise.allSettled([
        this.deps.ledger.run('gateway_hold', c.scope, c.customerId, [
          c.transactionId, c.wallet, inputCostBound(c.rawBytes, prices), prices.output, wanted,
          c.explicitMax !== null ? '1' : '0', hold_ttl_seconds, reservation.admitted ? '1' : '0', c.answers,
        ]),
        this.deps.redis.hset(txIndex, c.transactionId, c.customerId),
      ]);
      holdMayExist = held.status === 'rejected' ? !provesNothingSent(held.reason) : held.value[0] === ScriptStatus.Ok;
      if (held.status === 'rejected') throw held.reason;
      const [status, raw] = held.value;
      if (status === ScriptStatus.CustomerNotFound) throw new ApiError('customer_not_found');
      if (status === ScriptStatus.UsageLimit) throw this.deps.plans.refusal(reservation);
      if (status === ScriptStatus.Insufficient || status === ScriptStatus.InsufficientSelected) {
        throw new ApiError('insufficient_balance', { status: 402 });
      }
      if (status !== ScriptStatus.Ok) throw new Error(`gateway_hold answered ${status}`);
      if (indexed.status === 'rejected') throw indexed.reason;
      const hold = JSON.parse(raw) as { hold: string; output_tokens: string };
      ok = true;
      return { ...c, startedAt, reservation, hold: Number(hold.hold), outputTokens: Number(hold.output_tokens), requestBytes: c.rawBytes };
    } finally {
      if (!ok) {
        void this.deps.plans.finish(reservation, 'release');
        await this.deps.redis.hdel(txIndex, c.transactionId).catch(() => undefined);
        // The call fails, but a hold may be frozen: release it once Redis answers (the
        // release is idempotent), instead of leaving it to its one-hour TTL while a retry
        // of the client freezes more.
        if (holdMayExist) {
          const call: Call = { ...c, startedAt, reservation, hold: 0, outputTokens: 0, requestBytes: c.rawBytes };
          this.retryLater('gateway_release', call, [call.transactionId, this.failedRecord(call, null)]);
        }
      }
    }
  }

  /**
   * Sends a release or a settlement in the background until Redis answers, for at most
   * background_retry_total_ms: a hold whose outcome was unknown when its call failed, or
   * a settlement that could not be confirmed while the call waited (the customer may have
   * the answer already, and the provider bills the call). Both scripts are idempotent: a
   * release of a hold that does not exist, or was settled or released, changes nothing,
   * and a settled call answers its stored result, so one that did apply and is sent again
   * is charged once. The pauses do not keep a stopping process alive: what is still
   * unsent when the process ends is the residual risk that docs/ARCHITECTURE.md names.
   */
  private retryLater(script: 'gateway_release' | 'gateway_settle', call: Call, args: (string | number)[]): void {
    const { transactionId } = call;
    const giveUpAt = Date.now() + background_retry_total_ms;
    void (async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          const [status] = await this.deps.ledger.run(script, call.scope, call.customerId, args);
          if (script === 'gateway_settle' && status !== ScriptStatus.Ok && status !== ScriptStatus.Replay) {
            this.deps.logger.error({ transactionId, status }, 'gateway settlement refused in the background; the call is not billed');
          } else if (script === 'gateway_settle') {
            this.deps.logger.info({ transactionId, attempt }, 'gateway settlement confirmed in the background');
          }
          return;
        } catch (err) {
          const pause = Math.min(background_retry_pause_ms * 2 ** (attempt - 1), background_retry_pause_max_ms);
          if (Date.now() + pause > giveUpAt) {
            const what = script === 'gateway_settle' ? 'gateway call not settled; it is not billed' : 'gateway hold not released; its TTL releases it';
            this.deps.logger.error({ err, transactionId, args }, what);
            return;
          }
          await new Promise((resolve) => setTimeout(resolve, pause).unref());
          // While Redis is away or unverified, this resolves as soon as it is verified
          // again (or after the guard's wait): a try sent before would be refused.
          await this.deps.ledger.ready().catch(() => undefined);
        }
      }
    })();
  }

  /** The usage record of a call that is not billed, as JSON for the release script. */
  private failedRecord(call: Call, upstreamStatus: number | null): string {
    const zero: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
    return JSON.stringify(this.usageRecord(call, 'failed', zero, 0, false, upstreamStatus));
  }

  private usageRecord(call: Call, status: UsageRecordInput['status'], usage: Usage, cost: number, estimated: boolean, upstreamStatus: number | null): UsageRecordInput {
    const p = call.model.prices;
    return {
      id: newId('usage'),
      customer_id: call.customerId,
      trace_id: call.traceId,
      wallet: call.wallet,
      model: call.model.id,
      endpoint: call.endpoint,
      stream: call.stream,
      status,
      input_tokens: usage.input,
      output_tokens: usage.output,
      cache_read_tokens: usage.cacheRead,
      cache_write_tokens: usage.cacheWrite,
      usage_estimated: estimated,
      cost_credits: cost,
      latency_ms: Date.now() - call.startedAt,
      prices: {
        input_price_per_million_credits: p.input,
        output_price_per_million_credits: p.output,
        cache_read_price_per_million_credits: p.cacheRead,
        cache_write_price_per_million_credits: p.cacheWrite,
      },
      upstream_status: upstreamStatus,
    };
  }

  /**
   * Charges the call (lua/gateway_settle-6.lua): its cost from the hold, and what the hold
   * does not cover from the wallet's available credits as far as they go. A settlement
   * whose reply was lost is sent again: the script answers a settled call with its stored
   * result, so the call is charged once. When no try is answered, the call fails (outcome
   * unknown) and the settlement goes on in the background (retryLater): the upstream did
   * the work, and a streamed answer already reached the client. A settled call counts as
   * a billable operation whatever it cost: its plan reservation is committed once it
   * settled, or may have (or will, in the background).
   */
  private async settle(call: Call, usage: Usage, status: 'settled' | 'client_aborted', estimated: boolean, upstreamStatus: number | null): Promise<SettleResult> {
    const cost = costOf(usage, call.model.prices);
    const record = this.usageRecord(call, status, usage, cost, estimated, upstreamStatus);
    const args = [call.transactionId, cost, JSON.stringify(record), call.model.id];
    call.settleTried = true;
    let reply: ScriptReply | undefined;
    try {
      for (let attempt = 1; reply === undefined; attempt++) {
        try {
          reply = await this.deps.ledger.run('gateway_settle', call.scope, call.customerId, args);
        } catch (err) {
          if (attempt >= settle_attempts_max) {
            this.deps.logger.warn({ err, transactionId: call.transactionId }, 'gateway settlement unconfirmed; retrying it in the background');
            this.retryLater('gateway_settle', call, args);
            throw err;
          }
          this.deps.logger.warn({ err, transactionId: call.transactionId, attempt }, 'gateway settlement unanswered; sending it again');
          await new Promise((resolve) => setTimeout(resolve, settle_retry_pause_ms));
        }
      }
    } finally {
      const mayHaveSettled = reply === undefined || reply[0] === ScriptStatus.Ok || reply[0] === ScriptStatus.Replay;
      void this.deps.plans.finish(call.reservation, mayHaveSettled ? 'commit' : 'release');
    }
    if (reply[0] === ScriptStatus.AccountNotFound) throw new ApiError('billing_account_not_found');
    if (reply[0] !== ScriptStatus.Ok && reply[0] !== ScriptStatus.Replay) throw new Error(`gateway_settle answered ${reply[0]}`);
    const r = JSON.parse(reply[1]) as { cost: string; shortfall: string; returned: string; reserved: string; balance_after: string };
    if (Number(r.shortfall) > 0) {
      this.deps.logger.warn({ transactionId: call.transactionId, cost, shortfall: Number(r.shortfall) }, 'gateway call cost more than the wallet held; charged what it had');
    }
    return { cost: Number(r.cost), returned: Number(r.returned), reserved: Number(r.reserved), balanceAfter: Number(r.balance_after) };
  }

  /**
   * Gives the hold back: the call is not billed (upstream error, timeout, bad answer). A
   * release without an answer is sent again in the background.
   */
  private async release(call: Call, upstreamStatus: number | null): Promise<void> {
    const record = this.failedRecord(call, upstreamStatus);
    void this.deps.plans.finish(call.reservation, 'release');
    const args = [call.transactionId, record];
    try {
      await this.deps.ledger.run('gateway_release', call.scope, call.customerId, args);
    } catch (err) {
      this.retryLater('gateway_release', call, args);
      throw err;
    }
  }

  private billingHeaders(s: SettleResult): Record<string, string> {
    return {
      'X-Service-Cost-Credits': String(s.cost),
      'X-Service-Cost-Cents': creditsToCents(s.cost),
      'X-Service-Cost-Usd': creditsToUsd(s.cost),
      'X-Service-Balance-Credits': String(s.balanceAfter),
      'X-Service-Balance-Usd': creditsToUsd(s.balanceAfter),
    };
  }

  /**
   * Sends the call upstream. Null when the client left before the upstream answered: the
   * call is then settled as aborted (the request went out, and the provider bills the
   * input it read).
   */
  private async send(req: Request, call: Call, body: Record<string, unknown>, signal: AbortSignal) {
    try {
      return await this.deps.upstream.send(
        { format: call.format, baseUrl: call.model.upstreamBaseUrl, apiKey: call.model.upstreamKey! },
        body,
        { stream: call.stream, signal, anthropicVersion: call.format === 'anthropic' ? headerValue(req, 'anthropic-version') : undefined },
      );
    } catch (err) {
      if (signal.aborted) {
        await this.settleAborted(call, null, null);
        return null;
      }
      await this.release(call, null);
      throw upstreamError(err);
    }
  }

  /**
   * Settles a call whose client left before its answer was relayed: in full when the
   * upstream's usage came, else its input estimated from the request's size (CONTRACT.md
   * section 4 bills an aborted stream the same way).
   */
  private settleAborted(call: Call, usage: Usage | null, upstreamStatus: number | null): Promise<SettleResult> {
    const estimate: Usage = { input: Math.ceil(call.requestBytes / request_bytes_per_token_estimate), output: 0, cacheRead: 0, cacheWrite: 0 };
    return this.settle(call, usage ?? estimate, 'client_aborted', usage === null, upstreamStatus);
  }

  /** Relays a whole answer; true when the call was settled, false when its hold was released. */
  private async relayWhole(req: Request, res: Response, call: Call, body: Record<string, unknown>): Promise<boolean> {
    const abort = new AbortController();
    let clientGone = false;
    const onClose = () => {
      if (!res.writableFinished) {
        clientGone = true;
        abort.abort();
      }
    };
    res.once('close', onClose);
    let upstream: NonNullable<Awaited<ReturnType<GatewayService['send']>>>;
    let bytes: Buffer;
    try {
      const sent = await this.send(req, call, body, abort.signal);
      if (sent === null) return true;
      upstream = sent;
      try {
        bytes = await readAll(upstream.body);
      } catch (err) {
        // The client left while the answer was coming: the upstream did the work.
        if (clientGone && upstream.status < 400) {
          await this.settleAborted(call, null, upstream.status);
          return true;
        }
        await this.release(call, upstream.status);
        throw upstreamError(err);
      }
    } finally {
      res.off('close', onClose);
    }
    const contentType = String(upstream.headers['content-type'] ?? 'application/json');
    if (upstream.status >= 400) {
      await this.release(call, upstream.status);
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
      await this.release(call, upstream.status);
      throw new ApiError('upstream_error', { message: 'the upstream answered without a valid response body or usage' });
    }
    // A client that left as the whole answer arrived is billed it in full.
    const settled = await this.settle(call, usage, clientGone ? 'client_aborted' : 'settled', false, upstream.status);
    if (clientGone) return true;
    res.set(this.billingHeaders(settled));
    res.status(upstream.status).type(contentType).send(bytes);
    return true;
  }

  /** Relays a streamed answer; true when the call was settled, false when its hold was released. */
  private async relayStream(req: Request, res: Response, call: Call, body: Record<string, unknown>, clientWantsUsage: boolean): Promise<boolean> {
    const abort = new AbortController();
    let clientGone = false;
    const onClose = () => {
      if (!res.writableFinished) {
        clientGone = true;
        abort.abort();
      }
    };
    res.once('close', onClose);
    const upstream = await this.send(req, call, body, abort.signal);
    if (upstream === null) {
      res.off('close', onClose);
      return true;
    }
    if (upstream.status >= 400) {
      const bytes = await readAll(upstream.body).catch(() => Buffer.alloc(0));
      await this.release(call, upstream.status);
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
      await this.release(call, upstream.status);
      throw upstreamError(err);
    }
    if (!clientGone && (relay.invalid() || first.length === 0)) {
      res.off('close', onClose);
      await this.release(call, upstream.status);
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
      settled = await this.settle(call, usage, 'settled', false, upstream.status);
    } else if (relay.relayedOutputEstimate() > 0) {
      // The client has (part of) an answer but the upstream gave no usage for it (it broke
      // off, or it ignores stream_options): charged as estimated, not served for free.
      settled = await this.settleEstimate(call, relay, 'settled', upstream.status);
    } else {
      await this.release(call, upstream.status);
      res.end();
      return false;
    }
    res.addTrailers(this.billingHeaders(settled));
    res.end();
    return true;
  }

  /**
   * Settles what a stream that did not end with complete usage is estimated to have cost:
   * the upstream's counts where it sent them, else the request's size for the input, and
   * at least the output relayed to the client.
   */
  private settleEstimate(call: Call, relay: StreamRelay, status: 'settled' | 'client_aborted', upstreamStatus: number): Promise<SettleResult> {
    const usage = relay.usage();
    const estimate: Usage = {
      input: usage?.input ?? Math.ceil(call.requestBytes / request_bytes_per_token_estimate),
      cacheRead: usage?.cacheRead ?? 0,
      cacheWrite: usage?.cacheWrite ?? 0,
      output: Math.max(relay.relayedOutputEstimate(), usage?.output ?? 0),
    };
    return this.settle(call, estimate, status, true, upstreamStatus);
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
