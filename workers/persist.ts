/**
 * The persist loop: takes customers from the dirty set, copies their outbox entries to
 * PostgreSQL (idempotent on the entry id) and only then deletes them from the outbox. A
 * crash between insert and delete repeats an insert that is skipped; a customer popped by
 * a worker that then died is found again by the sweeper.
 */
import type { Logger } from 'pino';
import type { Redis } from 'ioredis';
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

export class PersistLoop {
  private running = false;
  /** A customer of the last pass could not be persisted (see run()). */
  private customerFailed = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly queries: LedgerQueries,
    private readonly prefix: string,
    private readonly idleMs: number,
    private readonly logger: Logger,
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
          this.logger.error({ err: inner, customer: base }, 'persisting a customer failed; will retry');
          this.customerFailed = true;
          await this.redis.sadd(dirty, base).catch(() => undefined);
        }
      }
      return moved;
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
      await this.queries.insertEntries(batch.map(([, fields]) => parseOutboxEntry(fields[1])));
      await this.redis.xdel(outbox, ...batch.map(([id]) => id));
      moved += batch.length;
      if (batch.length < persist_batch_size) return moved;
    }
  }
}
