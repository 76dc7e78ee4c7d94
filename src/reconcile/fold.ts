/**
 * Folds a customer's ledger entries, as PostgreSQL holds them, into the Redis state the
 * Lua scripts would hold after writing those entries (lua/includes/customer.lua and
 * lua/<op>-10.lua): the meta, src, tx and dep hashes and the ttl zset. Pure: reconcile
 * compares its output with Redis and writes it back with --repair. Gateway calls leave
 * state the ledger does not carry; withRedisOnlyState() says which and takes it from Redis.
 *
 * Amounts are strings in every encoded value, as the scripts write them. JSON key order
 * is not reproduced (cjson orders keys by its hash table); readers parse, so only the
 * meaning has to match, and comparable() below compares by meaning.
 */
import {
  encodeDeposit, encodeSource, encodeTransaction, parseStoredSource, parseTransaction, type StoredHold as Hold, type StoredSource,
  type StoredTransaction,
} from '../redis/codec.js';
import { alertMetaOf, type AlertSettings } from '../customers/alerts.js';
import { projectKeyBudgetField, projectKeyBudgetValue, type BudgetPeriod } from '../ledger/budgets.js';

/** Meta fields of the auto top-up state, which only Redis keeps (lua/includes/alerts.lua). */
const top_up_meta_fields = ['tu_o', 'tu_t', 'tu_m', 'tu_s'] as const;

type EntryType = 'DEPOSIT' | 'DEDUCT' | 'FREEZE' | 'CONSUME' | 'UNFREEZE' | 'GATEWAY' | 'EXPIRE';

/** A ledger_entries row (the columns the fold needs). */
export interface EntryRow {
  seq: number;
  type: EntryType;
  transaction_id: string;
  amount: number;
  wallet: string | null;
  /** Detail items; amounts are numbers once in PostgreSQL. */
  details: unknown;
  reason: 'ttl_release' | 'ttl_consume' | null;
  business_type: string | null;
  /** The stored result (parsed jsonb of the script's result JSON). */
  result: unknown;
  /** The entry's `x`: request hash, deposit key, source and customer, freeze TTL. */
  extra: Record<string, unknown> | null;
}

/** A customers row: the profile as last written (deposit creation or PATCH). */
export interface CustomerRow {
  name: string | null;
  email: string | null;
  metadata: unknown;
  /** Epoch ms. */
  created_at: number;
  /** Balance alert settings (src/customers/alerts.ts); absent or null for none. */
  alert_settings?: unknown;
  /** The customer's spending budget (migration 016), rebuilt into the meta hash; its counters are not (docs/ARCHITECTURE.md, "Budgets"). */
  budget_limit?: number | null;
  budget_period?: string | null;
  /** Project key budgets for this customer (migration 018), {key id: {limit, period}}, rebuilt into the meta hash as `bud_pk:<id>`. */
  key_budgets?: unknown;
}

/** The Redis state of one customer: hash fields and values exactly as the scripts store them. */
export interface FoldedCustomer {
  meta: Record<string, string>;
  /** Source id -> the whole source (encodeSource); src/ledger/sources.ts lays it out in Redis. */
  src: Record<string, string>;
  /** Source id -> the seq of the last entry that moved it. */
  srcLastSeq: Record<string, number>;
  tx: Record<string, string>;
  dep: Record<string, string>;
  /** Pending TTL freezes: transaction id -> due time (ms). */
  ttl: Record<string, number>;
  /**
   * Sources whose EXPIRE entry the ledger holds (id -> credits expired). A source that
   * expired with credits left and is not listed here has yet to write its entry: it stays
   * live where Redis still holds it live (src/ledger/sources.ts, sourceLayout).
   */
  expired: Record<string, number>;
}

/** Entries that do not fold: a gap in the ledger or an entry kind this fold does not know. */
export class FoldError extends Error {}

/**
 * `anomalies` collects what the fold kept rather than failed on. An entry written on a
 * Redis that had forgotten earlier ones (a seq clash, renumbered after PostgreSQL's last
 * entry by src/reconcile/repair.ts, which marks it with `extra.renumbered_from`) may
 * contradict the entries before it: it settles a freeze that is no longer frozen, or
 * applies a transaction id or deposit key again. It does not fail the fold: it is kept,
 * folded as far as it moved money, and described. Sources drawn beyond their total (a
 * shortfall) are described too.
 */
export interface FoldOptions {
  anomalies?: string[];
  /**
   * Folds records only, from the entries of some transactions (the restore of an archived
   * record, src/ledger/bindings.ts): a source they name without its deposit is taken as
   * empty instead of failing the fold, and the sources' state means nothing.
   */
  recordsOnly?: boolean;
}

function str(n: number): string {
  // The scripts format with '%.0f'; every amount and time is an integer below 2^53.
  if (!Number.isSafeInteger(n)) throw new FoldError(`not an integer amount: ${n}`);
  return String(n);
}

function holdsOf(e: EntryRow): Hold[] {
  // cjson encodes an empty list as {}; PostgreSQL then holds [] (outboxEntryToPublic).
  if (!Array.isArray(e.details)) return [];
  return e.details.map((d: { account_id: string; credit_type: string; amount: number | string }) => ({
    account_id: d.account_id,
    credit_type: d.credit_type,
    amount: str(Number(d.amount)),
  }));
}

function needString(e: EntryRow, field: string): string {
  const v = e.extra?.[field];
  if (typeof v !== 'string') throw new FoldError(`${e.type} entry seq ${e.seq} lacks extra.${field}`);
  return v;
}

export function foldCustomer(customer: CustomerRow, entries: readonly EntryRow[], opts: FoldOptions = {}): FoldedCustomer {
  const sources = new Map<string, StoredSource>();
  const txs = new Map<string, StoredTransaction>();
  const dep: Record<string, string> = {};
  const ttl: Record<string, number> = {};
  const expired: Record<string, number> = {};
  let seq = 0;
  let srcSeq = 0;

  const srcLastSeq: Record<string, number> = {};
  const source = (e: EntryRow, id: string): StoredSource => {
    const s = sources.get(id);
    if (s) {
      srcLastSeq[id] = e.seq;
      return s;
    }
    if (!opts.recordsOnly) throw new FoldError(`${e.type} entry seq ${e.seq} names unknown source ${id}`);
    const empty: StoredSource = { id, w: '', l: '', q: '0', t: '0', u: '0', f: '0', s: '', e: '' };
    sources.set(id, empty);
    return empty;
  };
  const add = (s: StoredSource, field: 'u' | 'f', delta: number) => {
    s[field] = str(Number(s[field]) + delta);
  };
  const lenient = (e: EntryRow) => e.extra?.renumbered_from !== undefined;
  const anomaly = (message: string) => opts.anomalies?.push(message);
  /** The frozen transaction an entry settles; null for a stale settlement folded leniently. */
  const frozenTx = (e: EntryRow): StoredTransaction | null => {
    const tx = txs.get(e.transaction_id);
    if (!tx || tx.k !== 'freeze' || tx.st !== 'frozen') {
      if (!lenient(e)) throw new FoldError(`${e.type} entry seq ${e.seq} settles ${e.transaction_id}, which is not frozen`);
      anomaly(`${e.type} entry seq ${e.seq} settles ${e.transaction_id}, which an earlier entry had already settled (written on a Redis that had forgotten it)`);
      return null;
    }
    return tx;
  };
  /** A transaction id applied a second time on a Redis that had forgotten the first. */
  const repeated = (e: EntryRow): boolean => {
    if (!txs.has(e.transaction_id) || !lenient(e)) return false;
    anomaly(`${e.type} entry seq ${e.seq} applied transaction ${e.transaction_id} again (written on a Redis that had forgotten the first; the first result is kept for replays)`);
    return true;
  };

  const ordered = [...entries].sort((a, b) => a.seq - b.seq);
  for (const e of ordered) {
    if (e.seq <= seq) throw new FoldError(`entry seq ${e.seq} repeats`);
    seq = e.seq;
    const result = JSON.stringify(e.result);
    switch (e.type) {
      case 'DEPOSIT': {
        const s = parseStoredSource(needString(e, 'source'));
        sources.set(s.id, s);
        srcLastSeq[s.id] = e.seq;
        srcSeq = Math.max(srcSeq, Number(s.q));
        const ik = e.extra?.ik;
        if (typeof ik === 'string' && dep[ik] !== undefined && lenient(e)) {
          anomaly(`DEPOSIT entry seq ${e.seq} credited idempotency key ${ik} again (written on a Redis that had forgotten the first; the first result is kept for replays)`);
        } else if (typeof ik === 'string') {
          dep[ik] = encodeDeposit({ h: needString(e, 'h'), r: result });
        }
        break;
      }
      case 'DEDUCT': {
        for (const d of holdsOf(e)) add(source(e, d.account_id), 'u', Number(d.amount));
        if (repeated(e)) break;
        txs.set(e.transaction_id, { k: 'deduct', st: 'done', h: needString(e, 'h'), a: str(e.amount), r: result });
        break;
      }
      case 'FREEZE': {
        // A repeated freeze only held funds that the first freeze's settlement decides
        // about: its holds are not kept, so they cannot stay frozen for ever.
        if (repeated(e)) break;
        const holds = holdsOf(e);
        for (const d of holds) add(source(e, d.account_id), 'f', Number(d.amount));
        const tx: StoredTransaction = { k: 'freeze', st: 'frozen', h: needString(e, 'h'), a: str(e.amount), holds, w: e.wallet, r: result };
        if (e.business_type !== null) tx.bt = e.business_type;
        const kind = e.extra?.ttlk;
        if (typeof kind === 'string') {
          tx.ttlk = kind;
          tx.ttla = needString(e, 'ttla');
          ttl[e.transaction_id] = Number(tx.ttla);
        }
        if (e.extra?.pc === '1') tx.pc = '1';
        txs.set(e.transaction_id, tx);
        break;
      }
      case 'CONSUME': {
        const tx = frozenTx(e);
        if (tx === null) {
          // The stale consume charged the customer what its details say: kept as used.
          for (const d of holdsOf(e)) add(source(e, d.account_id), 'u', Number(d.amount));
          break;
        }
        if (e.reason === 'ttl_consume') {
          // settle_ttl: every hold becomes used.
          for (const h of tx.holds ?? []) {
            const s = source(e, h.account_id);
            add(s, 'f', -Number(h.amount));
            add(s, 'u', Number(h.amount));
          }
          tx.ca = tx.a;
          tx.by = 'ttl';
        } else {
          // consume-10.lua: the holds are used in the order they were drawn; the rest returns.
          let left = e.amount;
          for (const h of tx.holds ?? []) {
            const s = source(e, h.account_id);
            const held = Number(h.amount);
            const take = Math.min(left, held);
            add(s, 'f', -held);
            add(s, 'u', take);
            left -= take;
          }
          tx.ca = str(e.amount);
          tx.by = 'api';
        }
        tx.st = 'consumed';
        tx.cr = result;
        delete ttl[e.transaction_id];
        break;
      }
      case 'UNFREEZE': {
        const tx = frozenTx(e);
        // A stale release of funds an earlier entry already settled moves nothing.
        if (tx === null) break;
        for (const h of tx.holds ?? []) add(source(e, h.account_id), 'f', -Number(h.amount));
        const byTtl = e.reason === 'ttl_release';
        tx.st = byTtl ? 'released' : 'unfrozen';
        tx.by = byTtl ? 'ttl' : 'api';
        tx.ur = result;
        delete ttl[e.transaction_id];
        break;
      }
      case 'GATEWAY': {
        // gateway_settle-10.lua: the hold (never in the ledger) is gone and the cost is used.
        for (const d of holdsOf(e)) add(source(e, d.account_id), 'u', Number(d.amount));
        const reserved = (e.result as { reserved?: unknown } | null)?.reserved;
        if (typeof reserved !== 'string') throw new FoldError(`GATEWAY entry seq ${e.seq} lacks result.reserved`);
        const record: StoredTransaction = { k: 'gateway', st: 'settled', a: reserved, w: e.wallet, r: result };
        if (typeof e.extra?.gk === 'string') record.ik = e.extra.gk;
        txs.set(e.transaction_id, record);
        break;
      }
      case 'EXPIRE': {
        // retire in lua/includes/customer.lua: the source died expired with these credits
        // left. Its used and frozen stay as they were (the expiry itself takes it out of
        // every balance), so the entry is not counted against them a second time.
        const s = source(e, e.transaction_id);
        const left = Number(s.t) - Number(s.u) - Number(s.f);
        if (expired[s.id] !== undefined) anomaly(`EXPIRE entry seq ${e.seq} expires source ${s.id} again`);
        else if (left !== e.amount && !opts.recordsOnly) anomaly(`EXPIRE entry seq ${e.seq} expires ${e.amount} credits of source ${s.id}, which had ${left} left`);
        expired[s.id] = e.amount;
        break;
      }
      default:
        throw new FoldError(`entry seq ${e.seq}: entries of type ${e.type} do not fold into Redis state`);
    }
  }

  const meta: Record<string, string> = { created_at: str(customer.created_at) };
  if (customer.name !== null) meta.name = customer.name;
  if (customer.email !== null) meta.email = customer.email;
  if (customer.metadata !== null && customer.metadata !== undefined) meta.metadata = JSON.stringify(customer.metadata);
  const al = alertMetaOf((customer.alert_settings ?? null) as AlertSettings | null);
  if (al !== null) meta.al = al;
  if (seq > 0) meta.seq = str(seq);
  if (srcSeq > 0) meta.src_seq = str(srcSeq);
  // The budget's limit and period (lua/includes/budget.lua); its counters start over.
  if (customer.budget_limit != null && customer.budget_period != null) {
    meta.bud_l = str(customer.budget_limit);
    meta.bud_p = customer.budget_period;
  }
  for (const [keyId, b] of Object.entries((customer.key_budgets ?? {}) as Record<string, { limit: number; period: string }>)) {
    meta[projectKeyBudgetField(keyId)] = projectKeyBudgetValue({ limit: b.limit, period: b.period as BudgetPeriod });
  }

  const src: Record<string, string> = {};
  for (const s of sources.values()) {
    const over = Number(s.u) + Number(s.f) - Number(s.t);
    if (over > 0 && !opts.recordsOnly) anomaly(`source ${s.id} is drawn ${over} credits beyond its total (a shortfall)`);
    src[s.id] = encodeSource(s);
  }
  const tx: Record<string, string> = {};
  for (const [id, t] of txs) tx[id] = encodeTransaction(t);
  return { meta, src, srcLastSeq, tx, dep, ttl, expired };
}

/**
 * Adds to a fold the state Redis holds by design and PostgreSQL never sees, taken from
 * the customer's current Redis keys:
 * - gateway holds of calls in flight (gateway_hold-10.lua writes no entry), with their
 *   frozen credits and TTL;
 * - records of gateway calls released unbilled (their USAGE entries become usage records,
 *   not ledger entries);
 * - the fields of a settled gateway call that its GATEWAY entry does not carry (holds,
 *   TTL), which no script reads once the call is settled;
 * - entry numbers taken by USAGE entries: meta.seq only has to stay above the ledger's;
 * - the auto top-up state (meta `tu_*`, lua/includes/alerts.lua).
 * A settled call that cost something is not carried: the ledger must hold it.
 */
export function withRedisOnlyState(folded: FoldedCustomer, redis: { meta: Record<string, string>; tx: Record<string, string> }): FoldedCustomer {
  const out: FoldedCustomer = {
    meta: { ...folded.meta }, src: { ...folded.src }, srcLastSeq: folded.srcLastSeq, tx: { ...folded.tx }, dep: folded.dep, ttl: { ...folded.ttl },
    expired: folded.expired,
  };
  // The open auto top-up request and the month's requested credits (lua/includes/alerts.lua).
  for (const f of top_up_meta_fields) if (redis.meta[f] !== undefined) out.meta[f] = redis.meta[f];
  const redisSeq = Number(redis.meta.seq ?? 0);
  if (Number.isSafeInteger(redisSeq) && redisSeq > Number(out.meta.seq ?? 0)) out.meta.seq = str(redisSeq);
  for (const [id, raw] of Object.entries(redis.tx)) {
    let tx: StoredTransaction;
    try {
      tx = parseTransaction(raw);
    } catch {
      continue;
    }
    if (tx.k !== 'gateway') continue;
    const ledger = out.tx[id];
    if (ledger !== undefined) {
      out.tx[id] = encodeTransaction({ ...tx, ...parseTransaction(ledger) });
      continue;
    }
    // A settled call is in the ledger (its GATEWAY entry, amount 0 included): not carried.
    if (tx.st === 'settled') continue;
    out.tx[id] = raw;
    if (tx.st !== 'frozen') continue;
    // cjson encodes the empty holds of a zero hold (a free model) as {}, not [].
    for (const h of Array.isArray(tx.holds) ? tx.holds : []) {
      const s = out.src[h.account_id];
      if (s === undefined) continue;
      const source = parseStoredSource(s);
      source.f = str(Number(source.f) + Number(h.amount));
      out.src[h.account_id] = encodeSource(source);
    }
    if (tx.ttla !== undefined) out.ttl[id] = Number(tx.ttla);
  }
  return out;
}

/**
 * A stored tx or dep value with its nested result strings (r, cr, ur) parsed, so two
 * encodings of the same value compare equal whatever their key order. Without the budget
 * marks (`bc`, `bk`: which budget counters hold the record, lua/includes/budget.lua):
 * Redis-only bookkeeping that no entry carries, as the counters themselves.
 */
export function comparable(raw: string): Record<string, unknown> {
  const v = JSON.parse(raw) as Record<string, unknown>;
  for (const k of ['r', 'cr', 'ur']) if (typeof v[k] === 'string') v[k] = JSON.parse(v[k] as string);
  delete v.bc;
  delete v.bk;
  // The request's compared fields (`q`, src/ledger/conflicts.ts) are in no ledger entry:
  // only Redis keeps them, to name what a conflicting retry changed.
  delete v.q;
  return v;
}
