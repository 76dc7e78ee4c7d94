/**
 * The marks that lead the workers to a customer's outbox: the dirty mark after a script
 * wrote it (the persist loop), and the active mark before a script may write it (the
 * sweeper, workers/sweep.ts). Kept per process by LedgerService (src/ledger/service.ts).
 */
import type { RedisClient } from '../redis/client.js';
import { activeKeyOf, dirty_shards, dirtyKey, expiringKeyOf, shardOf } from '../redis/keys.js';
import type { Clock } from './clock.js';

/**
 * How long an active mark lasts (OutboxMarks.markActive): the sweeper looks at a
 * customer's outbox and TTLs once its mark is over, so an outbox an API process left
 * unmarked when it died is found within about this long.
 */
export const active_mark_window_ms = 10_000;
/** A process marks a customer again once less than this is left of its mark. */
const active_mark_refresh_ms = 5_000;
/** Customers whose mark a process remembers; beyond it forgets them all (and marks again). */
const active_marks_remembered_max = 100_000;

export class OutboxMarks {
  /** Outboxes written since the last SADD to the dirty shards (markDirty), per shard. */
  private readonly dirty = new Map<number, Set<string>>();
  private dirtyFlushQueued = false;
  /** Customer base -> until when its active mark holds (ms, service clock), or the ZADD in flight. */
  private readonly activeUntil = new Map<string, number | Promise<void>>();

  constructor(
    private readonly redis: RedisClient,
    private readonly prefix: string,
    private readonly clock: Clock,
  ) {}

  /**
   * Adds a customer's outbox to its dirty shard (`dirty:{n}`, by a hash of the customer),
   * together with every other outbox written in the same turn of the event loop: one SADD
   * per shard for many operations under load. Not awaited by the operation: the sweeper
   * finds an outbox whose SADD was lost with this process through the active mark.
   */
  markDirty(base: string): void {
    const shard = shardOf(base, dirty_shards);
    let members = this.dirty.get(shard);
    if (!members) this.dirty.set(shard, (members = new Set()));
    members.add(base);
    if (this.dirtyFlushQueued) return;
    this.dirtyFlushQueued = true;
    setImmediate(() => {
      this.dirtyFlushQueued = false;
      this.flushDirty();
    });
  }

  /**
   * Sends the dirty marks gathered since the last flush (one SADD per shard), without
   * waiting for the end of the turn; a process that stops calls it before closing Redis.
   */
  flushDirty(): void {
    for (const [n, bases] of this.dirty) this.redis.sadd(dirtyKey(this.prefix, n), ...bases).catch(() => undefined);
    this.dirty.clear();
  }

  /**
   * Makes sure the sweeper looks at the customer by `atMs`, when a source it is about to
   * get expires (the expiring index, src/redis/keys.ts): awaited before the deposit's
   * script, so a process that dies after the script leaves no source the sweeper cannot
   * find. ZADD LT: an earlier expiry already listed keeps its place. One command, for
   * deposits with `expires_at` only (not the hot path).
   */
  async markExpiring(base: string, atMs: number): Promise<void> {
    await this.redis.zadd(expiringKeyOf(this.prefix, base), 'LT', atMs, base);
  }

  /**
   * Makes sure the customer is in its shard of the active index before a script of this
   * process may write its outbox: a mark that is applied before the script, unlike the
   * dirty mark after it, survives this process dying in between, and the sweeper walks
   * the index instead of the keyspace (workers/sweep.ts). A script cannot add it itself:
   * the index is in another slot. Costs a command on the first operation on a customer
   * per process and per active_mark_refresh_ms, none on the others; null when nothing is
   * to wait for.
   */
  markActive(base: string): Promise<void> | null {
    const now = Date.now() + this.clock.offsetMs();
    const held = this.activeUntil.get(base);
    if (typeof held === 'number' && held - now > active_mark_refresh_ms) return null;
    if (held instanceof Promise) return held;
    if (this.activeUntil.size >= active_marks_remembered_max) this.activeUntil.clear();
    const until = now + active_mark_window_ms;
    const pending = this.redis.zadd(activeKeyOf(this.prefix, base), 'GT', until, base).then(
      () => void this.activeUntil.set(base, until),
      (err: unknown) => {
        this.activeUntil.delete(base);
        throw err;
      },
    );
    this.activeUntil.set(base, pending);
    return pending;
  }
}
