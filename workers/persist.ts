/**
 * The persist loop: takes customers from the dirty set, copies their outbox entries to
 * PostgreSQL (idempotent on the entry id) and only then deletes them from the outbox. A
 * crash between insert and delete repeats an insert that is skipped; a customer popped by
 * a worker that then died is found again by the sweeper.
 *
 * A customer whose entries clash with sequence numbers PostgreSQL already holds (Redis
 * forgot entries that were persisted, then numbered new ones from where it had stopped)
 * can never be inserted as it is: the loop hands it to the repair hook (reconcile's
 * renumbering, src/reconcile/reconcile.ts) and, should that fail, sets it aside instead of
 * retrying it: it is logged, counted in /health, and found again by the next sweep.
 */
import type { Logger } from 'pino';
import type { RedisClient } from '../src/redis/client.js';
import { parseOutboxEntry } from '../src/ledger/entries.js';
import type { LedgerQueries } from '../src/ledger/queries.js';
import { customerKeysFromBase, dirtySetKey } from '../src/redis/keys.js';

export const persist_batch_size = 500;
export const dirty_pop_count = 64;
/**
 * Below this many entries in a pass, the loop waits persist_batch_wait_ms before the next,
 * so that under load a pass carries tens of entries: its fixed cost (the dirty-set pop,
 * the outbox reads and trims, BEGIN and COMMIT) is paid once for all of them. PostgreSQL
 * then trails Redis by about that wait; reads never notice (they merge the outbox).
 */
export const persist_batch_grow_below = 256;
export const persist_batch_wait_ms = 40;
/** Pause after a failed pass, or a pass in which a customer's entries were refused. */
export const persist_retry_wait_ms = 1_000;
/** Pause of the loop while the Redis generation is not verified (src/redis/generation.ts). */
export const persist_unverified_wait_ms = 100;

/** Redis hash: customer key base -> why its entries are set aside (JSON). /health counts it. */
export const setAsideKey = (prefix: string) => `${prefix}persist:set_aside`;

/** True for PostgreSQL's refusal of an entry whose (project, customer, seq) is taken. */
export function isSeqClash(err: unknown): boolean {
  for (let e = err as { constraint?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (e.constraint === 'ledger_entries_project_id_customer_id_seq_key') return true;
  }
  return false;
}

export interface PersistHooks {
  /** False while money must not touch Redis (the generation guard); the loop waits. */
  isReady?(): boolean;
  /** Records that this prefix serves these projects, before their entries are written. */
  recordProjects?(projectIds: string[]): Promise<void>;
  /** Repairs a customer whose entries clash with PostgreSQL's seq; throws when it cannot. */
  repairSeqClash?(base: string): Promise<void>;
}

export class PersistLoop {
  private running = false;
  /** A customer of the last pass could not be persisted (see run()). */
  private customerFailed = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly queries: LedgerQueries,
    private readonly prefix: string,
    private readonly idleMs: number,
    private readonly logger: Logger,
    private readonly hooks: PersistHooks = {},
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
  }

  private async run(): Promise<void> {
    while (this.running) {
      if (this.hooks.isReady && !this.hooks.isReady()) {
        await this.sleep(persist_unverified_wait_ms);
        continue;
      }
      let moved = 0;
      try {
        moved = await this.pass();
      } catch (err) {
        this.logger.error({ err }, 'persist pass failed; retrying');
        await this.sleep(persist_retry_wait_ms);
      }
      // A customer whose entries PostgreSQL refused went back to the dirty set: without a
      // pause the loop would retry it at once, forever, while the refusal lasts.
      if (this.customerFailed) {
        this.customerFailed = false;
        await this.sleep(persist_retry_wait_ms);
      }
      // A short wait after a small pass lets the next batch grow: one transaction for
      // many entries costs PostgreSQL far less than many transactions of one.
      if (moved < persist_batch_grow_below) await this.sleep(moved === 0 ? this.idleMs : persist_batch_wait_ms);
    }
  }

  /**
   * One pass: pops dirty customers, reads their outboxes in one round trip, writes all
   * entries in one transaction, then trims each outbox of what was written. A customer
   * whose outbox held more than one batch stays dirty for the next pass.
   */
  async pass(): Promise<number> {
    const dirty = dirtySetKey(this.prefix);
    const popped = await this.redis.spop(dirty, dirty_pop_count);
    if (popped.length === 0) return 0;
    try {
      const batches = await Promise.all(
        popped.map((base) => this.redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', persist_batch_size)),
      );
      const entries = batches.flatMap((batch) => batch.map(([, fields]) => parseOutboxEntry(fields[1])));
      await this.hooks.recordProjects?.(entries.map((e) => e.project_id));
      await this.queries.insertEntries(entries);
      await Promise.all(
        popped.map((base, i) => (batches[i].length > 0 ? this.redis.xdel(customerKeysFromBase(base).outbox, ...batches[i].map(([id]) => id)) : null)),
      );
      const full = popped.filter((_, i) => batches[i].length === persist_batch_size);
      if (full.length > 0) await this.redis.sadd(dirty, ...full);
      return entries.length;
    } catch (err) {
      // One customer's bad entry must not hold back the others popped with it: drain them
      // one by one; those that still fail go back to the dirty set for a later pass.
      this.logger.error({ err }, 'persist batch failed; draining its customers one by one');
      let moved = 0;
      for (const base of popped) {
        try {
          moved += await this.drain(base);
        } catch (inner) {
          if (isSeqClash(inner)) {
            await this.repairOrSetAside(base, inner);
            continue;
          }
          this.logger.error({ err: inner, customer: base }, 'persisting a customer failed; will retry');
          this.customerFailed = true;
          await this.redis.sadd(dirty, base).catch(() => undefined);
        }
      }
      return moved;
    }
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
      this.logger.warn({ customer: base }, 'entries written on a Redis that had forgotten persisted ones were renumbered and persisted');
    } catch (err) {
      this.logger.error({ err, customer: base }, 'customer set aside: its entries clash with the ledger in PostgreSQL; run npm run reconcile -- --repair');
      const why = JSON.stringify({ at: new Date().toISOString(), error: (err as Error).message });
      await this.redis.hset(setAside, base, why).catch(() => undefined);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  /** Copies one customer's outbox to PostgreSQL. Returns how many entries it moved. */
  async drain(base: string): Promise<number> {
    const { outbox } = customerKeysFromBase(base);
    let moved = 0;
    for (;;) {
      const batch = await this.redis.xrange(outbox, '-', '+', 'COUNT', persist_batch_size);
      if (batch.length === 0) return moved;
      const entries = batch.map(([, fields]) => parseOutboxEntry(fields[1]));
      await this.hooks.recordProjects?.(entries.map((e) => e.project_id));
      await this.queries.insertEntries(entries);
      await this.redis.xdel(outbox, ...batch.map(([id]) => id));
      moved += batch.length;
      if (batch.length < persist_batch_size) return moved;
    }
  }
}
