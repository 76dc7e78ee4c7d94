/**
 * What a process cache filled from PostgreSQL and invalidated over Redis pub/sub (the key
 * cache, the model cache) needs so that an invalidation is never undone:
 * - a read from PostgreSQL that was in flight when an invalidation landed may have read
 *   the row before the change, so it is not cached and is read again (otherwise it would
 *   put the old row back after the message cleared it);
 * - pub/sub delivers at most once, so a subscriber that reconnects forgets everything.
 */
import type { Redis } from 'ioredis';

/** Reads of one key that restart because an invalidation landed while they ran, at most. */
const read_attempts_max = 5;

/**
 * Counts invalidations (a generation) and runs the reads of a cache: concurrent reads of
 * one key share one, and a read that an invalidation overtook is done again.
 */
export class InvalidationGuard<T> {
  private generation = 0;
  private readonly inFlight = new Map<string, Promise<T>>();

  /** Every invalidation of the cache calls this. */
  invalidate(): void {
    this.generation++;
  }

  /** For work outside `read` (a background refresh): `overtaken(token)` tells whether an invalidation came since. */
  token(): number {
    return this.generation;
  }

  overtaken(token: number): boolean {
    return token !== this.generation;
  }

  /** True while a read of `key` is in flight. */
  reading(key: string): boolean {
    return this.inFlight.has(key);
  }

  /**
   * Reads `key` with `load`, shared with concurrent callers. `keep` stores a value that no
   * invalidation overtook, with the time its read started. When invalidations keep coming,
   * the newest value is answered after read_attempts_max reads, without being kept. An
   * error of `load` is every waiting caller's.
   */
  read(key: string, load: () => Promise<T>, keep: (value: T, startedAt: number) => void): Promise<T> {
    let read = this.inFlight.get(key);
    if (!read) {
      read = this.readFresh(load, keep).finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, read);
    }
    return read;
  }

  private async readFresh(load: () => Promise<T>, keep: (value: T, startedAt: number) => void): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const generation = this.generation;
      const startedAt = Date.now();
      const value = await load();
      if (generation === this.generation) {
        keep(value, startedAt);
        return value;
      }
      if (attempt === read_attempts_max) return value;
    }
  }
}

/**
 * Calls `forget` whenever the subscriber reconnects, and again once Redis confirmed the
 * SUBSCRIBE to `channels` sent then: ioredis reports `ready` once it has sent its own
 * SUBSCRIBE again, before Redis confirmed it, and a message published in between is lost.
 * From the confirmation on, no message is missed.
 */
export function forgetOnResubscribe(subscriber: Redis, channels: readonly string[], forget: () => void): void {
  subscriber.on('ready', () => {
    forget();
    subscriber.subscribe(...channels).then(
      () => forget(),
      // The connection dropped again: its next `ready` repeats this.
      () => undefined,
    );
  });
}
