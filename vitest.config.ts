import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    // Each of the two worker processes runs file after file without starting afresh: a
    // fresh process per file spent about 2 s starting and importing the sources before its
    // first test, a quarter of the suite's wall time on two cores (measured: 246 s of 496 with
    // a core idle; 28 s of 579 without, the tail included).
    // Every file makes its own service (own Redis prefix, queue prefix, projects) and
    // closes it, and no file changes process.env or mocks a module, so nothing one file
    // leaves is read by the next.
    isolate: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    env: { TEST_DATABASE_URL: process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/svc_test' },
  },
});
