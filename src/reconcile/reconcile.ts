/**
 * reconcile: compares every customer's Redis state with the state folded from its
 * PostgreSQL ledger (the system of record) and, with `repair`, rewrites Redis from the
 * fold. This is also the cold start after a Redis loss: a customer that PostgreSQL knows
 * and Redis does not is drift, and repair recreates it.
 *
 * Per customer: drain its outbox into PostgreSQL, WATCH its keys, fold the ledger plus
 * whatever the outbox holds by now (acknowledged operations all the same), add what Redis
 * holds by design and the ledger never sees (gateway calls in flight, see
 * withRedisOnlyState), compare, and end with MULTI/EXEC (the rewrite, or nothing). EXEC
 * fails when any of the keys changed after the WATCH, so neither the comparison nor the
 * rewrite can mix states from before and after a concurrent operation; such a customer
 * is simply tried again after a short random pause.
 *
 * A customer whose outbox entries clash with PostgreSQL's sequence numbers (Redis forgot
 * entries PostgreSQL has, then wrote new ones under the same numbers: the wedge) is
 * folded with those entries renumbered after PostgreSQL's last; `repair` inserts them so
 * renumbered and rebuilds the customer from the whole ledger. See docs/OPERATIONS.md.
 *
 * An entry PostgreSQL refused for good sits in quarantine (src/ledger/quarantine.ts): its
 * seq is a known hole, reported as `quarantined`. Redis applied it, so the fold takes it
 * from its stored fields when they parse; `repair` leaves such a customer's Redis alone
 * until an operator has released the entry.
 */
import { isDeepStrictEqual } from 'node:util';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import '../schema/zod.js';
import { ledgerEntryRow } from '../ledger/queries.js';
import { isSeqClash, LedgerOutbox, setAsideKey } from '../ledger/outbox.js';
import type { QuarantineQueries, QuarantineRow } from '../ledger/quarantine.js';
import { isLedgerEntry, type LedgerEntryType } from '../ledger/entries.js';
import {
  parseOutboxEntry, parseStoredSource, parseTransaction, sourcesOfHash, toSourceState, type OutboxEntry,
} from '../redis/codec.js';
import { createClient, isCluster, type RedisClient } from '../redis/client.js';
import { scanKeys } from '../redis/scan.js';
import { activeKey, activeKeyOf, bindingKeys, customerBase, customerKeysFromBase, dirty_shards, parseCustomerBase, type CustomerKeys } from '../redis/keys.js';
import { Bindings, claimId } from '../ledger/bindings.js';
import { registerScripts } from '../redis/scripts.js';
import { queueExpiry } from '../ledger/expiry.js';
import type { Queue } from 'bullmq';
import type { Logger } from 'pino';
import type { Config } from '../config/index.js';
import type { LedgerQueries } from '../ledger/queries.js';
import type { Clock } from '../ledger/clock.js';
import type { LedgerJobData } from '../ledger/expiry.js';
import { comparable, FoldError, foldCustomer, withRedisOnlyState, type CustomerRow, type EntryRow, type FoldedCustomer } from './fold.js';
import { effectiveCounters, sourceLayout, type SourceLayout } from '../ledger/sources.js';

/** Redis hash: customer key base -> JSON list of the anomalies its last repair found (/health counts them). */
export const anomaliesKey = (prefix: string) => `${prefix}ledger:anomalies`;

/** Tries per customer when concurrent operations keep changing its keys. */
const attempts_max = 10;
/** Upper bound of the random pause before try n (times n), so busy customers get a quiet moment. */
const retry_pause_ms_max = 10;
const scan_count = 1_000;
const index_read_batch_size = 500;
/** Customers read from PostgreSQL per query: reconcile walks them in pages of this many. */
export const customer_page_size = 500;
/** Outbox entries read per XRANGE of a snapshot: a long outbox is read in pages. */
const snapshot_outbox_page_size = 500;

interface DriftItem {
  project_id: string;
  customer_id: string;
  /**
   * What differs: `customer` (missing on one side), `meta.<field>`, `source` (missing on
   * one side) or `source.<field>`, `transaction` or `transaction.<field>`, `deposit` or
   * `deposit.<field>`, `ttl`, `txidx`, `depidx`, or `ledger.seq` (outbox entries whose
   * numbers PostgreSQL already holds for others: `redis` lists them, `expected` says
   * where they are renumbered from).
   */
  field: string;
  source?: string;
  transaction_id?: string;
  idempotency_key?: string;
  redis: unknown;
  expected: unknown;
}

/**
 * What a run found. The lists hold at most `items_max` entries each (report_items_max
 * unless the caller says otherwise), the first found; the `_total` counts cover all, so
 * that a run over a million drifted customers keeps a bounded report.
 */
export interface ReconcileReport {
  customers_checked: number;
  customers_with_drift: number;
  customers_repaired: number;
  drift_total: number;
  drift: DriftItem[];
  /**
   * Customers that could not be checked. `permanent`: their ledger does not fold (trying
   * again changes nothing); otherwise a store failed or the keys kept changing.
   */
  errors_total: number;
  errors: { project_id: string; customer_id: string; message: string; permanent: boolean }[];
  /**
   * What a fold found and kept rather than fail on: entries written on a Redis that had
   * forgotten earlier ones (renumbered after PostgreSQL's last), settlements or repeats
   * they made, and sources drawn beyond their total (shortfalls).
   */
  anomalies_total: number;
  anomalies: { project_id: string; customer_id: string; message: string }[];
  /**
   * Ledger entries PostgreSQL refused for good, parked in quarantine and not released:
   * holes in the ledger of record (docs/OPERATIONS.md, "Quarantined ledger entries").
   */
  quarantined_total: number;
  quarantined: QuarantinedItem[];
  /** The cap of each list. */
  items_max: number;
}

/** A quarantined entry as the report names it. */
interface QuarantinedItem {
  project_id: string;
  customer_id: string;
  /** The quarantine row (`npm run quarantine -- show <id>`). */
  quarantine_id: number;
  /** The hole's seq; null when the entry does not name one. */
  seq: number | null;
  entry_id: string | null;
  error: string;
}

/** Where a run is: reported to `onProgress` at most every progress_interval_ms, and once at the end. */
export interface ReconcileProgress {
  customers_done: number;
  /**
   * The customers PostgreSQL holds in the run's scope when it starts (or the customers
   * given). The scan for customers only Redis holds comes after and may add to `done`.
   */
  customers_total: number;
  customers_with_drift: number;
  drift_total: number;
  errors_total: number;
  elapsed_ms: number;
}

/** Drift items, errors and anomalies a report lists at most, each (the counts cover all). */
export const report_items_max = 1_000;
/** Customers checked at once, each on a Redis connection of its own (WATCH is per connection). */
export const concurrency_default = 4;
export const concurrency_max = 64;
const progress_interval_ms = 1_000;

export interface ReconcileRuntime {
  config: Config;
  redis: RedisClient;
  db: DatabasePool;
  ledgerQueries: LedgerQueries;
  ledgerQueue: Queue<LedgerJobData>;
  clock: Clock;
  logger: Logger;
}

const customerRow = z.object({
  name: z.string().nullable(),
  email: z.string().nullable(),
  metadata: z.unknown(),
  created_at: z.number(),
});

const entryRow = ledgerEntryRow.pick({ id: true, seq: true, type: true, transaction_id: true, amount: true, wallet: true, details: true, reason: true, business_type: true, result: true, extra: true, created_at: true });

function createReconcileQueries(pool: DatabasePool) {
  return {
    /** The next page of customers after `after` (keyset order: project, id). */
    customerPage(projectId: string | null, after: { project_id: string; id: string } | null, limit: number) {
      const conditions = [
        ...(projectId === null ? [] : [sql.fragment`project_id = ${projectId}`]),
        ...(after === null ? [] : [sql.fragment`(project_id, id) > (${after.project_id}, ${after.id})`]),
      ];
      return pool.any(sql.type(z.object({ project_id: z.string(), id: z.string() }))`
        SELECT project_id, id FROM customers
        ${conditions.length === 0 ? sql.fragment`` : sql.fragment`WHERE ${sql.join(conditions, sql.fragment` AND `)}`}
        ORDER BY project_id, id LIMIT ${limit}`);
    },
    /** Which of these customers PostgreSQL has. */
    existing(ids: { projectId: string; customerId: string }[]) {
      return pool.any(sql.type(z.object({ project_id: z.string(), id: z.string() }))`
        SELECT c.project_id, c.id FROM customers c
        JOIN unnest(${sql.array(ids.map((i) => i.projectId), 'text')}::text[], ${sql.array(ids.map((i) => i.customerId), 'text')}::text[]) AS w(project_id, id)
          ON c.project_id = w.project_id AND c.id = w.id`);
    },
    async customer(projectId: string, customerId: string): Promise<CustomerRow | null> {
      const row = await pool.maybeOne(sql.type(customerRow)`
        SELECT name, email, metadata, created_at FROM customers WHERE project_id = ${projectId} AND id = ${customerId}`);
      return row && { ...row, metadata: row.metadata };
    },
    async entries(projectId: string, customerId: string): Promise<IdentifiedEntry[]> {
      const rows = await pool.any(sql.type(entryRow)`
        SELECT id, seq, type, transaction_id, amount, wallet, details, reason, business_type, result, extra, created_at
        FROM ledger_entries WHERE project_id = ${projectId} AND customer_id = ${customerId}
        ORDER BY seq`);
      return rows.map((r) => ({ ...r, details: r.details, result: r.result }));
    },
    /** How many customers the scope holds (the progress's total). */
    countCustomers(projectId: string | null) {
      return pool.oneFirst(sql.type(z.object({ n: z.number() }))`
        SELECT count(*)::int8 AS n FROM customers ${projectId === null ? sql.fragment`` : sql.fragment`WHERE project_id = ${projectId}`}`);
    },
    organizationOf(projectId: string) {
      return pool.maybeOneFirst(sql.type(z.object({ organization_id: z.string() }))`
        SELECT organization_id FROM projects WHERE id = ${projectId}`);
    },
  };
}

type IdentifiedEntry = EntryRow & { id: string; created_at: number };

interface Snapshot {
  meta: Record<string, string>;
  /** The src hash as stored (src/ledger/sources.ts). */
  src: Record<string, string>;
  /** Zset member -> score, as Redis answers them (scores as strings, 'inf' for none). */
  live: Record<string, string>;
  dead: Record<string, string>;
  spent: Record<string, string>;
  tx: Record<string, string>;
  dep: Record<string, string>;
  ttl: Record<string, number>;
  /** Entries not in PostgreSQL yet: acknowledged operations all the same. */
  outbox: OutboxEntry[];
  /** The stream ids of `outbox`, in the same order. */
  outboxIds: string[];
}

function zsetOf(flat: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < flat.length; i += 2) out[flat[i]] = flat[i + 1];
  return out;
}

/**
 * WATCHes the customer's keys and reads them, with Redis's clock, in one round trip: the
 * WATCH comes first in the pipeline, so any write after the reads fails the caller's EXEC.
 */
async function watchAndReadSnapshot(conn: RedisClient, k: CustomerKeys): Promise<{ snap: Snapshot; redisMs: number }> {
  const replies = await conn
    .pipeline()
    .watch(k.meta, k.src, k.tx, k.dep, k.ttl, k.outbox, k.live, k.dead, k.spent, k.fin, k.arch)
    .hgetall(k.meta).hgetall(k.src).hgetall(k.tx).hgetall(k.dep).zrange(k.ttl, 0, -1, 'WITHSCORES').xrange(k.outbox, '-', '+', 'COUNT', snapshot_outbox_page_size)
    .zrange(k.live, 0, -1, 'WITHSCORES').zrange(k.dead, 0, -1, 'WITHSCORES').zrange(k.spent, 0, -1, 'WITHSCORES')
    .time()
    .exec();
  const values = (replies ?? []).map(([err, v]) => {
    if (err) throw err;
    return v;
  });
  const [, meta, src, tx, dep, ttlFlat, stream, live, dead, spent, [sec, usec]] = values as [
    unknown, Record<string, string>, Record<string, string>, Record<string, string>, Record<string, string>, string[], [string, string[]][],
    string[], string[], string[], [string, string],
  ];
  // The rest of a long outbox, page by page after the first: under the WATCH, so a
  // change between the pages fails the EXEC and the snapshot is read again.
  for (let page = stream; page.length === snapshot_outbox_page_size; ) {
    page = await conn.xrange(k.outbox, `(${page[page.length - 1][0]}`, '+', 'COUNT', snapshot_outbox_page_size);
    stream.push(...page);
  }
  const ttl: Record<string, number> = {};
  for (let i = 0; i < ttlFlat.length; i += 2) ttl[ttlFlat[i]] = Number(ttlFlat[i + 1]);
  const snap = {
    meta, src, tx, dep, ttl, live: zsetOf(live), dead: zsetOf(dead), spent: zsetOf(spent),
    outbox: stream.map(([, fields]) => parseOutboxEntry(fields)), outboxIds: stream.map(([id]) => id),
  };
  return { snap, redisMs: Number(sec) * 1000 + Math.floor(Number(usec) / 1000) };
}

/** An outbox entry as the ledger row it becomes (outboxEntryToPublic and insertEntries). */
function outboxRow(e: OutboxEntry & { type: LedgerEntryType }): IdentifiedEntry {
  return {
    id: e.id,
    seq: Number(e.seq),
    type: e.type,
    transaction_id: e.transaction_id,
    amount: Number(e.amount),
    wallet: e.wallet ?? null,
    details: e.details,
    reason: e.reason ?? null,
    business_type: e.business_type ?? null,
    result: JSON.parse(e.result),
    extra: e.x ?? null,
    created_at: Number(e.at),
  };
}

/**
 * The customer and ledger as of the snapshot: PostgreSQL plus the outbox (an entry in
 * both counts once, as PostgreSQL holds it: a renumbered entry keeps its old number in
 * the outbox until it is trimmed). A customer whose creating deposit is still in the
 * outbox takes its profile from that deposit, as the persist loop will.
 */
function ledgerAsOfSnapshot(row: CustomerRow | null, stored: IdentifiedEntry[], outbox: OutboxEntry[]): { customer: CustomerRow | null; entries: EntryRow[] } {
  const byId = new Map(stored.map((e) => [e.id, e]));
  let customer = row;
  for (const e of outbox) {
    if (!isLedgerEntry(e)) continue;
    if (!byId.has(e.id)) byId.set(e.id, outboxRow(e));
    const created = e.x?.customer as { created_at: string; name: string | null; email: string | null; metadata: string | null } | null | undefined;
    if (customer === null && created) {
      customer = {
        created_at: Number(created.created_at),
        name: created.name,
        email: created.email,
        metadata: created.metadata === null ? null : JSON.parse(created.metadata),
      };
    }
  }
  return { customer, entries: [...byId.values()] };
}

function isEmpty(s: Snapshot): boolean {
  return [s.meta, s.src, s.tx, s.dep, s.ttl, s.live, s.dead, s.spent].every((h) => Object.keys(h).length === 0);
}

const meta_fields = ['created_at', 'name', 'email', 'metadata', 'seq', 'src_seq'] as const;
const source_fields: Record<string, string> = { w: 'wallet', l: 'label', q: 'seq', t: 'total', u: 'used', f: 'frozen', s: 'starts_at', e: 'expires_at' };

function parseOr<T>(raw: string, parse: (raw: string) => T): T | string {
  try {
    return parse(raw);
  } catch {
    return raw;
  }
}

/** A source field as people read it: amounts and times as numbers, null for none. */
function sourceValue(field: string, v: unknown): unknown {
  if (v === undefined) return null;
  if (field === 'w' || field === 'l') return v;
  return v === '' ? null : Number(v);
}

/** Differences between two stored hashes whose values are JSON objects, field by field. */
function compareJsonHash(
  redis: Record<string, string>,
  expected: Record<string, string>,
  parse: (raw: string) => Record<string, unknown>,
  item: (id: string, field: string | null, redisValue: unknown, expectedValue: unknown) => void,
): void {
  for (const id of new Set([...Object.keys(redis), ...Object.keys(expected)])) {
    const r = redis[id] === undefined ? null : parseOr(redis[id], parse);
    const e = expected[id] === undefined ? null : parse(expected[id]);
    if (r === null || e === null || typeof r === 'string') {
      if (!isDeepStrictEqual(r, e)) item(id, null, r, e);
      continue;
    }
    for (const f of new Set([...Object.keys(r), ...Object.keys(e)])) {
      if (!isDeepStrictEqual(r[f], e[f])) item(id, f, r[f] ?? null, e[f] ?? null);
    }
  }
}

/**
 * The expected Redis state of a customer's sources: the fold laid out as the scripts keep
 * it at `nowMs` (src/ledger/sources.ts). A dead source that Redis no longer holds and
 * whose entries PostgreSQL has is archived, not drift.
 */
function layoutOf(expected: FoldedCustomer, snap: Snapshot, nowMs: number, persistedSeq: number): SourceLayout {
  const present = new Set<string>();
  const died: Record<string, string> = {};
  for (const [id, { source, died: d }] of sourcesOfHash(snap.src)) {
    if (source.w !== undefined) present.add(id);
    if (d !== null) died[id] = d;
  }
  const deadAt: Record<string, number> = {};
  for (const [id, at] of Object.entries(snap.dead)) deadAt[id] = Number(at);
  const sources = Object.values(expected.src).map(parseStoredSource);
  return sourceLayout(sources, expected.srcLastSeq, nowMs, persistedSeq, { present, deadAt, died, archived: snap.meta.src_archived === '1' });
}

/** The sources of a src hash (or of a layout's src fields) as whole sources, by id. */
function wholeSources(hash: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [id, { source }] of sourcesOfHash(hash)) out[id] = JSON.stringify(source);
  return out;
}

function compareSources(base: { project_id: string; customer_id: string }, snap: Snapshot, expected: FoldedCustomer, layout: SourceLayout, nowMs: number): DriftItem[] {
  const drift: DriftItem[] = [];
  compareJsonHash(wholeSources(snap.src), wholeSources(layout.src), JSON.parse, (id, f, r, e) => {
    if (f === null) drift.push({ ...base, field: 'source', source: id, redis: r, expected: e });
    else drift.push({ ...base, field: `source.${source_fields[f] ?? f}`, source: id, redis: sourceValue(f, r), expected: sourceValue(f, e) });
  });
  // The live set: every source that can still give credits, under its draw-order member.
  // A source that expired with nothing frozen may wait there until a draw passes it.
  const expiredSince = (member: string) => {
    const id = member.slice(member.indexOf(':') + 1);
    const raw = expected.src[id];
    if (raw === undefined) return false;
    const s = toSourceState(parseStoredSource(raw));
    return s.frozen <= 0 && s.expiresAtMs !== null && s.expiresAtMs <= nowMs;
  };
  for (const m of new Set([...Object.keys(snap.live), ...Object.keys(layout.live)])) {
    const r = snap.live[m] ?? null;
    const e = layout.live[m] ?? null;
    if (r === e || (e === null && expiredSince(m))) continue;
    drift.push({ ...base, field: 'source.live', source: m.slice(m.indexOf(':') + 1), redis: r, expected: e });
  }
  for (const id of Object.keys(layout.dead)) {
    const lazily = expiredSince(`0:${id}`) && Object.keys(snap.live).some((m) => m.endsWith(`:${id}`));
    if (snap.dead[id] === undefined && !lazily) drift.push({ ...base, field: 'source.dead', source: id, redis: null, expected: 'dead' });
  }
  for (const id of Object.keys(snap.dead)) {
    if (layout.dead[id] === undefined) drift.push({ ...base, field: 'source.dead', source: id, redis: 'dead', expected: null });
  }
  // Spent sources still counted in their wallet's totals; those expired by now are taken
  // out of the counters lazily, so both sides are compared as of now.
  const spent: Record<string, number> = {};
  for (const [m, at] of Object.entries(snap.spent)) spent[m] = Number(at);
  for (const m of new Set([...Object.keys(spent), ...Object.keys(layout.spent)])) {
    const r = spent[m] !== undefined && spent[m] > nowMs ? spent[m] : null;
    const e = layout.spent[m] ?? null;
    if (r !== e) drift.push({ ...base, field: 'source.spent', source: m.split('|')[0], redis: r, expected: e });
  }
  const counters = effectiveCounters(snap.meta, spent, nowMs);
  for (const f of new Set([...Object.keys(counters), ...Object.keys(layout.meta).filter((k) => /^w[tu]:/.test(k))])) {
    const r = counters[f] ?? null;
    const e = layout.meta[f] === undefined ? null : Number(layout.meta[f]);
    if (r !== e) drift.push({ ...base, field: `meta.${f}`, redis: r, expected: e });
  }
  for (const f of ['src_total', 'src_archived']) {
    const r = snap.meta[f] ?? null;
    const e = layout.meta[f] ?? null;
    if (r !== e) drift.push({ ...base, field: `meta.${f}`, redis: r, expected: e });
  }
  return drift;
}

function compare(
  ids: { projectId: string; customerId: string },
  snap: Snapshot,
  expected: FoldedCustomer | null,
  layout: SourceLayout | null,
  nowMs: number,
): DriftItem[] {
  const base = { project_id: ids.projectId, customer_id: ids.customerId };
  if (expected === null) return isEmpty(snap) ? [] : [{ ...base, field: 'customer', redis: 'present', expected: null }];
  if (isEmpty(snap)) return [{ ...base, field: 'customer', redis: null, expected: 'present' }];
  const drift: DriftItem[] = [];

  for (const f of meta_fields) {
    const r = snap.meta[f] ?? null;
    const e = expected.meta[f] ?? null;
    // PostgreSQL keeps metadata as jsonb, which does not keep the key order of the request.
    const same = f === 'metadata' && r !== null && e !== null ? isDeepStrictEqual(parseOr(r, JSON.parse), JSON.parse(e)) : r === e;
    if (!same) drift.push({ ...base, field: `meta.${f}`, redis: r, expected: e });
  }

  drift.push(...compareSources(base, snap, expected, layout!, nowMs));
  compareJsonHash(snap.tx, expected.tx, comparable, (id, f, r, e) => {
    drift.push({ ...base, field: f === null ? 'transaction' : `transaction.${f}`, transaction_id: id, redis: r, expected: e });
  });
  compareJsonHash(snap.dep, expected.dep, comparable, (id, f, r, e) => {
    drift.push({ ...base, field: f === null ? 'deposit' : `deposit.${f}`, idempotency_key: id, redis: r, expected: e });
  });
  for (const id of new Set([...Object.keys(snap.ttl), ...Object.keys(expected.ttl)])) {
    const r = snap.ttl[id] ?? null;
    const e = expected.ttl[id] ?? null;
    if (r !== e) drift.push({ ...base, field: 'ttl', transaction_id: id, redis: r, expected: e });
  }
  return drift;
}

/**
 * Binding entries (src/ledger/bindings.ts) that do not name this customer: transaction
 * ids, then deposit keys. Records the trim may have archived are not looked at: their
 * binding may be gone. Nor is one the trim archived after the snapshot `bound` comes from
 * (it became due meanwhile: its binding is gone, its record listed in `arch`, the
 * customer's `archKey`), which a missing binding is checked against before it counts.
 */
async function indexDrift(
  redis: RedisClient, prefix: string, ids: { projectId: string; customerId: string }, bound: { tx: string[]; dep: string[] }, archKey: string,
): Promise<DriftItem[]> {
  const drift: DriftItem[] = [];
  const check = async (kind: 't' | 'd', names: string[]) => {
    for (let i = 0; i < names.length; i += index_read_batch_size) {
      const batch = names.slice(i, i + index_read_batch_size);
      // One command each, not a pipeline: the buckets are in different slots (on a
      // cluster, different masters); auto-pipelining still batches them per connection.
      const owners = (await Promise.all(batch.map((name) => redis.hget(bindingKeys(prefix, ids.projectId, kind, name).ids, name)))).map((v) =>
        v === null ? null : v.slice(0, v.lastIndexOf('|')),
      );
      // A gateway call's record is listed as `g:`, every other transaction as `t:`.
      const archivedSince = await Promise.all(
        batch.map(async (name, j) => {
          if (owners[j] !== null) return false;
          const members = kind === 't' ? [`t:${name}`, `g:${name}`] : [`d:${name}`];
          return (await Promise.all(members.map((m) => redis.zscore(archKey, m)))).some((score) => score !== null);
        }),
      );
      batch.forEach((name, j) => {
        if (owners[j] === ids.customerId || archivedSince[j]) return;
        const id = kind === 't' ? { transaction_id: name } : { idempotency_key: name };
        drift.push({ project_id: ids.projectId, customer_id: ids.customerId, field: kind === 't' ? 'txidx' : 'depidx', ...id, redis: owners[j], expected: ids.customerId });
      });
    }
  };
  await check('t', bound.tx);
  await check('d', bound.dep);
  return drift;
}

/** Record ids of one customer, transactions and deposit keys. */
interface RecordIds {
  tx: Set<string>;
  dep: Set<string>;
}

/**
 * The records the trim may have archived (src/ledger/retention.ts): final (a deduct, a
 * settled freeze or gateway call, a deposit), every entry of theirs in PostgreSQL, and
 * the last one written at or before `cutoffMs`. `lastAt` gets the time of each final
 * record's last entry (the `fin` score a repair writes).
 */
function dueRecords(folded: FoldedCustomer, stored: IdentifiedEntry[], pending: OutboxEntry[], cutoffMs: number, lastAt: Map<string, number>): RecordIds {
  const unpersisted = new Set(pending.map((e) => e.transaction_id));
  const storedIds = new Set(stored.map((e) => e.id));
  for (const e of pending) {
    const ik = e.x?.ik;
    if (!storedIds.has(e.id) && typeof ik === 'string') unpersisted.add(`d:${ik}`);
  }
  for (const e of stored) {
    const ik = e.extra?.ik;
    if (e.type === 'DEPOSIT' && typeof ik === 'string') lastAt.set(`d:${ik}`, e.created_at);
    else lastAt.set(`t:${e.transaction_id}`, Math.max(lastAt.get(`t:${e.transaction_id}`) ?? 0, e.created_at));
  }
  const due: RecordIds = { tx: new Set(), dep: new Set() };
  for (const [id, raw] of Object.entries(folded.tx)) {
    const tx = parseTransaction(raw);
    const final = tx.k === 'deduct' || tx.st !== 'frozen';
    const at = lastAt.get(`t:${id}`);
    if (final && at !== undefined && at <= cutoffMs && !unpersisted.has(id)) due.tx.add(id);
  }
  for (const key of Object.keys(folded.dep)) {
    const at = lastAt.get(`d:${key}`);
    if (at !== undefined && at <= cutoffMs && !unpersisted.has(`d:${key}`)) due.dep.add(key);
  }
  return due;
}

/** The fold without the records archived from Redis: those due that Redis no longer holds. */
function withoutArchived(expected: FoldedCustomer, archived: RecordIds): FoldedCustomer {
  const tx = Object.fromEntries(Object.entries(expected.tx).filter(([id]) => !archived.tx.has(id)));
  const dep = Object.fromEntries(Object.entries(expected.dep).filter(([key]) => !archived.dep.has(key)));
  return { ...expected, tx, dep };
}

/**
 * Rewrites the customer's keys from the fold. `fin` and `arch` are not cleared: the
 * bindings of refused operations listed there are Redis-only state, and a record waiting
 * for its deletion is either written again here (and listed as final again, below) or
 * left as it was. Every final record written is listed as final (NX: a listed one keeps
 * its time), scored by its last entry's time.
 */
function queueRewrite(m: ReturnType<RedisClient['multi']>, k: CustomerKeys, folded: FoldedCustomer, layout: SourceLayout, lastAt: Map<string, number>): void {
  m.del(k.meta, k.src, k.tx, k.dep, k.ttl, k.live, k.dead, k.spent);
  m.hset(k.meta, { ...folded.meta, ...layout.meta });
  if (Object.keys(layout.src).length > 0) m.hset(k.src, layout.src);
  const live = Object.entries(layout.live).flatMap(([member, score]) => [score, member]);
  if (live.length > 0) m.zadd(k.live, ...live);
  const dead = Object.entries(layout.dead).flatMap(([id, at]) => [at, id]);
  if (dead.length > 0) m.zadd(k.dead, ...dead);
  const spent = Object.entries(layout.spent).flatMap(([member, at]) => [at, member]);
  if (spent.length > 0) m.zadd(k.spent, ...spent);
  if (Object.keys(folded.tx).length > 0) m.hset(k.tx, folded.tx);
  if (Object.keys(folded.dep).length > 0) m.hset(k.dep, folded.dep);
  const ttl = Object.entries(folded.ttl).flatMap(([id, at]) => [at, id]);
  if (ttl.length > 0) m.zadd(k.ttl, ...ttl);
  const fin: (string | number)[] = [];
  for (const [id, raw] of Object.entries(folded.tx)) {
    const tx = parseTransaction(raw);
    if (tx.k !== 'deduct' && tx.st === 'frozen') continue;
    fin.push(lastAt.get(`t:${id}`) ?? Date.now(), `${tx.k === 'gateway' ? 'g' : 't'}:${id}`);
  }
  for (const key of Object.keys(folded.dep)) fin.push(lastAt.get(`d:${key}`) ?? Date.now(), `d:${key}`);
  if (fin.length > 0) m.zadd(k.fin, 'NX', ...fin);
}

/**
 * The wedge: outbox entries not in PostgreSQL (by id) whose seq PostgreSQL already holds
 * for other entries. Redis forgot those entries and numbered new ones from where it had
 * stopped. Every pending ledger entry is then renumbered, in outbox order, after
 * PostgreSQL's last seq: the entries Redis forgot stay as they were acknowledged, and the
 * ones written on the stale state (acknowledged too) follow them, marked with
 * `renumbered_from` (their number in Redis) so that every later fold knows what they are.
 * Null when nothing clashes.
 */
function renumberClashes(
  stored: IdentifiedEntry[],
  outbox: OutboxEntry[],
): { renumbered: Map<string, OutboxEntry>; firstSeq: number; clashingSeqs: number[] } | null {
  const storedIds = new Set(stored.map((e) => e.id));
  const storedSeqs = new Set(stored.map((e) => e.seq));
  const pending = outbox.filter((e) => isLedgerEntry(e) && !storedIds.has(e.id));
  const clashingSeqs = pending.filter((e) => storedSeqs.has(Number(e.seq))).map((e) => Number(e.seq));
  if (clashingSeqs.length === 0) return null;
  const last = stored.reduce((max, e) => Math.max(max, e.seq), 0);
  const renumbered = new Map<string, OutboxEntry>();
  pending.forEach((e, i) => renumbered.set(e.id, { ...e, seq: String(last + 1 + i), x: { ...(e.x ?? {}), renumbered_from: e.seq } }));
  return { renumbered, firstSeq: last + 1, clashingSeqs };
}

function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * Copies to PostgreSQL the outboxes of the customers in the active index (of one project,
 * or all): those written in the last window or with entries still waiting
 * (workers/sweep.ts). A customer whose first entries are still in its outbox is then in
 * PostgreSQL when the pages are read. A seq clash is left to the customer's check.
 */
async function drainActive(redis: RedisClient, persist: LedgerOutbox, prefix: string, projectId: string | null): Promise<void> {
  const head = `${prefix}c:{${projectId === null ? '' : `${encodeURIComponent(projectId)}:`}`;
  for (let shard = 0; shard < dirty_shards; shard++) {
    for (let start = 0; ; start += customer_page_size) {
      const bases = await redis.zrange(activeKey(prefix, shard), start, start + customer_page_size - 1);
      for (const base of bases) {
        if (!base.startsWith(head)) continue;
        await persist.drain(base).catch((err: unknown) => {
          if (!isSeqClash(err)) throw err;
        });
      }
      if (bases.length < customer_page_size) break;
    }
  }
}

/**
 * Customers whose keys Redis holds (of one project, or all), batch by batch as the scan of
 * every master finds them; a customer may come in several batches.
 */
async function scanRedisCustomers(
  redis: RedisClient,
  prefix: string,
  projectId: string | null,
  each: (found: [string, { projectId: string; customerId: string }][]) => Promise<void>,
): Promise<void> {
  const head = `${prefix}c:{${projectId === null ? '' : `${encodeURIComponent(projectId)}:`}`;
  await scanKeys(redis, `${globEscape(head)}*`, scan_count, async (keys) => {
    const found = new Map<string, { projectId: string; customerId: string }>();
    for (const key of keys) {
      const end = key.lastIndexOf('}:');
      const base = end > 0 ? key.slice(0, end + 1) : null;
      const ids = base === null ? null : parseCustomerBase(prefix, base);
      if (base !== null && ids) found.set(base, ids);
    }
    if (found.size > 0) await each([...found]);
  });
}

interface CustomerOutcome {
  drift: DriftItem[];
  anomalies: string[];
  /** The customer's keys were rewritten from the fold. */
  rewritten: boolean;
  /** The state folded from PostgreSQL alone; null when PostgreSQL has no such customer. */
  folded: FoldedCustomer | null;
  /** Records whose binding must name this customer (not archived, nor due for it). */
  bound: { tx: string[]; dep: string[] };
  /** Records archived from Redis (due, and absent): with a repair, their ids go into the Bloom filters. */
  archived: RecordIds;
  /** The customer's entries in quarantine. */
  quarantined: QuarantinedItem[];
}

/**
 * The customer's quarantined entries: as the report lists them, and those whose fields
 * parse as ledger entries (Redis applied them: the fold takes them as the outbox's).
 */
function quarantinedOf(ids: { projectId: string; customerId: string }, rows: readonly QuarantineRow[]): { items: QuarantinedItem[]; entries: OutboxEntry[] } {
  const items: QuarantinedItem[] = [];
  const entries: OutboxEntry[] = [];
  for (const r of rows) {
    items.push({ project_id: ids.projectId, customer_id: ids.customerId, quarantine_id: r.id, seq: r.seq, entry_id: r.entry_id, error: r.error });
    try {
      const e = parseOutboxEntry(r.fields.map((f) => f.toString('utf8')));
      if (isLedgerEntry(e)) entries.push(e);
    } catch {
      // Listed, not folded: the comparison then shows what it did.
    }
  }
  return { items, entries };
}

/**
 * Drains, folds, compares and (with `repair`) rewrites one customer's keys; tries again
 * when an operation changed them meanwhile. The project index is not looked at here.
 *
 * One round trip WATCHes the keys and reads them (with the outbox); the ledger is read
 * after it. An entry written before the WATCH is then in the outbox as read, or was
 * deleted from it after the WATCH (the EXEC fails), or before, which a worker does only
 * once the entry is committed (so the later ledger read has it); an entry in both counts
 * once. Any write after the WATCH fails the EXEC. A customer whose outbox holds entries is
 * drained into PostgreSQL first and read again: not needed for the comparison, it keeps
 * PostgreSQL, the record, up to date (most customers have none, and skip the drain's
 * round trip).
 */
async function reconcileKeys(
  ctx: {
    conn: RedisClient; persist: LedgerOutbox; queries: ReturnType<typeof createReconcileQueries>; ledgerQueries: LedgerQueries; clockOffsetMs: number; retentionMs: number;
    quarantine: QuarantineQueries;
    /**
     * Whether any entry was in quarantine when the run started. When none was, only a
     * customer whose outbox this run drained (and so may have parked) reads it.
     */
    anyQuarantined: boolean;
  },
  base: string,
  ids: { projectId: string; customerId: string },
  repair: boolean,
): Promise<CustomerOutcome> {
  const k = customerKeysFromBase(base);
  let drained = false;
  /** EXECs failed so far: a busy customer gets a longer pause each time. */
  let changed = 0;
  for (let attempt = 0; attempt < attempts_max; attempt++) {
    if (changed > 0) await new Promise((r) => setTimeout(r, Math.random() * retry_pause_ms_max * changed));
    const { snap, redisMs } = await watchAndReadSnapshot(ctx.conn, k);
    if (snap.outbox.length > 0 && !drained) {
      drained = true;
      try {
        await ctx.persist.drain(base);
      } catch (err) {
        // A seq clash is handled below; anything else stops this customer.
        if (!isSeqClash(err)) throw err;
      }
      continue;
    }
    const [row, stored, parked] = await Promise.all([
      ctx.queries.customer(ids.projectId, ids.customerId),
      ctx.queries.entries(ids.projectId, ids.customerId),
      ctx.anyQuarantined || drained ? ctx.quarantine.open({ projectId: ids.projectId, customerId: ids.customerId }) : [],
    ]);
    const quarantined = quarantinedOf(ids, parked);
    const clash = renumberClashes(stored, snap.outbox);
    const outbox = snap.outbox.map((e) => clash?.renumbered.get(e.id) ?? e);
    const ledger = ledgerAsOfSnapshot(row, stored, [...quarantined.entries, ...outbox]);
    const anomalies: string[] = [];
    const folded = ledger.customer === null ? null : foldCustomer(ledger.customer, ledger.entries, { anomalies });
    const nowMs = redisMs + ctx.clockOffsetMs;
    const lastAt = new Map<string, number>();
    const due = folded === null ? { tx: new Set<string>(), dep: new Set<string>() } : dueRecords(folded, stored, outbox, redisMs - ctx.retentionMs, lastAt);
    const archived: RecordIds = { tx: new Set([...due.tx].filter((id) => snap.tx[id] === undefined)), dep: new Set([...due.dep].filter((key) => snap.dep[key] === undefined)) };
    const expected = folded === null ? null : withoutArchived(withRedisOnlyState(folded, snap), archived);
    const persistedSeq = stored.reduce((max, e) => Math.max(max, e.seq), 0);
    const layout = expected === null ? null : layoutOf(expected, snap, nowMs, persistedSeq);
    const drift = compare(ids, snap, expected, layout, nowMs);
    if (clash) {
      anomalies.unshift(`${clash.renumbered.size} entries written on a Redis that had forgotten entries in PostgreSQL, renumbered from seq ${clash.firstSeq}`);
      drift.push({ project_id: ids.projectId, customer_id: ids.customerId, field: 'ledger.seq', redis: clash.clashingSeqs, expected: `renumbered from ${clash.firstSeq}` });
    }
    // A customer with entries in quarantine is rewritten only once they are released: the
    // fold may lack what Redis applied.
    const rewrite = repair && expected !== null && drift.length > 0 && quarantined.items.length === 0;
    // The renumbered entries go to PostgreSQL before the rewrite that trims them from the
    // outbox: should the EXEC fail, the next attempt finds them in PostgreSQL by id.
    if (rewrite && clash) await ctx.ledgerQueries.insertEntries([...clash.renumbered.values()]);
    const m = ctx.conn.multi();
    if (rewrite) queueRewrite(m, k, expected, layout!, lastAt);
    if (rewrite && clash) {
      const trimmed = snap.outboxIds.filter((_, i) => clash.renumbered.has(snap.outbox[i].id));
      if (trimmed.length > 0) m.xdel(k.outbox, ...trimmed);
    }
    // Null: a watched key changed, so the snapshot may not match the ledger read.
    const bound = {
      tx: Object.keys(folded?.tx ?? {}).filter((id) => !due.tx.has(id)),
      dep: Object.keys(folded?.dep ?? {}).filter((key) => !due.dep.has(key)),
    };
    if ((await m.exec()) !== null) return { drift, anomalies, rewritten: rewrite, folded, bound, archived, quarantined: quarantined.items };
    changed++;
  }
  throw new Error(`the customer's keys kept changing over ${attempts_max} attempts`);
}


type CustomerIds = { projectId: string; customerId: string };

/**
 * The customers of a scope from PostgreSQL, in keyset order, a page of `pageSize` at a
 * time; the next page is read while the current one is checked. At most two pages are
 * held, whatever the number of customers.
 */
async function* customerPages(queries: ReturnType<typeof createReconcileQueries>, projectId: string | null, pageSize: number): AsyncGenerator<CustomerIds> {
  let next = queries.customerPage(projectId, null, pageSize);
  for (;;) {
    const page = await next;
    const full = page.length === pageSize;
    if (full) next = queries.customerPage(projectId, page[page.length - 1], pageSize);
    for (const row of page) yield { projectId: row.project_id, customerId: row.id };
    if (!full) return;
  }
}

/**
 * Checks (and with `repair` rewrites) every customer of the prefix, of one project, or
 * only the `customers` given (the CLI's --customer, the recovery after a Redis restart,
 * the persist loop's repair of a clashing customer).
 *
 * Customers come from PostgreSQL, in pages of customer_page_size (keyset order), so that
 * neither a project with a million customers nor a cluster makes one long read, and are
 * checked `concurrency` at a time, each lane on a Redis connection of its own. Nothing
 * grows with the number of customers: two pages, one customer per lane, and a report
 * whose lists stop at `itemsMax` (its counts go on). With `redisOnly` (the CLI and the
 * admin job, run by hand), an extra step then scans every master's keyspace
 * (src/redis/scan.ts) for customers Redis holds and PostgreSQL does not: they are
 * reported, never deleted. Nothing runs this scan on a timer.
 */
export async function reconcile(
  rt: ReconcileRuntime,
  opts: {
    projectId?: string;
    repair: boolean;
    customers?: CustomerIds[];
    redisOnly?: boolean;
    pageSize?: number;
    concurrency?: number;
    itemsMax?: number;
    onProgress?: (progress: ReconcileProgress) => void;
    /** Aborted: the lanes stop after their current customer and the partial report is returned. */
    signal?: AbortSignal;
  },
): Promise<ReconcileReport> {
  const prefix = rt.config.REDIS_PREFIX;
  const queries = createReconcileQueries(rt.db);
  const persist = new LedgerOutbox(rt.redis, rt.ledgerQueries, prefix, rt.logger);
  const bindings = new Bindings(rt.redis, registerScripts(rt.redis), prefix, null);
  const retentionMs = rt.config.REDIS_RETENTION_SECONDS * 1000;
  const itemsMax = opts.itemsMax ?? report_items_max;
  const concurrency = opts.concurrency ?? concurrency_default;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > concurrency_max) throw new Error(`concurrency must be an integer from 1 to ${concurrency_max}`);
  if (!Number.isInteger(itemsMax) || itemsMax < 0) throw new Error('itemsMax must be a non-negative integer');
  const report: ReconcileReport = {
    customers_checked: 0, customers_with_drift: 0, customers_repaired: 0,
    drift_total: 0, drift: [], errors_total: 0, errors: [], anomalies_total: 0, anomalies: [], quarantined_total: 0, quarantined: [], items_max: itemsMax,
  };
  const quarantine = rt.ledgerQueries.quarantine(prefix);
  const anyQuarantined = (await quarantine.openCount()) > 0;
  const keep = <T>(list: T[], items: T[]) => {
    for (const item of items) {
      if (list.length >= itemsMax) return;
      list.push(item);
    }
  };

  const startedAt = Date.now();
  let total = 0;
  let reportedAt = 0;
  const progress = (force: boolean) => {
    if (!opts.onProgress) return;
    const now = Date.now();
    if (!force && now - reportedAt < progress_interval_ms) return;
    reportedAt = now;
    opts.onProgress({
      customers_done: report.customers_checked, customers_total: total, customers_with_drift: report.customers_with_drift,
      drift_total: report.drift_total, errors_total: report.errors_total, elapsed_ms: now - startedAt,
    });
  };

  const organizations = new Map<string, string | null>();
  const checkCustomer = async (conn: RedisClient, base: string, ids: CustomerIds): Promise<void> => {
    let outcome: CustomerOutcome;
    try {
      outcome = await reconcileKeys(
        { conn, persist, queries, ledgerQueries: rt.ledgerQueries, clockOffsetMs: rt.clock.offsetMs(), retentionMs, quarantine, anyQuarantined },
        base, ids, opts.repair,
      );
    } catch (err) {
      await conn.unwatch().catch(() => undefined);
      const permanent = err instanceof FoldError;
      if (!permanent) rt.logger.error({ err, ...ids }, 'reconcile failed for a customer');
      report.errors_total++;
      keep(report.errors, [{ project_id: ids.projectId, customer_id: ids.customerId, message: (err as Error).message, permanent }]);
      // A hole is reported even when the customer could not be checked (a quarantined
      // entry whose fields do not fold may be why).
      const parked = await quarantine.open(ids).catch(() => []);
      const { items } = quarantinedOf(ids, parked);
      report.quarantined_total += items.length;
      keep(report.quarantined, items);
      return;
    }
    report.quarantined_total += outcome.quarantined.length;
    keep(report.quarantined, outcome.quarantined);
    report.anomalies_total += outcome.anomalies.length;
    keep(report.anomalies, outcome.anomalies.map((message) => ({ project_id: ids.projectId, customer_id: ids.customerId, message })));
    if (opts.repair && outcome.rewritten && outcome.anomalies.length > 0) {
      rt.logger.error({ ...ids, anomalies: outcome.anomalies }, 'reconcile kept ledger anomalies; see docs/OPERATIONS.md');
      await rt.redis.hset(anomaliesKey(prefix), base, JSON.stringify({ at: new Date().toISOString(), anomalies: outcome.anomalies }));
    }

    const { folded } = outcome;
    // An archived record's id goes into its bucket's Bloom filter (its binding, if one
    // is left, is removed), so that after a rebuild from an empty Redis a replay of it
    // still asks PostgreSQL instead of applying as new.
    if (outcome.rewritten) {
      await bindings.archive(ids.projectId, 't', ids.customerId, [...outcome.archived.tx]);
      await bindings.archive(ids.projectId, 'd', ids.customerId, [...outcome.archived.dep]);
      for (const txid of outcome.archived.tx) {
        const ik = (JSON.parse(folded?.tx[txid] ?? '{}') as { ik?: string }).ik;
        if (ik !== undefined) await bindings.archive(ids.projectId, 'g', txid, [claimId(ids.customerId, ik)]);
      }
    }
    const drift = folded === null ? outcome.drift : [...outcome.drift, ...(await indexDrift(rt.redis, prefix, ids, outcome.bound, customerKeysFromBase(base).arch))];
    if (drift.length === 0) return;
    report.customers_with_drift++;
    report.drift_total += drift.length;
    keep(report.drift, drift);
    // Redis state without a PostgreSQL customer is reported, never deleted.
    if (!opts.repair || folded === null) return;

    const boundAt = Date.now();
    for (const d of drift) {
      const [kind, id] = d.field === 'txidx' ? (['t', d.transaction_id!] as const) : d.field === 'depidx' ? (['d', d.idempotency_key!] as const) : [null, ''];
      if (kind !== null) await rt.redis.hset(bindingKeys(prefix, ids.projectId, kind, id).ids, id, `${ids.customerId}|${boundAt}`);
    }
    if (outcome.rewritten) {
      await rt.redis.hdel(setAsideKey(prefix), base);
      if (!organizations.has(ids.projectId)) organizations.set(ids.projectId, await queries.organizationOf(ids.projectId));
      const organizationId = organizations.get(ids.projectId) ?? '';
      for (const [transactionId, atMs] of Object.entries(folded.ttl)) {
        // A Redis loss takes the delayed jobs with it; one that still exists is not added again.
        await queueExpiry(rt.ledgerQueue, rt.clock, { projectId: ids.projectId, organizationId, customerId: ids.customerId, transactionId }, atMs);
      }
      // The sweeper's fallback for a job lost later: it walks the active index, which holds
      // every customer with pending TTLs (workers/sweep.ts). GT: a later mark of a process
      // keeps its window.
      const firstDue = Math.min(...Object.values(folded.ttl));
      if (Number.isFinite(firstDue)) await rt.redis.zadd(activeKeyOf(prefix, base), 'GT', firstDue, base);
    }
    rt.logger.info({ ...ids, drift: drift.length }, 'reconcile repaired a customer');
    report.customers_repaired++;
  };

  // WATCH belongs to a connection: the shared client is used by others and its MULTIs
  // would end our WATCH. One connection per lane, and no more lanes than customers given.
  const lanes = opts.customers ? Math.max(1, Math.min(concurrency, opts.customers.length)) : concurrency;
  const conns = Array.from({ length: lanes }, () => createClient(rt.config.REDIS_URL, isCluster(rt.redis), { enableAutoPipelining: false }));
  /**
   * Checks the customers of `source` on every lane; each lane takes the next customer
   * when it is done with one. A failure outside a customer's check (a store the report
   * cannot do without) stops every lane and is thrown.
   */
  const runLanes = async (source: AsyncIterator<CustomerIds> | Iterator<CustomerIds>): Promise<void> => {
    let failed = false;
    await Promise.all(conns.map(async (conn) => {
      try {
        while (!failed && !opts.signal?.aborted) {
          const next = await source.next();
          if (next.done) return;
          report.customers_checked++;
          await checkCustomer(conn, customerBase(prefix, next.value.projectId, next.value.customerId), next.value);
          progress(false);
        }
      } catch (err) {
        failed = true;
        throw err;
      }
    }));
  };
  try {
    if (opts.customers) {
      const given = new Map(opts.customers.map((ids) => [customerBase(prefix, ids.projectId, ids.customerId), ids]));
      total = given.size;
      await runLanes(given.values());
    } else {
      const projectId = opts.projectId ?? null;
      await drainActive(rt.redis, persist, prefix, projectId);
      total = await queries.countCustomers(projectId);
      progress(true);
      await runLanes(customerPages(queries, projectId, opts.pageSize ?? customer_page_size));
      if (opts.redisOnly && !opts.signal?.aborted) {
        // Bases met so far: a customer may come in several scan batches. Only customers
        // PostgreSQL lacks are kept, which is what drift there is to report.
        const seen = new Set<string>();
        await scanRedisCustomers(rt.redis, prefix, projectId, async (found) => {
          const fresh = found.filter(([base]) => !seen.has(base));
          if (fresh.length === 0) return;
          const known = new Set((await queries.existing(fresh.map(([, ids]) => ids))).map((r) => customerBase(prefix, r.project_id, r.id)));
          const unknown: CustomerIds[] = [];
          for (const [base, ids] of fresh) {
            if (known.has(base)) continue;
            seen.add(base);
            unknown.push(ids);
          }
          await runLanes(unknown.values());
        });
      }
    }
  } finally {
    for (const conn of conns) conn.disconnect();
  }
  progress(true);
  return report;
}

// The documented answer (src/openapi/).
const customerOf = { project_id: z.string(), customer_id: z.string() };
export const reconcileReportSchema = z
  .object({
    customers_checked: z.number().int(),
    customers_with_drift: z.number().int(),
    customers_repaired: z.number().int(),
    drift_total: z.number().int().openapi({ description: 'Differences found; `drift` lists the first `items_max`.' }),
    drift: z.array(
      z
        .object({
          ...customerOf,
          field: z.string().openapi({ description: 'What differs: `customer`, `meta.<field>`, `source[.<field>]`, `transaction[.<field>]`, `deposit[.<field>]`, `ttl`, `txidx`, `depidx` or `ledger.seq`.' }),
          source: z.string().optional(),
          transaction_id: z.string().optional(),
          idempotency_key: z.string().optional(),
          redis: z.unknown(),
          expected: z.unknown(),
        })
        .openapi('Drift'),
    ),
    errors_total: z.number().int(),
    errors: z.array(z.object({ ...customerOf, message: z.string(), permanent: z.boolean() }).strict()),
    anomalies_total: z.number().int(),
    anomalies: z.array(z.object({ ...customerOf, message: z.string() }).strict()),
    quarantined_total: z.number().int(),
    quarantined: z
      .array(
        z
          .object({
            ...customerOf,
            quarantine_id: z.number().int(),
            seq: z.number().int().nullable(),
            entry_id: z.string().nullable(),
            error: z.string(),
          })
          .strict(),
      )
      .openapi({ description: 'Ledger entries PostgreSQL refused for good, in quarantine: each seq a known hole in the ledger. A repair leaves these customers alone until they are released.' }),
    items_max: z.number().int().openapi({ description: 'The most entries each list holds (the first found); the `_total` counts cover all.' }),
  })
  .strict()
  .openapi('ReconcileReport');
