/**
 * The repair half of reconcile (src/reconcile/walk.ts calls it): the drain of the active
 * customers' outboxes before a walk, the renumbering of outbox entries that clash with
 * PostgreSQL's seqs (the wedge), the MULTI that rewrites a customer's keys from the fold,
 * and what follows a repair outside those keys: archived records into the Bloom filters,
 * bindings, expiry jobs and the active mark.
 */
import type { Queue } from 'bullmq';
import { isSeqClash, setAsideKey, type LedgerOutbox } from '../ledger/outbox.js';
import { isLedgerEntry } from '../ledger/entries.js';
import { claimId, type Bindings } from '../ledger/bindings.js';
import { queueExpiry, type LedgerJobData } from '../ledger/expiry.js';
import type { Clock } from '../ledger/clock.js';
import type { SourceLayout } from '../ledger/sources.js';
import { parseStoredSource, parseTransaction, type OutboxEntry } from '../redis/codec.js';
import type { RedisClient } from '../redis/client.js';
import { activeKey, activeKeyOf, bindingKeys, dirty_shards, expiringKeyOf, type CustomerKeys } from '../redis/keys.js';
import type { FoldedCustomer } from './fold.js';
import type { IdentifiedEntry, RecordIds } from './compare.js';
import { customer_page_size, type DriftItem } from './report.js';

/** Redis hash: customer key base -> JSON list of the anomalies its last repair found (/health counts them). */
export const anomaliesKey = (prefix: string) => `${prefix}ledger:anomalies`;

/**
 * Rewrites the customer's keys from the fold. `fin` and `arch` are not cleared: the
 * bindings of refused operations listed there are Redis-only state, and a record waiting
 * for its deletion is either written again here (and listed as final again, below) or
 * left as it was. Every final record written is listed as final (NX: a listed one keeps
 * its time), scored by its last entry's time.
 */
export function queueRewrite(m: ReturnType<RedisClient['multi']>, k: CustomerKeys, folded: FoldedCustomer, layout: SourceLayout, lastAt: Map<string, number>): void {
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
export function renumberClashes(
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

/**
 * Copies to PostgreSQL the outboxes of the customers in the active index (of one project,
 * or all): those written in the last window or with entries still waiting
 * (workers/sweep.ts). A customer whose first entries are still in its outbox is then in
 * PostgreSQL when the pages are read. A seq clash is left to the customer's check.
 */
export async function drainActive(redis: RedisClient, persist: LedgerOutbox, prefix: string, projectId: string | null): Promise<void> {
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
 * An archived record's id goes into its bucket's Bloom filter (its binding, if one is
 * left, is removed), so that after a rebuild from an empty Redis a replay of it still
 * asks PostgreSQL instead of applying as new. For a customer whose keys were rewritten.
 */
export async function archiveRecords(bindings: Bindings, ids: { projectId: string; customerId: string }, archived: RecordIds, folded: FoldedCustomer | null): Promise<void> {
  await bindings.archive(ids.projectId, 't', ids.customerId, [...archived.tx]);
  await bindings.archive(ids.projectId, 'd', ids.customerId, [...archived.dep]);
  for (const txid of archived.tx) {
    const ik = (JSON.parse(folded?.tx[txid] ?? '{}') as { ik?: string }).ik;
    if (ik !== undefined) await bindings.archive(ids.projectId, 'g', txid, [claimId(ids.customerId, ik)]);
  }
}

/** What the rest of a repair writes besides the customer's own keys. */
export interface RepairContext {
  redis: RedisClient;
  ledgerQueue: Queue<LedgerJobData>;
  clock: Clock;
  prefix: string;
  /** The project's organization, which its expiry jobs name. */
  organizationOf: (projectId: string) => Promise<string>;
}

/**
 * The rest of a drifted customer's repair: the bindings that did not name it (`txidx`
 * and `depidx` drift) name it again and, when its keys were rewritten, it is no longer
 * set aside, its TTLs get their expiry jobs again and it is marked active.
 */
export async function repairOutsideKeys(
  ctx: RepairContext, base: string, ids: { projectId: string; customerId: string }, drift: DriftItem[], folded: FoldedCustomer, rewritten: boolean,
): Promise<void> {
  const boundAt = Date.now();
  for (const d of drift) {
    const [kind, id] = d.field === 'txidx' ? (['t', d.transaction_id!] as const) : d.field === 'depidx' ? (['d', d.idempotency_key!] as const) : [null, ''];
    if (kind !== null) await ctx.redis.hset(bindingKeys(ctx.prefix, ids.projectId, kind, id).ids, id, `${ids.customerId}|${boundAt}`);
  }
  if (!rewritten) return;
  await ctx.redis.hdel(setAsideKey(ctx.prefix), base);
  const organizationId = await ctx.organizationOf(ids.projectId);
  for (const [transactionId, atMs] of Object.entries(folded.ttl)) {
    // A Redis loss takes the delayed jobs with it; one that still exists is not added again.
    await queueExpiry(ctx.ledgerQueue, ctx.clock, { projectId: ids.projectId, organizationId, customerId: ids.customerId, transactionId }, atMs);
  }
  // The sweeper's fallback for a job lost later: it walks the active index, which holds
  // every customer with pending TTLs (workers/sweep.ts). GT: a later mark of a process
  // keeps its window.
  const firstDue = Math.min(...Object.values(folded.ttl));
  if (Number.isFinite(firstDue)) await ctx.redis.zadd(activeKeyOf(ctx.prefix, base), 'GT', firstDue, base);
  // The sweeper's listing of the next source expiry without its EXPIRE entry (workers/sweep.ts).
  const firstExpiry = Math.min(...Object.values(folded.src).map(parseStoredSource).filter((s) => s.e !== '' && folded.expired[s.id] === undefined).map((s) => Number(s.e)));
  if (Number.isFinite(firstExpiry)) await ctx.redis.zadd(expiringKeyOf(ctx.prefix, base), 'LT', firstExpiry, base);
}
