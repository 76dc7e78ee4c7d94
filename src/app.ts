/**
 * The application's wiring: the Express app and the front door before it, with logging,
 * parsing, auth, rate limits, the hot routes, every domain's routers, and the error
 * handler, in that order. The plumbing they are built from lives in src/http/.
 */
import type { RequestListener, ServerOptions } from 'node:http';
import express, { type RequestHandler } from 'express';
import { managementOperations } from './admin/operations/index.js';
import { adminRoutes, dashboardApiRoutes, dashboardSessions } from './admin/routes.js';
import { dashboardPages } from './dashboard/routes.js';
import { docsRoutes } from './openapi/routes.js';
import { customerRoutes } from './customers/routes.js';
import { profileRoutes } from './customers/profile.js';
import { health, readiness } from './health.js';
import { ledgerRoutes } from './ledger/routes.js';
import type { Runtime } from './runtime.js';
import type { Config } from './config/index.js';
import { authenticate } from './http/auth.js';
import { rateLimit } from './http/rate-limit.js';
import { requestEnd } from './http/access-log.js';
import { metricsHandler, watchStores } from './metrics/stores.js';
import { errorHandler, notFound } from './http/errors.js';
import { exactRouter, underPrefix } from './http/router.js';
import { expressClasses, frontDoor } from './http/front-door.js';
import { measuredExpressJson, measuredJson } from './http/validate.js';
import { gateway_paths, gatewayRoutes } from './gateway/routes.js';
import { modelRoutes } from './gateway/model-routes.js';
import { usageRoutes } from './usage/routes.js';
import { eventRoutes } from './events/routes.js';
import { webhookRoutes } from './webhooks/routes.js';

export const body_bytes_max_billing = 1024 * 1024;

/**
 * The JSON body parser of every path but the gateway's: gateway calls take larger bodies,
 * parsed by their own router. The routers match paths exactly (src/http/router.ts), so
 * only these paths reach the gateway; the billing parser measures what it reads all
 * the same (measuredJson), so a gateway hold never rests on a body nobody measured.
 */
export function jsonBodies(parserOf = bodyParsers()): RequestHandler {
  return (req, res, next) => {
    const parser = parserOf(req.path);
    return parser === null ? next() : parser(req, res, next);
  };
}

/** The JSON body parser of a path: the billing one, or null on the gateway's paths. */
export function bodyParsers(): (path: string) => RequestHandler | null {
  // The billing parser keeps each body's text: amounts are read from it (src/ledger/amounts.ts).
  const billingJson = measuredJson(body_bytes_max_billing, measuredExpressJson(body_bytes_max_billing, { keepText: true }), { keepText: true });
  const gatewayPaths = new Set<string>(gateway_paths);
  return (path) => (gatewayPaths.has(path) ? null : billingJson);
}

export interface Api {
  /** Everything but the hot routes' own methods. */
  app: express.Express;
  /** The server's request listener: the hot routes, then the app (src/http/front-door.ts). */
  listener: RequestListener;
  /** The server's request and response classes, which the listener needs. */
  serverOptions: ServerOptions;
}

/**
 * An Express app with the API's settings, before any middleware: createApi's, and the one
 * test/http/front-door-pin.test.ts compares the front door with.
 */
export function expressApp(trustProxy: Config['TRUST_PROXY']): express.Express {
  const app = express();
  // `/health/` is not `/health`, as every router's paths are exact. The `/v1` prefix of
  // createApi's authentication is matched in any case on purpose: `/V1/...` is
  // authenticated too, whatever a router behind it matches.
  app.set('strict routing', true);
  app.disable('x-powered-by');
  app.set('etag', false);
  // Who the client is (req.ip, for the sign-in limit): the socket unless TRUST_PROXY names proxies.
  app.set('trust proxy', trustProxy);
  return app;
}

export function createApi(rt: Runtime): Api {
  const app = expressApp(rt.config.TRUST_PROXY);
  const ended = requestEnd(rt.logger, rt.metrics);
  app.use(ended);
  // The gauges read from Redis and PostgreSQL on a scrape (src/metrics/stores.ts).
  watchStores(rt);
  // Without METRICS_PORT the scrape is served here, without a key; with it, on that port
  // only (src/server.ts), and this path is a 404 like any unknown one.
  if (rt.config.METRICS_PORT === undefined) app.get('/metrics', metricsHandler(rt.metrics));

  app.get('/health', async (_req, res) => {
    const h = await health(rt);
    res.status(h.httpStatus).json(h.body);
  });
  // The process answers (a liveness probe), and whether it should get new requests (a
  // readiness probe: 503 while it stops, or while Redis or PostgreSQL does not answer).
  app.get('/health/live', (_req, res) => {
    res.json({ status: 'live' });
  });
  app.get('/health/ready', async (_req, res) => {
    const r = await readiness(rt);
    res.status(r.httpStatus).json(r.body);
  });

  const parsers = bodyParsers();
  app.use(jsonBodies(parsers));
  const gateway = gatewayRoutes(rt.gateway);
  const authenticated = authenticate(rt.keyCache, { ownVariantCheck: new Set(gateway.map((r) => r.path)) });
  const underV1 = [authenticated, rateLimit(rt.redis, rt.config.REDIS_PREFIX, rt.config.RATE_LIMIT_PER_MINUTE, rt.logger)];
  app.use(underPrefix('/v1', underV1));
  const ledger = ledgerRoutes(rt.ledger);
  const customers = customerRoutes({ ledger: rt.ledger, redis: rt.redis, queries: rt.ledgerQueries });
  // The hot routes' own methods never reach the app (the front door below serves them); the
  // routers keep them for the HEAD and OPTIONS requests Express answers from them.
  app.use(exactRouter(ledger));
  app.use(exactRouter(customers));
  app.use(profileRoutes({ ledger: rt.ledger, redis: rt.redis, db: rt.db, ledgerQueries: rt.ledgerQueries, prefix: rt.config.REDIS_PREFIX, logger: rt.logger }));
  app.use(exactRouter(gateway));
  app.use(modelRoutes(rt.modelQueries));
  app.use(usageRoutes({ usage: rt.usageQueries, ledger: rt.ledger, redis: rt.redis, prefix: rt.config.REDIS_PREFIX }));
  app.use(eventRoutes(rt.db));
  app.use(webhookRoutes({ db: rt.db, endpoints: rt.webhookEndpoints, queue: rt.webhookQueue, allowPrivate: rt.config.UPSTREAM_ALLOW_PRIVATE }));
  // One set of management operations: for admin keys, and for dashboard sessions.
  const management = managementOperations(rt);
  app.use(adminRoutes(management));
  const sessions = dashboardSessions(rt);
  app.use(dashboardApiRoutes(sessions, management));
  // The dashboard's page: server-rendered screens over the same operations (src/dashboard/).
  app.use(dashboardPages(rt, sessions, management));
  // The API's OpenAPI document and its reference page (src/openapi/).
  app.use(docsRoutes());
  app.use(notFound);
  const onError = errorHandler(rt.logger, rt.metrics);
  app.use(onError);
  const listener = frontDoor({
    app,
    first: [ended],
    metrics: rt.metrics,
    bodyParser: parsers,
    underV1,
    routes: [...ledger, ...customers, ...gateway].filter((r) => r.hot),
    onError,
  });
  return { app, listener, serverOptions: expressClasses(app) };
}
