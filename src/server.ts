/** Starts the HTTP server of a runtime and subscribes it to key revocations. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApi } from './http/app.js';
import type { Runtime } from './runtime.js';
import { serveMetrics, type MetricsServer } from './metrics/stores.js';

export interface RunningServer {
  url: string;
  port: number;
  /** GET /metrics on a port of its own (METRICS_PORT); null when the API's port serves it. */
  metrics: MetricsServer | null;
  close(): Promise<void>;
}

export async function listen(rt: Runtime, port = rt.config.PORT, host = rt.config.HOST): Promise<RunningServer> {
  const subscriber = rt.extraConnection();
  await rt.keyCache.subscribe(subscriber, rt.config.REDIS_PREFIX);
  await rt.models.subscribe(subscriber, rt.config.REDIS_PREFIX);
  const api = createApi(rt);
  const server = createServer(api.serverOptions, api.listener).listen(port, host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  server.keepAliveTimeout = 65_000;
  const actual = (server.address() as AddressInfo).port;
  rt.logger.info({ port: actual, host }, 'API listening');
  const metricsPort = rt.config.METRICS_PORT;
  const metrics = metricsPort === undefined ? null : await serveMetrics(rt.metrics, metricsPort, rt.config.METRICS_HOST ?? host);
  if (metrics) rt.logger.info({ port: metrics.port }, 'metrics listening');
  return {
    url: `http://${host}:${actual}`,
    port: actual,
    metrics,
    close: async () => {
      await Promise.all([
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
        metrics?.close(),
      ]);
    },
  };
}
