/** The one error middleware: catalogue errors as the contract's body, the rest as 500. */
import type { ErrorRequestHandler, Request, RequestHandler } from 'express';
import type { Logger } from 'pino';
import { ApiError } from '../errors/catalogue.js';
import { pathOf } from './access-log.js';
import { backendFailure, failedStore } from '../errors/backend.js';
import type { Metrics } from '../metrics/metrics.js';
import { anthropicTypeOfStatus } from '../errors/anthropic.js';

export const notFound: RequestHandler = (req) => {
  throw new ApiError('not_found', { message: `no route for ${req.method} ${req.path}` });
};

/**
 * A 4xx raised by Express or body-parser, whose message is meant for the client: an
 * http-errors error marked `expose`, or the router's URIError for a path parameter.
 */
function isClientHttpError(err: unknown): boolean {
  const e = err as { status?: unknown; expose?: unknown };
  if (typeof e?.status !== 'number' || e.status < 400 || e.status >= 500) return false;
  return e.expose === true || err instanceof URIError;
}

/** The gateway route of the Anthropic wire format. */
const anthropic_path = '/v1/messages';

/**
 * The gateway route of the Anthropic format and the paths under it: the Anthropic SDK
 * calls those too (`messages.countTokens`, `messages.batches`), and the service's 404 for
 * them should read as well as the route's own errors.
 */
function isAnthropicPath(path: string): boolean {
  return path === anthropic_path || path.startsWith(`${anthropic_path}/`);
}

/**
 * An error of the service's own on /v1/messages (or under it), in a body that Anthropic
 * clients read as well: Anthropic's top-level `"type": "error"`, the service's `error`
 * object (code, message, param, details) with Anthropic's `type` for its status
 * (`invalid_request_error`, `billing_error`, ...: code that branches on Anthropic's
 * types works unchanged), and the message at the top level, which is where
 * @anthropic-ai/sdk takes an error's message from (`APIError.makeMessage`: the body's
 * `message`, else the whole body as JSON). Upstream errors are relayed untouched.
 */
function anthropicEnvelope(status: number, body: { error: Record<string, unknown> }): Record<string, unknown> {
  return { type: 'error', error: { ...body.error, type: anthropicTypeOfStatus(status) }, message: body.error.message };
}

/** A byte count as people read limits: `1 MiB`, `8 MiB`, else bytes. */
function bytesText(n: number): string {
  return n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)} MiB` : n % 1024 === 0 ? `${n / 1024} KiB` : `${n} bytes`;
}

/** body-parser's refusal of a body over its limit, which carries the limit and the declared length. */
function tooLarge(err: { limit?: number; length?: number }): ApiError {
  if (typeof err.limit !== 'number') return new ApiError('payload_too_large');
  const length = typeof err.length === 'number' && err.length > err.limit ? err.length : null;
  return new ApiError('payload_too_large', {
    message: `request body is too large: this endpoint takes at most ${bytesText(err.limit)} (${err.limit} bytes)${length === null ? '' : `, the body has ${length}`}`,
    extra: { details: { limit_bytes: err.limit, length_bytes: length } },
  });
}


/**
 * What the client is told of an error: an ApiError as it is, Express's and body-parser's
 * refusals as theirs, a store failure as 503 (or outcome_unknown), anything else as 500.
 * `logger` gets the failures of our own (a 5xx), with the request's method and path, and
 * `metrics` counts the requests a store failure answered 503.
 */
export function apiErrorOf(err: unknown, req: Request, logger?: Logger, metrics?: Metrics): ApiError {
  const backend = backendFailure(err);
  if (err instanceof ApiError) {
    // The 503s raised as ApiErrors: the Redis generation guard's (src/redis/generation.ts:
    // Redis is away, or back and not yet checked against PostgreSQL), and a gateway call's outcome_unknown.
    if (err.code === 'service_unavailable' || err.code === 'outcome_unknown') metrics?.redisErrors.inc({ kind: 'request' });
    return err;
  }
  if ((err as { type?: string }).type === 'entity.too.large') return tooLarge(err as { limit?: number; length?: number });
  if ((err as { type?: string }).type === 'entity.parse.failed') return new ApiError('invalid_json');
  // What Express and body-parser refuse before a route runs: a malformed path
  // encoding, an unsupported Content-Encoding or charset, an aborted body.
  if (isClientHttpError(err)) return new ApiError('invalid_request', { message: (err as Error).message });
  if (backend !== null) {
    logger?.error({ err, method: req.method, path: pathOf(req) }, 'backing service unavailable');
    (failedStore(err) === 'postgres' ? metrics?.postgresErrors : metrics?.redisErrors)?.inc({ kind: 'request' });
    // A read changes nothing: whatever became of its command, nothing was applied.
    const read = req.method === 'GET' || req.method === 'HEAD';
    return new ApiError(backend === 'unknown' && !read ? 'outcome_unknown' : 'service_unavailable');
  }
  logger?.error({ err, method: req.method, path: pathOf(req) }, 'unhandled error');
  return new ApiError('server_error');
}

/** The error middleware: apiErrorOf's answer as the contract's body. */
export function errorHandler(logger?: Logger, metrics?: Metrics): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const apiError = apiErrorOf(err, req, logger, metrics);
    if (res.headersSent) {
      res.end();
      return;
    }
    if (apiError.headers) res.set(apiError.headers);
    const body = apiError.toBody();
    res.status(apiError.status).json(isAnthropicPath(pathOf(req)) ? anthropicEnvelope(apiError.status, body) : body);
  };
}
