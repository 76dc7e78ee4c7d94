/** Starts the HTTP server of a runtime and subscribes it to key revocations. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApi } from './http/app.js';
import type { Runtime } from './runtime.js';

export interface RunningServer {
  url: string;
  port: number;
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
  return {
    url: `http://${host}:${actual}`,
    port: actual,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
