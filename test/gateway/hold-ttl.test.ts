/**
 * A gateway hold carries a one-hour TTL (a hold left by an API process that died mid-call
 * is given back lazily). A call that outlives its hold settles late: the hold is gone, so
 * the whole cost comes from the wallet's available credits at settlement, down to zero and
 * never below (docs/ARCHITECTURE.md, Gateway). The call is held at the mock upstream
 * (latency) while the test moves the service clock past the TTL and spends the wallet.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hold_ttl_seconds } from '../../src/gateway/service.js';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { waitFor } from '../helpers.js';
import { expectedCost, OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv } from './support.js';

/** How long the upstream keeps the call open: room for the test's steps on a busy machine. */
const upstream_latency_ms = 3_000;
const funded = 10_000_000;
const tokens = { input: 2_000_000, output: 3 };

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env?.close());

/** Starts a call on `customer`, waits for its hold, moves past the TTL and waits until a read has released it. */
async function callOutlivingItsHold(customer: string) {
  const call = rawPost(env.svc.url, '/v1/chat/completions', {
    key: env.p.projectKey,
    headers: { 'x-service-customer': customer },
    body: { model: OPENAI_MODEL, messages: [{ role: 'user', content: `long ${mockDirective({ latency_ms: upstream_latency_ms, input_tokens: tokens.input, output_tokens: tokens.output })}` }], max_tokens: 5 },
  });
  const held = (await waitFor(async () => (await env.balance(customer)).frozen, 5_000, 'the hold')) as number;
  env.svc.rt.clock.advance(hold_ttl_seconds * 1_000);
  // Any script on the customer settles due TTLs first: this read gives the hold back.
  await waitFor(async () => (await env.balance(customer)).frozen === 0, 5_000, 'the TTL to release the hold');
  return { call, held };
}

async function expectNoDrift() {
  await env.svc.drained();
  const report = await reconcile(env.svc.rt, { projectId: env.p.projectId, repair: false });
  expect(report).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });
}

describe('a gateway call whose hold its TTL released', () => {
  it('is charged from the available credits down to zero, never below, with one GATEWAY entry', async () => {
    const customer = 'ttl-short';
    await env.fund(customer, funded);
    const { call, held } = await callOutlivingItsHold(customer);
    expect(held).toBeGreaterThan(0);
    // Spend most of the wallet while the call is still running: what is left is less than the cost.
    const left = 1_000_000;
    const freeze = await env.svc.call('POST', '/v1/billing/freeze', { key: env.p.projectKey, body: { customer_id: customer, transaction_id: 'ttl-short-spend', amount: funded - left } });
    expect(freeze.status, JSON.stringify(freeze.body)).toBe(200);

    const res = await call;
    expect(res.status, res.text).toBe(200);
    expect(expectedCost(tokens)).toBeGreaterThan(left);
    expect(Number(res.headers['x-service-cost-credits'])).toBe(left);
    expect(res.headers['x-service-balance-credits']).toBe('0');
    expect(await env.balance(customer)).toMatchObject({ total: funded, used: left, frozen: funded - left, available: 0 });
    const entries = await env.ledger(customer, 'GATEWAY');
    expect(entries).toHaveLength(1);
    expect(entries[0].amount).toBe(left);
    expect(entries[0].details.reduce((n, d) => n + d.amount, 0)).toBe(left);
    await expectNoDrift();
  });

  it('is charged its whole cost when the wallet still has it', async () => {
    const customer = 'ttl-enough';
    await env.fund(customer, funded);
    const { call } = await callOutlivingItsHold(customer);
    const res = await call;
    expect(res.status, res.text).toBe(200);
    const cost = expectedCost(tokens);
    expect(Number(res.headers['x-service-cost-credits'])).toBe(cost);
    expect(Number(res.headers['x-service-balance-credits'])).toBe(funded - cost);
    expect(await env.balance(customer)).toMatchObject({ total: funded, used: cost, frozen: 0, available: funded - cost });
    const entries = await env.ledger(customer, 'GATEWAY');
    expect(entries.map((e) => e.amount)).toEqual([cost]);
    await expectNoDrift();
  });
});
