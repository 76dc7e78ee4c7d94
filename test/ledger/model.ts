/**
 * Reference model of the wallet ledger for the model-based property test
 * (model.property.test.ts), of both contract variants, written from docs/API.md ("Ledger
 * endpoints", "Replays of old operations", "Errors") and docs/ARCHITECTURE.md, not from
 * the Lua scripts. It has no Redis, HTTP or clock of its own: the test sets the instant each
 * request ran at (setNow), and every result is a function of the state, the request and
 * that instant.
 *
 * Requests carry amounts as integer credits in `amount` (a consume's too); the test writes
 * them in one of Variant A's unit fields when it sends them. Wallets follow the variant: A
 * names a deposit's wallet with `credit_type` (default `default`) and filters draws with
 * `credit_types`, B uses `wallet` or its alias `credit_type` (default `credits`); A's
 * consume must name its amount.
 *
 * What it models:
 * - Sources with validity windows: a source counts and can be drawn from only while
 *   starts_at <= now < expires_at (when set).
 * - Draw order: soonest expiry first (none last), then oldest source first; a wallet
 *   filter restricts the draw, and decides between insufficient_balance and
 *   insufficient_balance_in_selected_credit_types.
 * - The staged deduction: freeze -> consumed | unfrozen | released (TTL) | consumed (TTL),
 *   with the errors and replay rules of POST /v1/billing/consume and /unfreeze (docs/API.md).
 * - Identifier scope: transaction ids and deposit idempotency keys are bound to the first
 *   customer that names them in the project, even when that request fails (docs/API.md).
 * - The ledger entries each operation writes, including TTL settlements.
 * - Gateway calls' money (docs/ARCHITECTURE.md, Gateway): the hold (input bound plus the
 *   output the wallet affords), its one-hour TTL release without an entry, the settlement
 *   (from the hold, then beyond it from the available credits down to zero, also after the
 *   TTL released the hold) with its GATEWAY entry, and the release.
 *
 * Ids the service invents (source account ids, deposit record ids) are named here after
 * the request that created them (`src:<n>`, `rec:<n>`); the test maps the real ids onto
 * these names from the responses. Times the service stamps with its own clock are
 * returned as `approx(ms)`: when the test knows only a window in which a request ran,
 * the stamp may be later than the instant the model was set to.
 */

export type Variant = 'A' | 'B';
/** The wallet a deposit without one goes to, per contract variant. */
export const default_wallet: Record<Variant, string> = { A: 'default', B: 'credits' };
const amount_max = 1_000_000_000_000_000;

/** HTTP status of each error code the ledger operations answer (docs/API.md, "Errors"). */
const errorStatus = {
  invalid_request: 400,
  invalid_amount: 400,
  invalid_expires_at: 400,
  customer_not_found: 404,
  transaction_conflict: 409,
  customer_scope_mismatch: 409,
  insufficient_balance: 400,
  insufficient_balance_in_selected_credit_types: 400,
  no_consumable_freeze_records: 400,
  freeze_records_already_consumed: 400,
  no_unfreezable_records: 400,
  actual_amount_exceeds_frozen_amount: 400,
} as const;
export type ModelErrorCode = keyof typeof errorStatus;

/** A time the service stamps with its own clock: expected at `ms`, observed slightly later. */
export interface ApproxTime {
  readonly approxMs: number;
}
function approx(ms: number): ApproxTime {
  return { approxMs: ms };
}
export function isApprox(v: unknown): v is ApproxTime {
  return typeof v === 'object' && v !== null && 'approxMs' in v;
}

export type Expected = { status: 200; body: Record<string, unknown> } | { status: number; code: ModelErrorCode };

/** What a gateway script answers: its status and, when it has one, its JSON result (amounts as numbers). */
export interface GatewayAnswer {
  status: 'ok' | 'replay' | 'customer_not_found' | 'insufficient' | 'no_consumable';
  body?: Record<string, unknown>;
}

type Op = 'deposit' | 'deduct' | 'freeze' | 'consume' | 'unfreeze';

/** One HTTP request as the test sends it: the endpoint's operation and its JSON body. */
export interface LedgerRequest {
  op: Op;
  body: Record<string, unknown>;
}

export interface Detail {
  account_id: string;
  credit_type: string;
  amount: number;
}

/** The fields of a ledger entry the model predicts (ids and created_at are the service's). */
export interface ModelEntry {
  type: 'DEPOSIT' | 'DEDUCT' | 'FREEZE' | 'CONSUME' | 'UNFREEZE' | 'GATEWAY' | 'EXPIRE';
  transaction_id: string;
  amount: number;
  returned_amount: number | null;
  wallet: string | null;
  details: Detail[];
  reason: 'ttl_release' | 'ttl_consume' | null;
  business_type: string | null;
  description: string | null;
}

interface Source {
  id: string;
  wallet: string;
  label: string;
  seq: number;
  total: number;
  used: number;
  frozen: number;
  startsAt: number | null;
  expiresAt: number | null;
  /** Died expired (its EXPIRE entry written when credits were left). */
  expired?: boolean;
}

interface Tx {
  kind: 'deduct' | 'freeze' | 'gateway';
  params: string;
  amount: number;
  state: 'done' | 'frozen' | 'consumed' | 'unfrozen' | 'released' | 'settled';
  holds: Detail[];
  wallet: string | null;
  businessType: string | null;
  result: Record<string, unknown>;
  ttl: { kind: 'release' | 'consume'; dueAt: number } | null;
  settledBy: 'api' | 'ttl' | null;
  consumedAmount: number | null;
  consumeResult: Record<string, unknown> | null;
  unfreezeResult: Record<string, unknown> | null;
}

interface Customer {
  createdAt: number;
  srcSeq: number;
  sources: Source[];
  txs: Record<string, Tx>;
  deposits: Record<string, { params: string; result: Record<string, unknown> }>;
  entries: ModelEntry[];
}

export interface ModelState {
  now: number;
  customers: Record<string, Customer>;
  /** Project scope: transaction id -> the customer it is bound to. */
  txIndex: Record<string, string>;
  /** Project scope: deposit idempotency key -> the customer it is bound to. */
  depositIndex: Record<string, string>;
}

interface WalletView {
  total: number;
  used: number;
  frozen: number;
  available: number;
}

/** Sums the model keeps apart from source state, for the conservation checks. */
export interface Tallies {
  deposited: number;
  used: number;
  frozen: number;
}

/** Thrown inside an operation to answer with an error; nothing of the operation applies. */
class Reject {
  constructor(readonly code: ModelErrorCode) {}
}

function isActive(s: Source, now: number): boolean {
  return (s.startsAt === null || s.startsAt <= now) && (s.expiresAt === null || s.expiresAt > now);
}

/**
 * Ends a freeze's or gateway call's holds: `amount` of them is used, drawn hold by hold in
 * order, the rest goes back to available. The details of what was used (the scripts'
 * shared consume_holds).
 */
function consumeHolds(c: Customer, tx: Tx, amount: number): Detail[] {
  let left = amount;
  const details: Detail[] = [];
  for (const h of tx.holds) {
    const s = c.sources.find((x) => x.id === h.account_id)!;
    const take = Math.min(left, h.amount);
    s.frozen -= h.amount;
    s.used += take;
    left -= take;
    if (take > 0) details.push({ ...h, amount: take });
  }
  return details;
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function readAmount(body: Record<string, unknown>, optional: boolean): number | null {
  const v = body.amount;
  if (v === undefined || v === null) {
    if (optional) return null;
    throw new Reject('invalid_amount');
  }
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0 || v > amount_max) throw new Reject('invalid_amount');
  return v;
}

/** Variant A names a deposit's wallet with `credit_type`; B with `wallet` or its deprecated alias `credit_type`. */
function readWallet(body: Record<string, unknown>, variant: Variant): string | null {
  if (variant === 'A') return (body.credit_type as string | undefined) ?? null;
  const wallet = (body.wallet as string | undefined) ?? null;
  const alias = (body.credit_type as string | undefined) ?? null;
  if (wallet !== null && alias !== null && wallet !== alias) throw new Reject('invalid_request');
  return wallet ?? alias;
}

function readTime(body: Record<string, unknown>, field: 'starts_at' | 'expires_at'): number | null {
  const v = body[field];
  if (v === undefined || v === null) return null;
  const ms = Date.parse(String(v));
  if (Number.isNaN(ms)) throw new Error(`the generator sent an unparsable ${field}: ${String(v)}`);
  return ms;
}

function readTtl(body: Record<string, unknown>): { kind: 'release' | 'consume'; seconds: number } | null {
  const release = body.release_after_seconds as number | undefined;
  const consume = body.consume_after_seconds as number | undefined;
  if (release != null && consume != null) throw new Reject('invalid_request');
  if (release != null) return { kind: 'release', seconds: release };
  if (consume != null) return { kind: 'consume', seconds: consume };
  return null;
}

function text(body: Record<string, unknown>, field: string): string | null {
  const v = body[field];
  return typeof v === 'string' ? v : null;
}

export class LedgerModel {
  constructor(
    readonly state: ModelState,
    readonly variant: Variant,
  ) {}

  static start(nowMs: number, variant: Variant = 'B'): LedgerModel {
    return new LedgerModel({ now: nowMs, customers: {}, txIndex: {}, depositIndex: {} }, variant);
  }

  clone(): LedgerModel {
    return new LedgerModel(structuredClone(this.state), this.variant);
  }

  get now(): number {
    return this.state.now;
  }

  /** Moves the model to the instant a request ran at. Time never goes back. */
  setNow(ms: number): void {
    if (ms < this.state.now) throw new Error(`model time cannot go back from ${this.state.now} to ${ms}`);
    this.state.now = ms;
  }

  /**
   * The instants in (from, to] at which an outcome can change: a source's starts_at (it
   * counts from that instant on) and expires_at (it stops counting at that instant), a
   * frozen transaction's TTL deadline (due from that instant on), and the window of the
   * deposit `req` would create. Between two of them every answer is the same, so a request
   * known only to have run somewhere in (from, to] needs to be tried at these instants only.
   */
  boundaries(from: number, to: number, req?: LedgerRequest, customerId?: string): number[] {
    const all: number[] = [];
    for (const [id, c] of Object.entries(this.state.customers)) {
      if (customerId !== undefined && id !== customerId) continue;
      for (const s of c.sources) all.push(s.startsAt ?? from, s.expiresAt ?? from);
      for (const tx of Object.values(c.txs)) if (tx.state === 'frozen' && tx.ttl) all.push(tx.ttl.dueAt);
    }
    if (req?.op === 'deposit') all.push(readTime(req.body, 'starts_at') ?? from, readTime(req.body, 'expires_at') ?? from);
    return [...new Set(all.filter((b) => b > from && b <= to))].sort((a, b) => a - b);
  }

  /** The customer an operation on this request runs its script on, when known. */
  customerOf(req: LedgerRequest): string | null {
    if (req.op === 'consume' || req.op === 'unfreeze') return this.state.txIndex[String(req.body.transaction_id)] ?? null;
    return String(req.body.customer_id);
  }

  /** Applies one request; `requestNo` names the source and record a deposit creates. */
  apply(req: LedgerRequest, requestNo: number): Expected {
    try {
      switch (req.op) {
        case 'deposit':
          return this.deposit(req.body, requestNo);
        case 'deduct':
        case 'freeze':
          return this.draw(req.op, req.body);
        case 'consume':
          return this.consume(req.body);
        case 'unfreeze':
          return this.unfreeze(req.body);
      }
    } catch (e) {
      if (e instanceof Reject) return { status: errorStatus[e.code], code: e.code };
      throw e;
    }
  }

  private deposit(body: Record<string, unknown>, requestNo: number): Expected {
    const customerId = String(body.customer_id);
    const amount = readAmount(body, false)!;
    const wallet = readWallet(body, this.variant) ?? default_wallet[this.variant];
    const startsAt = readTime(body, 'starts_at');
    const expiresAt = readTime(body, 'expires_at');
    // The order of the two times is a property of the request alone: rejected before the key binds.
    if (startsAt !== null && expiresAt !== null && expiresAt <= startsAt) throw new Reject('invalid_expires_at');
    const description = text(body, 'description');
    const label = text(body, 'source') ?? description ?? 'deposit';
    const key = text(body, 'idempotency_key');
    if (key !== null) this.bind(this.state.depositIndex, key, customerId);
    this.settleDue(customerId);

    const params = JSON.stringify([amount, wallet, label, startsAt, expiresAt, description]);
    const existing = this.state.customers[customerId];
    const prior = key === null ? undefined : existing?.deposits[key];
    if (prior) {
      if (prior.params !== params) throw new Reject('transaction_conflict');
      return { status: 200, body: { ...prior.result, is_idempotent_replay: true } };
    }
    const now = this.state.now;
    if (expiresAt !== null && expiresAt <= now) throw new Reject('invalid_expires_at');

    const c = (this.state.customers[customerId] ??= { createdAt: now, srcSeq: 0, sources: [], txs: {}, deposits: {}, entries: [] });
    const source: Source = {
      id: `src:${requestNo}`, wallet, label, seq: ++c.srcSeq, total: amount, used: 0, frozen: 0, startsAt, expiresAt,
    };
    c.sources.push(source);
    const walletTotal = c.sources.filter((s) => s.wallet === wallet && isActive(s, now)).reduce((n, s) => n + s.total, 0);
    const recordId = `rec:${requestNo}`;
    const result = {
      customer_id: customerId,
      account_id: source.id,
      credit_type: wallet,
      wallet,
      total_amount: walletTotal,
      added_amount: amount,
      starts_at: iso(startsAt),
      expires_at: iso(expiresAt),
      record_id: recordId,
    };
    if (key !== null) c.deposits[key] = { params, result };
    c.entries.push({
      type: 'DEPOSIT', transaction_id: recordId, amount, returned_amount: null, wallet,
      details: [{ account_id: source.id, credit_type: wallet, amount }],
      reason: null, business_type: null, description,
    });
    return { status: 200, body: { ...result, is_idempotent_replay: false } };
  }

  private draw(kind: 'deduct' | 'freeze', body: Record<string, unknown>): Expected {
    const customerId = String(body.customer_id);
    const txid = String(body.transaction_id);
    const amount = readAmount(body, false)!;
    // The wallet filter: A names a list (`credit_types`), B one wallet.
    const named = this.variant === 'A' ? ((body.credit_types as string[] | undefined) ?? null) : readWallet(body, 'B') === null ? null : [readWallet(body, 'B')!];
    const filter = named === null ? null : [...new Set(named)].sort();
    const ttl = kind === 'freeze' ? readTtl(body) : null;
    const businessType = text(body, 'business_type');
    const description = text(body, 'description');
    this.bind(this.state.txIndex, txid, customerId);
    this.settleDue(customerId);
    const c = this.state.customers[customerId];
    if (!c) throw new Reject('customer_not_found');

    const params = JSON.stringify([amount, filter, businessType, description, ttl]);
    const prior = c.txs[txid];
    if (prior) {
      if (prior.kind !== kind || prior.params !== params) throw new Reject('transaction_conflict');
      return { status: 200, body: { ...prior.result, is_idempotent_replay: true } };
    }

    const details = this.pick(c, amount, filter);
    for (const d of details) {
      const s = c.sources.find((x) => x.id === d.account_id)!;
      if (kind === 'deduct') s.used += d.amount;
      else s.frozen += d.amount;
    }
    // A filter of one wallet names it; otherwise the entry names the wallet drawn from, or none when the draw spans several.
    const entryWallet = named !== null && named.length === 1 ? named[0] : details.every((d) => d.credit_type === details[0].credit_type) ? details[0].credit_type : null;
    const now = this.state.now;
    const result: Record<string, unknown> =
      kind === 'deduct'
        ? { transaction_id: txid, deducted_amount: amount, deduct_details: details, deducted_at: approx(now) }
        : {
            transaction_id: txid, frozen_amount: amount, freeze_details: details, frozen_at: approx(now),
            auto_settle: ttl?.kind ?? null, auto_settle_at: ttl ? approx(now + ttl.seconds * 1000) : null,
          };
    c.txs[txid] = {
      kind, params, amount, state: kind === 'deduct' ? 'done' : 'frozen', holds: details, wallet: entryWallet, businessType, result,
      ttl: ttl ? { kind: ttl.kind, dueAt: now + ttl.seconds * 1000 } : null,
      settledBy: null, consumedAmount: null, consumeResult: null, unfreezeResult: null,
    };
    c.entries.push({
      type: kind === 'deduct' ? 'DEDUCT' : 'FREEZE', transaction_id: txid, amount, returned_amount: null, wallet: entryWallet,
      details, reason: null, business_type: businessType, description,
    });
    return { status: 200, body: { ...result, is_idempotent_replay: false } };
  }

  /** Chooses the funds for `amount`: active sources of the filter, soonest expiry, then oldest. */
  private pick(c: Customer, amount: number, filter: string[] | null): Detail[] {
    const now = this.state.now;
    let availableAll = 0;
    let availableSelected = 0;
    const eligible: Source[] = [];
    for (const s of c.sources) {
      const available = s.total - s.used - s.frozen;
      if (available <= 0 || !isActive(s, now)) continue;
      availableAll += available;
      if (filter === null || filter.includes(s.wallet)) {
        availableSelected += available;
        eligible.push(s);
      }
    }
    if (availableSelected < amount) {
      throw new Reject(filter !== null && availableAll >= amount ? 'insufficient_balance_in_selected_credit_types' : 'insufficient_balance');
    }
    eligible.sort((a, b) => {
      if (a.expiresAt !== b.expiresAt) {
        if (a.expiresAt === null) return 1;
        if (b.expiresAt === null) return -1;
        return a.expiresAt - b.expiresAt;
      }
      return a.seq - b.seq;
    });
    const details: Detail[] = [];
    let left = amount;
    for (const s of eligible) {
      if (left === 0) break;
      const take = Math.min(left, s.total - s.used - s.frozen);
      details.push({ account_id: s.id, credit_type: s.wallet, amount: take });
      left -= take;
    }
    return details;
  }

  /** The transaction a consume or unfreeze names, after its scope checks. */
  private settleTarget(body: Record<string, unknown>, missing: ModelErrorCode): { c: Customer | undefined; tx: Tx | undefined; txid: string } {
    const txid = String(body.transaction_id);
    const owner = this.state.txIndex[txid];
    if (owner === undefined) throw new Reject(missing);
    const customerId = text(body, 'customer_id');
    if (customerId !== null && customerId !== owner) throw new Reject('customer_scope_mismatch');
    this.settleDue(owner);
    const c = this.state.customers[owner];
    return { c, tx: c?.txs[txid], txid };
  }

  private consume(body: Record<string, unknown>): Expected {
    // Variant B may omit the amount (the whole freeze); A requires it.
    const requested = readAmount(body, this.variant === 'B');
    const { c, tx, txid } = this.settleTarget(body, 'no_consumable_freeze_records');
    if (!c || !tx || tx.kind !== 'freeze') throw new Reject('no_consumable_freeze_records');
    const amount = requested ?? tx.amount;
    if (tx.state === 'consumed') {
      // The identical repeat is a replay; after a TTL consume nothing is
      // (docs/API.md, "POST /v1/billing/consume").
      if (tx.settledBy === 'api' && tx.consumedAmount === amount) return { status: 200, body: { ...tx.consumeResult!, is_idempotent_replay: true } };
      throw new Reject('freeze_records_already_consumed');
    }
    if (tx.state !== 'frozen') throw new Reject('no_consumable_freeze_records');
    if (amount > tx.amount) throw new Reject('actual_amount_exceeds_frozen_amount');

    const details = consumeHolds(c, tx, amount);
    const returned = tx.amount - amount;
    tx.state = 'consumed';
    tx.settledBy = 'api';
    tx.consumedAmount = amount;
    tx.consumeResult = {
      transaction_id: txid, consumed_amount: amount, returned_amount: returned, consume_details: details, consumed_at: approx(this.state.now),
    };
    c.entries.push({
      type: 'CONSUME', transaction_id: txid, amount, returned_amount: returned, wallet: tx.wallet, details,
      reason: null, business_type: tx.businessType, description: text(body, 'description'),
    });
    this.expireSources(c);
    return { status: 200, body: { ...tx.consumeResult, is_idempotent_replay: false } };
  }

  private unfreeze(body: Record<string, unknown>): Expected {
    const { c, tx, txid } = this.settleTarget(body, 'no_unfreezable_records');
    if (!c || !tx || tx.kind !== 'freeze') throw new Reject('no_unfreezable_records');
    // A repeated unfreeze of an unfrozen transaction is a replay
    // (docs/API.md, "POST /v1/billing/unfreeze").
    if (tx.state === 'unfrozen') return { status: 200, body: { ...tx.unfreezeResult!, is_idempotent_replay: true } };
    if (tx.state !== 'frozen') throw new Reject('no_unfreezable_records');
    for (const h of tx.holds) c.sources.find((x) => x.id === h.account_id)!.frozen -= h.amount;
    tx.state = 'unfrozen';
    tx.settledBy = 'api';
    tx.unfreezeResult = { transaction_id: txid, unfrozen_amount: tx.amount, unfreeze_details: tx.holds, unfrozen_at: approx(this.state.now) };
    c.entries.push({
      type: 'UNFREEZE', transaction_id: txid, amount: tx.amount, returned_amount: null, wallet: tx.wallet, details: tx.holds,
      reason: null, business_type: tx.businessType, description: text(body, 'description'),
    });
    this.expireSources(c);
    return { status: 200, body: { ...tx.unfreezeResult, is_idempotent_replay: false } };
  }

  /** Binds an identifier to the first customer that names it (kept even when the request fails). */
  private bind(index: Record<string, string>, id: string, customerId: string): void {
    const owner = (index[id] ??= customerId);
    if (owner !== customerId) throw new Reject('transaction_conflict');
  }

  /**
   * Settles the customer's freezes whose TTL is due: a release returns the holds, a
   * consume uses all of them; either writes its ledger entry with a `reason`. Which
   * process settles them, and when after the due time, does not change the outcome.
   */
  settleDue(customerId: string): void {
    const c = this.state.customers[customerId];
    if (!c) return;
    const due = Object.entries(c.txs)
      .filter(([, tx]) => tx.state === 'frozen' && tx.ttl !== null && tx.ttl.dueAt <= this.state.now)
      .sort(([a, x], [b, y]) => x.ttl!.dueAt - y.ttl!.dueAt || (a < b ? -1 : 1));
    for (const [txid, tx] of due) {
      if (tx.kind === 'gateway') {
        // A hold that outlived its call is given back, without a ledger entry (it had none).
        for (const h of tx.holds) c.sources.find((x) => x.id === h.account_id)!.frozen -= h.amount;
        tx.state = 'released';
        tx.settledBy = 'ttl';
        continue;
      }
      const consumed = tx.ttl!.kind === 'consume';
      for (const h of tx.holds) {
        const s = c.sources.find((x) => x.id === h.account_id)!;
        s.frozen -= h.amount;
        if (consumed) s.used += h.amount;
      }
      tx.state = consumed ? 'consumed' : 'released';
      tx.settledBy = 'ttl';
      if (consumed) tx.consumedAmount = tx.amount;
      c.entries.push({
        type: consumed ? 'CONSUME' : 'UNFREEZE', transaction_id: txid, amount: tx.amount, returned_amount: consumed ? 0 : null,
        wallet: tx.wallet, details: tx.holds, reason: consumed ? 'ttl_consume' : 'ttl_release', business_type: tx.businessType,
        description: null,
      });
    }
    this.expireSources(c);
  }

  /**
   * Sources that expired with nothing frozen die, and write an EXPIRE entry with the
   * credits left (retire in lua/includes/customer.lua): at the start of every script, and
   * at its end for a source whose last freeze or hold it ended. Once per source.
   */
  private expireSources(c: Customer): void {
    for (const s of c.sources) {
      if (s.expired || s.expiresAt === null || s.expiresAt > this.state.now || s.frozen > 0) continue;
      s.expired = true;
      const left = s.total - s.used;
      if (left <= 0) continue;
      c.entries.push({
        type: 'EXPIRE', transaction_id: s.id, amount: left, returned_amount: null, wallet: s.wallet,
        details: [{ account_id: s.id, credit_type: s.wallet, amount: left }], reason: null, business_type: null, description: null,
      });
    }
  }

  settleAllDue(): void {
    for (const id of Object.keys(this.state.customers)) this.settleDue(id);
  }

  /** GET /v1/customers/{id}, after settling due TTLs as the read does. */
  customer(customerId: string): Expected {
    this.settleDue(customerId);
    const c = this.state.customers[customerId];
    if (!c) return { status: 404, code: 'customer_not_found' };
    const wallets: Record<string, WalletView & { sources: Record<string, unknown>[] }> = {};
    for (const s of [...c.sources].sort((a, b) => a.seq - b.seq)) {
      const w = (wallets[s.wallet] ??= { total: 0, used: 0, frozen: 0, available: 0, sources: [] });
      const active = isActive(s, this.state.now);
      const available = s.total - s.used - s.frozen;
      if (active) {
        w.total += s.total;
        w.used += s.used;
        w.frozen += s.frozen;
        w.available += available;
      }
      w.sources.push({
        account_id: s.id, source: s.label, credit_type: s.wallet, total: s.total, used: s.used, frozen: s.frozen,
        available: active ? available : 0, active, starts_at: iso(s.startsAt), expires_at: iso(s.expiresAt),
      });
    }
    return {
      status: 200,
      body: { id: customerId, name: null, email: null, metadata: {}, low_balance_threshold: null, auto_top_up: null, wallets, created_at: approx(c.createdAt), budget: null, key_budgets: {} },
    };
  }

  /** GET /v1/customers/{id}/balance. */
  balance(customerId: string): Expected {
    const view = this.customer(customerId);
    if ('code' in view) return view;
    const wallets = view.body.wallets as Record<string, WalletView>;
    const totals: WalletView = { total: 0, used: 0, frozen: 0, available: 0 };
    const summary: Record<string, WalletView> = {};
    for (const [name, w] of Object.entries(wallets)) {
      summary[name] = { total: w.total, used: w.used, frozen: w.frozen, available: w.available };
      for (const k of ['total', 'used', 'frozen', 'available'] as const) totals[k] += w[k];
    }
    return { status: 200, body: { customer_id: customerId, ...totals, wallets: summary, as_of: approx(this.state.now) } };
  }

  /** The ledger entries the customer should have, in the order the model wrote them. */
  entries(customerId: string): ModelEntry[] {
    return this.state.customers[customerId]?.entries ?? [];
  }

  /** Deposited, used and frozen credits summed from the operations, not from the sources. */
  tallies(customerId: string): Tallies {
    const t: Tallies = { deposited: 0, used: 0, frozen: 0 };
    for (const e of this.entries(customerId)) {
      if (e.type === 'DEPOSIT') t.deposited += e.amount;
      if (e.type === 'DEDUCT' || e.type === 'CONSUME' || e.type === 'GATEWAY') t.used += e.amount;
      if (e.type === 'FREEZE') t.frozen += e.amount;
      if (e.type === 'CONSUME') t.frozen -= e.amount + (e.returned_amount ?? 0);
      if (e.type === 'UNFREEZE') t.frozen -= e.amount;
    }
    // Gateway holds write no entry: what they freeze comes from the state.
    t.frozen += this.openHolds(customerId);
    return t;
  }

  /** Credits frozen by the customer's gateway holds in flight. */
  openHolds(customerId: string): number {
    const c = this.state.customers[customerId];
    return c ? Object.values(c.txs).filter((tx) => tx.kind === 'gateway' && tx.state === 'frozen').reduce((n, tx) => n + tx.amount, 0) : 0;
  }

  private walletAvailable(c: Customer, wallet: string): number {
    return c.sources.filter((s) => s.wallet === wallet && isActive(s, this.state.now)).reduce((n, s) => n + s.total - s.used - s.frozen, 0);
  }

  /**
   * A gateway call's hold (lua/gateway_hold-10.lua, called as the gateway calls it, plan
   * admitted, one answer): the input bound plus the output the wallet can afford, up to
   * `wanted` tokens (lowered to what it affords unless `fixed`), frozen from the wallet in
   * draw order, with a TTL of `ttlSeconds`. No ledger entry.
   */
  gatewayHold(customerId: string, txid: string, g: { wallet: string; inputBound: number; outPrice: number; wanted: number; fixed: boolean; ttlSeconds: number }): GatewayAnswer {
    this.settleDue(customerId);
    const c = this.state.customers[customerId];
    if (!c) return { status: 'customer_not_found' };
    const available = this.walletAvailable(c, g.wallet);
    const outCost = (tokens: number) => Math.ceil((tokens * g.outPrice) / 1_000_000);
    // A refusal says why: the hold it needed for `tokens`, the largest client limit that
    // fits ('' when none would), the credits available in each wallet that has any, and
    // the wallet when it never had a source.
    const refuse = (tokens: number, fits: number | null): GatewayAnswer => {
      const byWallet: Record<string, number> = {};
      for (const s of c.sources) {
        const a = s.total - s.used - s.frozen;
        if (a > 0 && isActive(s, this.state.now)) byWallet[s.wallet] = (byWallet[s.wallet] ?? 0) + a;
      }
      return {
        status: 'insufficient',
        body: {
          hold: g.inputBound + outCost(tokens), input: g.inputBound, output: outCost(tokens), tokens,
          fits: fits !== null && fits >= 1 ? fits : '', available: byWallet,
          none: c.sources.some((s) => s.wallet === g.wallet) ? '' : g.wallet,
        },
      };
    };
    let tokens = g.wanted;
    if (g.inputBound + outCost(tokens) > available) {
      if (g.fixed || g.outPrice === 0) {
        const fits = g.fixed && g.outPrice > 0 && available > g.inputBound ? Math.floor(((available - g.inputBound) * 1_000_000) / g.outPrice) : null;
        return refuse(tokens, fits);
      }
      tokens = Math.floor(((available - g.inputBound) * 1_000_000) / g.outPrice);
      if (tokens < 1) return refuse(1, null);
    }
    const hold = g.inputBound + outCost(tokens);
    const holds = hold > 0 ? this.pick(c, hold, [g.wallet]) : [];
    for (const d of holds) c.sources.find((x) => x.id === d.account_id)!.frozen += d.amount;
    c.txs[txid] = {
      kind: 'gateway', params: '', amount: hold, state: 'frozen', holds, wallet: g.wallet, businessType: null, result: {},
      ttl: { kind: 'release', dueAt: this.state.now + g.ttlSeconds * 1000 }, settledBy: null, consumedAmount: null, consumeResult: null, unfreezeResult: null,
    };
    return { status: 'ok', body: { hold, output_tokens: tokens, available } };
  }

  /**
   * A gateway call's settlement (lua/gateway_settle-10.lua): the cost from the hold, the rest
   * of the hold back, and what the hold does not cover (all of it when the TTL released the
   * hold) from the wallet's available credits, down to zero and never below. One GATEWAY
   * entry, also for a cost of 0. A settled call answers its stored result.
   */
  gatewaySettle(customerId: string, txid: string, cost: number, model: string): GatewayAnswer {
    this.settleDue(customerId);
    const c = this.state.customers[customerId];
    const tx = c?.txs[txid];
    if (!c || !tx || tx.kind !== 'gateway') return { status: 'no_consumable' };
    if (tx.state === 'settled') return { status: 'replay', body: tx.result };
    const live = tx.state === 'frozen';
    if (!live && !(tx.state === 'released' && tx.settledBy === 'ttl')) return { status: 'no_consumable' };
    const held = live ? tx.amount : 0;
    const fromHold = Math.min(cost, held);
    const details = live ? consumeHolds(c, tx, fromHold) : [];
    const wallet = tx.wallet!;
    const beyond = Math.max(0, Math.min(cost - fromHold, this.walletAvailable(c, wallet)));
    if (beyond > 0) {
      for (const p of this.pick(c, beyond, [wallet])) {
        c.sources.find((x) => x.id === p.account_id)!.used += p.amount;
        const same = details.find((d) => d.account_id === p.account_id);
        if (same) same.amount += p.amount;
        else details.push(p);
      }
    }
    const charged = fromHold + beyond;
    tx.state = 'settled';
    tx.result = {
      transaction_id: txid, cost: charged, shortfall: cost - charged, returned: held - fromHold, reserved: tx.amount, details,
      balance_after: this.walletAvailable(c, wallet), settled_at: this.state.now,
    };
    c.entries.push({
      type: 'GATEWAY', transaction_id: txid, amount: charged, returned_amount: held - fromHold, wallet, details,
      reason: null, business_type: 'TOKEN_USAGE', description: model,
    });
    this.expireSources(c);
    return { status: 'ok', body: tx.result };
  }

  /** A failed gateway call (lua/gateway_release-10.lua): the hold back, no ledger entry; a repeat is a replay. */
  gatewayRelease(customerId: string, txid: string): GatewayAnswer {
    this.settleDue(customerId);
    const c = this.state.customers[customerId];
    const tx = c?.txs[txid];
    if (!c || !tx || tx.kind !== 'gateway') return { status: 'no_consumable' };
    if (tx.state === 'released' && tx.settledBy === 'api') return { status: 'replay' };
    if (tx.state !== 'frozen') return { status: 'no_consumable' };
    for (const h of tx.holds) c.sources.find((x) => x.id === h.account_id)!.frozen -= h.amount;
    tx.state = 'released';
    tx.settledBy = 'api';
    this.expireSources(c);
    return { status: 'ok' };
  }

  /** A key that is equal for two models in the same state, whatever the order of keys and entries. */
  fingerprint(): string {
    const s = structuredClone(this.state);
    // Worlds that differ only in when the last request ran have the same future: the next one runs later than both.
    s.now = 0;
    for (const c of Object.values(s.customers)) c.entries = c.entries.map(stableJson).sort() as unknown as ModelEntry[];
    return stableJson(s);
  }
}

/** JSON with object keys sorted, so equal values give equal strings. */
export function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).sort().map((k) => `${JSON.stringify(k)}:${stableJson(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}
