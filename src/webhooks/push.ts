/**
 * The push: the persist worker hands over the ids of the events it has just committed
 * (workers/persist.ts, `eventsPersisted`), and this fans them out (fanOutEvents) beside
 * the persist loop, which never waits for it: one fan-out at a time, taking every id
 * handed over meanwhile, so that a burst of small persist passes makes a few large
 * fan-outs. A failed fan-out is logged and left to the dispatcher's poll, which takes the
 * events once they are WEBHOOK_DISPATCH_GRACE_MS old; the persist batch, committed, is
 * neither failed nor retried for it. So are ids beyond push_pending_max (PostgreSQL slow
 * or away): the poll's, too.
 */
import type { Logger } from 'pino';

/** Event ids one fan-out takes at most. */
const push_batch_max = 1_000;
/** Event ids that may wait for a fan-out; more are left to the poll. */
const push_pending_max = 50_000;

export class EventPush {
  private pending: string[] = [];
  private running: Promise<void> | undefined;

  constructor(
    private readonly fanOut: (eventIds: readonly string[]) => Promise<void>,
    private readonly logger: Logger,
  ) {}

  /** Fans these events out soon; never throws, never waits. */
  add(eventIds: readonly string[]): void {
    if (eventIds.length === 0) return;
    if (this.pending.length + eventIds.length > push_pending_max) {
      this.logger.warn({ events: eventIds.length, waiting: this.pending.length }, 'webhook push behind; these events are left to the dispatcher\'s poll');
      return;
    }
    this.pending.push(...eventIds);
    this.running ??= this.drain();
  }

  /** Resolves once every event handed over so far has been fanned out (or its fan-out failed). */
  async idle(): Promise<void> {
    await this.running;
  }

  private async drain(): Promise<void> {
    while (this.pending.length > 0) {
      const ids = this.pending.splice(0, push_batch_max);
      try {
        await this.fanOut(ids);
      } catch (err) {
        this.logger.error({ err, events: ids.length }, 'webhook push failed; the dispatcher\'s poll fans these events out after WEBHOOK_DISPATCH_GRACE_MS');
      }
    }
    this.running = undefined;
  }
}
