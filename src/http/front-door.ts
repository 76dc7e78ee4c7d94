/**
 * The HTTP server's request listener. The hot routes (money operations, balance reads,
 * gateway calls) are served here, without entering the Express app: a profile of the
 * deduct route showed Express's app and router (prototype setup, a layer walk with a
 * `next` per middleware, path matching per layer) at about a tenth of the API's CPU per
 * request. Every other request, and a HEAD or OPTIONS of a hot path, goes to the app.
 *
 * A hot request still runs what the app would have run before its route, in the same
 * order: the access log, the JSON body parser (billing paths; the gateway's routes parse
 * their own), the `/v1` authentication and rate limit, then the route's handlers, with the
 * app's error middleware for any failure. The request and response have Express's
 * prototypes (expressClasses), so every handler sees the same `req` and `res` it would have
 * seen in the app.
 *
 * It copies by hand what Express 5.3's app.handle and its router (the `router` package) set
 * up before a route: `app.request`/`app.response` as prototypes (from which `req.app`,
 * `req.query`, `req.ip` and the `res` helpers come), `req.res`, `res.locals`,
 * `req.originalUrl`, `req.baseUrl` and `req.params` (decoded as the router does); `res.req`
 * is Node's. It leaves out the router's `req.next`, `req.route` and its tracing. That is
 * why package.json pins Express's minor (`~5.3.0`) and, through `overrides`, the router's (`~2.3.0`). On an Express upgrade: run
 * test/http/front-door-pin.test.ts, which compares what a handler sees here and through
 * Express; copy any new setup here, or write it down there as a difference, with why.
 */
import { IncomingMessage, ServerResponse, type RequestListener, type ServerOptions } from 'node:http';
import type { ErrorRequestHandler, Express, Request, RequestHandler, Response } from 'express';
import { ApiError } from '../errors/catalogue.js';
import { routeTable, runHandlers, type Route } from './router.js';
import { routeSeries, startedAt, type Timed } from './access-log.js';
import type { Metrics, RouteSeries } from '../metrics/metrics.js';

export interface FrontDoorOptions {
  /** The app everything else goes to; its prototypes are given to the hot requests. */
  app: Express;
  /** Run before every hot route: the access log and request histogram (src/http/access-log.ts). */
  first: readonly RequestHandler[];
  /** Where each hot route's request duration series comes from. */
  metrics: Metrics;
  /** The body parser of a hot path, or null when its route reads its own body. */
  bodyParser(path: string): RequestHandler | null;
  /** Run after the body parser for a path under `/v1`: authentication, rate limit. */
  underV1: readonly RequestHandler[];
  routes: readonly Route[];
  onError: ErrorRequestHandler;
}

const v1 = /^\/v1(?:\/|$)/i;

/** A hot route with its whole chain of handlers and its request duration series. */
type HotRoute = Route & { series: RouteSeries };

/**
 * The server's request and response classes, made with Express's prototypes: a hot request
 * has them from the start instead of changing its prototype (as Express's app.handle does),
 * which is cheaper and keeps V8's view of these objects stable. The app still sets its own
 * prototypes on the requests it gets, which are the same.
 */
export function expressClasses(app: Express): Pick<ServerOptions, 'IncomingMessage' | 'ServerResponse'> {
  class ExpressRequest extends IncomingMessage {}
  Object.setPrototypeOf(ExpressRequest.prototype, app.request);
  // The request-end fields (src/http/access-log.ts) are the class's own, so every response
  // has them from its construction and none changes shape when a middleware sets them.
  class ExpressResponse extends ServerResponse {
    [startedAt] = 0;
    [routeSeries]: RouteSeries | null = null;
  }
  Object.setPrototypeOf(ExpressResponse.prototype, app.response);
  return { IncomingMessage: ExpressRequest, ServerResponse: ExpressResponse as unknown as typeof ServerResponse };
}

/**
 * The request listener of a server made with expressClasses(o.app): hot routes here, the
 * rest to the app.
 */
export function frontDoor(o: FrontDoorOptions): RequestListener {
  /** What runs before a route of `path`, in the app's order. */
  const prelude = (path: string): RequestHandler[] => {
    const parser = o.bodyParser(path);
    return [...o.first, ...(parser ? [parser] : []), ...(v1.test(path) ? o.underV1 : [])];
  };
  // Each route's whole chain is built once, not per request, and its request duration
  // series (the histogram's children per status) found once.
  const chained: HotRoute[] = o.routes.map((route) => ({ ...route, handlers: [...prelude(route.path), ...route.handlers], series: o.metrics.route(route.method, route.path) }));
  const find = routeTable(chained);
  const { app, onError } = o;

  return (message: IncomingMessage, response: ServerResponse) => {
    const url = message.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    let match: ReturnType<typeof find>;
    let failure: unknown = null;
    try {
      match = find(message.method ?? '', path);
    } catch (err) {
      // A malformed escape in a parameter of a hot path: the router's 400, as in the app.
      match = null;
      failure = err;
    }
    if (match === null && failure === null) {
      app(message, response);
      return;
    }
    // What Express's app.handle and router set up before a route runs (the prototypes come
    // from the server's classes).
    const req = message as Request;
    const res = response as Response;
    req.res = res;
    res.locals = Object.create(null) as Response['locals'];
    req.originalUrl = url;
    req.baseUrl = '';
    const done = (err?: unknown) => {
      // A hot route's handlers answer or fail; one that let the request through would
      // have gone on to the app's last middleware.
      const error = err ?? new ApiError('not_found', { message: `no route for ${req.method} ${path}` });
      try {
        onError(error, req, res, () => undefined);
      } catch {
        // An error handler that throws: inside Express the router would catch it and its
        // final handler answer 500; without this the request would hang.
        lastResort(res);
      }
    };
    if (failure !== null) {
      // Authenticated first, as in the app, where the router's 400 came after the `/v1` middleware.
      runHandlers(prelude(path), req, res, (err?: unknown) => done(err ?? failure));
      return;
    }
    req.params = match!.params;
    (response as Timed)[routeSeries] = (match!.route as HotRoute).series;
    runHandlers(match!.route.handlers, req, res, done);
  };
}

/** The answer when the error handler itself failed: 500 if nothing was sent yet, else the connection closes. */
function lastResort(res: ServerResponse): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.statusCode = 500;
  res.setHeader('content-type', 'text/plain; charset=utf-8');
  res.end('Internal Server Error');
}
