/** The Express application: parsing, logging, auth, domain routers, errors. */
import express, { type RequestHandler } from 'express';
import { pinoHttp } from 'pino-http';
import { adminRoutes } from '../admin/routes.js';
import { customerRoutes } from '../customers/routes.js';
import { profileRoutes } from '../customers/profile.js';
import { health } from '../health.js';
import { ledgerRoutes } from '../ledger/routes.js';
import type { Runtime } from '../runtime.js';
import { authenticate } from './auth.js';
import { rateLimit } from '../keys/rate-limit.js';
import { errorHandler, notFound } from './errors.js';
import { measuredJson } from './validate.js';
import { gatewayRoutes } from '../gateway/routes.js';
import { modelRoutes } from '../gateway/model-routes.js';
import { usageRoutes } from '../usage/routes.js';

export const body_bytes_max_billing = 1024 * 1024;

/**
 * The JSON body parser of every path but the gateway's: gateway calls take larger bodies,
 * parsed by their own router. The routers match paths exactly (src/http/router.ts), so
 * only these two paths reach the gateway; the billing parser measures what it reads all
 * the same (measuredJson), so a gateway hold never rests on a body nobody measured.
 */
export function jsonBodies(): RequestHandler {
  const billingJson = measuredJson(body_bytes_max_billing);
  const gatewayPaths = new Set(['/v1/chat/completions', '/v1/messages']);
  return (req, res, next) => (gatewayPaths.has(req.path) ? next() : billingJson(req, res, next));
}

export function createApp(rt: Runtime): express.Express {
  const app = express();
  // `/health/` is not `/health`, as every router's paths are exact. Case stays insensitive
  // here on purpose: the `/v1` mount below must authenticate `/V1/...` too, whatever a
  // router behind it matches.
  app.set('strict routing', true);
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(
    pinoHttp({
      logger: rt.logger,
      autoLogging: rt.logger.isLevelEnabled('info'),
      // Method, path and status are what an access log needs; headers (which carry keys)
      // and bodies are never logged, and each request costs less to log.
      // Ours already produce plain objects; pino-http's wrapping would run the standard
      // serializers under them on every line.
      wrapSerializers: false,
      serializers: {
        req: (req: { id: unknown; method: string; url: string }) => ({ id: req.id, method: req.method, url: req.url }),
        res: (res: { statusCode: number }) => ({ statusCode: res.statusCode }),
      },
    }),
  );

  app.get('/health', async (_req, res) => {
    const h = await health(rt);
    res.status(h.httpStatus).json(h.body);
  });

  app.use(jsonBodies());
  app.use('/v1', authenticate(rt.keyCache), rateLimit(rt.redis, rt.config.REDIS_PREFIX, rt.config.RATE_LIMIT_PER_MINUTE, rt.logger));
  app.use(ledgerRoutes(rt.ledger));
  app.use(customerRoutes({ ledger: rt.ledger, redis: rt.redis, queries: rt.ledgerQueries }));
  app.use(profileRoutes({ ledger: rt.ledger, redis: rt.redis, db: rt.db, ledgerQueries: rt.ledgerQueries, prefix: rt.config.REDIS_PREFIX, logger: rt.logger }));
  app.use(gatewayRoutes(rt.gateway));
  app.use(modelRoutes(rt.modelQueries));
  app.use(usageRoutes({ usage: rt.usageQueries, ledger: rt.ledger, redis: rt.redis, prefix: rt.config.REDIS_PREFIX }));
  app.use(adminRoutes(rt));
  app.use(notFound);
  app.use(errorHandler);
  return app;
}
