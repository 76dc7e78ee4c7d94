/**
 * Redis unreachable (docs/API.md, "GET /health" and "Errors"): money operations answer 503
 * service_unavailable (type server_error) and GET /health answers 503 with status
 * "down". The service under test uses a Redis of its own, started here on a free port in
 * a temporary directory and killed mid-test; the shared Redis and PostgreSQL are never
 * touched. The Redis is then started again on the same port, and the service serves again;
 * svc_redis_errors_total counted each refused request and the lost connections.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type ApiResponse, type TestService } from '../helpers.js';
import { closedPort } from '../gateway/support.js';
import { captureConsoleErrors, type ConsoleErrors } from '../support/console-errors.js';
import { ownRedis, type OwnRedis } from '../support/own-redis.js';
import { expectError } from '../support/errors.js';

let redis: OwnRedis | null = null;
let svc: TestService | null = null;
/** Every Redis connection of the service has an `error` listener: nothing unhandled is printed. */
let consoleErrors: ConsoleErrors;

beforeAll(async () => {
  consoleErrors = captureConsoleErrors();
  redis = await ownRedis('svc-redis-down-');
  await redis.start();
  // Workers too: their BullMQ connections are among those that must not print errors.
  svc = await startTestService({ workers: true, config: { REDIS_URL: redis.url, SVC_MASTER_KEY: randomBytes(32).toString('hex') } });
});

afterAll(async () => {
  // close() clears the service's keys and queue, which needs its Redis back.
  if (svc && redis && !redis.running) await redis.start();
  await svc?.close();
  await redis?.remove();
  consoleErrors.restore();
});

/** svc_redis_errors_total of `kind` as the service's /metrics reads it. */
async function redisErrors(s: TestService, kind: 'connection' | 'request'): Promise<number> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const m = new RegExp(`^svc_redis_errors_total\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(text);
  if (!m) throw new Error(`no svc_redis_errors_total{kind="${kind}"} in the scrape`);
  return Number(m[1]);
}

function expectUnavailable(label: string, res: ApiResponse): void {
  expectError(res, 503, 'service_unavailable', { label });
}

describe('Redis unreachable', () => {
  it('money operations and the gateway answer 503 service_unavailable; /health answers 503 "down"; service resumes when Redis is back', async () => {
    const s = svc!;
    const p = await s.project('B');
    const model = {
      provider: 'openai', upstream_base_url: `http://127.0.0.1:${await closedPort()}/v1`, upstream_model: 'm', upstream_api_key: 'sk-never-used',
      context_window: 1000, max_output_tokens: 10, supports_streaming: false, input_price_per_million_credits: 1, output_price_per_million_credits: 1,
    };
    expect((await s.call('PUT', `/v1/admin/projects/${p.projectId}/models/m`, { key: p.adminKey, body: model })).status).toBe(201);
    expect((await s.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 100 } })).status).toBe(200);
    expect((await s.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'f1', amount: 10 } })).status).toBe(200);
    expect((await s.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'f2', amount: 10 } })).status).toBe(200);
    const up = await s.call('GET', '/health');
    expect([up.status, up.body.checks.redis.status]).toEqual([200, 'ok']);

    // Read while Redis is up: a scrape without it waits out the gauges' reads.
    const before = { connection: await redisErrors(s, 'connection'), request: await redisErrors(s, 'request') };
    await redis!.kill();

    const key = p.projectKey;
    const cases: [string, () => Promise<ApiResponse>][] = [
      ['deduct', () => s.call('POST', '/v1/billing/deduct', { key, body: { customer_id: 'c1', transaction_id: 'd1', amount: 5 } })],
      ['deposit', () => s.call('POST', '/v1/customers/deposit', { key, body: { customer_id: 'c1', amount: 5 } })],
      ['deposit to a new customer', () => s.call('POST', '/v1/customers/deposit', { key, body: { customer_id: 'c2', amount: 5 } })],
      ['freeze', () => s.call('POST', '/v1/billing/freeze', { key, body: { customer_id: 'c1', transaction_id: 'f3', amount: 5 } })],
      ['consume', () => s.call('POST', '/v1/billing/consume', { key, body: { transaction_id: 'f1' } })],
      ['unfreeze', () => s.call('POST', '/v1/billing/unfreeze', { key, body: { transaction_id: 'f2' } })],
      ['balance', () => s.call('GET', '/v1/customers/c1/balance', { key })],
      ['gateway', () => s.call('POST', '/v1/chat/completions', { key, headers: { 'x-service-customer': 'c1' }, body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] } })],
    ];
    // All at once: each waits for the client to give up on its queued commands, which
    // takes longer the longer Redis has been gone (reconnect backoff).
    const [down, ...answers] = await Promise.all([s.call('GET', '/health'), ...cases.map(([, run]) => run())]);
    for (const [i, [label]] of cases.entries()) expectUnavailable(label, answers[i]);
    expect([down.status, down.body.status, down.body.checks.redis.status]).toEqual([503, 'down', 'down']);
    // PostgreSQL is up: the report tells the two apart.
    expect(down.body.checks.postgres.status).toBe('ok');

    // The same port again, empty (no persistence): the service reconnects by itself.
    await redis!.start();
    const deadline = Date.now() + 10_000;
    let health = await s.call('GET', '/health');
    while (health.status !== 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      health = await s.call('GET', '/health');
    }
    expect([health.status, health.body.checks.redis.status]).toEqual([200, 'ok']);
    const again = await s.call('POST', '/v1/customers/deposit', { key, body: { customer_id: 'c3', amount: 5 } });
    expect([again.status, again.body.total_amount]).toEqual([200, 5]);
    expect(consoleErrors.lines).toEqual([]);

    // Every refused request counted as one Redis failed; the lost connections and the
    // failed reconnects as connection errors.
    expect(await redisErrors(s, 'request') - before.request).toBe(cases.length);
    expect(await redisErrors(s, 'connection') - before.connection).toBeGreaterThan(0);
  });
});
