/**
 * A customer budget under concurrency across two API processes (docs/API.md, "Budgets"):
 * 50 gateway calls and deducts at once, split over two web processes, never spend past
 * the budget, to the credit; every refusal is budget_exceeded (402 on the gateway, 400 on
 * the ledger), and the budget's spent is exactly what the ledger charged.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';
import { OPENAI_MODEL, startGatewayEnv, type GatewayEnv } from './support.js';

let env: GatewayEnv;
let apis: ServiceProcess[] = [];

beforeAll(async () => {
  env = await startGatewayEnv();
  const cfg = env.svc.rt.config;
  const childEnv = {
    REDIS_PREFIX: cfg.REDIS_PREFIX,
    QUEUE_PREFIX: cfg.QUEUE_PREFIX,
    DATABASE_URL: process.env.TEST_DATABASE_URL!,
    SVC_CLOCK_CONTROL: '0',
    SVC_MASTER_KEY: String(cfg.SVC_MASTER_KEY),
  };
  apis = await Promise.all([spawnService('src/web.ts', childEnv), spawnService('src/web.ts', childEnv)]);
}, 60_000);
afterAll(async () => {
  await Promise.all(apis.map((a) => a.kill()));
  await env?.close();
});

interface Outcome {
  kind: 'gateway' | 'deduct';
  status: number;
  code: string | null;
  charged: number;
}

async function send(url: string, kind: 'gateway' | 'deduct', i: number, customer: string): Promise<Outcome> {
  const key = env.p.projectKey;
  const res =
    kind === 'gateway'
      ? await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-service-customer': customer },
        body: JSON.stringify({ model: OPENAI_MODEL, max_tokens: 40, messages: [{ role: 'user', content: `hello number ${i} ${mockDirective({ output_tokens: 30 })}` }] }),
      })
      : await fetch(`${url}/v1/billing/deduct`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ customer_id: customer, transaction_id: `mp-${customer}-${i}`, amount: 3_001 + i }),
      });
  const body = (await res.json()) as { error?: { code: string }; deducted_amount?: number };
  const charged = res.status !== 200 ? 0 : kind === 'gateway' ? Number(res.headers.get('x-service-cost-credits')) : Number(body.deducted_amount);
  return { kind, status: res.status, code: body.error?.code ?? null, charged };
}

describe('a budget across two API processes', () => {
  it('50 concurrent gateway calls and deducts spend within the budget to the credit; every refusal is budget_exceeded', async () => {
    const customer = 'mpb1';
    await env.fund(customer, 10_000_000);
    const limit = 60_007;
    const patched = await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: env.p.projectKey, body: { budget: { limit, period: 'month' } } });
    expect(patched.status).toBe(200);

    const outcomes = await Promise.all(
      Array.from({ length: 50 }, (_, i) => send(apis[i % 2].url, i % 2 === 0 ? 'gateway' : 'deduct', i, customer)),
    );
    for (const o of outcomes) {
      if (o.status === 200) continue;
      expect([o.kind, o.status, o.code]).toEqual([o.kind, o.kind === 'gateway' ? 402 : 400, 'budget_exceeded']);
    }
    const applied = outcomes.filter((o) => o.status === 200);
    const charged = applied.reduce((sum, o) => sum + o.charged, 0);
    expect(applied.some((o) => o.kind === 'gateway')).toBe(true);
    expect(applied.some((o) => o.kind === 'deduct')).toBe(true);
    expect(outcomes.some((o) => o.status !== 200)).toBe(true);
    expect(charged).toBeLessThanOrEqual(limit);

    const got = await env.svc.call('GET', `/v1/customers/${customer}`, { key: env.p.projectKey });
    expect(got.body.budget).toMatchObject({ limit, spent: charged, held: 0, remaining: limit - charged });
    // What the ledger charged is what the budget counts, to the credit.
    const entries = [...(await env.ledger(customer, 'DEDUCT')), ...(await env.ledger(customer, 'GATEWAY'))];
    expect(entries.reduce((sum, e) => sum + Number(e.amount), 0)).toBe(charged);
    expect((await env.balance(customer)).used).toBe(charged);
  }, 60_000);
});
