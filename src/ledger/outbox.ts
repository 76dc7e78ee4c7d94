/**
 * The ledger's outbox: each customer's stream of entries that the scripts wrote and
 * PostgreSQL does not hold yet. This module reads it (always with a COUNT), parses its
 * entries, copies them to PostgreSQL (idempotent on the entry id) and only then trims
 * them. A crash between the insert and the trim repeats an insert that is skipped.
 *
 * A customer whose entries clash with sequence numbers PostgreSQL already holds (Redis
 * forgot entries that were persisted, then numbered new ones from where it had stopped)
 * can never be inserted as it is: it goes to the repair hook (reconcile's renumbering,
 * src/reconcile/repair.ts) and, should that fail, is set aside: logged, counted in
 * /health, found again by the next sweep.
 *
 * An entry PostgreSQL refuses for good (src/ledger/write-refusals.ts: a NUL byte, a number out of
 * range, a value that does not serialize) is parked in the quarantine table with its raw
 * fields (src/ledger/quarantine.ts), then trimmed like a written one: it never holds back
 * the customer's later entries or anyone else's. A failed batch is split in halves until
 * the refused customer, then the refused entries, are found: a few more transactions, no
 * pause. A transient failure (the connection, a timeout) leaves the entries for later.
 *
 * The persist loop (workers/persist.ts), PATCH of a customer profile and reconcile use it.
 */
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { customerKeysFromBase, parseCustomerBase } from '../redis/keys.js';
import { parseOutboxEntry, type OutboxEntry } from '../redis/codec.js';
import type { LedgerQueries } from './queries.js';
import type { QuarantineQueries } from './quarantine.js';
import { isSeqClash, mayBeOneCustomers, refusalOf, unwritableReason } from './write-refusals.js';

export { isSeqClash };

/** The most entries one read of one outbox returns. */
export const outbox_read_count_max = 500;

/** Redis hash: customer key base -> why its entries are set aside (JSON). /health counts it. */
export const setAsideKey = (prefix: string) => `${prefix}persist:set_aside`;

export interface OutboxHooks {
  /** Records that this prefix serves these projects, before their entries are written. */
  recordProjects?(projectIds: string[]): Promise<void>;
  /** Repairs a customer whose entries clash with PostgreSQL's seq; throws when it cannot. */
  repairSeqClash?(base: string): Promise<void>;
}

/** Entries read from one outbox: stream ids and the parsed entries, in order. */
export interface OutboxBatch {
  base: string;
  /** Every stream id read (what the trim removes once written or parked). */
  ids: string[];
  /** The entries that parse, in order, and their stream ids (`ids` itself when all parse). */
  entries: OutboxEntry[];
  entryIds: string[];
  /** Stream entries that do not parse: parked as they are. */
  unreadable: RefusedEntry[];
}

/** An outbox entry refused for good: what it was read as (null when it does not parse) and why. */
export interface RefusedEntry {
  streamId: string;
  entry: OutboxEntry | null;
  error: unknown;
}

/** The result of persisting a set of customers. */
export interface PersistResult {
  /** Entries written to PostgreSQL (or found there) and trimmed. */
  moved: number;
  /** Customers whose outbox was copied and trimmed in this call. */
  persisted: string[];
  /** Customers whose read was full: more entries may wait. */
  full: string[];
  /** Customers that could not be persisted now (retry later). */
  failed: string[];
  /** Entries parked in the quarantine table (src/ledger/quarantine.ts), trimmed with the rest. */
  quarantined: number;
  /** The ids of the events among the entries written (a parked one too: the fan-out finds no row for it). */
  events: string[];
}

/** Counts a batch written (and trimmed) into `result`: its customer, its entries, its events. */
function countWritten(b: OutboxBatch, count: number, result: PersistResult): void {
  for (const e of b.entries) if (e.type === 'EVENT') result.events.push(e.id);
  result.persisted.push(b.base);
  if (b.ids.length === count) result.full.push(b.base);
  result.moved += b.ids.length;
}

/**
 * Every entry of an outbox (the reads that merge it with PostgreSQL), in pages of
 * outbox_read_count_max: no single command returns more, however long the outbox grew.
 */
export async function readOutboxEntries(redis: RedisClient, outboxKey: string): Promise<OutboxEntry[]> {
  const out: OutboxEntry[] = [];
  for (let from = '-'; ; ) {
    const stream = await redis.xrange(outboxKey, from, '+', 'COUNT', outbox_read_count_max);
    for (const [, fields] of stream) out.push(parseOutboxEntry(fields));
    if (stream.length < outbox_read_count_max) return out;
    from = `(${stream[stream.length - 1][0]}`;
  }
}

function batchOf(base: string, stream: [string, string[]][]): OutboxBatch {
  const ids: string[] = new Array(stream.length);
  let entries: OutboxEntry[] = new Array(stream.length);
  let entryIds = ids;
  const unreadable: RefusedEntry[] = [];
  for (let i = 0; i < stream.length; i++) {
    ids[i] = stream[i][0];
    try {
      entries[i] = parseOutboxEntry(stream[i][1]);
    } catch (error) {
      unreadable.push({ streamId: ids[i], entry: null, error });
    }
  }
  if (unreadable.length > 0) {
    const bad = new Set(unreadable.map((u) => u.streamId));
    entryIds = ids.filter((id) => !bad.has(id));
    entries = entries.filter((_, i) => !bad.has(ids[i]));
  }
  return { base, ids, entries, entryIds, unreadable };
}

/** The first half of a list and the rest. */
function halves<T>(list: readonly T[]): [T[], T[]] {
  const mid = list.length >> 1;
  return [list.slice(0, mid), list.slice(mid)];
}

export class LedgerOutbox {
  private readonly quarantine: QuarantineQueries;

  constructor(
    private readonly redis: RedisClient,
    queries: LedgerQueries,
    private readonly prefix: string,
    private readonly logger: Logger,
    private readonly hooks: OutboxHooks = {},
    /**
     * What writes the entries: the statement path (`queries.insertEntries`) unless given,
     * the persist loop's COPY writer (src/ledger/copy-writer.ts) in a worker.
     */
    private readonly writer: Pick<LedgerQueries, 'insertEntries'> = queries,
  ) {
    this.quarantine = queries.quarantine(prefix);
  }

  /** The oldest `count` entries of a customer's outbox. */
  async read(base: string, count = outbox_read_count_max): Promise<OutboxBatch> {
    const stream = await this.redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', Math.min(count, outbox_read_count_max));
    return batchOf(base, stream);
  }

  /**
   * Copies the oldest `countPerCustomer` entries of each customer's outbox to PostgreSQL
   * in one transaction, then trims them. When the batch fails for an entry's data, a seq
   * clash or a statement's transient error (a deadlock), it is split in halves and each
   * written on its own, down to the customer at fault, so that one customer does not hold
   * back the others (persistGroup); a lost connection returns the whole batch in `failed`.
   */
  async persist(bases: string[], countPerCustomer = outbox_read_count_max): Promise<PersistResult> {
    const count = Math.min(countPerCustomer, outbox_read_count_max);
    const result: PersistResult = { moved: 0, persisted: [], full: [], failed: [], quarantined: 0, events: [] };
    if (bases.length === 0) return result;
    // One round trip: the connection pipelines concurrent commands.
    const streams = await Promise.all(bases.map((base) => this.redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', count)));
    await this.persistGroup(streams.map((stream, i) => batchOf(bases[i], stream)), count, result);
    return result;
  }

  /** Writes a group of customers' batches in one transaction, else halves of it, else one customer alone. */
  private async persistGroup(batches: OutboxBatch[], count: number, result: PersistResult): Promise<void> {
    if (batches.length === 0) return;
    const entries = batches.length === 1 ? batches[0].entries : batches.flatMap((b) => b.entries);
    try {
      await this.write(entries);
    } catch (err) {
      const refusal = refusalOf(err, entries);
      if (batches.length > 1 && (refusal !== 'transient' || mayBeOneCustomers(err))) {
        this.logger.warn({ err, customers: batches.length }, 'persist batch refused; splitting it to find the customer at fault');
        const [first, rest] = halves(batches);
        await this.persistGroup(first, count, result);
        await this.persistGroup(rest, count, result);
        return;
      }
      if (batches.length === 1) return this.persistAlone(batches[0], count, result, err, refusal);
      this.logger.error({ err, customers: batches.length }, 'persisting a batch failed; its customers will be retried');
      for (const b of batches) result.failed.push(b.base);
      return;
    }
    try {
      const parked = await this.park(batches.flatMap((b) => b.unreadable.map((u) => ({ base: b.base, refused: u }))));
      await this.trim(batches);
      result.quarantined += parked;
    } catch (err) {
      this.logger.error({ err, customers: batches.length }, 'persisted entries could not be trimmed; they are written again (skipped) on the next pass');
      for (const b of batches) result.failed.push(b.base);
      return;
    }
    for (const b of batches) countWritten(b, count, result);
  }

  /**
   * One customer whose write just failed with `err`: a clash repaired, a transient failure
   * retried later, else its refused entries found (the batch is not written again whole),
   * parked, and the rest written.
   */
  private async persistAlone(b: OutboxBatch, count: number, result: PersistResult, err: unknown, refusal: 'clash' | 'data' | 'transient'): Promise<void> {
    if (refusal === 'clash') return this.repairOrSetAside(b.base, err);
    if (refusal === 'transient') {
      this.logger.error({ err, customer: b.base }, 'persisting a customer failed; will retry');
      result.failed.push(b.base);
      return;
    }
    try {
      const parked = await this.persistBatch(b, err);
      result.quarantined += parked;
      countWritten(b, count, result);
    } catch (err) {
      if (isSeqClash(err)) return this.repairOrSetAside(b.base, err);
      this.logger.error({ err, customer: b.base }, 'persisting a customer failed; will retry');
      result.failed.push(b.base);
    }
  }

  /**
   * Writes one customer's batch, parking every entry refused for good, then trims it.
   * Returns how many entries were parked; throws on a seq clash or a transient failure
   * (nothing trimmed, the written entries skipped when tried again).
   */
  private async persistBatch(b: OutboxBatch, refusedWhole?: unknown): Promise<number> {
    const refused = [...b.unreadable, ...(await this.writeIsolating(b.entries, b.entryIds, refusedWhole))];
    const parked = await this.park(refused.map((r) => ({ base: b.base, refused: r })));
    await this.trim([b]);
    return parked;
  }

  /**
   * Writes one customer's entries in order, and returns those PostgreSQL (or our own
   * serialization) refuses for good, found by halving: a bad entry among 500 costs about
   * 18 writes. Throws a seq clash or a transient failure. `refused`: the error these
   * entries were just refused with as a whole (they are not tried whole again).
   */
  private async writeIsolating(entries: OutboxEntry[], ids: string[], refused?: unknown): Promise<RefusedEntry[]> {
    if (entries.length === 0) return [];
    try {
      if (refused !== undefined) throw refused;
      await this.write(entries);
      return [];
    } catch (err) {
      if (refusalOf(err, entries) !== 'data') throw err;
      if (entries.length === 1) return [{ streamId: ids[0], entry: entries[0], error: unwritableReason(entries[0]) ?? err }];
      const [e1, e2] = halves(entries);
      const [i1, i2] = halves(ids);
      return [...(await this.writeIsolating(e1, i1)), ...(await this.writeIsolating(e2, i2))];
    }
  }

  /**
   * Parks refused entries in the quarantine table, each with its stream fields as Redis
   * holds them (read again as bytes: a string would not keep invalid UTF-8). Returns how
   * many. PostgreSQL has them before the trim removes them from the outbox.
   */
  private async park(refused: { base: string; refused: RefusedEntry }[]): Promise<number> {
    if (refused.length === 0) return 0;
    const parked = [];
    for (const { base, refused: r } of refused) {
      const raw = await this.redis.xrangeBuffer(customerKeysFromBase(base).outbox, r.streamId, r.streamId);
      // Gone meanwhile: another worker that took the customer too has dealt with it.
      if (raw.length === 0) continue;
      const ids = parseCustomerBase(this.prefix, base) ?? { projectId: r.entry?.project_id ?? '', customerId: r.entry?.customer_id ?? base };
      this.logger.error(
        { err: r.error, customer: base, stream_id: r.streamId, seq: r.entry?.seq },
        'ledger entry refused for good by PostgreSQL: quarantined, the customer\'s later entries go on (docs/OPERATIONS.md, "Quarantined ledger entries")',
      );
      parked.push({ base, streamId: r.streamId, projectId: ids.projectId, customerId: ids.customerId, entry: r.entry, fields: raw[0][1], error: r.error });
    }
    if (parked.length > 0) await this.quarantine.park(parked);
    return parked.length;
  }

  private async persistOne(base: string, count: number): Promise<number> {
    const batch = await this.read(base, count);
    await this.persistBatch(batch);
    return batch.ids.length;
  }

  /**
   * Copies a customer's whole outbox to PostgreSQL, parking entries refused for good.
   * Returns how many entries it moved; throws on a seq clash or a transient failure.
   */
  async drain(base: string): Promise<number> {
    let moved = 0;
    for (;;) {
      const n = await this.persistOne(base, outbox_read_count_max);
      moved += n;
      if (n < outbox_read_count_max) return moved;
    }
  }

  private async write(entries: OutboxEntry[]): Promise<void> {
    if (entries.length === 0) return;
    await this.hooks.recordProjects?.(entries.map((e) => e.project_id));
    await this.writer.insertEntries(entries);
  }

  private async trim(batches: OutboxBatch[]): Promise<void> {
    await Promise.all(batches.map((b) => (b.ids.length > 0 ? this.redis.xdel(customerKeysFromBase(b.base).outbox, ...b.ids) : null)));
  }

  /**
   * A clashing customer: repaired at once when the hook can, else set aside. It does not
   * go back to the dirty set, so it cannot hold the loop; the sweeper finds its outbox
   * again (every SWEEP_INTERVAL_MS) and the repair is tried then.
   */
  private async repairOrSetAside(base: string, clash: unknown): Promise<void> {
    const setAside = setAsideKey(this.prefix);
    try {
      if (!this.hooks.repairSeqClash) throw clash;
      await this.hooks.repairSeqClash(base);
      await this.redis.hdel(setAside, base);
      this.logger.warn({ customer: base }, 'entries written on a RedisClient that had forgotten persisted ones were renumbered and persisted');
    } catch (err) {
      this.logger.error({ err, customer: base }, 'customer set aside: its entries clash with the ledger in PostgreSQL; run npm run reconcile -- --repair');
      const why = JSON.stringify({ at: new Date().toISOString(), error: (err as Error).message });
      await this.redis.hset(setAside, base, why).catch(() => undefined);
    }
  }
}
