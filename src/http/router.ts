/**
 * Every router of the API matches paths exactly: `/v1/billing/deduct/` and
 * `/V1/BILLING/DEDUCT` are 404, not the canonical route. Express's default routers ignore
 * a trailing slash and case, and a variant path then skipped what the app decides by
 * exact path (which body parser runs, so which bytes bound a gateway hold). Duplicate
 * slashes and `.` segments never match a route, so they are 404 as well.
 *
 * The hot routes (money operations, balance reads, gateway calls) do not reach Express at
 * all: the front door (src/http/front-door.ts) finds them with `routeTable`, by method and
 * path in one map lookup (a path with parameters: a few segment comparisons), with the same
 * exact matching, and runs their handlers the way Express does. What it does not find goes
 * to the Express app, whose routers have the hot routes too: a HEAD or an OPTIONS request of
 * a hot path (which Express answers from the GET route, or with an Allow header) is theirs.
 */
import { Router, type NextFunction, type Request, type RequestHandler, type Response } from 'express';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * One route: its method, its exact path (`:name` segments are parameters), its handlers in
 * order, and whether the front door serves it before the app (src/http/front-door.ts).
 */
export interface Route {
  method: Method;
  path: string;
  handlers: readonly RequestHandler[];
  hot?: boolean;
}

/** A strict, case-sensitive Express router with `routes` registered on it. */
export function exactRouter(routes: readonly Route[] = []): Router {
  const r = Router({ strict: true, caseSensitive: true });
  for (const route of routes) {
    const method = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete';
    r[method](route.path, ...route.handlers);
  }
  return r;
}

interface ParamRoute {
  route: Route;
  /** The path's segments; a parameter's is its name with the `:`. */
  segments: string[];
}

/**
 * A parameter as Express's router decodes it: a malformed escape is a 400 URIError
 * (the error middleware answers it as invalid_request).
 */
function decodeParam(value: string): string {
  if (!value.includes('%')) return value;
  try {
    return decodeURIComponent(value);
  } catch (err) {
    if (err instanceof URIError) {
      err.message = `Failed to decode param '${value}'`;
      (err as URIError & { status: number }).status = 400;
    }
    throw err;
  }
}

/** The parameters of `path` when it matches `segments` exactly, else null. */
function matchSegments(segments: string[], path: string): Record<string, string> | null {
  const parts = path.split('/');
  if (parts.length !== segments.length) return null;
  let params: Record<string, string> | null = null;
  for (let i = 0; i < parts.length; i++) {
    const want = segments[i]!;
    const part = parts[i]!;
    if (want.startsWith(':')) {
      if (part.length === 0) return null;
      (params ??= {})[want.slice(1)] = part;
    } else if (want !== part) {
      return null;
    }
  }
  // Decoded only once the whole path matched, as Express does.
  if (params !== null) for (const name of Object.keys(params)) params[name] = decodeParam(params[name]!);
  return params ?? {};
}

/**
 * Runs `handlers` in order as an Express route would: a throw or a rejected promise goes
 * to `done`, and so does `next(err)`. The `next` handed to a handler is an anonymous arrow:
 * tsx compiles with esbuild's keepNames, which names every named closure as it is made
 * (an Object.defineProperty per request).
 */
export function runHandlers(handlers: readonly RequestHandler[], req: Request, res: Response, done: NextFunction, from = 0): void {
  const handler = handlers[from];
  if (handler === undefined) return done();
  try {
    const ret: unknown = handler(req, res, (err?: unknown) => {
      if (err !== undefined && err !== null) done(err);
      else runHandlers(handlers, req, res, done, from + 1);
    });
    if (ret instanceof Promise) ret.then(undefined, (e: unknown) => done(e ?? new Error('Rejected promise')));
  } catch (e) {
    done(e);
  }
}

/** A route found by routeTable, with its path parameters decoded. */
export interface RouteMatch {
  route: Route;
  params: Record<string, string>;
}

/**
 * Finds `routes` by method and exact path without Express's routers, as the front door
 * does (src/http/front-door.ts). Static paths are found by `METHOD path` in a map; paths
 * with parameters are compared segment by segment, in the order given, after the static
 * ones (as `/v1/customers/deposit` came before `/v1/customers/:customer_id` in the
 * routers). Matching is exact, like exactRouter's: a trailing slash, another case, an
 * empty segment is no match (null). A malformed escape in a parameter throws the router's
 * 400 URIError.
 */
export function routeTable(routes: readonly Route[]): (method: string, path: string) => RouteMatch | null {
  const fixed = new Map<string, RouteMatch>();
  const withParams: ParamRoute[] = [];
  for (const route of routes) {
    const segments = route.path.split('/');
    if (segments.some((s) => s.startsWith(':'))) withParams.push({ route, segments });
    else fixed.set(`${route.method} ${route.path}`, { route, params: {} });
  }
  return (method, path) => {
    const hit = fixed.get(`${method} ${path}`);
    if (hit !== undefined) return { route: hit.route, params: {} };
    for (const { route, segments } of withParams) {
      if (route.method !== method) continue;
      const params = matchSegments(segments, path);
      if (params !== null) return { route, params };
    }
    return null;
  };
}

/**
 * Runs `handlers` for a path that is `prefix` or under it, in any case, as
 * `app.use(prefix, ...handlers)` would, without a mount: a mount rewrites `req.url` on the
 * way in and back out on every request, and none of these handlers reads it.
 */
export function underPrefix(prefix: string, handlers: readonly RequestHandler[]): RequestHandler {
  const escaped = prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const matches = new RegExp(`^${escaped}(?:/|$)`, 'i');
  return (req, res, next) => (matches.test(req.path) ? runHandlers(handlers, req, res, next) : next());
}
