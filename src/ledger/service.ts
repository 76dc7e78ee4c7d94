/**
 * Ledger operations: each is one Lua script on the customer's keys (lua/), with a
 * project-scope binding of its identifier: in the same script on a single Redis, a command
 * before it on a Redis Cluster (fromBinding). Nothing here decides what a concurrent
 * request could invalidate; the scripts decide.
 */
import { createHash } from 'node:crypto';
import { isCluster, type RedisClient } from '../redis/client.js';
import { ApiError, type ErrorCode } from '../errors/catalogue.js';
import { activeKeyOf, bindingKeys, customerKeys, dirty_shards, dirtyKey, scriptKeys, shardOf, type CustomerKeys } from '../redis/keys.js';
import {
  scriptApi, scriptError, ScriptStatus, type BoundOperation, type CustomerCall, type CustomerScriptArgs, type CustomerScriptName, type ScriptApi,
  type Scripts, type ScriptReply,
} from '../redis/scripts.js';
import type { Clock } from './clock.js';
import { newId } from '../ids.js';
import { publicResult } from './entries.js';
import { deposit_limit_message } from './amounts.js';
import { CommandNotSentError, OutcomeUnknownError, provesNothingSent } from '../redis/sent.js';
import { decodeSource, type SourceState } from '../redis/codec.js';
import { Bindings, type Archive, type Binding } from './bindings.js';
import { drawRefusal, settleRefusal } from './refusals.js';
import type { LedgerOperation, Metrics, OutcomePath } from '../metrics/metrics.js';

export interface ProjectScope {
  projectId: string;
  organizationId: string;
}

export interface DepositInput {
  customerId: string;
  amount: number;
  wallet: string;
  label: string;
  startsAtMs: number | null;
  expiresAtMs: number | null;
  idempotencyKey: string | null;
  name?: string;
  email?: string;
  metadata?: unknown;
  description: string | null;
}

export interface DrawInput {
  customerId: string;
  transactionId: string;
  amount: number;
  /** Wallets to draw from; null for all. */
  wallets: string[] | null;
  /** The request field that chose the wallets (Variant B `wallet`, A `credit_types`): a refusal's message names it. */
  walletField?: 'wallet' | 'credit_types';
  businessType: string | null;
  description: string | null;
}

/** Consume and unfreeze: the transaction, and its customer when the caller names it. */
export interface SettleInput {
  transactionId: string;
  customerId: string | null;
  description: string | null;
}

export interface FreezeInput extends DrawInput {
  ttl: { kind: 'release' | 'consume'; seconds: number } | null;
}

export interface OpResult {
  body: Record<string, unknown>;
  replay: boolean;
  customerId: string;
  /** TTL freezes of this customer that the script consumed on the way (billable ops). */
  autoConsumed: number;
}

/** Plan accounting of billable operations (src/plans/service.ts). */
interface BillableOps {
  /**
   * Reserves one operation ahead; `admitted` false when the plan's hard limit refuses it,
   * and then `refusal` is the error to answer. Normally served from the process's lease
   * of the organization's operations: it resolves without any Redis command. `commit` (the operation applied, or may
   * have) and `release` (it did not) never reject: a reservation that neither reaches
   * counts once its deadline passes.
   */
  reserve(scope: ProjectScope): Promise<{ admitted: boolean; refusal: ApiError | null; commit(): Promise<void>; release(): Promise<void> }>;
  /**
   * Counts TTL auto-consumes that a script applied on the way. Never throws: the script
   * applied, so its answer must not become an error; the count is retried, then logged.
   */
  record(scope: ProjectScope, n: number): void;
}

export interface LedgerHooks {
  /** A freeze with a TTL was applied: make sure it settles on time. */
  scheduleExpiry?(scope: ProjectScope, customerId: string, transactionId: string, atMs: number): Promise<void>;
  /** The expiry job of an applied freeze could not be queued (the sweeper covers it). */
  onScheduleError?(err: unknown, transactionId: string): void;
  billable?: BillableOps;
  /**
   * What PostgreSQL knows of archived ids (pgArchive in src/ledger/bindings.ts); without
   * it an archived id is taken as new.
   */
  archived?: Archive;
  /**
   * Resolves when money operations may touch Redis, else throws 503 service_unavailable
   * (the Redis generation guard, src/redis/generation.ts).
   */
  ready?(): Promise<void>;
  /** Counts every operation by its outcome (svc_ledger_operations_total). */
  metrics?: Metrics;
  /**
   * How long a money script whose reply was lost waits for Redis to answer again, to learn
   * its outcome (OUTCOME_WAIT_MS); default outcome_wait_ms_default.
   */
  outcomeWaitMs?: number;
}

/** How long a money script whose reply was lost waits for Redis by default (LedgerHooks.outcomeWaitMs). */
const outcome_wait_ms_default = 2_000;
/** The pause before each try of learning a lost reply's outcome. */
const outcome_retry_pause_ms = 50;

/**
 * Scripts whose outcome is learned by sending them again with the same arguments when
 * their reply is lost (LedgerService.learn): each answers REPLAY with its stored result
 * when its identifier already applied, so a second send never applies twice. A deposit
 * only with an idempotency key (without one it is not idempotent). The others are reads
 * and worker jobs, whose callers try again themselves.
 */
const learnableScripts: ReadonlySet<CustomerScriptName> = new Set([
  'deposit', 'deduct', 'freeze', 'consume', 'unfreeze', 'gateway_hold', 'gateway_settle', 'gateway_release',
]);

/**
 * Scripts whose success writes no outbox entry of its own (TTL settlements they make on
 * the way are counted in reply[3]): nothing for the workers to persist.
 */
const entrylessScripts: ReadonlySet<CustomerScriptName> = new Set(['gateway_hold', 'view', 'expire', 'trim_sources']);

/**
 * Scripts whose refusals list the operation's binding as final (lua/includes/customer.lua
 * finalize): the customer is marked dirty all the same, so that the persist loop hands
 * it to the trim (src/ledger/retention.ts).
 */
const bindingScripts: ReadonlySet<CustomerScriptName> = new Set(['deduct', 'freeze', 'deposit']);

/**
 * Tries of an operation whose customer script refused a binding read longer ago than the
 * grace (ScriptStatus.StaleBinding: nothing applied). Each try reads the binding again,
 * so a second refusal takes a pause of seconds between two commands.
 */
const stale_binding_attempts_max = 3;

export function requestHash(parts: unknown[]): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 32);
}


/**
 * How long an active mark lasts (LedgerService.markActive): the sweeper looks at a
 * customer's outbox and TTLs once its mark is over, so an outbox an API process left
 * unmarked when it died is found within about this long.
 */
export const active_mark_window_ms = 10_000;
/** A process marks a customer again once less than this is left of its mark. */
const active_mark_refresh_ms = 5_000;
/** Customers whose mark a process remembers; beyond it forgets them all (and marks again). */
const active_marks_remembered_max = 100_000;

export class LedgerService {
  /** Outboxes written since the last SADD to the dirty shards (markDirty), per shard. */
  private readonly dirty = new Map<number, Set<string>>();
  private dirtyFlushQueued = false;
  /** Customer base -> until when its active mark holds (ms, service clock), or the ZADD in flight. */
  private readonly activeUntil = new Map<string, number | Promise<void>>();
  readonly bindings: Bindings;
  private readonly api: ScriptApi;
  /**
   * A single Redis: an operation whose customer is known binds its id in its own script
   * (fromBinding), and the gateway hold writes its receipt index entry in its own
   * (src/gateway/billing.ts). A Redis Cluster has the binding bucket and the customer in
   * other slots.
   */
  readonly oneScript: boolean;

  constructor(
    private readonly redis: RedisClient,
    scripts: Scripts,
    private readonly prefix: string,
    private readonly clock: Clock,
    private readonly hooks: LedgerHooks = {},
  ) {
    this.api = scriptApi(scripts);
    this.bindings = new Bindings(redis, scripts, prefix, hooks.archived ?? null);
    this.oneScript = !isCluster(redis);
  }

  /**
   * Adds a customer's outbox to its dirty shard (`dirty:{n}`, by a hash of the customer),
   * together with every other outbox written in the same turn of the event loop: one SADD
   * per shard for many operations under load. Not awaited by the operation: the sweeper
   * finds an outbox whose SADD was lost with this process through the active mark.
   */
  private markDirty(base: string): void {
    const shard = shardOf(base, dirty_shards);
    let members = this.dirty.get(shard);
    if (!members) this.dirty.set(shard, (members = new Set()));
    members.add(base);
    if (this.dirtyFlushQueued) return;
    this.dirtyFlushQueued = true;
    setImmediate(() => {
      this.dirtyFlushQueued = false;
      this.flushDirty();
    });
  }

  /**
   * Sends the dirty marks gathered since the last flush (one SADD per shard), without
   * waiting for the end of the turn; a process that stops calls it before closing Redis.
   */
  flushDirty(): void {
    for (const [n, bases] of this.dirty) this.redis.sadd(dirtyKey(this.prefix, n), ...bases).catch(() => undefined);
    this.dirty.clear();
  }

  /**
   * Makes sure the customer is in its shard of the active index before a script of this
   * process may write its outbox: a mark that is applied before the script, unlike the
   * dirty mark after it, survives this process dying in between, and the sweeper walks
   * the index instead of the keyspace (workers/sweep.ts). A script cannot add it itself:
   * the index is in another slot. Costs a command on the first operation on a customer
   * per process and per active_mark_refresh_ms, none on the others; null when nothing is
   * to wait for.
   */
  private markActive(base: string): Promise<void> | null {
    const now = Date.now() + this.clock.offsetMs();
    const held = this.activeUntil.get(base);
    if (typeof held === 'number' && held - now > active_mark_refresh_ms) return null;
    if (held instanceof Promise) return held;
    if (this.activeUntil.size >= active_marks_remembered_max) this.activeUntil.clear();
    const until = now + active_mark_window_ms;
    const pending = this.redis.zadd(activeKeyOf(this.prefix, base), 'GT', until, base).then(
      () => void this.activeUntil.set(base, until),
      (err: unknown) => {
        this.activeUntil.delete(base);
        throw err;
      },
    );
    this.activeUntil.set(base, pending);
    return pending;
  }

  /**
   * Waits for the Redis generation guard: the entry point of every money operation calls
   * it before its first command, so that not even an index binding reaches a Redis that
   * may have forgotten acknowledged writes.
   */
  async ready(): Promise<void> {
    await this.hooks.ready?.();
  }

  keys(scope: ProjectScope, customerId: string): CustomerKeys {
    return customerKeys(this.prefix, scope.projectId, customerId);
  }

  /**
   * Runs a customer script; marks the outbox dirty when the script may have written. Every
   * script waits for the Redis generation guard first, reads (view) and worker jobs
   * (expire) included: a process that just started or reconnected is verified within a
   * round trip or two, and a script sent before would be refused with a 503.
   */
  async run<N extends CustomerScriptName>(
    name: N,
    scope: ProjectScope,
    customerId: string,
    args: CustomerScriptArgs<N>,
    bindingReadAtMs: number | null = null,
  ): Promise<ScriptReply> {
    return this.send(name, scope, customerId, (call) => this.api.customer(name, { ...call, bindingReadAtMs }, args), learnable(name, args));
  }

  /**
   * Runs the bound script of `op` (a single Redis): the binding of `id` in its project
   * bucket and the operation, in one script (lua/includes/bound.lua).
   */
  runBound<N extends BoundOperation>(op: N, scope: ProjectScope, customerId: string, id: string, args: CustomerScriptArgs<N>): Promise<ScriptReply> {
    const bucket = bindingKeys(this.prefix, scope.projectId, op === 'deposit' ? 'd' : 't', id);
    return this.send(op, scope, customerId, (call) => this.api.bound(op, { ...call, bucket }, args), learnable(op, args));
  }

  /**
   * What run and runBound share: the guard and the active mark before, the dirty mark and
   * the TTL count after. A `learnable` script whose reply is lost has its outcome learned
   * (learn) before the caller hears of it.
   */
  private async send(
    name: CustomerScriptName,
    scope: ProjectScope,
    customerId: string,
    script: (call: Omit<CustomerCall, 'bindingReadAtMs'>) => Promise<ScriptReply>,
    learnable: boolean,
  ): Promise<ScriptReply> {
    const k = this.keys(scope, customerId);
    const marked = this.markActive(k.base);
    try {
      await (marked ? Promise.all([this.ready(), marked]) : this.ready());
    } catch (err) {
      // The script was not sent: a lost reply of the active mark leaves nothing applied.
      throw provesNothingSent(err) || !(err instanceof Error) ? err : new CommandNotSentError(err);
    }
    const call = () => script({ keys: scriptKeys(k), clockOffsetMs: this.clock.offsetMs(), projectId: scope.projectId, customerId, entryIdBase: newId('le') });
    let reply: ScriptReply;
    try {
      reply = await call();
    } catch (err) {
      if (!learnable || !replyLost(err)) throw err;
      reply = await this.learn(call, err);
    }
    if (reply[3] > 0 || (reply[0] === ScriptStatus.Ok && !entrylessScripts.has(name)) || bindingScripts.has(name)) this.markDirty(k.base);
    if (reply[2] > 0 && this.hooks.billable) this.hooks.billable.record(scope, reply[2]);
    return reply;
  }

  /**
   * Learns the outcome of a script whose reply was lost (`lost`), within the request's
   * time: sends it again, with the same arguments, once Redis answers and the generation
   * guard passes, until one try answers or outcomeWaitMs is over. The script is
   * idempotent (learnableScripts): when the lost send applied, the new one answers REPLAY
   * with its stored result, which is answered as OK, as the lost reply would have been
   * (the client asked once); when it did not, the new one applies it now, or refuses it.
   * No answer in time: OutcomeUnknownError (503 outcome_unknown). Counted in
   * svc_outcome_learning_total.
   */
  private async learn(call: () => Promise<ScriptReply>, lost: unknown): Promise<ScriptReply> {
    let reply: ScriptReply;
    try {
      reply = await this.resend(call, lost);
    } catch (err) {
      this.learned('unknown');
      throw err;
    }
    if (reply[0] === ScriptStatus.Replay) {
      this.learned('learned_applied');
      return [ScriptStatus.Ok, ...reply.slice(1)] as ScriptReply;
    }
    this.learned(reply[0] === ScriptStatus.Ok ? 'learned_not_applied_then_applied' : 'learned_not_applied_then_refused');
    return reply;
  }

  /**
   * Sends an idempotent `call` whose reply was lost (`lost`) again, once Redis answers and
   * the generation guard passes, until one try answers or outcomeWaitMs is over; then
   * OutcomeUnknownError. A try still in flight then is left to finish: it applies at most
   * once, like the lost one.
   */
  private async resend<T>(call: () => Promise<T>, lost: unknown): Promise<T> {
    const deadline = Date.now() + (this.hooks.outcomeWaitMs ?? outcome_wait_ms_default);
    let last = lost;
    for (let left = deadline - Date.now(); left > 0; left = deadline - Date.now()) {
      await sleep(Math.min(outcome_retry_pause_ms, left));
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<typeof timed_out>((resolve) => {
        timer = setTimeout(() => resolve(timed_out), Math.max(0, deadline - Date.now()));
      });
      try {
        const tried = this.ready().then(call);
        // A try that loses the race still ends; its failure is nobody's to hear.
        tried.catch(() => undefined);
        const answer = await Promise.race([tried, late]);
        if (answer === timed_out) break;
        return answer;
      } catch (err) {
        last = err;
      } finally {
        clearTimeout(timer);
      }
    }
    throw last instanceof OutcomeUnknownError ? last : new OutcomeUnknownError(last instanceof Error ? last : new Error(String(last)));
  }

  /**
   * Binds or reads an id (Bindings.bind, idempotent for one owner); a lost reply is sent
   * again (resend), so that the operation goes on, or fails as outcome unknown.
   */
  private async bindResending(projectId: string, kind: 't' | 'd', id: string, owner: string): Promise<Binding> {
    const bind = () => this.bindings.bind(projectId, kind, id, owner);
    try {
      return await bind();
    } catch (err) {
      if (!replyLost(err)) throw err;
      return this.resend(bind, err);
    }
  }

  private learned(path: OutcomePath): void {
    this.hooks.metrics?.outcomeLearning.inc({ path });
  }

  /**
   * Runs a billable script (deduct, consume, a freeze with a consume TTL) under a plan
   * reservation. `lookup` (binding or finding the transaction's customer; a value when the
   * script binds itself) goes out in the same round trip as the reservation: neither needs
   * the other's answer. `script` gets what the lookup found and whether the plan admits a
   * new operation (its last argument); the reservation is committed when the operation
   * applied now (or may have), and given back otherwise.
   */
  private async runBillable<T>(
    scope: ProjectScope,
    lookup: T | Promise<T>,
    script: (found: T, admitted: '0' | '1') => Promise<ScriptReply>,
  ): Promise<{ reply: ScriptReply; found: T }> {
    const [found, reserved] = await Promise.allSettled([lookup, this.hooks.billable?.reserve(scope) ?? null]);
    const reservation = reserved.status === 'fulfilled' ? reserved.value : null;
    let reply: ScriptReply | undefined;
    let unsent = false;
    try {
      if (found.status === 'rejected') throw found.reason;
      if (reserved.status === 'rejected') throw reserved.reason;
      try {
        reply = await script(found.value, reservation && !reservation.admitted ? '0' : '1');
      } catch (err) {
        unsent = provesNothingSent(err);
        throw err;
      }
      if (reply[0] === ScriptStatus.UsageLimit && reservation?.refusal) throw reservation.refusal;
      return { reply, found: found.value };
    } finally {
      // Given back when the script answered that nothing applied, or provably never
      // reached Redis (never written, or refused by the generation guard). Without an
      // answer otherwise (a lost reply) it may have applied: it counts, one too high at
      // worst, never too low.
      // A consume of a freeze that the plan counted when it was accepted (reply[4] = 1,
      // lua/consume-10.lua) gives its reservation back too: counted once.
      const notApplied = reply !== undefined
        ? reply[0] !== ScriptStatus.Ok || reply[4] === 1
        : unsent || found.status === 'rejected' || reserved.status === 'rejected';
      // Not awaited: the answer does not wait on the count (neither rejects).
      if (reservation) void (notApplied ? reservation.release() : reservation.commit());
    }
  }

  /**
   * The script's answer as a result, or its error. `idParam` names the request field a
   * conflict is about (the operation's identifier).
   */
  private outcome(reply: ScriptReply, customerId: string, idParam?: string, asked?: Asked): OpResult {
    const [status, raw, autoConsumed] = reply;
    if (status === ScriptStatus.Ok || status === ScriptStatus.Replay) {
      return { body: publicResult(raw), replay: status === ScriptStatus.Replay, customerId, autoConsumed };
    }
    if (status === ScriptStatus.DepositLimit) throw scriptError('deposit', status, { param: 'amount', message: deposit_limit_message });
    // Refusals whose script answered numbers (on its failure path only) say them.
    if ((status === ScriptStatus.Insufficient || status === ScriptStatus.InsufficientSelected) && asked?.draw) {
      throw drawRefusal(status === ScriptStatus.Insufficient ? 'insufficient_balance' : 'insufficient_balance_in_selected_credit_types', raw, asked.draw);
    }
    const settleCode = settleCodes.get(status);
    if (settleCode !== undefined) {
      const refusal = settleRefusal(settleCode, raw, { requested: asked?.consumed ?? null });
      if (refusal !== null) throw refusal;
    }
    const param =
      status === ScriptStatus.Conflict ? idParam
      : status === ScriptStatus.InvalidExpires ? 'expires_at'
      : status === ScriptStatus.ScopeMismatch ? 'customer_id'
      : undefined;
    throw scriptError('customer script', status, { param });
  }

  /**
   * Runs an operation that starts from a binding. On a single Redis, `bound` (when the
   * operation has one: its customer is known) runs the binding and the operation as one
   * script, one command. Otherwise, and when that script found the id's binding possibly
   * archived (it wrote nothing), the two steps: `twoSteps` binds first (asking PostgreSQL
   * for an archived id, src/ledger/bindings.ts), then runs the customer script; again
   * from the binding when that script refused a binding read older than the grace (the
   * record may have been archived after the read; nothing applied). A Redis Cluster
   * always takes the two steps: the binding bucket and the customer are in other slots.
   */
  private async fromBinding(bound: (() => Promise<ScriptReply>) | null, twoSteps: () => Promise<ScriptReply>): Promise<ScriptReply> {
    if (bound !== null && this.oneScript) {
      const reply = await bound();
      if (reply[0] !== ScriptStatus.BindingArchived) return reply;
    }
    for (let n = 1; ; n++) {
      const reply = await twoSteps();
      if (reply[0] !== ScriptStatus.StaleBinding) return reply;
      if (n >= stale_binding_attempts_max) throw new Error(`binding read refused as stale ${n} times in a row`);
    }
  }

  /**
   * Binds an identifier to a customer in the project's buckets (src/ledger/bindings.ts),
   * or finds it bound; throws transaction_conflict when it names another customer.
   */
  private async bindTo(scope: ProjectScope, kind: 't' | 'd', id: string, customerId: string, param: string): Promise<{ customerId: string; readAtMs: number }> {
    const b = await this.bindResending(scope.projectId, kind, id, customerId);
    if (b.owner !== customerId) throw new ApiError('transaction_conflict', { param });
    return { customerId, readAtMs: b.readAtMs };
  }

  private async depositOp(scope: ProjectScope, input: DepositInput): Promise<OpResult> {
    await this.ready();
    const hash = requestHash([
      'deposit', input.amount, input.wallet, input.label, input.startsAtMs, input.expiresAtMs, input.description,
      input.name ?? null, input.email ?? null, input.metadata ?? null,
    ]);
    const opt = (v: string | undefined) => (v === undefined ? '0' : `1${v}`);
    const args: CustomerScriptArgs<'deposit'> = {
      idempotencyKey: input.idempotencyKey ?? '', requestHash: hash, amount: input.amount, wallet: input.wallet, label: input.label,
      startsAtMs: input.startsAtMs ?? '', expiresAtMs: input.expiresAtMs ?? '',
      name: opt(input.name), email: opt(input.email), metadata: opt(input.metadata === undefined ? undefined : JSON.stringify(input.metadata)),
      description: input.description ?? '', sourceId: newId('src'),
    };
    const key = input.idempotencyKey;
    // Without a key there is nothing to bind: the deposit script alone.
    const reply = key === null
      ? await this.run('deposit', scope, input.customerId, args)
      : await this.fromBinding(
        () => this.runBound('deposit', scope, input.customerId, key, args),
        async () => {
          const bound = await this.bindTo(scope, 'd', key, input.customerId, 'idempotency_key');
          return this.run('deposit', scope, input.customerId, args, bound.readAtMs);
        },
      );
    return this.outcome(reply, input.customerId, 'idempotency_key');
  }

  /** Binds the transaction id to the customer; returns the customer and when the binding was read. */
  private bindTransaction(scope: ProjectScope, input: DrawInput): Promise<{ customerId: string; readAtMs: number }> {
    return this.bindTo(scope, 't', input.transactionId, input.customerId, 'transaction_id');
  }

  private drawArgs(input: DrawInput, hash: string): Omit<CustomerScriptArgs<'deduct'>, 'admitted'> {
    const walletFilter = input.wallets === null ? '' : JSON.stringify([...new Set(input.wallets)]);
    const entryWallet = input.wallets !== null && input.wallets.length === 1 ? input.wallets[0] : '';
    return {
      transactionId: input.transactionId, amount: input.amount, requestHash: hash, walletFilter, entryWallet,
      businessType: input.businessType ?? '', description: input.description ?? '',
    };
  }

  private async deductOp(scope: ProjectScope, input: DrawInput): Promise<OpResult> {
    await this.ready();
    const hash = requestHash(['deduct', input.amount, input.wallets ? [...new Set(input.wallets)].sort() : null, input.businessType, input.description]);
    const args = this.drawArgs(input, hash);
    const reply = await this.fromBinding(
      async () => {
        const r = await this.runBillable(scope, null, (_, admitted) => this.runBound('deduct', scope, input.customerId, input.transactionId, { ...args, admitted }));
        return r.reply;
      },
      async () => {
        const r = await this.runBillable(scope, this.bindTransaction(scope, input), (bound, admitted) =>
          this.run('deduct', scope, input.customerId, { ...args, admitted }, bound.readAtMs));
        return r.reply;
      },
    );
    return this.outcome(reply, input.customerId, 'transaction_id', this.askedDraw(input));
  }

  private askedDraw(input: DrawInput): Asked {
    return { draw: { amount: input.amount, wallets: input.wallets, selector: input.walletField ?? 'wallet' } };
  }

  private async freezeOp(scope: ProjectScope, input: FreezeInput): Promise<OpResult> {
    await this.ready();
    const hash = requestHash([
      'freeze', input.amount, input.wallets ? [...new Set(input.wallets)].sort() : null, input.businessType, input.description,
      input.ttl?.kind ?? null, input.ttl?.seconds ?? null,
    ]);
    const args: Omit<CustomerScriptArgs<'freeze'>, 'admitted'> = { ...this.drawArgs(input, hash), ttlKind: input.ttl?.kind ?? '', ttlSeconds: input.ttl?.seconds ?? 0 };
    // A freeze that its TTL consumes is the billable operation (its TTL consume cannot be
    // refused later, and does not count again): the plan admits and counts it now, as a
    // deduct. Any other freeze is not billable and never waits on the plan.
    const reply = input.ttl?.kind === 'consume'
      ? await this.fromBinding(
        async () => (await this.runBillable(scope, null, (_, admitted) => this.runBound('freeze', scope, input.customerId, input.transactionId, { ...args, admitted }))).reply,
        async () => (await this.runBillable(scope, this.bindTransaction(scope, input), (bound, admitted) =>
          this.run('freeze', scope, input.customerId, { ...args, admitted }, bound.readAtMs))).reply,
      )
      : await this.fromBinding(
        () => this.runBound('freeze', scope, input.customerId, input.transactionId, { ...args, admitted: '1' }),
        async () => {
          const bound = await this.bindTransaction(scope, input);
          return this.run('freeze', scope, input.customerId, { ...args, admitted: '1' }, bound.readAtMs);
        },
      );
    const result = this.outcome(reply, input.customerId, 'transaction_id', this.askedDraw(input));
    if (!result.replay && input.ttl && this.hooks.scheduleExpiry) {
      const at = Date.parse(String(result.body.auto_settle_at));
      // The freeze applied: its answer must not become an error. Without the job the TTL
      // still settles: lazily in the customer's next script, or by the sweeper.
      await this.hooks.scheduleExpiry(scope, input.customerId, input.transactionId, at).catch((err: unknown) => {
        this.hooks.onScheduleError?.(err, input.transactionId);
      });
    }
    return result;
  }

  /** Finds the customer of a transaction id for consume and unfreeze. */
  private async ownerOf(scope: ProjectScope, transactionId: string, customerId: string | null, missing: ErrorCode): Promise<{ customerId: string; readAtMs: number }> {
    const b = await this.bindResending(scope.projectId, 't', transactionId, '');
    if (b.owner === null) throw new ApiError(missing);
    if (customerId !== null && customerId !== b.owner) throw new ApiError('customer_scope_mismatch', { param: 'customer_id' });
    return { customerId: b.owner, readAtMs: b.readAtMs };
  }

  private async consumeOp(
    scope: ProjectScope,
    input: { transactionId: string; customerId: string | null; amount: number | null; description: string | null },
  ): Promise<OpResult> {
    await this.ready();
    const args = { transactionId: input.transactionId, amount: input.amount ?? '', description: input.description ?? '' };
    // The customer the script ran on: the request's, or the binding's when it names none.
    let customerId = input.customerId ?? '';
    const named = input.customerId;
    const reply = await this.fromBinding(
      named === null ? null : async () => {
        const r = await this.runBillable(scope, null, (_, admitted) => this.runBound('consume', scope, named, input.transactionId, { ...args, admitted }));
        return r.reply;
      },
      async () => {
        const owner = this.ownerOf(scope, input.transactionId, input.customerId, 'no_consumable_freeze_records');
        const r = await this.runBillable(scope, owner, (found, admitted) => this.run('consume', scope, found.customerId, { ...args, admitted }, found.readAtMs));
        customerId = r.found.customerId;
        return r.reply;
      },
    );
    return this.outcome(reply, customerId, undefined, { consumed: input.amount });
  }

  private async unfreezeOp(
    scope: ProjectScope,
    input: { transactionId: string; customerId: string | null; description: string | null },
  ): Promise<OpResult> {
    await this.ready();
    const args = { transactionId: input.transactionId, description: input.description ?? '' };
    let customerId = input.customerId ?? '';
    const named = input.customerId;
    const reply = await this.fromBinding(
      named === null ? null : () => this.runBound('unfreeze', scope, named, input.transactionId, args),
      async () => {
        const owner = await this.ownerOf(scope, input.transactionId, input.customerId, 'no_unfreezable_records');
        customerId = owner.customerId;
        return this.run('unfreeze', scope, owner.customerId, args, owner.readAtMs);
      },
    );
    return this.outcome(reply, customerId);
  }

  /**
   * The operations, each counted by its outcome (svc_ledger_operations_total): applied,
   * replay, or the error it failed with. One try per operation, no closure.
   */
  async deposit(scope: ProjectScope, input: DepositInput): Promise<OpResult> {
    try {
      return this.counted('deposit', await this.depositOp(scope, input));
    } catch (err) {
      throw this.failed('deposit', err);
    }
  }

  async deduct(scope: ProjectScope, input: DrawInput): Promise<OpResult> {
    try {
      return this.counted('deduct', await this.deductOp(scope, input));
    } catch (err) {
      throw this.failed('deduct', err);
    }
  }

  async freeze(scope: ProjectScope, input: FreezeInput): Promise<OpResult> {
    try {
      return this.counted('freeze', await this.freezeOp(scope, input));
    } catch (err) {
      throw this.failed('freeze', err);
    }
  }

  async consume(scope: ProjectScope, input: SettleInput & { amount: number | null }): Promise<OpResult> {
    try {
      return this.counted('consume', await this.consumeOp(scope, input));
    } catch (err) {
      throw this.failed('consume', err);
    }
  }

  async unfreeze(scope: ProjectScope, input: SettleInput): Promise<OpResult> {
    try {
      return this.counted('unfreeze', await this.unfreezeOp(scope, input));
    } catch (err) {
      throw this.failed('unfreeze', err);
    }
  }

  private counted(op: LedgerOperation, result: OpResult): OpResult {
    this.hooks.metrics?.ledgerDone(op, result.replay);
    return result;
  }

  private failed(op: LedgerOperation, err: unknown): unknown {
    this.hooks.metrics?.ledgerFailed(op, err);
    return err;
  }

  /** Settles due TTL freezes of one customer (the expire worker): how many auto-consumes
   * (billable) and how many TTL entries (each freeze settled) it wrote.
   */
  async expire(scope: ProjectScope, customerId: string): Promise<{ autoConsumed: number; settled: number }> {
    const metrics = this.hooks.metrics;
    try {
      const reply = await this.run('expire', scope, customerId, {});
      metrics?.ledgerDone('expire', false);
      return { autoConsumed: reply[2], settled: reply[3] };
    } catch (err) {
      metrics?.ledgerFailed('expire', err);
      throw err;
    }
  }

  /**
   * Archives up to `countMax` of the customer's dead sources that died more than
   * `retentionMs` ago and whose last entry PostgreSQL holds (lua/trim_sources-10.lua).
   * Returns how many left Redis.
   */
  async trimSources(scope: ProjectScope, customerId: string, retentionMs: number, countMax: number): Promise<number> {
    const reply = await this.run('trim_sources', scope, customerId, { retentionMs, countMax });
    return Number(reply[4]);
  }

  /**
   * The customer's profile and balances, after settling due TTLs; null when absent.
   * `listing` adds the sources Redis holds (live, and dead ones not archived yet).
   */
  async view(scope: ProjectScope, customerId: string, listing = false): Promise<CustomerView | null> {
    const reply = await this.run('view', scope, customerId, { listSources: listing ? '1' : '0' });
    if (reply[0] === ScriptStatus.CustomerNotFound) return null;
    const profile = JSON.parse(reply[1]) as { created_at: string; name: string | null; email: string | null; metadata: string | null };
    const nowMs = Number(reply[4]);
    const sums = JSON.parse(reply[5] as string) as Record<string, { t: string; u: string; f: string }>;
    const wallets: Record<string, WalletSums> = {};
    for (const [name, a] of Object.entries(sums)) wallets[name] = { total: Number(a.t), used: Number(a.u), frozen: Number(a.f) };
    const sources = (reply[6] as string[]).map(decodeSource).sort((a, b) => a.seq - b.seq);
    return { profile, nowMs, wallets, sources, srcSeq: Number(reply[7]), archived: reply[8] === '1', autoConsumed: reply[2] };
  }
}

const timed_out = Symbol('timed out');

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether a script's outcome is learned when its reply is lost (learnableScripts). */
function learnable(name: CustomerScriptName, args: object): boolean {
  return learnableScripts.has(name) && !(name === 'deposit' && (args as { idempotencyKey?: unknown }).idempotencyKey === '');
}

/**
 * A failure of a sent script without its reply: not proven unsent, and not an answer of
 * Redis (a ReplyError is one: the script ran, or was refused, and said so).
 */
function replyLost(err: unknown): boolean {
  return !provesNothingSent(err) && (err as { name?: string })?.name !== 'ReplyError';
}

/** What a request asked, for the words of its refusal (src/ledger/refusals.ts). */
interface Asked {
  draw?: { amount: number; wallets: string[] | null; selector: 'wallet' | 'credit_types' };
  /** A consume's amount, null for the whole frozen amount. */
  consumed?: number | null;
}

const settleCodes = new Map<number, 'actual_amount_exceeds_frozen_amount' | 'no_consumable_freeze_records' | 'freeze_records_already_consumed' | 'no_unfreezable_records'>([
  [ScriptStatus.ExceedsFrozen, 'actual_amount_exceeds_frozen_amount'],
  [ScriptStatus.NoConsumable, 'no_consumable_freeze_records'],
  [ScriptStatus.AlreadyConsumed, 'freeze_records_already_consumed'],
  [ScriptStatus.NoUnfreezable, 'no_unfreezable_records'],
]);

/** A wallet's sums over the sources active now. */
interface WalletSums {
  total: number;
  used: number;
  frozen: number;
}

export interface CustomerView {
  profile: { created_at: string; name: string | null; email: string | null; metadata: string | null };
  nowMs: number;
  /** Every wallet the customer ever had, with its sums over the sources active now. */
  wallets: Record<string, WalletSums>;
  /** The sources Redis holds, by creation order (only with `listing`). */
  sources: SourceState[];
  /** The creation seq of the customer's newest source. */
  srcSeq: number;
  /** Some sources were archived: PostgreSQL alone holds them. */
  archived: boolean;
  autoConsumed: number;
}

export { isActive } from './sources.js';
export {  type SourceState } from '../redis/codec.js';
