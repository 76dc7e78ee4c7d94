/**
 * Ledger operations: each is one Lua script on the customer's keys (lua/), preceded by a
 * project-scope binding of its identifier. Nothing here decides what a concurrent request
 * could invalidate; the scripts decide.
 */
import { createHash } from 'node:crypto';
import type { RedisClient } from '../redis/client.js';
import { ApiError, type ErrorCode } from '../errors/catalogue.js';
import { customerKeys, dirtySetKey, projectKeys, scriptKeys, type CustomerKeys } from '../redis/keys.js';
import { ScriptStatus, type CustomerScriptName, type Scripts, type ScriptReply } from '../redis/scripts.js';
import type { Clock } from './clock.js';
import { newId } from '../ids.js';
import { publicResult } from './entries.js';
import { deposit_limit_message } from './amounts.js';
import { provesNothingSent } from '../redis/sent.js';

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
  businessType: string | null;
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
export interface BillableOps {
  /**
   * Reserves one operation ahead; `admitted` false when the plan's hard limit refuses it,
   * and then `refusal` is the error to answer. `commit` (the operation applied, or may
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
   * Resolves when money operations may touch Redis, else throws 503 service_unavailable
   * (the Redis generation guard, src/redis/generation.ts).
   */
  ready?(): Promise<void>;
}

const statusErrors: Partial<Record<ScriptStatus, ErrorCode>> = {
  [ScriptStatus.CustomerNotFound]: 'customer_not_found',
  [ScriptStatus.Conflict]: 'transaction_conflict',
  [ScriptStatus.Insufficient]: 'insufficient_balance',
  [ScriptStatus.InsufficientSelected]: 'insufficient_balance_in_selected_credit_types',
  [ScriptStatus.NoConsumable]: 'no_consumable_freeze_records',
  [ScriptStatus.AlreadyConsumed]: 'freeze_records_already_consumed',
  [ScriptStatus.NoUnfreezable]: 'no_unfreezable_records',
  [ScriptStatus.ExceedsFrozen]: 'actual_amount_exceeds_frozen_amount',
  [ScriptStatus.InvalidExpires]: 'invalid_expires_at',
  [ScriptStatus.UsageLimit]: 'usage_limit_exceeded',
  [ScriptStatus.AccountNotFound]: 'billing_account_not_found',
  [ScriptStatus.DepositLimit]: 'invalid_amount',
};

/**
 * Scripts whose success writes no outbox entry of its own (TTL settlements they make on
 * the way are counted in reply[3]): nothing for the workers to persist.
 */
const entrylessScripts: ReadonlySet<CustomerScriptName> = new Set(['gateway_hold', 'view', 'expire']);

export function requestHash(parts: unknown[]): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 32);
}


export class LedgerService {
  /** Outboxes written since the last SADD to the dirty set (markDirty). */
  private readonly dirty = new Set<string>();

  constructor(
    private readonly redis: RedisClient,
    private readonly scripts: Scripts,
    private readonly prefix: string,
    private readonly clock: Clock,
    private readonly hooks: LedgerHooks = {},
  ) {}

  /**
   * Adds a customer's outbox to the dirty set, together with every other outbox written
   * in the same turn of the event loop: one SADD for many operations under load. Not
   * awaited by the operation: the sweeper re-finds an outbox whose SADD was lost with
   * this process.
   */
  private markDirty(base: string): void {
    this.dirty.add(base);
    if (this.dirty.size > 1) return;
    setImmediate(() => {
      const members = [...this.dirty];
      this.dirty.clear();
      this.redis.sadd(dirtySetKey(this.prefix), ...members).catch(() => undefined);
    });
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
  async run(name: CustomerScriptName, scope: ProjectScope, customerId: string, args: (string | number)[]): Promise<ScriptReply> {
    await this.ready();
    const k = this.keys(scope, customerId);
    const entryId = newId('le');
    const reply = await this.scripts.run(name, scriptKeys(k), [this.clock.offsetMs(), scope.projectId, customerId, entryId, ...args]);
    if (reply[3] > 0 || (reply[0] === ScriptStatus.Ok && !entrylessScripts.has(name))) this.markDirty(k.base);
    if (reply[2] > 0 && this.hooks.billable) this.hooks.billable.record(scope, reply[2]);
    return reply;
  }

  /**
   * Runs a billable script (deduct, consume) under a plan reservation. `lookup` (binding
   * or finding the transaction's customer) goes out in the same round trip as the
   * reservation: neither needs the other's answer. The last script argument tells the
   * script whether the plan admits a new operation; the reservation is committed when the
   * operation applied now (or may have), and given back otherwise.
   */
  private async runBillable(
    name: 'deduct' | 'consume',
    scope: ProjectScope,
    lookup: Promise<string>,
    args: (string | number)[],
  ): Promise<{ reply: ScriptReply; customerId: string }> {
    const [customer, reserved] = await Promise.allSettled([lookup, this.hooks.billable?.reserve(scope) ?? Promise.resolve(null)]);
    const reservation = reserved.status === 'fulfilled' ? reserved.value : null;
    let reply: ScriptReply | undefined;
    let unsent = false;
    try {
      if (customer.status === 'rejected') throw customer.reason;
      if (reserved.status === 'rejected') throw reserved.reason;
      try {
        reply = await this.run(name, scope, customer.value, [...args, reservation && !reservation.admitted ? '0' : '1']);
      } catch (err) {
        unsent = provesNothingSent(err);
        throw err;
      }
      if (reply[0] === ScriptStatus.UsageLimit && reservation?.refusal) throw reservation.refusal;
      return { reply, customerId: customer.value };
    } finally {
      // Given back when the script answered that nothing applied, or provably never
      // reached Redis (never written, or refused by the generation guard). Without an
      // answer otherwise (a lost reply) it may have applied: it counts, one too high at
      // worst, never too low.
      const notApplied = reply !== undefined ? reply[0] !== ScriptStatus.Ok : unsent || customer.status === 'rejected' || reserved.status === 'rejected';
      // Not awaited: the answer does not wait on the count (neither rejects).
      if (reservation) void (notApplied ? reservation.release() : reservation.commit());
    }
  }

  /**
   * The script's answer as a result, or its error. `idParam` names the request field a
   * conflict is about (the operation's identifier).
   */
  private outcome(reply: ScriptReply, customerId: string, idParam?: string): OpResult {
    const [status, raw, autoConsumed] = reply;
    if (status === ScriptStatus.Ok || status === ScriptStatus.Replay) {
      return { body: publicResult(raw), replay: status === ScriptStatus.Replay, customerId, autoConsumed };
    }
    const code = statusErrors[status as ScriptStatus];
    if (!code) throw new Error(`unexpected script status ${status}`);
    if (status === ScriptStatus.DepositLimit) throw new ApiError(code, { param: 'amount', message: deposit_limit_message });
    const param = status === ScriptStatus.Conflict ? idParam : status === ScriptStatus.InvalidExpires ? 'expires_at' : undefined;
    throw new ApiError(code, { param });
  }

  /**
   * Binds an identifier to a customer in a project index, once. Returns the owner. A
   * binding is never removed or changed, so when HSETNX finds one, a later HGET reads the
   * same owner: the common case (a new identifier) costs one command.
   */
  private async bind(indexKey: string, id: string, customerId: string): Promise<string> {
    if ((await this.redis.hsetnx(indexKey, id, customerId)) === 1) return customerId;
    const owner = await this.redis.hget(indexKey, id);
    if (owner === null) throw new Error(`binding of ${id} in ${indexKey} vanished`);
    return owner;
  }

  async deposit(scope: ProjectScope, input: DepositInput): Promise<OpResult> {
    await this.ready();
    if (input.idempotencyKey !== null) {
      const owner = await this.bind(projectKeys(this.prefix, scope.projectId).depositIndex, input.idempotencyKey, input.customerId);
      if (owner !== input.customerId) throw new ApiError('transaction_conflict', { param: 'idempotency_key' });
    }
    const hash = requestHash([
      'deposit', input.amount, input.wallet, input.label, input.startsAtMs, input.expiresAtMs, input.description,
      input.name ?? null, input.email ?? null, input.metadata ?? null,
    ]);
    const opt = (v: string | undefined) => (v === undefined ? '0' : `1${v}`);
    const reply = await this.run('deposit', scope, input.customerId, [
      input.idempotencyKey ?? '', hash, input.amount, input.wallet, input.label,
      input.startsAtMs ?? '', input.expiresAtMs ?? '',
      opt(input.name), opt(input.email), opt(input.metadata === undefined ? undefined : JSON.stringify(input.metadata)),
      input.description ?? '', newId('src'),
    ]);
    return this.outcome(reply, input.customerId, 'idempotency_key');
  }

  /** Binds the transaction id to the customer; returns the customer. */
  private async bindTransaction(scope: ProjectScope, input: DrawInput): Promise<string> {
    const owner = await this.bind(projectKeys(this.prefix, scope.projectId).txIndex, input.transactionId, input.customerId);
    if (owner !== input.customerId) throw new ApiError('transaction_conflict', { param: 'transaction_id' });
    return owner;
  }

  private drawArgs(input: DrawInput, hash: string): (string | number)[] {
    const filter = input.wallets === null ? '' : JSON.stringify([...new Set(input.wallets)]);
    const entryWallet = input.wallets !== null && input.wallets.length === 1 ? input.wallets[0] : '';
    return [input.transactionId, input.amount, hash, filter, entryWallet, input.businessType ?? '', input.description ?? ''];
  }

  async deduct(scope: ProjectScope, input: DrawInput): Promise<OpResult> {
    await this.ready();
    const hash = requestHash(['deduct', input.amount, input.wallets ? [...new Set(input.wallets)].sort() : null, input.businessType, input.description]);
    const { reply } = await this.runBillable('deduct', scope, this.bindTransaction(scope, input), this.drawArgs(input, hash));
    return this.outcome(reply, input.customerId, 'transaction_id');
  }

  async freeze(scope: ProjectScope, input: FreezeInput): Promise<OpResult> {
    await this.ready();
    await this.bindTransaction(scope, input);
    const hash = requestHash([
      'freeze', input.amount, input.wallets ? [...new Set(input.wallets)].sort() : null, input.businessType, input.description,
      input.ttl?.kind ?? null, input.ttl?.seconds ?? null,
    ]);
    const reply = await this.run('freeze', scope, input.customerId, [
      ...this.drawArgs(input, hash), input.ttl?.kind ?? '', input.ttl?.seconds ?? 0,
    ]);
    const result = this.outcome(reply, input.customerId, 'transaction_id');
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
  private async ownerOf(scope: ProjectScope, transactionId: string, customerId: string | null, missing: ErrorCode): Promise<string> {
    const owner = await this.redis.hget(projectKeys(this.prefix, scope.projectId).txIndex, transactionId);
    if (owner === null) throw new ApiError(missing);
    if (customerId !== null && customerId !== owner) throw new ApiError('customer_scope_mismatch', { param: 'customer_id' });
    return owner;
  }

  async consume(
    scope: ProjectScope,
    input: { transactionId: string; customerId: string | null; amount: number | null; description: string | null },
  ): Promise<OpResult> {
    await this.ready();
    const owner = this.ownerOf(scope, input.transactionId, input.customerId, 'no_consumable_freeze_records');
    const { reply, customerId } = await this.runBillable('consume', scope, owner, [input.transactionId, input.amount ?? '', input.description ?? '']);
    return this.outcome(reply, customerId);
  }

  async unfreeze(
    scope: ProjectScope,
    input: { transactionId: string; customerId: string | null; description: string | null },
  ): Promise<OpResult> {
    await this.ready();
    const owner = await this.ownerOf(scope, input.transactionId, input.customerId, 'no_unfreezable_records');
    const reply = await this.run('unfreeze', scope, owner, [input.transactionId, input.description ?? '']);
    return this.outcome(reply, owner);
  }

  /** Settles due TTL freezes of one customer (the expire worker). */
  async expire(scope: ProjectScope, customerId: string): Promise<number> {
    const reply = await this.run('expire', scope, customerId, []);
    return reply[2];
  }

  /** The customer's profile and sources, after settling due TTLs; null when absent. */
  async view(scope: ProjectScope, customerId: string): Promise<CustomerView | null> {
    const reply = await this.run('view', scope, customerId, []);
    if (reply[0] === ScriptStatus.CustomerNotFound) return null;
    const profile = JSON.parse(reply[1]) as { created_at: string; name: string | null; email: string | null; metadata: string | null };
    const nowMs = Number(reply[4]);
    const sources = (reply[5] as string[]).map(decodeSource).sort((a, b) => a.seq - b.seq);
    return { profile, nowMs, sources, autoConsumed: reply[2] };
  }
}

export interface SourceState {
  id: string;
  wallet: string;
  label: string;
  seq: number;
  total: number;
  used: number;
  frozen: number;
  startsAtMs: number | null;
  expiresAtMs: number | null;
}

export interface CustomerView {
  profile: { created_at: string; name: string | null; email: string | null; metadata: string | null };
  nowMs: number;
  sources: SourceState[];
  autoConsumed: number;
}

export function decodeSource(raw: string): SourceState {
  const s = JSON.parse(raw) as Record<string, string>;
  return {
    id: s.id,
    wallet: s.w,
    label: s.l,
    seq: Number(s.q),
    total: Number(s.t),
    used: Number(s.u),
    frozen: Number(s.f),
    startsAtMs: s.s === '' ? null : Number(s.s),
    expiresAtMs: s.e === '' ? null : Number(s.e),
  };
}

export function isActive(s: SourceState, nowMs: number): boolean {
  return (s.startsAtMs === null || s.startsAtMs <= nowMs) && (s.expiresAtMs === null || s.expiresAtMs > nowMs);
}
