/**
 * PostgreSQL going away while Redis stays: money operations keep being served (the hot
 * path needs only Redis; known keys are served from the cache even once it is stale),
 * /health says `degraded` with the outbox lag growing, reads that need PostgreSQL answer
 * 503 service_unavailable, and once PostgreSQL is back the outbox drains with nothing
 * lost. The service reaches PostgreSQL through a TCP proxy that the test cuts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startTestService, type TestProject, type TestService } from '../helpers.js';
import { expectError } from '../support/errors.js';

const proxy = TcpProxy.to(process.env.TEST_DATABASE_URL!, 5432);
let svc: TestService;
let p: TestProject;

beforeAll(async () => {
  await proxy.start();
  // A key cache entry is stale at once, so every request asks PostgreSQL first.
  svc = await startTestService({ workers: true, config: { DATABASE_URL: proxy.via(process.env.TEST_DATABASE_URL!), KEY_CACHE_TTL_MS: 0 } });
  p = await svc.project('B');
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1_000 } })).status).toBe(200);
  // The first billable operation of a period seeds the plan's counter from PostgreSQL;
  // after it, counting needs only Redis.
  expect((await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'd0', amount: 10 } })).status).toBe(200);
  await svc.drained();
});
afterAll(async () => {
  await svc?.close();
  await proxy.close();
});

describe('PostgreSQL down, Redis up', () => {
  it('serves money operations, reports degraded with the lag, refuses PostgreSQL reads with 503, and loses nothing', async () => {
    await proxy.close();

    for (let i = 1; i <= 5; i++) {
      const res = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: `d${i}`, amount: 10 } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    const freeze = await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'f1', amount: 100 } });
    expect(freeze.status).toBe(200);
    const balance = await svc.call('GET', '/v1/customers/c1/balance', { key: p.projectKey });
    expect(balance.body).toMatchObject({ used: 60, frozen: 100, available: 840 });

    const health = await svc.call('GET', '/health');
    expect(health.status).toBe(200);
    expect(health.body.status).toBe('degraded');
    expect(health.body.checks.postgres.status).toBe('down');
    expect(health.body.checks.queue.outbox_lag_ms).toBeGreaterThanOrEqual(0);

    // Usage records live only in PostgreSQL.
    const usage = await svc.call('GET', '/v1/usage', { key: p.projectKey });
    expectError(usage, 503, 'service_unavailable');

    // A key this process never saw cannot be checked without PostgreSQL: 503, not 401.
    const unknown = await svc.call('GET', '/v1/customers/c1/balance', { key: p.projectKey.replace(/.$/, (c) => (c === 'a' ? 'b' : 'a')) });
    expectError(unknown, 503, 'service_unavailable');

    // Back: the outbox drains into PostgreSQL (the ledger below is read from it).
    await proxy.start();
    await svc.drained();
    const ledger = await svc.call('GET', '/v1/customers/c1/ledger', { key: p.projectKey });
    expect(ledger.status).toBe(200);
    expect(ledger.body.data.map((e: { type: string }) => e.type)).toEqual(['FREEZE', 'DEDUCT', 'DEDUCT', 'DEDUCT', 'DEDUCT', 'DEDUCT', 'DEDUCT', 'DEPOSIT']);
    expect((await svc.call('GET', '/health')).body.checks.postgres.status).toBe('ok');
  });
});
