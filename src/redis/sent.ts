/**
 * Which Redis commands provably never reached Redis. A command that failed without a
 * reply may have applied if it was written to the socket: Redis runs what it read even
 * when the connection drops before the reply goes back. ioredis gives a written command
 * and one still waiting in its offline queue the same error (MaxRetriesPerRequestError,
 * "Command timed out", "Connection is closed"), often one shared error object, so the
 * error alone cannot tell them apart. The proof is taken per command, where ioredis hands
 * it to the connection: a command that was never written fails with a
 * CommandNotSentError, and only that error lets the API say "nothing was applied".
 */
import type { Command, Redis } from 'ioredis';
import { ApiError } from '../errors/catalogue.js';

/** A Redis command that failed before any byte of it was written to a connection. */
export class CommandNotSentError extends Error {
  readonly code?: string;

  constructor(readonly original: Error) {
    // The same message and code as ioredis's error: callers that read them (BullMQ tells
    // connection errors apart that way) see no change.
    super(original.message, { cause: original });
    this.name = 'CommandNotSentError';
    this.code = (original as { code?: string }).code;
  }
}

/**
 * A failure whose outcome is unknown: a command that was written and whose connection
 * closed before its reply came, or a failure after part of the request already applied (a
 * gateway hold) of a later step that by itself would say nothing was applied. The API
 * answers 503 "outcome unknown".
 */
export class OutcomeUnknownError extends Error {
  constructor(cause: Error) {
    super(cause.message, { cause });
    this.name = 'OutcomeUnknownError';
  }
}

/**
 * The error to answer with when `err` ends a request after something of it applied: one
 * that claims nothing was applied (a command never sent, a 503 refused before sending)
 * becomes an OutcomeUnknownError; any other error is the request's answer as it is.
 */
export function afterApplied(err: unknown): unknown {
  return provesNothingSent(err) ? new OutcomeUnknownError(err) : err;
}

/**
 * True when `err` proves that the command it ended never reached Redis: a command never
 * written, or a 503 refused before sending (the Redis generation guard). Any other error
 * leaves the command's outcome unknown.
 */
export function provesNothingSent(err: unknown): err is CommandNotSentError | ApiError {
  return err instanceof CommandNotSentError || (err instanceof ApiError && err.code === 'service_unavailable');
}

const sendState = Symbol('svc.redis.sendState');

interface SendState {
  /** Written to a connection at least once, or possibly so. */
  written: boolean;
  /** Its promise has failed: the caller has its answer. */
  failed: boolean;
}

type TrackedCommand = Command & { [sendState]?: SendState };

/** ioredis's offline queue (a denque of `{ command, stream, select }`); private in its typings. */
interface OfflineQueue {
  peekBack(): { command: Command } | undefined;
}

/** ioredis's queue of written commands waiting for their replies; private in its typings. */
interface CommandQueue {
  shift(): { command: Command } | undefined;
}

/** ioredis's message for a closed connection: BullMQ reads it as a connection error. */
const connection_closed_message = 'Connection is closed.';

type SendCommand = Redis['sendCommand'];

/**
 * Follows every command the connection is given. ioredis routes all of them through
 * `sendCommand` (direct calls, auto-pipelined batches, scripts, the offline queue replayed
 * on reconnect), which either writes the command or appends it to the offline queue. A
 * command found at the tail of the offline queue right after that call was not written;
 * any other outcome counts as written. A command whose promise has failed is never
 * written afterwards: ioredis would otherwise replay a command that timed out in its
 * offline queue once the connection is back, after its caller was told it was not sent
 * (and, on a connection that resends unanswered commands, one its caller gave up on).
 */
export function trackWrites(redis: Redis): void {
  const send: SendCommand = redis.sendCommand.bind(redis);
  const tracked: SendCommand = (command: TrackedCommand, stream) => {
    let state = command[sendState];
    if (state === undefined) {
      const s: SendState = { written: false, failed: false };
      state = s;
      command[sendState] = s;
      const reject = command.reject;
      command.reject = (err: Error) => {
        s.failed = true;
        reject(s.written ? err : new CommandNotSentError(err));
      };
    } else if (state.failed) {
      return command.promise;
    }
    const result = send(command, stream);
    const offline = (redis as unknown as { offlineQueue?: OfflineQueue }).offlineQueue;
    // A command refused on the spot (a closed connection) has failed unwritten already.
    if (!state.failed && offline?.peekBack()?.command !== command) state.written = true;
    return result;
  };
  redis.sendCommand = tracked;
  // A connection that does not resend unanswered commands keeps them in a queue it drops
  // on its next connect, without failing them: their callers would wait for their
  // commandTimeout. They were written, so they fail as soon as the connection closes, and
  // as "outcome unknown". ioredis emits `close` on the next tick after it closed, before
  // any reconnect can start (that waits for retryStrategy's delay).
  if (!redis.options.autoResendUnfulfilledCommands) {
    redis.on('close', () => {
      const queue = (redis as unknown as { commandQueue?: CommandQueue }).commandQueue;
      for (let item = queue?.shift(); item !== undefined; item = queue?.shift()) {
        item.command.reject(new OutcomeUnknownError(new Error(connection_closed_message)));
      }
    });
  }
}
