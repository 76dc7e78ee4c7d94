/**
 * The Redis generation guard: no money operation reaches a Redis that may have forgotten
 * acknowledged writes until what it forgot is back from PostgreSQL.
 *
 * Redis's `run_id` (INFO server) changes whenever Redis restarts or a replica is promoted,
 * which is exactly when it may hold less than it acknowledged (an AOF `everysec` crash,
 * an old snapshot, a replica that was behind). Each process keeps "verified for run_id X".
 * The flag drops as soon as the shared connection is not ready (its status changes at
 * once; the `close` event follows), so a script is never sent to a Redis this process has
 * not verified since it reconnected. On `ready` the process reads run_id and looks for the
 * marker `<prefix>recovered:<run_id>`: present, the Redis is verified; absent, one process
 * (a lock with an expiry) recovers the customers whose ledger in PostgreSQL is ahead of
 * Redis and then sets the marker, while the others wait for it.
 *
 * On a Redis Cluster every master has its own run_id and may forget the writes of its
 * own slots alone, so the guard is per master: verified means every master of the slot
 * map is verified on the connection the cluster client uses for it now. A master's marker
 * and lock live on that master (under a hash tag whose slot it serves:
 * `<prefix>recovered:{n7}:<run_id>`), are read and written on its own connection, and its
 * recovery rebuilds only the customers whose slot it serves. A lost node connection is
 * replaced by a new one (ioredis does not reconnect a cluster node), which is verified
 * again before the guard lets scripts through.
 *
 * While unverified, money operations answer 503 service_unavailable, and nothing was
 * applied: the check runs synchronously right before the script is handed to the
 * connection.
 */
import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import { isCluster, type RedisClient } from './client.js';
import type { Scripts } from './scripts.js';
import { keySlot, masterSlots, tagIn } from './slots.js';

/** How long the recovering process holds the lock before another may take over. */
const recovery_lock_ms = 10 * 60_000;
/** How often a process that waits for another's recovery looks for the marker. */
const recovery_poll_ms = 100;
/** Pause before verifying again after a failure (PostgreSQL down, say). */
const verify_retry_ms = 1_000;
/**
 * How long a money operation waits for the verification before it answers 503: a
 * process that just started or reconnected is usually verified within a round trip or two.
 */
const verify_wait_ms = 2_000;

export const recoveredMarkerKey = (prefix: string, runId: string) => `${prefix}recovered:${runId}`;
export const recoveryLockKey = (prefix: string) => `${prefix}recovery:lock`;
/** The marker and lock of a cluster master, under a hash tag whose slot it serves (tagIn). */
export const nodeRecoveredMarkerKey = (prefix: string, tag: string, runId: string) => `${prefix}recovered:{${tag}}:${runId}`;
const nodeRecoveryLockKey = (prefix: string, tag: string) => `${prefix}recovery:lock:{${tag}}`;

const unverified_message =
  'Redis is unreachable, or restarted and is being checked against the ledger in PostgreSQL; nothing was applied: retry shortly';

/** What one recovery covers: a single Redis, or one master of a cluster. */
export interface RecoveryScope {
  /** The master ("host:port") on a cluster; null on a single Redis. */
  node: string | null;
  /** On a cluster, a hash tag whose slot this master serves, for keys that must live on it. */
  tag: string | null;
  /** True when this Redis holds `key` (every key on a single Redis; its slots on a cluster). */
  holds(key: string): boolean;
}

export const singleRedisScope: RecoveryScope = { node: null, tag: null, holds: () => true };

export interface GenerationOptions {
  prefix: string;
  logger: Logger;
  /** Restores from PostgreSQL what this Redis (or master) may have forgotten (src/reconcile/recovery.ts). */
  recover(runId: string, scope: RecoveryScope): Promise<void>;
}

/** The keys and the connection one verification uses. */
interface Target {
  conn: Redis;
  scope: RecoveryScope;
  marker(runId: string): string;
  lock: string;
}

export class RedisGeneration {
  /** Single Redis: the run_id this process verified, or null. */
  private verifiedRunId: string | null = null;
  /** Single Redis: counts connection losses; a verification started before the last one is void. */
  private epoch = 0;
  private waiters = new Set<() => void>();
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly cluster: ClusterGeneration | null = null;

  constructor(
    private readonly redis: RedisClient,
    private readonly opts: GenerationOptions,
  ) {
    if (isCluster(redis)) {
      this.cluster = new ClusterGeneration(redis, opts, () => this.notify(), (target, isCurrent) => this.verifyTarget(target, isCurrent));
      return;
    }
    const drop = () => {
      this.epoch++;
      this.verifiedRunId = null;
    };
    redis.on('close', drop);
    redis.on('reconnecting', drop);
    redis.on('end', drop);
    redis.on('ready', () => void this.verify());
    if (redis.status === 'ready') void this.verify();
  }

  /** True when money operations may be sent now. */
  get verified(): boolean {
    if (this.cluster) return this.cluster.verified;
    return this.verifiedRunId !== null && this.redis.status === 'ready';
  }

  /** The run_id this process verified (on a cluster, `host:port=run_id` per master), or null. */
  get runId(): string | null {
    if (this.cluster) return this.cluster.runIds();
    return this.verified ? this.verifiedRunId : null;
  }

  /** Throws 503 service_unavailable (nothing applied) unless verified. Synchronous on purpose. */
  assertVerified(): void {
    if (!this.verified) throw new ApiError('service_unavailable', { message: unverified_message });
  }

  /** Resolves once verified; 503 after verify_wait_ms. For the entry points of money operations. */
  async ready(waitMs = verify_wait_ms): Promise<void> {
    if (this.verified) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, waitMs);
      this.waiters.add(done);
    });
    this.assertVerified();
  }

  /** Scripts that check the guard right before each call (every money script goes through here). */
  guardScripts(scripts: Scripts): Scripts {
    return {
      run: (name, keys, args) => {
        this.assertVerified();
        return scripts.run(name, keys, args);
      },
      runOther: (name, keys, args) => {
        this.assertVerified();
        return scripts.runOther(name, keys, args);
      },
    };
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.cluster?.close();
  }

  private notify(): void {
    if (!this.verified) return;
    for (const w of [...this.waiters]) w();
  }

  private async verify(): Promise<void> {
    const epoch = this.epoch;
    const { prefix, logger } = this.opts;
    const target: Target = { conn: this.redis as Redis, scope: singleRedisScope, marker: (runId) => recoveredMarkerKey(prefix, runId), lock: recoveryLockKey(prefix) };
    try {
      const runId = await this.verifyTarget(target, () => epoch === this.epoch && !this.closed);
      if (runId === null) return;
      this.verifiedRunId = runId;
      this.notify();
    } catch (err) {
      if (epoch !== this.epoch || this.closed) return;
      logger.error({ err }, 'verifying the Redis generation failed; money operations wait; retrying');
      this.retryTimer = setTimeout(() => {
        if (epoch === this.epoch) void this.verify();
      }, verify_retry_ms);
    }
  }

  /**
   * Reads the run_id of `target`'s Redis and returns it once its marker is there (set by
   * another process, or by this one after the recovery); null when `isCurrent` turned
   * false meanwhile (the connection was lost: the answer would be about another Redis).
   */
  private async verifyTarget(target: Target, isCurrent: () => boolean): Promise<string | null> {
    const { conn } = target;
    const info = await conn.info('server');
    const runId = /run_id:([0-9a-f]+)/.exec(info)?.[1];
    if (!runId) throw new Error('INFO server carries no run_id');
    const marker = target.marker(runId);
    for (;;) {
      if (!isCurrent()) return null;
      if ((await conn.exists(marker)) === 1) break;
      const token = randomBytes(8).toString('hex');
      if ((await conn.set(target.lock, token, 'PX', recovery_lock_ms, 'NX')) === 'OK') {
        const started = Date.now();
        try {
          await this.opts.recover(runId, target.scope);
          await conn.set(marker, JSON.stringify({ at: new Date().toISOString(), ms: Date.now() - started }));
        } finally {
          // Only our own lock: after an expiry another process may hold it.
          await conn.eval("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0", 1, target.lock, token).catch(() => undefined);
        }
        this.opts.logger.info({ runId, node: target.scope.node ?? undefined, ms: Date.now() - started }, 'Redis generation recovered from PostgreSQL');
        break;
      }
      await new Promise((r) => setTimeout(r, recovery_poll_ms));
    }
    return isCurrent() ? runId : null;
  }
}

/** One master of a cluster, as the guard follows it. */
interface Master {
  key: string;
  slots: Set<number>;
  tag: string;
  /** The node connection verified, and its run_id; both null until verified. */
  conn: Redis | null;
  runId: string | null;
  /** Counts losses of this master's connection; a verification started before one is void. */
  epoch: number;
  verifying: boolean;
  retryTimer: NodeJS.Timeout | undefined;
}

/** The cluster half of RedisGeneration: one verification per master. */
class ClusterGeneration {
  private masters = new Map<string, Master>();
  private readonly followed = new WeakSet<Redis>();
  private closed = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly opts: GenerationOptions,
    private readonly changed: () => void,
    private readonly verifyTarget: (target: Target, isCurrent: () => boolean) => Promise<string | null>,
  ) {
    // The slot map is read on connect, every cluster_slots_refresh_ms and after a MOVED.
    cluster.on('refresh', () => this.sync());
    cluster.on('ready', () => this.sync());
    cluster.on('+node', (conn: Redis) => this.follow(conn));
    cluster.on('-node', (conn: Redis) => this.lost(conn));
    for (const conn of cluster.nodes('all')) this.follow(conn);
    if (cluster.status === 'ready') this.sync();
  }

  get verified(): boolean {
    if (this.cluster.status !== 'ready' || this.masters.size === 0) return false;
    for (const m of this.masters.values()) {
      if (m.runId === null || m.conn === null || m.conn.status !== 'ready' || this.connectionOf(m.key) !== m.conn) return false;
    }
    return true;
  }

  runIds(): string | null {
    if (!this.verified) return null;
    return [...this.masters.values()].map((m) => `${m.key}=${m.runId}`).sort().join(',');
  }

  close(): void {
    this.closed = true;
    for (const m of this.masters.values()) clearTimeout(m.retryTimer);
  }

  /** Reads the masters and their slots from the slot map; verifies what is new or moved. */
  private sync(): void {
    if (this.closed) return;
    const now = masterSlots(this.cluster);
    for (const [key, m] of this.masters) {
      if (!now.has(key)) {
        clearTimeout(m.retryTimer);
        m.epoch++;
        this.masters.delete(key);
      }
    }
    for (const [key, slots] of now) {
      const known = this.masters.get(key);
      if (known && sameSlots(known.slots, slots)) continue;
      if (known) {
        clearTimeout(known.retryTimer);
        known.epoch++;
      }
      // Slots that moved may have moved without their keys: verify again.
      this.masters.set(key, { key, slots, tag: tagIn(slots), conn: null, runId: null, epoch: (known?.epoch ?? 0) + 1, verifying: false, retryTimer: undefined });
    }
    for (const m of this.masters.values()) if (m.runId === null) this.verify(m);
    this.changed();
  }

  /** Listens to a node connection: losing it unverifies its master; once ready, it is verified. */
  private follow(conn: Redis): void {
    if (this.followed.has(conn)) return;
    this.followed.add(conn);
    const drop = () => {
      const m = this.masterOf(conn);
      if (!m) return;
      // Voids a verification in flight on it too.
      m.epoch++;
      if (m.conn === conn) {
        m.conn = null;
        m.runId = null;
      }
    };
    conn.on('close', drop);
    conn.on('reconnecting', drop);
    conn.on('end', drop);
    conn.on('ready', () => {
      const m = this.masterOf(conn);
      if (m && m.runId === null) this.verify(m);
    });
  }

  private lost(conn: Redis): void {
    const m = this.masterOf(conn);
    if (!m) return;
    if (m.conn === conn) {
      m.epoch++;
      m.conn = null;
      m.runId = null;
    }
    // ioredis opens a new connection only when a command needs the node; the guard needs
    // it verified before it lets scripts through, so it asks for it after a pause.
    this.retryLater(m);
  }

  private masterOf(conn: Redis): Master | undefined {
    return this.masters.get(`${conn.options.host}:${conn.options.port}`);
  }

  private connectionOf(key: string): Redis | undefined {
    return (this.cluster as unknown as { connectionPool: { getInstanceByKey(k: string): Redis | undefined } }).connectionPool.getInstanceByKey(key);
  }

  /** The pool's connection to `key`, made when the pool has none (ioredis makes them lazily). */
  private connect(key: string): Redis {
    const existing = this.connectionOf(key);
    if (existing) return existing;
    const colon = key.lastIndexOf(':');
    const pool = (this.cluster as unknown as { connectionPool: { findOrCreate(node: { host: string; port: number }): Redis } }).connectionPool;
    return pool.findOrCreate({ host: key.slice(0, colon), port: Number(key.slice(colon + 1)) });
  }

  private verify(m: Master): void {
    if (this.closed || m.verifying || this.masters.get(m.key) !== m) return;
    const conn = this.connect(m.key);
    this.follow(conn);
    if (conn.status !== 'ready') {
      // Its `ready` verifies it; a lazy connection waits for a first command to connect.
      if (conn.status === 'wait') conn.connect().catch(() => undefined);
      if (conn.status === 'end') this.retryLater(m);
      return;
    }
    const epoch = m.epoch;
    const { prefix, logger } = this.opts;
    const isCurrent = () => !this.closed && m.epoch === epoch && this.masters.get(m.key) === m && conn.status === 'ready';
    const scope: RecoveryScope = { node: m.key, tag: m.tag, holds: (key) => m.slots.has(keySlot(key)) };
    const target: Target = { conn, scope, marker: (runId) => nodeRecoveredMarkerKey(prefix, m.tag, runId), lock: nodeRecoveryLockKey(prefix, m.tag) };
    m.verifying = true;
    this.verifyTarget(target, isCurrent)
      .then((runId) => {
        if (runId === null || !isCurrent()) return;
        m.conn = conn;
        m.runId = runId;
        this.changed();
      })
      .catch((err: unknown) => {
        if (!isCurrent()) return;
        logger.error({ err, node: m.key }, 'verifying the Redis generation of a cluster master failed; money operations wait; retrying');
        this.retryLater(m);
      })
      .finally(() => {
        m.verifying = false;
        // Lost and back while this ran: verify the new connection.
        if (m.runId === null && this.masters.get(m.key) === m && this.connectionOf(m.key)?.status === 'ready' && m.epoch !== epoch) this.verify(m);
      });
  }

  private retryLater(m: Master): void {
    if (this.closed) return;
    clearTimeout(m.retryTimer);
    m.retryTimer = setTimeout(() => {
      if (m.runId === null) this.verify(m);
    }, verify_retry_ms);
  }
}

function sameSlots(a: ReadonlySet<number>, b: ReadonlySet<number>): boolean {
  if (a.size !== b.size) return false;
  for (const s of a) if (!b.has(s)) return false;
  return true;
}
