/**
 * An open-loop writer of ledger entries straight into customers' outboxes, for the benches
 * of the persist path (bench/persist/run.ts, bench/ab/persist-cpu.ts): each tick writes
 * what the rate owes by then, whatever the worker does, with the dirty marks a script
 * would leave, so that the worker sees the outboxes an API would have written.
 */
import type { RedisClient } from '../../src/redis/client.js';
import { newId } from '../../src/ids.js';
import { outboxEntryFields, type OutboxEntry } from '../../src/redis/codec.js';
import { dirtyKeyOf, type CustomerKeys } from '../../src/redis/keys.js';

/** Entries are written every this many ms. */
export const write_tick_ms = 10;

export interface OutboxLoad {
  redis: RedisClient;
  prefix: string;
  customers: string[];
  /** Each customer's keys, in the order of `customers`. */
  outboxes: CustomerKeys[];
  /** Each customer's last ledger seq; advanced as entries are written. */
  seqs: number[];
  /** The entry each written one copies, with its own id, seq, customer, transaction and time. */
  template: OutboxEntry;
}

/** Writes `rate` entries a second, round-robin over the customers, from `started` until `endAt` (ms). Returns how many it wrote. */
export async function writeOpenLoop(load: OutboxLoad, rate: number, started: number, endAt: number): Promise<number> {
  const { redis, prefix, customers, outboxes, seqs, template } = load;
  let written = 0;
  while (Date.now() < endAt) {
    const due = Math.floor(((Date.now() - started) / 1000) * rate) - written;
    if (due > 0) {
      const pipeline = redis.pipeline();
      const touched = new Set<string>();
      for (let i = 0; i < due; i++) {
        const c = (written + i) % outboxes.length;
        seqs[c]++;
        const e = { ...template, id: newId('le'), seq: String(seqs[c]), customer_id: customers[c], transaction_id: newId('tx'), at: String(Date.now()) };
        pipeline.xadd(outboxes[c].outbox, '*', ...outboxEntryFields(e));
        touched.add(outboxes[c].base);
      }
      for (const base of touched) pipeline.sadd(dirtyKeyOf(prefix, base), base);
      await pipeline.exec();
      written += due;
    }
    await new Promise((r) => setTimeout(r, write_tick_ms));
  }
  return written;
}
