/**
 * The comparison half of reconcile (src/reconcile/walk.ts drives it per customer): the
 * WATCHed snapshot of a customer's keys, the state expected as of that snapshot (the
 * ledger in PostgreSQL plus the outbox, without the records the trim archived), and the
 * differences between the two as drift items. Everything here but the snapshot read and
 * the binding check (indexDrift) is pure.
 */
import { isDeepStrictEqual } from 'node:util';
import type { QuarantineRow } from '../ledger/quarantine.js';
import { isLedgerEntry, type LedgerEntryType } from '../ledger/entries.js';
import {
  parseOutboxEntry, parseStoredSource, parseTransaction, sourcesOfHash, toSourceState, type OutboxEntry,
} from '../redis/codec.js';
import type { RedisClient } from '../redis/client.js';
import { bindingKeys, type CustomerKeys } from '../redis/keys.js';
import { comparable, type CustomerRow, type EntryRow, type FoldedCustomer } from './fold.js';
import { effectiveCounters, sourceLayout, type SourceLayout } from '../ledger/sources.js';
import type { DriftItem, QuarantinedItem } from './report.js';

/** Bindings read per batch by indexDrift. */
const index_read_batch_size = 500;
/** Outbox entries read per XRANGE of a snapshot: a long outbox is read in pages. */
const snapshot_outbox_page_size = 500;

export type IdentifiedEntry = EntryRow & { id: string; created_at: number };

export interface Snapshot {
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
export async function watchAndReadSnapshot(conn: RedisClient, k: CustomerKeys): Promise<{ snap: Snapshot; redisMs: number }> {
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
export function ledgerAsOfSnapshot(row: CustomerRow | null, stored: IdentifiedEntry[], outbox: OutboxEntry[]): { customer: CustomerRow | null; entries: EntryRow[] } {
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

const meta_fields = ['created_at', 'name', 'email', 'metadata', 'al', 'seq', 'src_seq'] as const;
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
export function layoutOf(expected: FoldedCustomer, snap: Snapshot, nowMs: number, persistedSeq: number): SourceLayout {
  const present = new Set<string>();
  const died: Record<string, string> = {};
  for (const [id, { source, died: d }] of sourcesOfHash(snap.src)) {
    if (source.w !== undefined) present.add(id);
    if (d !== null) died[id] = d;
  }
  const deadAt: Record<string, number> = {};
  for (const [id, at] of Object.entries(snap.dead)) deadAt[id] = Number(at);
  const sources = Object.values(expected.src).map(parseStoredSource);
  return sourceLayout(sources, expected.srcLastSeq, nowMs, persistedSeq, { present, deadAt, died, archived: snap.meta.src_archived === '1' }, expected.expired);
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

export function compare(
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
export async function indexDrift(
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
export interface RecordIds {
  tx: Set<string>;
  dep: Set<string>;
}

/**
 * The records the trim may have archived (src/ledger/retention.ts): final (a deduct, a
 * settled freeze or gateway call, a deposit), every entry of theirs in PostgreSQL, and
 * the last one written at or before `cutoffMs`. `lastAt` gets the time of each final
 * record's last entry (the `fin` score a repair writes).
 */
export function dueRecords(folded: FoldedCustomer, stored: IdentifiedEntry[], pending: OutboxEntry[], cutoffMs: number, lastAt: Map<string, number>): RecordIds {
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
export function withoutArchived(expected: FoldedCustomer, archived: RecordIds): FoldedCustomer {
  const tx = Object.fromEntries(Object.entries(expected.tx).filter(([id]) => !archived.tx.has(id)));
  const dep = Object.fromEntries(Object.entries(expected.dep).filter(([key]) => !archived.dep.has(key)));
  return { ...expected, tx, dep };
}

/**
 * The customer's quarantined entries: as the report lists them, and those whose fields
 * parse as ledger entries (Redis applied them: the fold takes them as the outbox's).
 */
export function quarantinedOf(ids: { projectId: string; customerId: string }, rows: readonly QuarantineRow[]): { items: QuarantinedItem[]; entries: OutboxEntry[] } {
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
