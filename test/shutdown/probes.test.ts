/**
 * GET /health/live and GET /health/ready (src/health.ts): live whenever the process
 * answers; ready when Redis and PostgreSQL answer and the process is not stopping, 503
 * otherwise, with what failed. PostgreSQL and Redis are reached through TCP proxies that
 * the test cuts; GET /health keeps its own rules (200 while Redis answers).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const pg = TcpProxy.to(process.env.TEST_DATABASE_URL!, 5432);
const redis = TcpProxy.to(redisUrl, 6379);
let svc: TestService;

beforeAll(async () => {
  await pg.start();
  await redis.start();
  svc = await startTestService({ config: { DATABASE_URL: pg.via(process.env.TEST_DATABASE_URL!), REDIS_URL: redis.via(redisUrl) } });
});
afterAll(async () => {
  await svc?.close();
  await pg.close();
  await redis.close();
});

describe('health probes', () => {
  it('live and ready while both stores answer; exact paths only', async () => {
    expect(await svc.call('GET', '/health/live')).toMatchObject({ status: 200, body: { status: 'live' } });
    expect(await svc.call('GET', '/health/ready')).toMatchObject({
      status: 200,
      body: { status: 'ready', checks: { redis: { status: 'ok' }, postgres: { status: 'ok' } } },
    });
    expect((await svc.call('GET', '/health/ready/')).status).toBe(404);
    expect((await svc.call('GET', '/health')).body.status).toMatch(/^(ok|degraded)$/);
  });

  it('not ready while PostgreSQL is away, live all the same; ready again once it is back', async () => {
    await pg.close();
    try {
      const ready = await svc.call('GET', '/health/ready');
      expect(ready.status).toBe(503);
      expect(ready.body).toMatchObject({ status: 'not_ready', checks: { redis: { status: 'ok' }, postgres: { status: 'down' } } });
      expect(ready.body.checks.postgres.error).toEqual(expect.any(String));
      expect((await svc.call('GET', '/health/live')).status).toBe(200);
      expect((await svc.call('GET', '/health')).status).toBe(200);
    } finally {
      await pg.start();
    }
    const again = await svc.call('GET', '/health/ready');
    expect(again.status, JSON.stringify(again.body)).toBe(200);
  });

  it('not ready while Redis is away', async () => {
    await redis.close();
    try {
      const ready = await svc.call('GET', '/health/ready');
      expect(ready.status).toBe(503);
      expect(ready.body).toMatchObject({ status: 'not_ready', checks: { redis: { status: 'down' } } });
      expect((await svc.call('GET', '/health/live')).status).toBe(200);
    } finally {
      await redis.start();
    }
  }, 30_000);

  it('503 stopping once the process is stopping, without asking the stores', async () => {
    svc.rt.lifecycle.stopping = true;
    try {
      await pg.close();
      const ready = await svc.call('GET', '/health/ready');
      expect(ready).toMatchObject({ status: 503, body: { status: 'stopping' } });
      expect(ready.body.checks).toBeUndefined();
      expect((await svc.call('GET', '/health/live')).status).toBe(200);
    } finally {
      svc.rt.lifecycle.stopping = false;
      await pg.start();
    }
  });
});
