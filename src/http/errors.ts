/** The one error middleware: catalogue errors as the contract's body, the rest as 500. */
import type { ErrorRequestHandler, RequestHandler } from 'express';
import type { Logger } from 'pino';
import { BackendTerminatedError, BackendTerminatedUnexpectedlyError, ConnectionError, SlonikError } from 'slonik';
import { ApiError } from '../errors/catalogue.js';
import { pathOf } from './access-log.js';
import { CommandNotSentError, OutcomeUnknownError } from '../redis/sent.js';
import type { Metrics } from '../metrics/metrics.js';

export const notFound: RequestHandler = (req) => {
  throw new ApiError('not_found', { message: `no route for ${req.method} ${req.path}` });
};

/**
 * Redis or PostgreSQL could not answer. 'unsent' only with proof that the command never
 * reached the store, so nothing was applied: a Redis command that failed before it was
 * written (CommandNotSentError, see src/redis/sent.ts), or a database connection that
 * could not be opened (slonik's ConnectionError: no query went out). Every other failure
 * of a store is 'unknown': the command may have been written and applied, and only its
 * reply was lost, or it came after part of the request applied (OutcomeUnknownError).
 * ioredis's own errors (MaxRetriesPerRequestError, "Connection is closed",
 * "Command timed out") are given to written and unwritten commands alike, so they prove
 * nothing by themselves.
 */
export function backendFailure(err: unknown): 'unsent' | 'unknown' | null {
  const e = err as { name?: string; message?: string; code?: string };
  if (err instanceof CommandNotSentError || err instanceof ConnectionError) return 'unsent';
  if (err instanceof OutcomeUnknownError || err instanceof BackendTerminatedError || err instanceof BackendTerminatedUnexpectedlyError) return 'unknown';
  if (e?.name === 'MaxRetriesPerRequestError' || e?.code === 'ECONNREFUSED') return 'unknown';
  if (/Connection is closed|Command timed out|Stream isn't writeable/.test(e?.message ?? '')) return 'unknown';
  return null;
}

/** The store a backend failure (backendFailure) came from: slonik's errors are PostgreSQL's, the rest Redis's. */
export function failedStore(err: unknown): 'redis' | 'postgres' {
  return err instanceof SlonikError ? 'postgres' : 'redis';
}

/**
 * A 4xx raised by Express or body-parser, whose message is meant for the client: an
 * http-errors error marked `expose`, or the router's URIError for a path parameter.
 */
function isClientHttpError(err: unknown): boolean {
  const e = err as { status?: unknown; expose?: unknown };
  if (typeof e?.status !== 'number' || e.status < 400 || e.status >= 500) return false;
  return e.expose === true || err instanceof URIError;
}

const outcome_unknown_message =
  'a backing service stopped answering; the operation may have been applied: retry it with the same transaction_id or idempotency_key, which answers with its original result if it was';

/**
 * The error middleware; `logger` gets the failures of our own (a 5xx), with the request's
 * method and path, and `metrics` counts the requests a store failure answered 503.
 */
export function errorHandler(logger?: Logger, metrics?: Metrics): ErrorRequestHandler {
  return (err, req, res, _next) => {
    let apiError: ApiError;
    const backend = backendFailure(err);
    if (err instanceof ApiError) {
      apiError = err;
    } else if ((err as { type?: string }).type === 'entity.too.large') {
      apiError = new ApiError('payload_too_large');
    } else if ((err as { type?: string }).type === 'entity.parse.failed') {
      apiError = new ApiError('invalid_json');
    } else if (isClientHttpError(err)) {
      // What Express and body-parser refuse before a route runs: a malformed path
      // encoding, an unsupported Content-Encoding or charset, an aborted body.
      apiError = new ApiError('invalid_request', { message: (err as Error).message });
    } else if (backend !== null) {
      logger?.error({ err, method: req.method, path: pathOf(req) }, 'backing service unavailable');
      (failedStore(err) === 'postgres' ? metrics?.postgresErrors : metrics?.redisErrors)?.inc({ kind: 'request' });
      apiError = new ApiError('service_unavailable', backend === 'unknown' ? { message: outcome_unknown_message } : {});
    } else {
      logger?.error({ err, method: req.method, path: pathOf(req) }, 'unhandled error');
      apiError = new ApiError('server_error');
    }
    if (res.headersSent) {
      res.end();
      return;
    }
    if (apiError.headers) res.set(apiError.headers);
    res.status(apiError.status).json(apiError.toBody());
  };
}
