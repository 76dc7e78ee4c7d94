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
import type { Cluster, Command, Redis } from 'ioredis';
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
  constructor(cause: Error, message = cause.message) {
    super(message, { cause });
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
 * The error to answer with when `err` ends a request in a step taken before its command
 * was sent (a mark, the generation check): whatever that step's own outcome, the command
 * was not sent, so an Error becomes a CommandNotSentError ("nothing was applied").
 */
export function beforeSent(err: unknown): unknown {
  return provesNothingSent(err) || !(err instanceof Error) ? err : new CommandNotSentError(err);
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
  /** Cluster: the promise whose failure reached the caller; that promise is never sent again. */
  answered?: Promise<unknown>;
  /** Cluster: the promise the cluster-level wrapper follows (a pipeline retry makes a new one). */
  followed?: Promise<unknown>;
  /** Cluster: the offline queue (the cluster's or a node's) it was last put in. */
  queue?: WaitingQueue;
}

/** An offline queue of ioredis (a denque), as trackClusterWrites searches it. */
interface WaitingQueue {
  peekBack(): { command: Command } | undefined;
  peekAt(index: number): { command: Command } | undefined;
  removeOne(index: number): unknown;
  size(): number;
}

/**
 * Takes a command whose caller has its failure out of the offline queue it waits in, so
 * that it is never written. A promise is not enough to recognise it there: a pipeline
 * whose commands all failed with one error gives each a new promise even when it does not
 * send them again.
 */
function unqueue(state: SendState, command: Command): void {
  const queue = state.queue;
  state.queue = undefined;
  if (!queue) return;
  for (let i = queue.size() - 1; i >= 0; i--) {
    if (queue.peekAt(i)?.command === command) queue.removeOne(i);
  }
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
        if (!s.written) reject(new CommandNotSentError(err));
        // A written command of a pipeline whose earlier replies had come when the
        // connection closed: ioredis fails it with its AbortError before the `close`
        // handler below runs. It may have applied, as any written command whose reply was
        // lost: "outcome unknown", like the others (the API answered 500 for it).
        else if (err.name === 'AbortError') reject(new OutcomeUnknownError(err));
        else reject(err);
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

/**
 * Replies by which a cluster node refuses a command without running it; the cluster
 * client sends it again where the reply says (ASK, MOVED) or later (TRYAGAIN, CLUSTERDOWN).
 */
const redirection = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /;

/**
 * The message of a written command that failed without its reply on a cluster. It must
 * differ from ioredis's "Connection is closed.": for that exact message, the cluster
 * client sends a failed command (and a pipeline whose commands all failed with it) again
 * after a failover delay, which would run a money script twice.
 */
const written_unknown_message = 'Connection is closed after the command was written: its outcome is unknown.';

type ClusterSend = Cluster['sendCommand'];

/**
 * The proof of trackWrites on a Redis Cluster client, for the money connection (the one
 * that never sends an unanswered command again). ioredis's cluster client routes every
 * command through its own `sendCommand`, which queues it in the cluster's offline queue
 * (before the cluster is ready, while it reconnects) or hands it to the connection of the
 * node that serves its slot; that node connection writes it or queues it in its own
 * offline queue. It retries a command on another node after a redirection (MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN: replies of a node that did not run it) and after "Connection is
 * closed." (a node lost: a failover); a pipeline (auto-pipelining) is retried as a whole
 * when all its commands failed with one error. So:
 * - every node connection (the `+node` event; a lost node gets a new connection) follows
 *   each attempt: a written command is "may have run" until a redirection reply says the
 *   node refused it; a written one whose connection failed fails as OutcomeUnknownError,
 *   with a message for which the cluster client does not send it again;
 * - the cluster-level wrapper sits below the cluster client's own retry handling, so it
 *   sees only the failure that reaches the caller: never written (or refused by every
 *   node it reached) becomes CommandNotSentError, and that promise is never sent again
 *   (from the cluster's offline queue after a timeout, say);
 * - a command waiting in the cluster's offline queue has no timeout of ioredis's own
 *   (commandTimeout belongs to the node connection), so it gets the node's commandTimeout
 *   here: while the whole cluster is away, commands fail as not sent instead of waiting.
 */
export function trackClusterWrites(cluster: Cluster): void {
  if (cluster.options.redisOptions?.autoResendUnfulfilledCommands !== false) return;
  const timeoutMs = cluster.options.redisOptions?.commandTimeout;
  const send: ClusterSend = cluster.sendCommand.bind(cluster);
  const tracked = ((command: TrackedCommand, stream?: unknown, node?: unknown) => {
    const state = stateOf(command);
    if (state.answered === command.promise) return command.promise;
    if (state.followed !== command.promise) {
      const promise = command.promise;
      state.followed = promise;
      const reject = command.reject;
      command.reject = (err: Error) => {
        state.answered = promise;
        unqueue(state, command);
        const proven = err instanceof CommandNotSentError || err instanceof OutcomeUnknownError;
        reject(proven || state.written ? err : new CommandNotSentError(err));
      };
    }
    if (typeof timeoutMs === 'number') command.setTimeout(timeoutMs);
    const result = (send as (c: Command, s?: unknown, n?: unknown) => Promise<unknown>)(command, stream, node);
    const offline = (cluster as unknown as { offlineQueue: WaitingQueue }).offlineQueue;
    if (offline.peekBack()?.command === command) state.queue = offline;
    return result;
  }) as ClusterSend;
  cluster.sendCommand = tracked;
  for (const redis of cluster.nodes('all')) trackNodeWrites(redis);
  cluster.on('+node', (redis: Redis) => trackNodeWrites(redis));
}

function stateOf(command: TrackedCommand): SendState {
  let state = command[sendState];
  if (state === undefined) {
    state = { written: false, failed: false };
    command[sendState] = state;
  }
  return state;
}

const trackedNodes = new WeakSet<Redis>();

/** One node connection of a tracked cluster client: follows each attempt (see trackClusterWrites). */
function trackNodeWrites(redis: Redis): void {
  if (trackedNodes.has(redis)) return;
  trackedNodes.add(redis);
  const send: SendCommand = redis.sendCommand.bind(redis);
  const tracked: SendCommand = (command: TrackedCommand, stream) => {
    const state = stateOf(command);
    if (state.answered === command.promise) return command.promise;
    // A command sent on the node connection itself (not through the cluster client): this
    // attempt's failure is the caller's.
    const direct = state.followed !== command.promise;
    const promise = command.promise;
    const reject = command.reject;
    let settled = false;
    let written = false;
    const wrapper = (err: Error) => {
      settled = true;
      if (command.reject === wrapper) command.reject = reject;
      if (err.name === 'ReplyError') {
        // The node answered: a redirection says it did not run the command.
        if (redirection.test(err.message)) state.written = false;
      } else if (written && !(err instanceof OutcomeUnknownError)) {
        err = new OutcomeUnknownError(err, err.message === connection_closed_message ? written_unknown_message : err.message);
      }
      if (direct) {
        state.answered = promise;
        unqueue(state, command);
        if (!state.written && !(err instanceof CommandNotSentError) && !(err instanceof OutcomeUnknownError)) err = new CommandNotSentError(err);
      }
      reject(err);
    };
    command.reject = wrapper;
    const result = send(command, stream);
    const offline = (redis as unknown as { offlineQueue: WaitingQueue }).offlineQueue;
    if (settled) return result;
    if (offline.peekBack()?.command === command) {
      state.queue = offline;
    } else {
      written = true;
      state.written = true;
    }
    return result;
  };
  redis.sendCommand = tracked;
}
