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
 * While unverified, money operations answer 503 service_unavailable, and nothing was
 * applied: the check runs synchronously right before the script is handed to the
 * connection.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import type { Scripts } from './scripts.js';

/** How long the recovering process holds the lock before another may take over. */
export const recovery_lock_ms = 10 * 60_000;
/** How often a process that waits for another's recovery looks for the marker. */
export const recovery_poll_ms = 100;
/** Pause before verifying again after a failure (PostgreSQL down, say). */
export const verify_retry_ms = 1_000;
/**
 * How long a money operation waits for the verification before it answers 503: a
 * process that just started or reconnected is usually verified within a round trip or two.
 */
export const verify_wait_ms = 2_000;

export const recoveredMarkerKey = (prefix: string, runId: string) => `${prefix}recovered:${runId}`;
export const recoveryLockKey = (prefix: string) => `${prefix}recovery:lock`;

const unverified_message =
  'Redis is unreachable, or restarted and is being checked against the ledger in PostgreSQL; nothing was applied: retry shortly';

export interface GenerationOptions {
  prefix: string;
  logger: Logger;
  /** Restores from PostgreSQL what this Redis may have forgotten (src/reconcile/recovery.ts). */
  recover(runId: string): Promise<void>;
}

export class RedisGeneration {
  private verifiedRunId: string | null = null;
  /** Counts connection losses: a verification started before the last one is void. */
  private epoch = 0;
  private waiters = new Set<() => void>();
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly redis: Redis,
    private readonly opts: GenerationOptions,
  ) {
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
    return this.verifiedRunId !== null && this.redis.status === 'ready';
  }

  /** The run_id this process verified, or null. */
  get runId(): string | null {
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
  }

  private async verify(): Promise<void> {
    const epoch = this.epoch;
    const { prefix, logger } = this.opts;
    try {
      const info = await this.redis.info('server');
      const runId = /run_id:([0-9a-f]+)/.exec(info)?.[1];
      if (!runId) throw new Error('INFO server carries no run_id');
      const marker = recoveredMarkerKey(prefix, runId);
      for (;;) {
        if (epoch !== this.epoch || this.closed) return;
        if ((await this.redis.exists(marker)) === 1) break;
        const token = randomBytes(8).toString('hex');
        if ((await this.redis.set(recoveryLockKey(prefix), token, 'PX', recovery_lock_ms, 'NX')) === 'OK') {
          const started = Date.now();
          try {
            await this.opts.recover(runId);
            await this.redis.set(marker, JSON.stringify({ at: new Date().toISOString(), ms: Date.now() - started }));
          } finally {
            // Only our own lock: after an expiry another process may hold it.
            await this.redis.eval("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0", 1, recoveryLockKey(prefix), token).catch(() => undefined);
          }
          logger.info({ runId, ms: Date.now() - started }, 'Redis generation recovered from PostgreSQL');
          break;
        }
        await new Promise((r) => setTimeout(r, recovery_poll_ms));
      }
      if (epoch !== this.epoch || this.closed) return;
      this.verifiedRunId = runId;
      for (const w of [...this.waiters]) w();
    } catch (err) {
      if (epoch !== this.epoch || this.closed) return;
      logger.error({ err }, 'verifying the Redis generation failed; money operations wait; retrying');
      this.retryTimer = setTimeout(() => {
        if (epoch === this.epoch) void this.verify();
      }, verify_retry_ms);
    }
  }
}
