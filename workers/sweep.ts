/**
 * The sweeper: finds outboxes with entries that no dirty mark points at (an API process
 * killed between its script and its SADD, a worker killed mid-drain, a customer set
 * aside) and TTL freezes that are overdue because their expire job was lost. Runs as a
 * BullMQ job scheduler, so one worker sweeps at a time however many run.
 *
 * It scans no keyspace: it walks the active index (`active:{n}`, src/redis/keys.ts), to
 * which an API process adds a customer before its first script on it in a window
 * (OutboxMarks.markActive). A member whose window is over is looked at: a non-empty
 * outbox is marked dirty and the member stays (looked at again next sweep); an overdue
 * TTL is settled; a TTL still pending moves the member to when it is due; a customer
 * with neither leaves the index. So the index holds the customers active in the last
 * window, plus those with entries not yet in PostgreSQL or pending TTLs.
 *
 * Source expiries (sweepExpiring): the expiring index (`expiring:{n}`) lists customers by
 * when their next source expires. Each due member gets the expire script, which writes
 * the EXPIRE entries of its expired sources (lua/includes/customer.lua, retire), and moves
 * to its next expiry or leaves. At SWEEP_INTERVAL_MS (5 s) an EXPIRE is written within
 * about that long of the expiry, whether or not anything touches the customer. A deposit
 * lists its customer before its script; every active member looked at here is listed
 * again (ZADD LT) from its first live source, which repairs a listing lost to a race or
 * a Redis that came back empty.
 */
import type { RedisClient } from '../src/redis/client.js';
import type { Scripts } from '../src/redis/scripts.js';
import { activeKey, customerKeysFromBase, dirty_shards, dirtyKeyOf, expiringKey, expiringKeyOf, parseCustomerBase } from '../src/redis/keys.js';
import type { LedgerService } from '../src/ledger/service.js';

/** Members read from a shard of the active index per command. */
const sweep_page_size = 500;
/** Pages per shard and sweep: what is left waits for the next sweep. */
const sweep_pages_per_shard_max = 20;
/** Customers looked at at once. */
const sweep_concurrency = 16;

/** The largest finite score a live source has: sources without expiry are scored +inf. */
const finite_score_max = '9007199254740991';

export async function sweep(
  redis: RedisClient, scripts: Scripts, prefix: string, ledger: LedgerService, nowMs: number,
): Promise<{ outboxes: number; expired: number; released: number; settled: number; expiring: number }> {
  const expiring = await sweepExpiring(redis, scripts, prefix, ledger, nowMs);
  let outboxes = 0;
  /** TTL freezes settled (their entries written). */
  let settled = 0;
  let expired = 0;
  let released = 0;
  // Members that stay due (their outbox has entries) keep their place: the next page starts after them.
  await walkDue(redis, (shard) => activeKey(prefix, shard), nowMs, async (key, base, score) => {
    const k = customerKeysFromBase(base);
    const [length, first, source] = await Promise.all([
      redis.xlen(k.outbox), redis.zrange(k.ttl, 0, 0, 'WITHSCORES'),
      redis.zrangebyscore(k.live, '-inf', finite_score_max, 'WITHSCORES', 'LIMIT', 0, 1),
    ]);
    if (source.length === 2) await redis.zadd(expiringKeyOf(prefix, base), 'LT', source[1], base);
    const ttlDueMs = first.length === 2 ? Number(first[1]) : null;
    if (ttlDueMs !== null && ttlDueMs <= nowMs) {
      const ids = parseCustomerBase(prefix, base);
      // The organization is only needed for plan accounting; the sweeper settles late.
      if (ids) settled += (await ledger.expire({ projectId: ids.projectId, organizationId: '' }, ids.customerId)).settled;
      expired++;
    }
    if (length > 0) {
      await redis.sadd(dirtyKeyOf(prefix, base), base);
      outboxes++;
      return true;
    }
    // Settled just now: its entry is in the outbox, looked at next sweep.
    if (ttlDueMs !== null && ttlDueMs <= nowMs) return true;
    // Unless an API process marked it again meanwhile (lua/trim_due-1.lua: set or remove if unchanged).
    const changed = await scripts.runOther<number>('trim_due', [key], [base, score, ttlDueMs === null ? '' : ttlDueMs]);
    if (changed === 1 && ttlDueMs === null) released++;
    return false;
  });
  return { outboxes, expired, released, settled, expiring };
}

/**
 * Runs the expire script of every customer of the expiring index whose listed expiry is
 * due, then lists it at its next source expiry or removes it, unless a deposit moved it
 * meanwhile (lua/trim_due-1.lua: set or remove if unchanged). Returns how many customers
 * it looked at. Several sweepers at once only run a script twice: a source's EXPIRE is
 * written by the script that retires it, once.
 */
async function sweepExpiring(redis: RedisClient, scripts: Scripts, prefix: string, ledger: LedgerService, nowMs: number): Promise<number> {
  let looked = 0;
  // Members a deposit moved meanwhile keep their place: the next page starts after them.
  await walkDue(redis, (shard) => expiringKey(prefix, shard), nowMs, async (key, base, score) => {
    looked++;
    const ids = parseCustomerBase(prefix, base);
    const next = ids ? (await ledger.expire({ projectId: ids.projectId, organizationId: '' }, ids.customerId)).nextSourceExpiryMs : null;
    const changed = await scripts.runOther<number>('trim_due', [key], [base, score, next === null ? '' : next]);
    return changed !== 1;
  });
  return looked;
}

/**
 * Walks the members of each shard's due index (a zset scored by when a member is due) that
 * are due at `nowMs`, a page at a time, `sweep_concurrency` at once. `visit` answers whether
 * the member stays in the index: one that stays keeps its place, so the next page starts
 * after it.
 */
async function walkDue(
  redis: RedisClient, keyOf: (shard: number) => string, nowMs: number,
  visit: (key: string, base: string, score: string) => Promise<boolean>,
): Promise<void> {
  for (let shard = 0; shard < dirty_shards; shard++) {
    const key = keyOf(shard);
    let offset = 0;
    for (let page = 0; page < sweep_pages_per_shard_max; page++) {
      const flat = await redis.zrangebyscore(key, '-inf', nowMs, 'WITHSCORES', 'LIMIT', offset, sweep_page_size);
      const due: [string, string][] = [];
      for (let i = 0; i < flat.length; i += 2) due.push([flat[i], flat[i + 1]]);
      for (let i = 0; i < due.length; i += sweep_concurrency) {
        const stays = await Promise.all(due.slice(i, i + sweep_concurrency).map(([base, score]) => visit(key, base, score)));
        offset += stays.filter(Boolean).length;
      }
      if (due.length < sweep_page_size) break;
    }
  }
}
