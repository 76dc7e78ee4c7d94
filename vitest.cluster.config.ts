/**
 * The suites that run on a local Redis Cluster (`npm run test:cluster`): the service,
 * started with REDIS_URL naming one node, finds the cluster by itself. (test/cluster/*
 * start clusters of their own and run in the normal suite.)
 */
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: [
      'test/ledger/smoke.test.ts',
      'test/ledger/deposit.test.ts',
      'test/ledger/billing.test.ts',
      'test/gateway/gateway.test.ts',
      // Two API processes (pub/sub revocations, one rate-limit budget), two processes on one customer.
      'test/keys/keys.test.ts',
      'test/ledger/multi-process.test.ts',
      'test/reconcile/reconcile.test.ts',
    ],
    globalSetup: ['test/cluster-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    env: {
      TEST_DATABASE_URL: process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/svc_test',
      REDIS_URL: 'redis://127.0.0.1:7000',
    },
  },
});
