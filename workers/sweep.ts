/**
 * The sweeper: finds outboxes with entries that no dirty mark points at (an API process
 * killed between its script and its SADD, a worker killed mid-drain) and TTL freezes that
 * are overdue because their expire job was lost. Runs as a BullMQ job scheduler, so one
 * worker sweeps at a time however many run.
 */
import type { RedisClient } from '../src/redis/client.js';
import { dirtySetKey, parseCustomerBase } from '../src/redis/keys.js';
import type { LedgerService } from '../src/ledger/service.js';

export const scan_count = 1_000;

export async function sweep(redis: RedisClient, prefix: string, ledger: LedgerService, nowMs: number): Promise<{ outboxes: number; expired: number }> {
  let outboxes = 0;
  let expired = 0;
  const scanAll = async (suffix: string, each: (base: string, key: string) => Promise<void>) => {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}c:*:${suffix}`, 'COUNT', scan_count);
      cursor = next;
      for (const key of keys) await each(key.slice(0, -(suffix.length + 1)), key);
    } while (cursor !== '0');
  };
  await scanAll('outbox', async (base, key) => {
    if ((await redis.xlen(key)) > 0) {
      await redis.sadd(dirtySetKey(prefix), base);
      outboxes++;
    }
  });
  await scanAll('ttl', async (base, key) => {
    const due = await redis.zrangebyscore(key, '-inf', nowMs, 'LIMIT', 0, 1);
    const ids = parseCustomerBase(prefix, base);
    if (due.length > 0 && ids) {
      // The organization is only needed for plan accounting; the sweeper settles late.
      await ledger.expire({ projectId: ids.projectId, organizationId: '' }, ids.customerId);
      expired++;
    }
  });
  return { outboxes, expired };
}
