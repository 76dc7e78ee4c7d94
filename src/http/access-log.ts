/**
 * The access log: one line per request, written when its response is done (or its
 * connection closed first), with the method, the path without its query string, the
 * status and the time taken. Never headers, the query or a body: they carry keys.
 *
 * It costs one listener per request, a function shared by all of them (no closure), and no
 * child logger. The lines go through a child of the process logger, made once, whose
 * redaction is off: redaction runs a serializer over every field of a line (about half of
 * a line's cost), and these four fields are never a place where a key is, so it guards
 * nothing here. Every other line of the process keeps it.
 */
import type { ServerResponse } from 'node:http';
import type { Request, RequestHandler } from 'express';
import type { Logger } from 'pino';

const startedAt = Symbol('access-log.startedAt');

type Timed = ServerResponse & { [startedAt]?: number; req: Request };

/** Writes the access line of `this` response; added as its one 'close' listener. */
function lineWriter(logger: Logger) {
  return function writeLine(this: Timed): void {
    const req = this.req;
    const response_time_ms = Math.round((performance.now() - this[startedAt]!) * 100) / 100;
    const fields = { method: req.method, path: pathOf(req), status: this.statusCode, response_time_ms };
    if (this.writableFinished) logger.info(fields, 'request');
    else logger.info({ ...fields, aborted: true }, 'request aborted');
  };
}

/** The request's path as the client sent it, without the query string. */
export function pathOf(req: Request): string {
  const url = req.originalUrl ?? req.url;
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** The access log middleware, or null when the logger's level leaves info lines out. */
export function accessLog(logger: Logger): RequestHandler | null {
  if (!logger.isLevelEnabled('info')) return null;
  const writeLine = lineWriter(logger.child({}, { redact: { paths: [] } }));
  return (_req, res, next) => {
    const timed = res as unknown as Timed;
    timed[startedAt] = performance.now();
    timed.on('close', writeLine);
    next();
  };
}
