/**
 * A fix for BullMQ 5's Worker: once a worker is closing, a job's completion (or failure)
 * that meets a connection error is retried at once and without end. Its retry pauses
 * `runRetryDelay` only while the worker is *not* closing, and the error of a connection
 * that has ended ("Connection is closed.") comes back in the same tick, so the retry
 * loop never leaves the microtask queue: the process spins at 100% CPU, no timer ever
 * fires again, and it never exits.
 *
 * It happens when a stop gives up on BullMQ's close (Redis away: workers/index.ts,
 * worker_close_wait_ms) and the connections are then closed while a job is still in
 * flight: the test of that stop (test/workers/shutdown.test.ts) hung a CI run this way,
 * past every vitest timeout. BullMQ 6 fixed it the same way as here (no retry of a
 * connection error while closing); 6 is a major version with other breaking changes, so
 * until the project moves to it, this wraps the private retry of this version: while the
 * worker is closing, a connection error is reported as a plain error, which BullMQ does
 * not retry. The job stays active in Redis, its lock expires, and BullMQ's stalled check
 * on a running worker gives it back to the queue (every job of this service is
 * idempotent).
 *
 * Applied once, when this module is imported (workers/index.ts). test/workers/
 * closing-spin.test.ts proves the spin without it and its end with it, in a child process.
 */
import { isNotConnectionError, Worker } from 'bullmq';

type RetryIfFailed = (this: Worker, fn: () => Promise<unknown>, opts: Record<string, unknown>) => Promise<unknown>;

/**
 * The error a connection error becomes while the worker is closing. Its message must not
 * carry the cause's text: BullMQ tells connection errors by their message
 * ("Connection is closed.", "ECONNREFUSED"); the cause keeps it.
 */
export class ClosingConnectionError extends Error {
  constructor(cause: Error) {
    super('the queue worker is closing and its Redis connection failed (see cause)', { cause });
    this.name = 'ClosingConnectionError';
  }
}

const proto = Worker.prototype as unknown as { retryIfFailed?: RetryIfFailed; __svcClosingFix?: true };

export function applyClosingFix(): void {
  if (proto.__svcClosingFix) return;
  const original = proto.retryIfFailed;
  // A BullMQ without this private method has changed: fail at start, not with a spin later.
  if (typeof original !== 'function') throw new Error('bullmq: Worker.retryIfFailed not found; review workers/bullmq-closing.ts for this version');
  proto.retryIfFailed = function (this: Worker, fn, opts) {
    return original.call(this, async () => {
      try {
        return await fn();
      } catch (err) {
        if (this.closing && err instanceof Error && !isNotConnectionError(err)) throw new ClosingConnectionError(err);
        throw err;
      }
    }, opts);
  };
  proto.__svcClosingFix = true;
}

applyClosingFix();
