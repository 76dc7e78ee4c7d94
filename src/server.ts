/** Starts the HTTP server of a runtime and subscribes it to key revocations. */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApi } from './app.js';
import type { Runtime } from './runtime.js';
import { serveMetrics, type MetricsServer } from './metrics/stores.js';
import { listenError } from './config/ports.js';

export interface RunningServer {
  url: string;
  port: number;
  /** GET /metrics on a port of its own (METRICS_PORT); null when the API's port serves it. */
  metrics: MetricsServer | null;
  /** Stops at once: every connection is closed, whatever it was doing. */
  close(): Promise<void>;
  /**
   * Stops gracefully: see drainServer. Resolves once every connection is closed; `cut`
   * says whether the grace ran out and connections still open were cut.
   */
  drain(graceMs: number): Drain;
}

export interface Drain {
  /** Resolves once the server has stopped and every connection is closed. */
  done: Promise<{ cut: boolean }>;
  /** Cuts what is still open now, without waiting for the rest of the grace. */
  cut(): void;
}

/** How often a draining server closes the keep-alive connections that have become idle. */
const drain_idle_check_ms = 50;
/**
 * Connections the kernel queues for accept (capped by net.core.somaxconn). Node's 511
 * overflowed when 1,000 clients opened their streams at once: each dropped connection
 * waited for its SYN to be sent again, 1 s and then 3 s later (bench:streams).
 */
const listen_backlog = 4_096;

export async function listen(rt: Runtime, port = rt.config.PORT, host = rt.config.HOST): Promise<RunningServer> {
  const subscriber = rt.extraConnection();
  await rt.keyCache.subscribe(subscriber, rt.config.REDIS_PREFIX);
  await rt.models.subscribe(subscriber, rt.config.REDIS_PREFIX);
  const api = createApi(rt);
  const server = createServer(api.serverOptions, api.listener).listen({ port, host, backlog: listen_backlog });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', (err) => reject(listenError(err, port, 'PORT')));
  });
  server.keepAliveTimeout = 65_000;
  const actual = (server.address() as AddressInfo).port;
  rt.logger.info({ port: actual, host }, 'API listening');
  const metricsPort = rt.config.METRICS_PORT;
  const metrics = metricsPort === undefined
    ? null
    : await serveMetrics(rt.metrics, metricsPort, rt.config.METRICS_HOST ?? host).catch((err: unknown) => {
      server.close();
      throw listenError(err, metricsPort, 'METRICS_PORT');
    });
  if (metrics) rt.logger.info({ port: metrics.port }, 'metrics listening');
  let draining: Drain | null = null;
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
    drain(graceMs) {
      draining ??= drainServer(server, api.listener, graceMs);
      return draining;
    },
  };
}

/**
 * The graceful stop of an HTTP server:
 * - it stops listening at once: a new connection is refused;
 * - a request that still arrives on a connection opened before (keep-alive) is served,
 *   and its answer says `Connection: close` and closes the connection after it (the
 *   request listener is swapped for one that says so: the listener of a server that is not
 *   draining does nothing more per request);
 * - keep-alive connections with no request in progress are closed at once, and those
 *   whose request finishes later as soon as it has (every drain_idle_check_ms), so the
 *   process can exit;
 * - once `graceMs` have passed, the connections still open (a stream that has not
 *   ended) are cut: the gateway then settles those calls as it does a client that left.
 */
function drainServer(server: ReturnType<typeof createServer>, listener: (req: IncomingMessage, res: ServerResponse) => void, graceMs: number): Drain {
  server.removeListener('request', listener);
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    res.shouldKeepAlive = false;
    listener(req, res);
  });
  let cutNow = () => undefined as void;
  const done = new Promise<{ cut: boolean }>((resolve) => {
    let cut = false;
    const idle = setInterval(() => server.closeIdleConnections(), drain_idle_check_ms);
    cutNow = () => {
      cut = true;
      server.closeAllConnections();
    };
    const grace = setTimeout(cutNow, graceMs);
    // Node's close also closes the connections that are idle now.
    server.close(() => {
      clearInterval(idle);
      clearTimeout(grace);
      resolve({ cut });
    });
  });
  return { done, cut: () => cutNow() };
}
