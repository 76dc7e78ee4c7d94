/**
 * CLI for the mock LLM upstream (see docs/MOCK_UPSTREAM.md).
 *
 *   MOCK_UPSTREAM_PORT (4010)  MOCK_UPSTREAM_HOST (127.0.0.1)  MOCK_LATENCY_MS (0)
 *   optional: MOCK_CHUNK_DELAY_MS (0)  MOCK_OUTPUT_TOKENS (12)  MOCK_REQUIRE_KEY (unset)
 */
import { startMockUpstream } from './server.js';
import { exitIfPortInUse, listenError } from '../../config/ports.js';

function intEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) {
    console.error(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
}

const port = intEnv('MOCK_UPSTREAM_PORT', 4010);
const mock = await startMockUpstream({
  port,
  host: process.env.MOCK_UPSTREAM_HOST || '127.0.0.1',
  latencyMs: intEnv('MOCK_LATENCY_MS', 0),
  chunkDelayMs: intEnv('MOCK_CHUNK_DELAY_MS', 0),
  defaultOutputTokens: intEnv('MOCK_OUTPUT_TOKENS', 12),
  requireKey: process.env.MOCK_REQUIRE_KEY || undefined,
}).catch((err: unknown) => exitIfPortInUse(listenError(err, port, 'MOCK_UPSTREAM_PORT')));

console.log(`mock upstream listening on ${mock.url}`);

let stopping = false;
const stop = (signal: NodeJS.Signals) => {
  if (stopping) process.exit(1); // second signal: give up waiting
  stopping = true;
  void mock.close().then(() => {
    console.log(`mock upstream stopped (${signal})`);
    process.exit(0);
  });
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
