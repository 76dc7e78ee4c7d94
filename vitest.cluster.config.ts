/**
 * The suites that run on a local Redis Cluster (`npm run test:cluster`, and `.ci/run` after
 * the single-Redis run): the service, started with REDIS_URL naming one node, finds the
 * cluster by itself. (test/cluster/* start clusters of their own and run in the normal
 * suite.)
 *
 * Left out, because they talk to one Redis around the client:
 * - test/crash/crash.test.ts starts a redis-server of its own (appendfsync always) behind a
 *   TCP proxy, and kills and restarts it. Its cluster counterpart,
 *   test/crash/cluster-master-kill.test.ts, starts a cluster of its own and runs in the
 *   normal suite, like test/cluster/*.
 * - test/gateway/late-settlement.test.ts cuts the connection of one Redis with a proxy.
 * - test/reconcile/scale.test.ts copies a customer to 10,000 and measures the CLI's memory
 *   over them: it is about iterating PostgreSQL, which a cluster does not change, and it
 *   would double the time of this run.
 * - test/workers/shutdown.test.ts kills a single redis-server of its own to stop the
 *   workers during an outage: it proves nothing about a cluster. (It hung here once, and
 *   in the normal suite once: BullMQ's closing worker spinning, workers/bullmq-closing.ts.)
 * - test/workers/closing-spin.test.ts is about BullMQ's closing worker in a process of its
 *   own, on one Redis.
 * - test/gateway/adapters.test.ts, mock-upstream.test.ts, upstream.test.ts and
 *   pricing.test.ts never reach Redis (the wire formats, the mock upstream, the upstream
 *   client, the cost arithmetic): on a cluster they would run the same code again.
 * - test/gateway/error-messages.test.ts (the texts of the gateway's refusals, some cut off
 *   from a Redis of its own) and test/reconcile/cli-args.test.ts (the CLI's argument
 *   checks): the refusals come from the same replies on a cluster; the cluster's own paths
 *   are run by gateway.test.ts, holds.test.ts and reconcile.test.ts.
 */
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: [
      // The ledger, with three API runtimes on one customer (multi-process: own connections
      // and HTTP servers, in this OS process); the sweeper and the TTL fallback walk the
      // sharded indexes.
      'test/ledger/*.test.ts',
      'test/workers/*.test.ts',
      'test/gateway/*.test.ts',
      // Two API runtimes (pub/sub revocations, one rate-limit budget).
      'test/keys/keys.test.ts',
      'test/reconcile/*.test.ts',
      'test/crash/batch-customer-order.test.ts',
      // Two web and two worker OS processes, one of each killed with kill -9 and restarted.
      'test/crash/web-worker-pairs.test.ts',
    ],
    exclude: [
      'test/gateway/late-settlement.test.ts', 'test/gateway/adapters.test.ts', 'test/gateway/mock-upstream.test.ts', 'test/gateway/upstream.test.ts', 'test/gateway/pricing.test.ts',
      'test/workers/shutdown.test.ts', 'test/workers/closing-spin.test.ts', 'test/reconcile/scale.test.ts',
      'test/gateway/error-messages.test.ts', 'test/reconcile/cli-args.test.ts',
    ],
    globalSetup: ['test/cluster-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    // As in vitest.config.ts: no fresh process per file.
    isolate: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    env: {
      TEST_DATABASE_URL: process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/svc_test',
      REDIS_URL: 'redis://127.0.0.1:7000',
    },
  },
});
