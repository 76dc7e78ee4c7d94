/**
 * The end of every request: its access line and its duration in the request histogram
 * (svc_http_request_duration_seconds), both written when its response is done (or its
 * connection closed first). The access line has the method, the path without its query
 * string, the status and the time taken; never headers, the query or a body: they carry
 * keys. The histogram has the method, the route's pattern (never the raw path) and the
 * status.
 *
 * It costs one listener per request, a function shared by all of them (no closure), and no
 * child logger. The route's series is bound once per route and status (src/metrics): a
 * hot route's is set by the front door, which found the route; a route of the Express
 * app's is looked up by its pattern (`req.route.path`) when the request ends. The lines
 * go through a child of the process logger, made once, whose redaction is off: redaction
 * runs a serializer over every field of a line (about half of a line's cost), and these
 * four fields are never a place where a key is, so it guards nothing here. Every other
 * line of the process keeps it.
 */
import type { ServerResponse } from 'node:http';
import type { Request, RequestHandler } from 'express';
import type { Logger } from 'pino';
import { unmatched_route, type Metrics, type RouteSeries } from '../metrics/metrics.js';

/** When the request started (performance.now()); a field of the server's response class (expressClasses). */
export const startedAt = Symbol('request.startedAt');
/** The route's request duration series, when the front door found it before any handler ran. */
export const routeSeries = Symbol('request.routeSeries');

export type Timed = ServerResponse & { [startedAt]: number; [routeSeries]: RouteSeries | null; req: Request };

/** The request's path as the client sent it, without the query string. */
export function pathOf(req: Request): string {
  const url = req.originalUrl ?? req.url;
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** The series of a request the Express app answered: its route's pattern, or `unmatched`. */
function appSeries(metrics: Metrics, req: Request): RouteSeries {
  const path = (req.route as { path?: unknown } | undefined)?.path;
  return metrics.route(req.method, typeof path === 'string' ? path : unmatched_route);
}

/** Observes and logs the end of `this` response; added as its one 'close' listener. */
function endWriter(logger: Logger | null, metrics: Metrics) {
  return function requestEnd(this: Timed): void {
    const ms = performance.now() - this[startedAt];
    const req = this.req;
    (this[routeSeries] ?? appSeries(metrics, req)).observe(this.statusCode, ms / 1000);
    if (logger === null) return;
    const fields = { method: req.method, path: pathOf(req), status: this.statusCode, response_time_ms: Math.round(ms * 100) / 100 };
    if (this.writableFinished) logger.info(fields, 'request');
    else logger.info({ ...fields, aborted: true }, 'request aborted');
  };
}

/**
 * The middleware run first on every request, hot or not: the access line (when the
 * logger's level has info lines) and the request histogram.
 */
export function requestEnd(logger: Logger, metrics: Metrics): RequestHandler {
  const lines = logger.isLevelEnabled('info') ? logger.child({}, { redact: { paths: [] } }) : null;
  const onEnd = endWriter(lines, metrics);
  return (_req, res, next) => {
    const timed = res as unknown as Timed;
    timed[startedAt] = performance.now();
    timed.on('close', onEnd);
    next();
  };
}
