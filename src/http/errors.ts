/** The one error middleware: catalogue errors as the contract's body, the rest as 500. */
import type { ErrorRequestHandler, RequestHandler } from 'express';
import { BackendTerminatedError, BackendTerminatedUnexpectedlyError, ConnectionError } from 'slonik';
import { ApiError } from '../errors/catalogue.js';

export const notFound: RequestHandler = (req) => {
  throw new ApiError('not_found', { message: `no route for ${req.method} ${req.path}` });
};

/**
 * Redis or PostgreSQL could not answer. 'unsent': the command never reached it (refused,
 * given up in the offline queue, or no database connection), so nothing was applied.
 * 'unknown': it was sent and no reply came, so it may have applied.
 */
function backendFailure(err: unknown): 'unsent' | 'unknown' | null {
  const e = err as { name?: string; message?: string; code?: string };
  if (err instanceof ConnectionError) return 'unsent';
  if (e?.name === 'MaxRetriesPerRequestError' || e?.code === 'ECONNREFUSED' || /Stream isn't writeable/.test(e?.message ?? '')) return 'unsent';
  if (err instanceof BackendTerminatedError || err instanceof BackendTerminatedUnexpectedlyError || /Connection is closed|Command timed out/.test(e?.message ?? '')) return 'unknown';
  return null;
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

export const errorHandler: ErrorRequestHandler = (err, req, res, _next) => {
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
    req.log?.error({ err }, 'backing service unavailable');
    apiError = new ApiError('service_unavailable', backend === 'unknown' ? { message: outcome_unknown_message } : {});
  } else {
    req.log?.error({ err }, 'unhandled error');
    apiError = new ApiError('server_error');
  }
  if (res.headersSent) {
    res.end();
    return;
  }
  if (apiError.headers) res.set(apiError.headers);
  res.status(apiError.status).json(apiError.toBody());
};
