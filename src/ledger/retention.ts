/**
 * Bounded idempotency state: a record that reached a final state (a deduct, a consumed or
 * released freeze, a deposit, a settled or released gateway call; the binding of a
 * refused operation too) is listed in its customer's `fin` zset by the script that made
 * it final (lua/includes/customer.lua). Once it has been final for the retention and its
 * entries are in PostgreSQL, the trim archives it in two steps:
 *
 * 1. its binding is removed and its id added to the bucket's Bloom filter
 *    (lua/unbind-2.lua), and the record moves from `fin` to `arch` (lua/trim-5.lua);
 * 2. the grace (ARCHIVE_GRACE_MS, default archive_grace_ms) later, the record is deleted.
 *
 * The grace is what makes step 1 safe: a request that read the binding just before it was
 * removed may reach its customer script after the record is gone. The script knows when
 * the binding was read, and refuses (nothing applied, start over from the binding) when
 * the record is absent and that read is older than the grace; a record is deleted only a
 * grace after its binding, so a fresher read proves that it was not archived.
 *
 * Which customers to trim, without a SCAN: the persist loop, after it persisted a
 * customer, adds it to a due set (`trim:{shard}`, sharded by a hash of the customer) at
 * now + retention, or earlier if it was due earlier; the trim of a customer sets its next
 * due time, or removes it when nothing is listed (lua/trim_due-1.lua).
 */
import type { RedisClient } from '../redis/client.js';
import type { Logger } from 'pino';
import { customerKeysFromBase, parseCustomerBase, scriptKeys, trim_due_shards, trimDueKey, trimDueKeyOf } from '../redis/keys.js';
import { scriptApi, type ScriptApi, type Scripts } from '../redis/scripts.js';
import { parseTransaction } from '../redis/codec.js';
import { claimId, type Bindings } from './bindings.js';

/**
 * The default grace (ARCHIVE_GRACE_MS), BINDING_GRACE_MS in lua/includes/customer.lua: the
 * customer scripts are loaded with the configured grace in its place (src/redis/scripts.ts),
 * so that they and the trim always use the same.
 */
export const archive_grace_ms = 5_000;
/** Records archived, or deleted, per trim script call. */
const trim_records_max = 500;
/** Customers taken from one due shard per pass. */
const trim_customers_per_shard_max = 100;
/** Customers trimmed at once within a pass. */
const trim_concurrency = 8;
/** Pause between two trim passes of a worker. */
const trim_interval_ms = 1_000;

export class Retention {
  constructor(
    private readonly redis: RedisClient,
    scripts: Scripts,
    private readonly bindings: Bindings,
    private readonly prefix: string,
    readonly retentionMs: number,
    private readonly logger: Logger,
    /** ARCHIVE_GRACE_MS: the customer scripts must run with the same (registerScripts). */
    readonly graceMs = archive_grace_ms,
  ) {
    this.api = scriptApi(scripts);
  }

  private readonly api: ScriptApi;

  /**
   * The persist loop persisted these customers' entries: their records may be due once the
   * retention has passed. ZADD LT keeps an earlier due time.
   */
  async persisted(bases: readonly string[]): Promise<void> {
    if (bases.length === 0) return;
    const at = Date.now() + this.retentionMs;
    // One ZADD per due shard with all of its customers (auto-pipelined: the shards are
    // different slots), not one per customer.
    const byShard = new Map<string, (string | number)[]>();
    for (const base of new Set(bases)) {
      const key = trimDueKeyOf(this.prefix, base);
      const args = byShard.get(key);
      if (args) args.push(at, base);
      else byShard.set(key, [at, base]);
    }
    await Promise.all([...byShard].map(([key, args]) => this.redis.zadd(key, 'LT', ...args)));
  }

  /**
   * Trims one customer: deletes records archived a grace ago, archives the bindings of
   * those due. Returns when it is due next (Redis ms), or null when nothing is listed.
   */
  async trimCustomer(base: string): Promise<number | null> {
    const ids = parseCustomerBase(this.prefix, base);
    if (!ids) throw new Error(`not a customer key base: ${base}`);
    const k = customerKeysFromBase(base);
    // Spent and expired sources leave by the same rule (lua/trim_sources-10.lua).
    const sources = await this.api.trim_sources(
      { keys: scriptKeys(k), clockOffsetMs: 0, projectId: ids.projectId, customerId: ids.customerId, entryIdBase: 'trim', bindingReadAtMs: null },
      { retentionMs: this.retentionMs, countMax: trim_records_max },
    );
    const sourcesNext = sources[5] === '' || sources[5] === undefined ? null : Number(sources[5]);
    const [due, cutoff, nextRaw] = await this.api.trimScan(k, { retentionMs: this.retentionMs, countMax: trim_records_max });
    let next = nextRaw === '' ? sourcesNext : sourcesNext === null ? Number(nextRaw) : Math.min(Number(nextRaw), sourcesNext);
    if (due.length === 0) return next;
    const of = (kind: string) => due.filter((m) => m[0] === kind || (kind === 't' && m[0] === 'g')).map((m) => m.slice(2));
    const removedAt = Math.max(
      await this.bindings.archive(ids.projectId, 't', ids.customerId, of('t')),
      await this.bindings.archive(ids.projectId, 'd', ids.customerId, of('d')),
    );
    // A gateway call's Idempotency-Key claim goes with the call: its record names the key.
    const calls = due.filter((m) => m[0] === 'g').map((m) => m.slice(2));
    const records = calls.length === 0 ? [] : await this.redis.hmget(k.tx, ...calls);
    const claims = calls.flatMap((txid, i) => {
      if (records[i] === null) return [];
      const call = parseTransaction(records[i]!);
      // A call released by the API billed nothing and freed its key already.
      if (call.ik === undefined || (call.st === 'released' && call.by === 'api')) return [];
      return [{ txid, id: claimId(ids.customerId, call.ik) }];
    });
    const claimedAt = await Promise.all(claims.map((c) => this.bindings.archive(ids.projectId, 'g', c.txid, [c.id])));
    const deleteAt = Math.max(removedAt, ...claimedAt) + this.graceMs;
    await this.api.trimMark(k, { cutoff, deleteAtMs: deleteAt, members: due });
    next = next === null ? deleteAt : Math.min(next, deleteAt);
    return next;
  }

  /** One pass over the due set: every customer due now is trimmed. Returns how many. */
  async pass(): Promise<number> {
    const [s, us] = await this.redis.time();
    const now = Number(s) * 1000 + Math.floor(Number(us) / 1000);
    let trimmed = 0;
    for (let shard = 0; shard < trim_due_shards; shard++) {
      const key = trimDueKey(this.prefix, shard);
      const flat = await this.redis.zrangebyscore(key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, trim_customers_per_shard_max);
      const due: [string, string][] = [];
      for (let i = 0; i < flat.length; i += 2) due.push([flat[i], flat[i + 1]]);
      for (let i = 0; i < due.length; i += trim_concurrency) {
        await Promise.all(
          due.slice(i, i + trim_concurrency).map(async ([base, score]) => {
            try {
              const next = await this.trimCustomer(base);
              await this.api.trim_due({ due: key }, { base, score, nextDueMs: next === null ? '' : next });
              trimmed++;
            } catch (err) {
              this.logger.error({ err, customer: base }, 'trim of a customer failed; it stays due');
            }
          }),
        );
      }
    }
    return trimmed;
  }
}

/** Runs trim passes until stopped (a worker process). */
export class TrimLoop {
  private running = false;
  private loop: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly retention: Retention,
    private readonly logger: Logger,
    private readonly isReady: () => boolean = () => true,
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = (async () => {
      while (this.running) {
        if (this.isReady()) {
          await this.retention.pass().catch((err: unknown) => this.logger.error({ err }, 'trim pass failed'));
        }
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          this.timer = setTimeout(resolve, trim_interval_ms);
        });
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.wake?.();
    await this.loop;
  }
}
