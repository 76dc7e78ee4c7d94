/**
 * The money of a gateway call, through the ledger's scripts: the plan count and the hold
 * before the upstream call (lua/gateway_hold-10.lua), then the settlement of its exact or
 * estimated cost (lua/gateway_settle-10.lua) or the release of the hold when nothing is
 * billed (lua/gateway_release-10.lua), with what must become known sent again in the
 * background. Also the claim of the call's Idempotency-Key. The usage record and receipt
 * travel with the settlement's outbox entry to the workers.
 */
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { newId } from '../ids.js';
import { creditsToCents, creditsToUsd } from '../ledger/amounts.js';
import type { UsageRecordInput } from '../ledger/queries.js';
import type { LedgerService } from '../ledger/service.js';
import type { ProjectScope } from '../ledger/requests.js';
import { gateway_reservation_ms, type PlanService } from '../plans/service.js';
import { gatewayBindings } from '../ledger/bindings.js';
import { scriptError, ScriptStatus, type CustomerScriptArgs, type ScriptReply } from '../redis/scripts.js';
import { OutcomeUnknownError, provesNothingSent } from '../redis/sent.js';
import { ApiError } from '../errors/catalogue.js';
import { holdRefusal, tooFewOutputTokens } from '../ledger/refusals.js';
import { budgetRefusal } from '../ledger/budgets.js';
import { budget_remaining_header, budgetOfHold, keyBudgetOf } from './budget.js';
import type { Usage } from './adapters.js';
import { callOf, type Call, type HoldRequest } from './call.js';
import { costOf, inputCostBound, partTokensBound } from './pricing.js';
import type { InFlight } from '../lifecycle.js';
import type { Metrics } from '../metrics/metrics.js';
import { customerNotFound } from '../errors/not-found.js';

/** A hold outlives its call only when the API process died mid-call; then it is released. */
export const hold_ttl_seconds = 3_600;
/** Request bytes per input token when the upstream sent no count (a rough English average). */
const request_bytes_per_token_estimate = 4;
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
const background_retry_pause_ms = 100;
const background_retry_pause_max_ms = 1_000;
const background_retry_total_ms = 10 * 60_000;
/** The longest pause between two tries of freeing an Idempotency-Key in the background. */
const key_free_retry_pause_ms = 200;

/**
 * The answer of a call that failed before it was sent upstream: a Redis failure of unknown
 * outcome says nothing was applied, since the hold that may exist is released and the
 * call is never billed.
 */
function unbilled(err: unknown): unknown {
  return err instanceof OutcomeUnknownError ? new ApiError('service_unavailable', { message: hold_unknown_message }) : err;
}

const hold_unknown_message =
  'Redis stopped answering while the call\'s hold was placed, before the call was sent upstream; nothing was applied: the call is not billed, and a hold that may have been placed is released: retry shortly';

export const billingHeaderNames = [
  'X-Service-Cost-Credits',
  'X-Service-Cost-Cents',
  'X-Service-Cost-Usd',
  'X-Service-Balance-Credits',
  'X-Service-Balance-Usd',
] as const;

/** What `X-Service-Stream-Billing: inline` adds to a stream's final usage event (GatewayBilling.inlineBilling). */
export interface InlineBilling {
  [field: string]: unknown;
  transaction_id: string;
  cost_credits: number;
  cost_cents: string;
  cost_usd: string;
  balance_credits: number;
  balance_usd: string;
  usage_estimated: boolean;
  /** An incremental hold's calls only: the wallet (or a budget) ended the stream. */
  hold_exhausted?: boolean;
}

/** A script that retryLater sends until Redis answers. */
type Background =
  | { script: 'gateway_settle'; args: CustomerScriptArgs<'gateway_settle'> }
  | { script: 'gateway_release'; args: CustomerScriptArgs<'gateway_release'> };

export interface SettleResult {
  cost: number;
  returned: number;
  reserved: number;
  balanceAfter: number;
  /** What the call's tightest budget has left after it (docs/API.md, "Budgets"); null without one. */
  budgetRemaining: number | null;
}

export class GatewayBilling {
  constructor(
    private readonly deps: {
      ledger: LedgerService;
      plans: PlanService;
      redis: RedisClient;
      prefix: string;
      logger: Logger;
      /** Counts the background sends of retryLater, for a shutdown to wait for (src/shutdown.ts). */
      inFlight?: InFlight;
      metrics?: Metrics;
    },
  ) {}

  /**
   * The upstream's answer ended (or failed): its time in svc_gateway_upstream_duration_seconds,
   * once per call, when it was sent.
   */
  private upstreamEnded(call: Call): void {
    if (call.upstreamStartedAt === 0 || !this.deps.metrics) return;
    this.deps.metrics.model(call.model.id).upstream[call.stream ? 1 : 0].observe((performance.now() - call.upstreamStartedAt) / 1000);
    call.upstreamStartedAt = 0;
  }

  /** What a settled call billed, in the token, cost and shortfall counters of its model. */
  private billed(modelId: string, usage: Usage, cost: number, shortfall: number): void {
    if (!this.deps.metrics) return;
    const m = this.deps.metrics.model(modelId);
    if (usage.input > 0) m.inputTokens.inc(usage.input);
    if (usage.output > 0) m.outputTokens.inc(usage.output);
    if (usage.cacheRead > 0) m.cacheReadTokens.inc(usage.cacheRead);
    if (usage.cacheWrite > 0) m.cacheWriteTokens.inc(usage.cacheWrite);
    if (cost > 0) m.cost.inc(cost);
    if (shortfall > 0) {
      m.shortfall.inc(shortfall);
      this.deps.metrics.uncoveredCalls.inc();
      this.deps.metrics.uncoveredCredits.inc(shortfall);
    }
  }

  /**
   * Claims the call's Idempotency-Key for `transactionId` in the project's bucketed
   * bindings, under `[customer, key]` (customer-scoped keys reach end users: one
   * customer's key must not block or reveal another's call; src/ledger/bindings.ts).
   * Answers the transaction that holds the key: this one when the claim is new.
   */
  claimIdempotencyKey(scope: ProjectScope, customerId: string, key: string, transactionId: string): Promise<string> {
    return gatewayBindings(this.deps.ledger.bindings, scope.projectId).claimKey(customerId, key, transactionId);
  }

  /**
   * Frees the Idempotency-Key that `transactionId` claimed: nothing was billed under it, so
   * the same key may retry. Only while the claim names this call (lua/unclaim-1.lua).
   * Sent again in the background until Redis answers when it does not now: a claim left
   * behind would answer every retry of the key 409 `idempotency_key_reused`, naming a call
   * that billed nothing. The claim's bucket may be on a Redis (a cluster master) that is
   * down while the rest answers.
   */
  async freeIdempotencyKey(scope: ProjectScope, customerId: string, key: string, transactionId: string): Promise<void> {
    const free = () => gatewayBindings(this.deps.ledger.bindings, scope.projectId).freeKey(customerId, key, transactionId);
    await free().catch((err: unknown) => {
      this.deps.logger.warn({ err, transactionId }, 'Idempotency-Key not freed; freeing it in the background');
      // Not behind the generation guard (Bindings.dropIfOwner): sent again every
      // key_free_retry_pause_ms, so that it lands as soon as the bucket's master answers,
      // before the guard lets a retry of the call claim the key.
      this.untilAnswered(free, (e) => this.deps.logger.error({ err: e, transactionId }, 'Idempotency-Key of a call that billed nothing not freed; retries of it answer 409'), {
        maxPauseMs: key_free_retry_pause_ms,
        waitForGuard: false,
      });
    });
  }

  /**
   * Counts the plan operation and holds an upper bound of the call's cost
   * (lua/gateway_hold-10.lua), with the receipt index entry in the same round trip: one
   * script on a single Redis (lua/bound_gateway_hold-12.lua), the hold and the entry
   * auto-pipelined on a Redis Cluster. A hold that fails is undone: the reservation given
   * back, the index entry taken back, and a hold that may exist released in the
   * background.
   */
  async hold(c: HoldRequest): Promise<Call> {
    const startedAt = Date.now();
    const reservation = await this.deps.plans.take(c.scope.organizationId, gateway_reservation_ms);
    const { ledger } = this.deps;
    const bindings = gatewayBindings(ledger.bindings, c.scope.projectId);
    let ok = false;
    // True once the hold may exist: its script applied, or its reply was lost.
    let holdMayExist = false;
    // True once the index entry may exist: on a single Redis, as the hold (its script writes
    // the entry only when the hold applies); on a cluster, once it was sent.
    let indexMayExist = false;
    try {
      const prices = c.model.prices;
      // An incremental hold holds one slice of the limit, lowered as a default limit is to what
      // the wallet affords (at least one token): the relay forwards what is held.
      const wanted = c.incremental?.slice ?? c.explicitMax ?? c.model.maxOutputTokens;
      const partTokens = partTokensBound(c.parts, c.model.partBounds, c.model.contextWindow);
      const args: CustomerScriptArgs<'gateway_hold'> = {
        transactionId: c.transactionId, wallet: c.wallet, inputCostBound: inputCostBound(c.rawBytes, prices, partTokens), outputPrice: prices.output,
        outputTokens: wanted, explicitMax: c.explicitMax !== null && c.incremental === null ? '1' : '0', holdTtlSeconds: hold_ttl_seconds,
        admitted: reservation.admitted ? '1' : '0', answers: c.answers, idempotencyKey: c.idempotencyKey, keyBudget: keyBudgetOf(c.auth.key),
      };
      // Receipts find the customer of a gateway transaction through the project index. The
      // entry is written with the hold, instead of after it: the transaction id is new, and
      // an entry whose transaction does not exist reads as no receipt, so a failed hold
      // only has to take its entry back. On a cluster its bucket is in another slot: it
      // goes beside the hold, in the same round trip (auto-pipelined).
      const [held, indexed] = ledger.oneScript
        ? [(await Promise.allSettled([ledger.runBound('gateway_hold', c.scope, c.customerId, c.transactionId, args)]))[0], null]
        : await Promise.allSettled([ledger.run('gateway_hold', c.scope, c.customerId, args), bindings.indexCall(c.transactionId, c.customerId)]);
      holdMayExist = held.status === 'rejected' ? !provesNothingSent(held.reason) : held.value[0] === ScriptStatus.Ok;
      indexMayExist = indexed === null ? holdMayExist : true;
      // A hold whose outcome stayed unknown (the ledger tried to learn it: OutcomeLearner.learn)
      // is released below and the call is never sent upstream: nothing is billed, so the
      // answer says nothing was applied.
      if (held.status === 'rejected') throw unbilled(held.reason);
      const [status, raw] = held.value;
      if (status === ScriptStatus.CustomerNotFound) throw customerNotFound(c.customerId);
      if (status === ScriptStatus.UsageLimit) throw this.deps.plans.refusal(reservation);
      // The gateway answers any shortfall as insufficient_balance, with 402 (the hold names
      // one wallet), saying the hold, the wallet's credits and what to change.
      if (status === ScriptStatus.BudgetExceeded) throw budgetRefusal(raw, 402);
      if (status === ScriptStatus.Insufficient || status === ScriptStatus.InsufficientSelected) {
        throw holdRefusal(raw, { wallet: c.wallet, explicitMax: c.incremental === null ? c.explicitMax : null, limitField: c.limitField, answers: c.answers });
      }
      if (status !== ScriptStatus.Ok) throw new Error(`gateway_hold answered ${status}`);
      if (indexed?.status === 'rejected') throw unbilled(indexed.reason);
      const hold = JSON.parse(raw) as { hold: string; output_tokens: string; budget_remaining: string; lowered_by_budget: string };
      // A limit lowered to fit the wallet or a budget, below what the upstream accepts,
      // would be refused upstream naming its own field: refused here, the hold released below.
      if (c.minOutputTokens !== undefined && c.incremental === null && Number(hold.output_tokens) < c.minOutputTokens) throw tooFewOutputTokens({ wallet: c.wallet, modelId: c.model.id, min: c.minOutputTokens }, hold);
      ok = true;
      return callOf(c, startedAt, reservation, Number(hold.hold), Number(hold.output_tokens), budgetOfHold(hold));
    } finally {
      if (!ok) {
        void this.deps.plans.finish(reservation, 'release');
        if (indexMayExist) await bindings.unindexCall(c.transactionId).catch(() => undefined);
        // The call fails, but a hold may be frozen: release it once Redis answers (the
        // release is idempotent), instead of leaving it to its one-hour TTL while a retry
        // of the client freezes more.
        if (holdMayExist) {
          const call = callOf(c, startedAt, reservation, 0, 0);
          this.retryLater({ script: 'gateway_release', args: { transactionId: call.transactionId, usageRecord: this.failedRecord(call, null) } }, call);
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
   * is charged once. The pauses do not keep a stopping process alive: a graceful shutdown
   * waits for these sends a while (they are counted in `inFlight`, src/shutdown.ts), and
   * what is still unsent when the process ends is the residual risk that
   * docs/ARCHITECTURE.md names.
   */
  private retryLater(send: Background, call: Call): void {
    const { script, args } = send;
    const { transactionId } = call;
    this.untilAnswered(
      async (attempt) => {
        const [status, raw] = await (send.script === 'gateway_settle'
          ? this.deps.ledger.run('gateway_settle', call.scope, call.customerId, send.args)
          : this.deps.ledger.run('gateway_release', call.scope, call.customerId, send.args));
        if (script === 'gateway_settle' && status !== ScriptStatus.Ok && status !== ScriptStatus.Replay) {
          this.deps.logger.error({ transactionId, status }, 'gateway settlement refused in the background; the call is not billed');
        } else if (script === 'gateway_settle') {
          this.deps.logger.info({ transactionId, attempt }, 'gateway settlement confirmed in the background');
          this.billedInBackground(call, send.args, raw);
        } else if ((status === ScriptStatus.Ok || status === ScriptStatus.Replay) && call.idempotencyKey !== '') {
          // Released by the API: the call billed nothing, and its key is free (what the
          // trim and a recovery read from a record released by the API). Freed again here:
          // a cluster master that came back empty while the hold was still frozen got the
          // claim back from its recovery (src/reconcile/shared-keys.ts).
          await this.freeIdempotencyKey(call.scope, call.customerId, call.idempotencyKey, transactionId);
        }
      },
      (err) => {
        const what = script === 'gateway_settle' ? 'gateway call not settled; it is not billed' : 'gateway hold not released; its TTL releases it';
        this.deps.logger.error({ err, transactionId, args }, what);
      },
    );
  }

  /**
   * Runs `send` in the background until it resolves, for at most background_retry_total_ms
   * (then `gaveUp`), with pauses doubling from background_retry_pause_ms up to
   * `opts.maxPauseMs`, each followed by a wait for the generation guard unless
   * `opts.waitForGuard` is false. The pauses do not keep a stopping process alive.
   */
  private untilAnswered(
    send: (attempt: number) => Promise<unknown>,
    gaveUp: (err: unknown) => void,
    opts: { maxPauseMs: number; waitForGuard: boolean } = { maxPauseMs: background_retry_pause_max_ms, waitForGuard: true },
  ): void {
    const giveUpAt = Date.now() + background_retry_total_ms;
    const inFlight = this.deps.inFlight;
    inFlight?.begin();
    void (async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          await send(attempt);
          return;
        } catch (err) {
          const pause = Math.min(background_retry_pause_ms * 2 ** (attempt - 1), opts.maxPauseMs);
          if (Date.now() + pause > giveUpAt) {
            gaveUp(err);
            return;
          }
          await new Promise((resolve) => setTimeout(resolve, pause).unref());
          // While Redis is away or unverified, this resolves as soon as it is verified
          // again (or after the guard's wait): a try sent before would be refused.
          if (opts.waitForGuard) await this.deps.ledger.ready().catch(() => undefined);
        }
      }
    })()
      .finally(() => inFlight?.end())
      .catch((err: unknown) => this.deps.logger.error({ err }, 'background Redis retry failed'));
  }

  /** The counters of a settlement confirmed in the background, from its usage record and the script's result. */
  private billedInBackground(call: Call, args: CustomerScriptArgs<'gateway_settle'>, raw: string): void {
    try {
      const r = JSON.parse(String(args.usageRecord)) as UsageRecordInput;
      const usage: Usage = { input: r.input_tokens, output: r.output_tokens, cacheRead: r.cache_read_tokens, cacheWrite: r.cache_write_tokens };
      const result = JSON.parse(raw) as { cost: string; shortfall: string };
      this.billed(call.model.id, usage, Number(result.cost), Number(result.shortfall));
    } catch {
      // The record is ours; a counter is not worth an error here.
    }
  }

  /** The usage record of a call that is not billed, as JSON for the release script. */
  private failedRecord(call: Call, upstreamStatus: number | null): string {
    const zero: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
    return JSON.stringify(this.usageRecord(call, 'failed', zero, 0, false, upstreamStatus));
  }

  private usageRecord(call: Call, status: UsageRecordInput['status'], usage: Usage, cost: number, estimated: boolean, upstreamStatus: number | null, holdExhausted = false): UsageRecordInput {
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
      upstream: call.upstream,
      attempts: call.attempts,
      hold_exhausted: holdExhausted,
    };
  }

  /**
   * Charges the call (lua/gateway_settle-10.lua): its cost from the hold, and what the hold
   * does not cover from the wallet's available credits as far as they go. A settlement
   * whose reply was lost is sent again: the script answers a settled call with its stored
   * result, so the call is charged once. When no try is answered, the call fails (outcome
   * unknown) and the settlement goes on in the background (retryLater): the upstream did
   * the work, and a streamed answer already reached the client. A settled call counts as
   * a billable operation whatever it cost: its plan reservation is committed once it
   * settled, or may have (or will, in the background).
   */
  async settle(call: Call, usage: Usage, status: 'settled' | 'client_aborted', estimated: boolean, upstreamStatus: number | null, holdExhausted = false): Promise<SettleResult> {
    this.upstreamEnded(call);
    const cost = costOf(usage, call.model.prices);
    const record = this.usageRecord(call, status, usage, cost, estimated, upstreamStatus, holdExhausted);
    const args: CustomerScriptArgs<'gateway_settle'> = { transactionId: call.transactionId, cost, usageRecord: JSON.stringify(record), modelId: call.model.id };
    call.settleTried = true;
    let reply: ScriptReply | undefined;
    try {
      // A lost reply is learned inside run (OutcomeLearner.learn): sent again until Redis
      // answers, for OUTCOME_WAIT_MS. Past that the settlement goes on in the background,
      // and the call answers outcome_unknown: it will be billed once.
      reply = await this.deps.ledger.run('gateway_settle', call.scope, call.customerId, args).catch((err: unknown) => {
        this.deps.logger.warn({ err, transactionId: call.transactionId }, 'gateway settlement unconfirmed; retrying it in the background');
        this.retryLater({ script: 'gateway_settle', args }, call);
        throw err;
      });
    } finally {
      const mayHaveSettled = reply === undefined || reply[0] === ScriptStatus.Ok || reply[0] === ScriptStatus.Replay;
      void this.deps.plans.finish(call.reservation, mayHaveSettled ? 'commit' : 'release');
    }
    if (reply[0] === ScriptStatus.AccountNotFound) throw scriptError('gateway_settle', reply[0]);
    if (reply[0] !== ScriptStatus.Ok && reply[0] !== ScriptStatus.Replay) throw new Error(`gateway_settle answered ${reply[0]}`);
    const r = JSON.parse(reply[1]) as { cost: string; shortfall: string; returned: string; reserved: string; balance_after: string };
    this.billed(call.model.id, usage, Number(r.cost), Number(r.shortfall));
    if (Number(r.shortfall) > 0) {
      this.deps.logger.warn({ transactionId: call.transactionId, cost, shortfall: Number(r.shortfall) }, 'gateway call cost more than the wallet held; charged what it had');
    }
    const budgetRemaining = typeof reply[4] === 'string' && reply[4] !== '' ? Number(reply[4]) : null;
    return { cost: Number(r.cost), returned: Number(r.returned), reserved: Number(r.reserved), balanceAfter: Number(r.balance_after), budgetRemaining };
  }

  /**
   * Gives the hold back: the call is not billed (upstream error, timeout, bad answer). A
   * release without an answer is sent again in the background.
   */
  async release(call: Call, upstreamStatus: number | null): Promise<void> {
    this.upstreamEnded(call);
    const record = this.failedRecord(call, upstreamStatus);
    void this.deps.plans.finish(call.reservation, 'release');
    const args: CustomerScriptArgs<'gateway_release'> = { transactionId: call.transactionId, usageRecord: record };
    try {
      await this.deps.ledger.run('gateway_release', call.scope, call.customerId, args);
    } catch (err) {
      this.retryLater({ script: 'gateway_release', args }, call);
      throw err;
    }
    // The call billed nothing: its key is freed before the relay answers (an upstream
    // error is relayed right after this), so that a retry sent on that answer finds it
    // free. Freed after the answer, a quick retry was answered 409 naming this call.
    if (call.idempotencyKey !== '') await this.freeIdempotencyKey(call.scope, call.customerId, call.idempotencyKey, call.transactionId);
  }

  /** The billing headers (or trailers) of a settled call, in billingHeaderNames order. */
  billingHeaders(s: SettleResult): [string, string][] {
    const headers: [string, string][] = [
      ['X-Service-Cost-Credits', String(s.cost)],
      ['X-Service-Cost-Cents', creditsToCents(s.cost)],
      ['X-Service-Cost-Usd', creditsToUsd(s.cost)],
      ['X-Service-Balance-Credits', String(s.balanceAfter)],
      ['X-Service-Balance-Usd', creditsToUsd(s.balanceAfter)],
    ];
    if (s.budgetRemaining !== null) headers.push([budget_remaining_header, String(s.budgetRemaining)]);
    return headers;
  }

  /**
   * The billing figures of a settled stream in its final usage event
   * (`X-Service-Stream-Billing: inline`): the trailers' figures (credits as numbers, cents
   * and USD as exact decimal strings), with the transaction id and whether the usage was
   * estimated; for an incremental hold, whether the wallet ended the stream (the trailer
   * X-Service-Hold-Exhausted, which SDKs do not show).
   */
  inlineBilling(call: Call, s: SettleResult, estimated: boolean, holdExhausted = false): InlineBilling {
    const figures: InlineBilling = {
      transaction_id: call.transactionId,
      cost_credits: s.cost,
      cost_cents: creditsToCents(s.cost),
      cost_usd: creditsToUsd(s.cost),
      balance_credits: s.balanceAfter,
      balance_usd: creditsToUsd(s.balanceAfter),
      usage_estimated: estimated,
    };
    if (call.incremental !== null) figures.hold_exhausted = holdExhausted;
    return figures;
  }

  /**
   * Settles a call whose client left before its answer was relayed: in full when the
   * upstream's usage came, else its input estimated from the request's size (docs/API.md,
   * "Gateway": a client that disconnects before the answer).
   */
  settleAborted(call: Call, usage: Usage | null, upstreamStatus: number | null): Promise<SettleResult> {
    const estimate: Usage = { input: Math.ceil(call.requestBytes / request_bytes_per_token_estimate), output: 0, cacheRead: 0, cacheWrite: 0 };
    return this.settle(call, usage ?? estimate, 'client_aborted', usage === null, upstreamStatus);
  }

  /**
   * Settles what a stream that did not end with complete usage is estimated to have cost:
   * the upstream's counts where it sent them (`usage`), else the request's size for the
   * input, and at least the output relayed to the client (`relayedOutput`).
   */
  settleEstimate(call: Call, usage: Usage | null, relayedOutput: number, status: 'settled' | 'client_aborted', upstreamStatus: number): Promise<SettleResult> {
    return this.settle(call, estimatedUsage(call, usage, relayedOutput), status, true, upstreamStatus);
  }
}

/** What settleEstimate bills: the upstream's counts where it sent them, the request's size for the input, at least `relayedOutput`. */
export function estimatedUsage(call: Call, usage: Usage | null, relayedOutput: number): Usage {
  return {
    input: usage?.input ?? Math.ceil(call.requestBytes / request_bytes_per_token_estimate),
    cacheRead: usage?.cacheRead ?? 0,
    cacheWrite: usage?.cacheWrite ?? 0,
    output: Math.max(relayedOutput, usage?.output ?? 0),
  };
}

