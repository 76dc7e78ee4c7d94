/**
 * The children both gateway scripts start beside the service (bench/gateway/run.ts,
 * bench/profile/gateway.ts): the mock upstream, answering at once and requiring its key,
 * and the bare Express + undici proxy in front of it (with ACCESS_LOG=1: the API's log).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NodeProcess, ProcessGroup } from '../lib/processes.js';
import { serviceScript } from '../lib/service.js';

const here = dirname(fileURLToPath(import.meta.url));

export interface ContenderEnv {
  group: ProcessGroup;
  root: string;
  logDir: string;
  env: NodeJS.ProcessEnv;
  fromSource: boolean;
}

export function startMock(c: ContenderEnv, port: number, upstreamKey: string): NodeProcess {
  return c.group.start({
    name: 'mock',
    script: serviceScript(c.root, 'src/gateway/mock/main', c.fromSource),
    env: { ...c.env, MOCK_UPSTREAM_PORT: String(port), MOCK_UPSTREAM_HOST: '127.0.0.1', MOCK_LATENCY_MS: '0', MOCK_REQUIRE_KEY: upstreamKey },
    logPath: join(c.logDir, 'mock.log'),
  });
}

export function startBareProxy(c: ContenderEnv, o: { name: string; port: number; mockUrl: string; log: string; extraEnv?: NodeJS.ProcessEnv }): NodeProcess {
  return c.group.start({
    name: o.name,
    script: join(here, 'bare-proxy.ts'),
    env: { ...c.env, NODE_ENV: 'production', PORT: String(o.port), HOST: '127.0.0.1', UPSTREAM_BASE_URL: o.mockUrl, ...o.extraEnv },
    logPath: join(c.logDir, o.log),
  });
}
