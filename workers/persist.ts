/**
 * The persist loop: takes customers from the dirty shards (`dirty:{n}`) and has the ledger's outbox
 * (src/ledger/outbox.ts) copy their entries to PostgreSQL. The loop only decides how much
 * to take per pass and when to run the next.
 *
 * Batches grow with the backlog while its lag stays bounded: a pass that found more than
 * a small batch runs the next at once, with twice the customers (up to
 * dirty_pop_count_max), so a backlog is drained in large transactions; a small pass waits
 * persist_batch_wait_ms so that the next one carries more than a few entries. Each pass
 * holds at most persist_pass_entries_max entries, so none takes long: an entry waits at
 * most a short wait plus a few passes behind a backlog.
 */
import type { Logger } from 'pino';
import type { RedisClient } from '../src/redis/client.js';
import { LedgerOutbox, outbox_read_count_max, type OutboxHooks } from '../src/ledger/outbox.js';
import type { LedgerQueries } from '../src/ledger/queries.js';
import type { EntryWriter } from '../src/ledger/copy-writer.js';
import { dirty_shards, dirtyKey, dirtyKeyOf } from '../src/redis/keys.js';

/** Customers popped per pass without a backlog, and at most under one. */
const dirty_pop_count_min = 64;
const dirty_pop_count_max = 1_024;
/**
 * The most entries one pass copies: the read per customer is this divided by the customers
 * the pop found (not by how many it asked for), so that a backlog in a few customers'
 * outboxes is taken in large reads rather than in many small passes.
 */
const persist_pass_entries_max = 8_192;
/**
 * Below this many entries in a pass, the loop waits before the next, so that under light
 * load a pass carries more than a few entries: its fixed cost (the dirty-set pops, a read
 * and a trim per customer, the write's round trips) is paid once for all of them. The
 * wait is what the last pass's rate says the next needs to carry about this many
 * entries, within persist_batch_wait_ms and persist_batch_wait_max_ms. PostgreSQL then
 * trails Redis by about that wait; reads never notice (they merge the outbox).
 */
export const persist_batch_grow_below = 256;
export const persist_batch_wait_ms = 40;
export const persist_batch_wait_max_ms = 250;

/**
 * The wait after a small pass that moved `moved` entries (those that came in over
 * `sinceLastMs`, the time since the previous pass started) and took `tookMs`.
 */
export function batchWaitMs(moved: number, sinceLastMs: number, tookMs: number): number {
  const want = moved > 0 ? (persist_batch_grow_below * Math.max(sinceLastMs, 1)) / moved - tookMs : persist_batch_wait_max_ms;
  return Math.round(Math.min(persist_batch_wait_max_ms, Math.max(persist_batch_wait_ms, want)));
}
/**
 * The wait after a pass that found nothing: `idleMs` after a pass that moved entries,
 * then twice the previous wait after each empty one, up to `idleMaxMs`. An idle worker
 * then polls the dirty shards (16 SPOPs) a few times a second instead of forty, and a
 * burst after a quiet spell waits at most `idleMaxMs`, the longest wait a small pass
 * gets anyway (persist_batch_wait_max_ms by default).
 */
export function nextIdleWaitMs(previousMs: number | null, idleMs: number, idleMaxMs: number): number {
  return previousMs === null ? idleMs : Math.max(idleMs, Math.min(idleMaxMs, previousMs * 2));
}
/**
 * Pause after a failed pass, or one in which no customer could be persisted. A customer
 * whose write failed for a transient reason in a pass that persisted others waits this
 * long on its own before it goes back to the dirty set: the others do not wait with it.
 */
export const persist_retry_wait_ms = 1_000;
/** Pause of the loop while the Redis generation is not verified (src/redis/generation.ts). */
const persist_unverified_wait_ms = 100;

export interface PersistHooks extends OutboxHooks {
  /** False while money must not touch Redis (the generation guard); the loop waits. */
  isReady?(): boolean;
  /** These customers' entries are persisted: their records may be trimmed once due (src/ledger/retention.ts). */
  persisted?(bases: string[]): Promise<void>;
  /**
   * A pass that found customers to persist ended: the entries it copied, how long it took
   * (the pops, the reads, the transaction, the trims) and the customers it gave back for
   * a failure (the worker's metrics, src/metrics/worker.ts).
   */
  passDone?(entries: number, seconds: number, failedCustomers: number): void;
  /**
   * A pass committed these events: the worker fans them out to webhook endpoints (the
   * push, src/webhooks/push.ts). Must not throw nor wait: the batch is committed whatever
   * becomes of the push. Not called for a pass without events.
   */
  eventsPersisted?(eventIds: string[]): void;
}

/** Members grouped by the key they go to, each once, in first-seen order. */
function groupByKey(members: readonly string[], keyOf: (m: string) => string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const m of new Set(members)) {
    const key = keyOf(m);
    const list = out.get(key);
    if (list) list.push(m);
    else out.set(key, [m]);
  }
  return out;
}

export class PersistLoop {
  private running = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private popCount = dirty_pop_count_min;
  /** The shard that takes the first of a pass's remainder; moves by one each pass. */
  private firstShard = 0;
  /** When the previous pass started (the entries of a pass came in since then). */
  private lastPassAt = Date.now();
  /** The wait after the last empty pass; null after a pass that moved entries. */
  private idleWaitMs: number | null = null;
  /** Customers whose write failed in a pass that wrote others: back to the dirty set after a pause. */
  private readonly retrying = new Set<string>();
  private retryTimer: NodeJS.Timeout | undefined;
  readonly outbox: LedgerOutbox;

  constructor(
    private readonly redis: RedisClient,
    queries: LedgerQueries,
    private readonly prefix: string,
    private readonly idleMs: number,
    private readonly logger: Logger,
    private readonly hooks: PersistHooks = {},
    writer?: EntryWriter,
    private readonly idleMaxMs = idleMs,
  ) {
    this.outbox = new LedgerOutbox(redis, queries, prefix, logger, hooks, writer);
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /** Ends the loop after the pass in progress, if any; resolves once it has ended. */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
    await this.flushRetries();
  }

  private async run(): Promise<void> {
    while (this.running) {
      if (this.hooks.isReady && !this.hooks.isReady()) {
        await this.sleep(persist_unverified_wait_ms);
        continue;
      }
      let pass = { moved: 0, backlog: false, failed: false };
      const started = Date.now();
      const sinceLast = started - this.lastPassAt;
      this.lastPassAt = started;
      try {
        pass = await this.pass();
      } catch (err) {
        this.logger.error({ err }, 'persist pass failed; retrying');
        await this.sleep(persist_retry_wait_ms);
      }
      // Nothing could be written (PostgreSQL is away): without a pause the loop would retry
      // at once, forever, while that lasts. Customers that failed in a pass that wrote
      // others wait on their own (retryLater).
      if (pass.failed) await this.sleep(persist_retry_wait_ms);
      else if (pass.backlog) continue;
      else if (pass.moved === 0) await this.sleep((this.idleWaitMs = nextIdleWaitMs(this.idleWaitMs, this.idleMs, this.idleMaxMs)));
      else {
        this.idleWaitMs = null;
        await this.sleep(batchWaitMs(pass.moved, sinceLast, Date.now() - started));
      }
    }
  }

  /**
   * One pass: pops dirty customers from the shards, persists their oldest entries in one
   * transaction (LedgerOutbox.persist), and puts back those with more waiting or that
   * failed. The pops go to every shard at once (auto-pipelined: one round trip per node),
   * each for its part of the pass, the first shards in a rotating order taking the
   * remainder, so that no shard waits behind the others.
   */
  async pass(): Promise<{ moved: number; backlog: boolean; failed: boolean }> {
    const started = performance.now();
    const base = Math.floor(this.popCount / dirty_shards);
    const extra = this.popCount % dirty_shards;
    const counts = Array.from({ length: dirty_shards }, (_, i) => base + ((i - this.firstShard + dirty_shards) % dirty_shards < extra ? 1 : 0));
    this.firstShard = (this.firstShard + 1) % dirty_shards;
    const pops = await Promise.all(counts.map((count, shard) => (count === 0 ? Promise.resolve([]) : this.redis.spop(dirtyKey(this.prefix, shard), count))));
    const popped = pops.flat();
    if (popped.length === 0) return { moved: 0, backlog: false, failed: false };
    const perCustomer = Math.max(16, Math.min(outbox_read_count_max, Math.floor(persist_pass_entries_max / popped.length)));
    let r: Awaited<ReturnType<LedgerOutbox['persist']>>;
    try {
      r = await this.outbox.persist(popped, perCustomer);
    } catch (err) {
      this.hooks.passDone?.(0, (performance.now() - started) / 1000, popped.length);
      throw err;
    }
    this.hooks.passDone?.(r.moved, (performance.now() - started) / 1000, r.failed.length);
    if (r.events.length > 0) this.hooks.eventsPersisted?.(r.events);
    // A pass that wrote nothing pauses as a whole (run); one that wrote others gives its
    // failed customers back after the same pause, without holding up the rest.
    const allFailed = r.failed.length > 0 && r.persisted.length === 0;
    if (!allFailed) this.retryLater(r.failed);
    const again = allFailed ? [...r.full, ...r.failed] : r.full;
    // One SADD per shard with all of its customers (auto-pipelined: the shards are
    // different slots), not one per customer.
    if (again.length > 0) await Promise.all([...groupByKey(again, (b) => dirtyKeyOf(this.prefix, b))].map(([key, members]) => this.redis.sadd(key, ...members)));
    if (r.persisted.length > 0 && this.hooks.persisted) {
      await this.hooks.persisted(r.persisted).catch((err: unknown) => this.logger.error({ err }, 'customers not handed to the trim; their records stay until they are persisted again'));
    }
    // A pop that came back at least half full with some shard full, or full outboxes, mean
    // a backlog: take more per pass, and go on at once. (A shard alone can be full by the
    // luck of the hash while the others are empty.)
    const shardFull = pops.some((p, shard) => counts[shard] > 0 && p.length === counts[shard]);
    const backlog = (shardFull && popped.length * 2 >= this.popCount) || r.full.length > 0 || r.moved >= persist_batch_grow_below;
    this.popCount = backlog ? Math.min(dirty_pop_count_max, this.popCount * 2) : Math.max(dirty_pop_count_min, this.popCount / 2);
    return { moved: r.moved, backlog: backlog && !allFailed, failed: allFailed };
  }

  /** Gives customers back to the dirty set after persist_retry_wait_ms (at once on stop). */
  private retryLater(bases: string[]): void {
    if (bases.length === 0) return;
    for (const b of bases) this.retrying.add(b);
    this.retryTimer ??= setTimeout(() => void this.flushRetries(), persist_retry_wait_ms);
  }

  private async flushRetries(): Promise<void> {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const bases = [...this.retrying];
    this.retrying.clear();
    if (bases.length === 0) return;
    // Should this fail, the sweeper finds their outboxes again (workers/sweep.ts).
    await Promise.all([...groupByKey(bases, (b) => dirtyKeyOf(this.prefix, b))].map(([key, members]) => this.redis.sadd(key, ...members))).catch((err: unknown) =>
      this.logger.error({ err }, 'customers to retry not put back in the dirty set; the sweeper finds them'),
    );
  }

  private sleep(ms: number): Promise<void> {
    // A stop asked for during a pass ends the loop right after it.
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }
}
