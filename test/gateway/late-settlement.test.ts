/**
 * A gateway call whose settlement cannot be confirmed while it waits (Redis is gone after
 * the hold applied and before the settlement) is settled in the background once Redis
 * answers again: the upstream did the work, and a streamed answer already reached the
 * client. Streamed (200 without its billing trailers) or not (503 outcome_unknown naming the call),
 * the call ends billed once, with nothing left frozen and no hold left in the TTL zset.
 *
 * The service reaches Redis through a TCP proxy that the test cuts and refuses while the
 * upstream answers slowly.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { customerKeys } from '../../src/redis/keys.js';
import { reconcileOverApi, testConfig, waitFor } from '../helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv, type RawResponse } from './support.js';

const redisUrl = testConfig().REDIS_URL;
const proxy = TcpProxy.to(redisUrl, 6379);
let env: GatewayEnv;
/** Straight to Redis, past the proxy. */
let direct: Redis;

beforeAll(async () => {
  await proxy.start();
  direct = new Redis(redisUrl);
  env = await startGatewayEnv({ config: { REDIS_URL: proxy.via(redisUrl) } });
});

afterAll(async () => {
  proxy.forward();
  await proxy.start();
  await env?.close();
  direct?.disconnect();
  await proxy.close();
});

/** A chat completion through node:http, which reads trailers. */
function chat(customerId: string, stream: boolean): Promise<RawResponse> {
  const payload = JSON.stringify({
    model: OPENAI_MODEL,
    stream,
    max_tokens: 20,
    // The upstream answers slowly, so that Redis can be cut while it does.
    messages: [{ role: 'user', content: `late ${customerId} ${mockDirective({ output_tokens: 8, latency_ms: 300, chunk_delay_ms: 40 })}` }],
  });
  return rawPost(env.svc.url, '/v1/chat/completions', {
    key: env.p.projectKey,
    headers: { 'x-service-customer': customerId, 'x-service-trace-id': customerId },
    body: payload,
  });
}

describe('a gateway call whose settlement Redis could not confirm', () => {
  it.each([
    ['streamed', true],
    ['not streamed', false],
  ])('%s: is settled once Redis is back, charged once, and leaves no hold', async (_, stream) => {
    const customerId = `late-${stream ? 'stream' : 'whole'}`;
    await env.fund(customerId, 10_000_000);
    const answer = chat(customerId, stream);
    // The upstream has the call: the hold applied and its reply came back.
    await waitFor(() => env.mock.requests.some((r) => JSON.stringify(r.body).includes(`late ${customerId}`)), 10_000, 'the upstream call');
    await proxy.refuse();
    proxy.cut();
    const res = await answer;
    if (stream) {
      // The client has the whole answer, without its billing trailers.
      expect(res.status).toBe(200);
      expect(res.text).toContain('[DONE]');
      expect(res.trailers['x-service-cost-credits']).toBeUndefined();
    } else {
      expect(res.status).toBe(503);
      expect(res.json().error).toMatchObject({ code: 'outcome_unknown', message: expect.stringMatching(/may have been applied/) });
      expect(res.json().error.transaction_id).toBe(res.headers['x-service-transaction-id']);
    }
    const transactionId = String(res.headers['x-service-transaction-id']);
    expect(transactionId).toMatch(/^gw_/);

    proxy.forward();
    await proxy.start();
    const ttl = customerKeys(env.svc.rt.config.REDIS_PREFIX, env.p.projectId, customerId).ttl;
    await waitFor(async () => (await direct.zscore(ttl, transactionId)) === null, 15_000, 'the hold to leave the TTL zset');
    const balance = await env.balance(customerId);
    expect(balance.frozen).toBe(0);
    expect(balance.used).toBeGreaterThan(0);
    await env.svc.drained();
    const entries = await env.ledger(customerId, 'GATEWAY');
    expect(entries.map((e) => [e.transaction_id, e.amount])).toEqual([[transactionId, balance.used]]);
    const usage = await env.svc.call('GET', `/v1/usage?trace_id=${customerId}`, { key: env.p.projectKey });
    expect(usage.body.data.map((u: { status: string }) => u.status)).toEqual(['settled']);
  });

  it('Redis and the ledger in PostgreSQL agree: reconcile finds no drift', async () => {
    await env.svc.drained();
    const report = await reconcileOverApi(env.svc, env.p);
    expect(report.errors).toEqual([]);
    expect(report.drift).toEqual([]);
  });
});
