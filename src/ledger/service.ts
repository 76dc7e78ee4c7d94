/**
 * Ledger operations: each is one Lua script on the customer's keys (lua/), with a
 * project-scope binding of its identifier: in the same script on a single Redis, a command
 * before it on a Redis Cluster (fromBinding). Nothing here decides what a concurrent
 * request could invalidate; the scripts decide.
 */
import { createHash } from 'node:crypto';
import { isCluster, type RedisClient } from '../redis/client.js';
import { ApiError, type ErrorCode } from '../errors/catalogue.js';
import { bindingKeys, customerKeys, scriptKeys, type CustomerKeys } from '../redis/keys.js';
import {
  scriptApi, ScriptStatus, type BoundOperation, type CustomerCall, type CustomerScriptArgs, type CustomerScriptName, type ScriptApi,
  type Scripts, type ScriptReply,
} from '../redis/scripts.js';
import type { Clock } from './clock.js';
import { newId } from '../ids.js';
import { beforeSent } from '../redis/sent.js';
import { Bindings, type Archive, type Binding } from './bindings.js';
import type { LedgerOperation, Metrics } from '../metrics/metrics.js';
import type { DepositInput, DrawInput, FreezeInput, ProjectScope, SettleInput } from './requests.js';
import { OutboxMarks } from './marks.js';
import { learnable, OutcomeLearner, replyLost } from './outcome.js';
import { resultOf, type Asked, type OpResult } from './results.js';
import { runBillable, type BillableOps } from './billable.js';
import { customerViewOf, type CustomerView } from './views.js';
import { customerConflict, depositFields, drawFields, keptFields, type RequestFields } from './conflicts.js';

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
   * its outcome (OUTCOME_WAIT_MS); default outcome_wait_ms_default (src/ledger/outcome.ts).
   */
  outcomeWaitMs?: number;
}

/**
 * Scripts whose success writes no outbox entry of its own (TTL settlements they make on
 * the way, and a gateway hold's balance events, are counted in reply[3]): nothing for the
 * workers to persist.
 */
const entrylessScripts: ReadonlySet<CustomerScriptName> = new Set(['gateway_hold', 'gateway_extend', 'view', 'expire', 'trim_sources']);

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

export class LedgerService {
  /** The dirty and active marks of the outboxes this process writes. */
  private readonly marks: OutboxMarks;
  /** Learns the outcome of a script or binding whose reply was lost. */
  private readonly lostReplies: OutcomeLearner;
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
    redis: RedisClient,
    scripts: Scripts,
    private readonly prefix: string,
    private readonly clock: Clock,
    private readonly hooks: LedgerHooks = {},
  ) {
    this.api = scriptApi(scripts);
    this.bindings = new Bindings(redis, scripts, prefix, hooks.archived ?? null);
    this.oneScript = !isCluster(redis);
    this.marks = new OutboxMarks(redis, prefix, clock);
    this.lostReplies = new OutcomeLearner(() => this.ready(), hooks.outcomeWaitMs, hooks.metrics);
  }

  /**
   * Sends the dirty marks gathered since the last flush (OutboxMarks.flushDirty); a
   * process that stops calls it before closing Redis.
   */
  flushDirty(): void {
    this.marks.flushDirty();
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
   * (OutcomeLearner.learn, src/ledger/outcome.ts) before the caller hears of it.
   */
  private async send(
    name: CustomerScriptName,
    scope: ProjectScope,
    customerId: string,
    script: (call: Omit<CustomerCall, 'bindingReadAtMs'>) => Promise<ScriptReply>,
    learnable: boolean,
  ): Promise<ScriptReply> {
    const k = this.keys(scope, customerId);
    const marked = this.marks.markActive(k.base);
    try {
      await (marked ? Promise.all([this.ready(), marked]) : this.ready());
    } catch (err) {
      // The script was not sent: a lost reply of the active mark leaves nothing applied.
      throw beforeSent(err);
    }
    const call = () => script({ keys: scriptKeys(k), clockOffsetMs: this.clock.offsetMs(), projectId: scope.projectId, customerId, entryIdBase: newId('le') });
    let reply: ScriptReply;
    try {
      reply = await call();
    } catch (err) {
      if (!learnable || !replyLost(err)) throw err;
      reply = await this.lostReplies.learn(call, err);
    }
    if (reply[3] > 0 || (reply[0] === ScriptStatus.Ok && !entrylessScripts.has(name)) || bindingScripts.has(name)) this.marks.markDirty(k.base);
    if (reply[2] > 0 && this.hooks.billable) this.hooks.billable.record(scope, reply[2]);
    return reply;
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
      return this.lostReplies.resend(bind, err);
    }
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
    if (b.owner !== customerId) throw customerConflict({ param, id, customerId, fields: {} }, b.owner ?? '');
    return { customerId, readAtMs: b.readAtMs };
  }

  private async depositOp(scope: ProjectScope, input: DepositInput): Promise<OpResult> {
    await this.ready();
    // Before the script: the sweeper finds the source when it expires (workers/sweep.ts).
    // A failure of this mark applied nothing, even when its own reply was lost.
    if (input.expiresAtMs !== null) {
      await this.marks.markExpiring(this.keys(scope, input.customerId).base, input.expiresAtMs).catch((err: unknown) => {
        throw beforeSent(err);
      });
    }
    const hash = requestHash([
      'deposit', input.amount, input.wallet, input.label, input.startsAtMs, input.expiresAtMs, input.description,
      input.name ?? null, input.email ?? null, input.metadata ?? null,
    ]);
    const fields = depositFields(input);
    const opt = (v: string | undefined) => (v === undefined ? '0' : `1${v}`);
    const args: CustomerScriptArgs<'deposit'> = {
      idempotencyKey: input.idempotencyKey ?? '', requestHash: hash, amount: input.amount, wallet: input.wallet, label: input.label,
      startsAtMs: input.startsAtMs ?? '', expiresAtMs: input.expiresAtMs ?? '',
      name: opt(input.name), email: opt(input.email), metadata: opt(input.metadata === undefined ? undefined : JSON.stringify(input.metadata)),
      description: input.description ?? '', sourceId: newId('src'), requestFields: keptFields(fields),
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
    const conflict = key === null ? undefined : { param: 'idempotency_key', id: key, customerId: input.customerId, fields };
    return resultOf(reply, input.customerId, 'idempotency_key', { expiresAtMs: input.expiresAtMs, conflict });
  }

  /** Binds the transaction id to the customer; returns the customer and when the binding was read. */
  private bindTransaction(scope: ProjectScope, input: DrawInput): Promise<{ customerId: string; readAtMs: number }> {
    return this.bindTo(scope, 't', input.transactionId, input.customerId, 'transaction_id');
  }

  private drawArgs(input: DrawInput, hash: string, fields: RequestFields): Omit<CustomerScriptArgs<'deduct'>, 'admitted'> {
    const walletFilter = input.wallets === null ? '' : JSON.stringify([...new Set(input.wallets)]);
    const entryWallet = input.wallets !== null && input.wallets.length === 1 ? input.wallets[0] : '';
    return {
      transactionId: input.transactionId, amount: input.amount, requestHash: hash, walletFilter, entryWallet,
      businessType: input.businessType ?? '', description: input.description ?? '', keyBudget: input.keyBudget ?? '',
      requestFields: keptFields(fields),
    };
  }

  private async deductOp(scope: ProjectScope, input: DrawInput): Promise<OpResult> {
    await this.ready();
    const hash = requestHash(['deduct', input.amount, input.wallets ? [...new Set(input.wallets)].sort() : null, input.businessType, input.description]);
    const fields = drawFields('deduct', input);
    const args = this.drawArgs(input, hash, fields);
    const reply = await this.fromBinding(
      async () => {
        const r = await runBillable(this.hooks.billable, scope, null, (_, admitted) => this.runBound('deduct', scope, input.customerId, input.transactionId, { ...args, admitted }));
        return r.reply;
      },
      async () => {
        const r = await runBillable(this.hooks.billable, scope, this.bindTransaction(scope, input), (bound, admitted) =>
          this.run('deduct', scope, input.customerId, { ...args, admitted }, bound.readAtMs));
        return r.reply;
      },
    );
    return resultOf(reply, input.customerId, 'transaction_id', this.askedDraw(input, fields));
  }

  private askedDraw(input: DrawInput, fields: RequestFields): Asked {
    return {
      draw: { amount: input.amount, wallets: input.wallets, selector: input.walletField ?? 'wallet' },
      conflict: { param: 'transaction_id', id: input.transactionId, customerId: input.customerId, fields },
    };
  }

  private async freezeOp(scope: ProjectScope, input: FreezeInput): Promise<OpResult> {
    await this.ready();
    const hash = requestHash([
      'freeze', input.amount, input.wallets ? [...new Set(input.wallets)].sort() : null, input.businessType, input.description,
      input.ttl?.kind ?? null, input.ttl?.seconds ?? null,
    ]);
    const fields = drawFields('freeze', input);
    const args: Omit<CustomerScriptArgs<'freeze'>, 'admitted'> = { ...this.drawArgs(input, hash, fields), ttlKind: input.ttl?.kind ?? '', ttlSeconds: input.ttl?.seconds ?? 0 };
    // A freeze that its TTL consumes is the billable operation (its TTL consume cannot be
    // refused later, and does not count again): the plan admits and counts it now, as a
    // deduct. Any other freeze is not billable and never waits on the plan.
    const reply = input.ttl?.kind === 'consume'
      ? await this.fromBinding(
        async () => (await runBillable(this.hooks.billable, scope, null, (_, admitted) => this.runBound('freeze', scope, input.customerId, input.transactionId, { ...args, admitted }))).reply,
        async () => (await runBillable(this.hooks.billable, scope, this.bindTransaction(scope, input), (bound, admitted) =>
          this.run('freeze', scope, input.customerId, { ...args, admitted }, bound.readAtMs))).reply,
      )
      : await this.fromBinding(
        () => this.runBound('freeze', scope, input.customerId, input.transactionId, { ...args, admitted: '1' }),
        async () => {
          const bound = await this.bindTransaction(scope, input);
          return this.run('freeze', scope, input.customerId, { ...args, admitted: '1' }, bound.readAtMs);
        },
      );
    const result = resultOf(reply, input.customerId, 'transaction_id', this.askedDraw(input, fields));
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
        const r = await runBillable(this.hooks.billable, scope, null, (_, admitted) => this.runBound('consume', scope, named, input.transactionId, { ...args, admitted }));
        return r.reply;
      },
      async () => {
        const owner = this.ownerOf(scope, input.transactionId, input.customerId, 'no_consumable_freeze_records');
        const r = await runBillable(this.hooks.billable, scope, owner, (found, admitted) => this.run('consume', scope, found.customerId, { ...args, admitted }, found.readAtMs));
        customerId = r.found.customerId;
        return r.reply;
      },
    );
    return resultOf(reply, customerId, undefined, { consumed: input.amount });
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
    return resultOf(reply, customerId);
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

  /** Settles due TTL freezes of one customer and retires its expired sources (the expire
   * worker, the sweeper): how many auto-consumes (billable) and entries (each freeze
   * settled, each EXPIRE) it wrote, and when its next source expires (null for none).
   */
  async expire(scope: ProjectScope, customerId: string): Promise<{ autoConsumed: number; settled: number; nextSourceExpiryMs: number | null }> {
    const metrics = this.hooks.metrics;
    try {
      const reply = await this.run('expire', scope, customerId, {});
      metrics?.ledgerDone('expire', false);
      const next = reply[4];
      return { autoConsumed: reply[2], settled: reply[3], nextSourceExpiryMs: typeof next === 'string' && next !== '' ? Number(next) : null };
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
    return customerViewOf(await this.run('view', scope, customerId, { listSources: listing ? '1' : '0' }));
  }
}
