/**
 * The API's access log for the benches' baselines (bench/hello/server.ts,
 * bench/gateway/bare-proxy.ts): with ACCESS_LOG=1, the middleware of src/http/access-log.ts
 * (the access line and the request histogram, as in the API) through the API's own logger (src/runtime.ts: pino, asynchronous stdout, the same
 * redaction) at LOG_LEVEL (default info); otherwise none.
 */
import type { RequestHandler } from 'express';
import { requestEnd } from '../../src/http/access-log.js';
import { Metrics } from '../../src/metrics/metrics.js';
import { createLogger } from '../../src/runtime.js';

type Level = Parameters<typeof createLogger>[0]['LOG_LEVEL'];

export function accessLogFromEnv(env: NodeJS.ProcessEnv = process.env): RequestHandler | null {
  if (env.ACCESS_LOG !== '1') return null;
  return requestEnd(createLogger({ LOG_LEVEL: (env.LOG_LEVEL ?? 'info') as Level }), new Metrics({ defaultMetrics: false }));
}
