/**
 * Many gateway calls at once on one wallet that affords only some of them (docs/API.md,
 * "Gateway": the hold before relaying, a wallet never below zero): each call is either
 * served and billed exactly or refused with 402 before the upstream hears of it, the
 * wallet never goes below zero, and afterwards the ledger, the usage records, the plan
 * count and the balance all add up to the deposit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countInputTokens, mockDirective } from '../../src/gateway/mock/controls.js';
import { ANTHROPIC_MODEL, expectedCost, OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv, type RawResponse } from './support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
  // A small default output limit, so that a call without its own limit holds about as much
  // as one with it, until the wallet runs low and the gateway lowers it.
  await env.putModel(OPENAI_MODEL, { provider: 'openai', max_output_tokens: 150 });
});
afterAll(() => env?.close());

const DEPOSIT = 12_000;
const CALLS = 40;

interface Planned {
  path: string;
  stream: boolean;
  body: Record<string, unknown>;
  /** The cost the call must have if it is served. */
  cost: number;
}

/**
 * Call i: OpenAI or Anthropic, whole or streamed, with the client's own output limit or
 * (some OpenAI calls) the model's, which the gateway lowers to what the wallet affords.
 * The upstream waits before answering so that the holds overlap.
 */
function plan(i: number): Planned {
  const anthropic = i % 2 === 1;
  const stream = i % 4 >= 2;
  const ownLimit = i % 8 < 4;
  const output = 5 + (i % 7);
  const cacheRead = i % 3;
  const messages = [{ role: 'user', content: `call number ${i} ${mockDirective({ output_tokens: output, cache_read_tokens: cacheRead, latency_ms: 300 })}` }];
  const body: Record<string, unknown> = { model: anthropic ? ANTHROPIC_MODEL : OPENAI_MODEL, messages, stream };
  if (anthropic || ownLimit) body.max_tokens = 100;
  const input = countInputTokens(anthropic ? 'anthropic' : 'openai', { messages });
  return { path: anthropic ? '/v1/messages' : '/v1/chat/completions', stream, body, cost: expectedCost({ input, output, cacheRead }) };
}

describe('parallel calls on a wallet that affords only some of them', () => {
  it('serves and bills some, refuses the others with 402, and everything adds up', async () => {
    await env.fund('crowd', DEPOSIT);
    const sentBefore = env.mock.requests.length;
    const opsBefore = await env.ops();
    const planned = Array.from({ length: CALLS }, (_, i) => plan(i));

    // Watches the wallet while the calls run: never negative, always consistent.
    let running = true;
    const samples: { total: number; used: number; frozen: number; available: number }[] = [];
    const watcher = (async () => {
      while (running) {
        samples.push((await env.balance('crowd')).wallets.credits!);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    let results: RawResponse[];
    try {
      results = await Promise.all(
        planned.map((c) => rawPost(env.svc.url, c.path, { key: env.p.projectKey, headers: { 'x-service-customer': 'crowd' }, body: c.body })),
      );
    } finally {
      running = false;
      await watcher;
    }

    const served: { call: Planned; res: RawResponse; cost: number }[] = [];
    for (const [i, res] of results.entries()) {
      if (res.status === 402) {
        expectError(res, 402, 'insufficient_balance');
        continue;
      }
      expect(res.status, res.text).toBe(200);
      const call = planned[i]!;
      const cost = Number(call.stream ? res.trailers['x-service-cost-credits'] : res.headers['x-service-cost-credits']);
      expect(cost).toBe(call.cost);
      expect(cost).toBeLessThanOrEqual(Number(res.headers['x-service-reserved-credits']));
      served.push({ call, res, cost });
    }
    // The holds overlapped: the wallet could not take every call, and took more than one.
    expect(served.length).toBeGreaterThan(1);
    expect(served.length).toBeLessThan(CALLS);
    expect(env.mock.requests.length - sentBefore).toBe(served.length);

    expect(samples.length).toBeGreaterThan(0);
    for (const s of samples) {
      expect(s.available).toBeGreaterThanOrEqual(0);
      expect(s.frozen).toBeGreaterThanOrEqual(0);
      expect(s.available + s.frozen + s.used).toBe(s.total);
    }

    const spent = served.reduce((sum, s) => sum + s.cost, 0);
    const balance = await env.balance('crowd');
    expect(balance).toMatchObject({ total: DEPOSIT, used: spent, frozen: 0, available: DEPOSIT - spent });

    const entries = await env.ledger('crowd', 'GATEWAY');
    expect(entries).toHaveLength(served.length);
    expect(entries.reduce((sum, e) => sum + e.amount, 0)).toBe(spent);
    expect(new Set(entries.map((e) => e.transaction_id))).toEqual(new Set(served.map((s) => s.res.headers['x-service-transaction-id'])));
    expect(await env.ops()).toBe(opsBefore + served.length);

    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?customer_id=crowd&limit=500', { key: env.p.projectKey });
    const settled = usage.body.data.filter((r: { status: string }) => r.status === 'settled');
    expect(settled).toHaveLength(served.length);
    expect(settled.reduce((sum: number, r: { cost_credits: number }) => sum + r.cost_credits, 0)).toBe(spent);
    // Refused calls never held anything, so they left no usage record either.
    expect(usage.body.data).toHaveLength(served.length);
  });
});
