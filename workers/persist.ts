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

export class PersistLoop {
  private running = false;
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
      let popped: string[] = [];
      try {
        popped = await this.redis.spop(dirtySetKey(this.prefix), dirty_pop_count);
        for (const base of popped) await this.drain(base);
      } catch (err) {
        this.logger.error({ err }, 'persist loop failed; retrying');
        // Put back what this pass popped so nothing waits for the sweeper needlessly.
        if (popped.length > 0) await this.redis.sadd(dirtySetKey(this.prefix), ...popped).catch(() => undefined);
        await this.sleep(1_000);
      }
      if (popped.length === 0) await this.sleep(this.idleMs);
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
