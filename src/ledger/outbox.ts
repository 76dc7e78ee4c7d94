/**
 * The ledger's outbox: each customer's stream of entries that the scripts wrote and
 * PostgreSQL does not hold yet. This module reads it (always with a COUNT), parses its
 * entries, copies them to PostgreSQL (idempotent on the entry id) and only then trims
 * them. A crash between the insert and the trim repeats an insert that is skipped.
 *
 * A customer whose entries clash with sequence numbers PostgreSQL already holds (Redis
 * forgot entries that were persisted, then numbered new ones from where it had stopped)
 * can never be inserted as it is: it goes to the repair hook (reconcile's renumbering,
 * src/reconcile/reconcile.ts) and, should that fail, is set aside: logged, counted in
 * /health, found again by the next sweep.
 *
 * The persist loop (workers/persist.ts), PATCH of a customer profile and reconcile use it.
 */
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { customerKeysFromBase } from '../redis/keys.js';
import { parseOutboxEntry, type OutboxEntry } from '../redis/codec.js';
import type { LedgerQueries } from './queries.js';

/** The most entries one read of one outbox returns. */
export const outbox_read_count_max = 500;

/** Redis hash: customer key base -> why its entries are set aside (JSON). /health counts it. */
export const setAsideKey = (prefix: string) => `${prefix}persist:set_aside`;

/**
 * True for PostgreSQL's refusal of an entry whose (project, customer, seq) is taken: the
 * ledger table's primary key (migrations/007_ledger_keys.sql).
 */
export function isSeqClash(err: unknown): boolean {
  for (let e = err as { constraint?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (e.constraint === 'ledger_entries_pkey') return true;
  }
  return false;
}

export interface OutboxHooks {
  /** Records that this prefix serves these projects, before their entries are written. */
  recordProjects?(projectIds: string[]): Promise<void>;
  /** Repairs a customer whose entries clash with PostgreSQL's seq; throws when it cannot. */
  repairSeqClash?(base: string): Promise<void>;
}

/** Entries read from one outbox: stream ids and the parsed entries, in order. */
export interface OutboxBatch {
  base: string;
  ids: string[];
  entries: OutboxEntry[];
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
  const entries: OutboxEntry[] = new Array(stream.length);
  for (let i = 0; i < stream.length; i++) {
    ids[i] = stream[i][0];
    entries[i] = parseOutboxEntry(stream[i][1]);
  }
  return { base, ids, entries };
}

export class LedgerOutbox {
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
  ) {}

  /** The oldest `count` entries of a customer's outbox. */
  async read(base: string, count = outbox_read_count_max): Promise<OutboxBatch> {
    const stream = await this.redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', Math.min(count, outbox_read_count_max));
    return batchOf(base, stream);
  }

  /**
   * Copies the oldest `countPerCustomer` entries of each customer's outbox to PostgreSQL
   * in one transaction, then trims them. When the batch fails, the customers are tried
   * one by one, so one customer's bad entry does not hold back the others; a clashing
   * customer goes to the repair hook or is set aside, and any other failure is returned
   * in `failed`.
   */
  async persist(bases: string[], countPerCustomer = outbox_read_count_max): Promise<PersistResult> {
    const count = Math.min(countPerCustomer, outbox_read_count_max);
    const result: PersistResult = { moved: 0, persisted: [], full: [], failed: [] };
    if (bases.length === 0) return result;
    try {
      // One round trip: the connection pipelines concurrent commands.
      const streams = await Promise.all(bases.map((base) => this.redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', count)));
      const batches = streams.map((stream, i) => batchOf(bases[i], stream));
      const entries = batches.flatMap((b) => b.entries);
      await this.write(entries);
      await this.trim(batches);
      for (const b of batches) {
        result.persisted.push(b.base);
        if (b.ids.length === count) result.full.push(b.base);
      }
      result.moved = entries.length;
      return result;
    } catch (err) {
      this.logger.error({ err }, 'persist batch failed; persisting its customers one by one');
      for (const base of bases) {
        try {
          const one = await this.persistOne(base, count);
          result.moved += one;
          result.persisted.push(base);
          if (one === count) result.full.push(base);
        } catch (inner) {
          if (isSeqClash(inner)) {
            await this.repairOrSetAside(base, inner);
            continue;
          }
          this.logger.error({ err: inner, customer: base }, 'persisting a customer failed; will retry');
          result.failed.push(base);
        }
      }
      return result;
    }
  }

  private async persistOne(base: string, count: number): Promise<number> {
    const batch = await this.read(base, count);
    await this.write(batch.entries);
    await this.trim([batch]);
    return batch.ids.length;
  }

  /** Copies a customer's whole outbox to PostgreSQL. Returns how many entries it moved. */
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
