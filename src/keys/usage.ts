/**
 * When each key was last used. The key cache notes every request a live key authenticates
 * in this process's memory (one Map write); the uses gathered are written to PostgreSQL in
 * one statement every `flushMs`, and on close. So "last used" is at most `flushMs` behind,
 * and no request waits for a write.
 */
import type { Logger } from 'pino';
import { sql, type DatabasePool } from 'slonik';

export class KeyUsage {
  private seen = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: DatabasePool,
    private readonly flushMs: number,
    private readonly logger: Logger,
  ) {}

  /** The timer starts with the first use: a process that authenticates nothing (a worker) never writes. */
  note(keyId: string, atMs: number): void {
    this.seen.set(keyId, atMs);
    this.timer ??= setInterval(() => void this.flush(), this.flushMs).unref();
  }

  /** Writes the uses noted so far; a later use never goes back to an earlier time. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.seen.size === 0) return;
      const batch = [...this.seen];
      this.seen = new Map();
      try {
        await this.db.query(sql.unsafe`
          UPDATE api_keys k SET last_used_at = v.at
          FROM unnest(${sql.array(batch.map(([id]) => id), 'text')}::text[], ${sql.array(batch.map(([, at]) => new Date(at).toISOString()), 'text')}::timestamptz[]) AS v(id, at)
          WHERE k.id = v.id AND (k.last_used_at IS NULL OR k.last_used_at < v.at)`);
      } catch (err) {
        // Only a display value is late; the next flush writes the uses noted after this one.
        this.logger.warn({ err, keys: batch.length }, 'key last-used times not written');
      }
    });
    return this.flushing;
  }

  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
  }
}
