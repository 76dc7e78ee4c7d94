/**
 * What a gateway call costs when the usage does not fit the hold, or does not come, and
 * how a settlement survives a lost reply: the cost is charged in full while the wallet
 * can pay it (never below zero), OpenAI `n` is part of the bound, a call on a free model
 * is still a settled, counted call, a stream without usage is charged an estimate, and a
 * settlement sent twice charges once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcileOverApi } from '../helpers.js';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import type { ScriptApi } from '../../src/redis/scripts.js';
import { OutcomeUnknownError } from '../../src/redis/sent.js';
import { expectedCost, MAX_OUTPUT_TOKENS, OPENAI_MODEL, PRICES, rawPost, sseData, startGatewayEnv, type GatewayEnv } from './support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(async () => {
  try {
    // After every test, whatever their order: Redis and the ledger in PostgreSQL agree.
    await env.svc.drained();
    const report = await reconcileOverApi(env.svc, env.p);
    expect(report.customers_checked).toBeGreaterThan(0);
    expect(report.errors).toEqual([]);
    expect(report.drift).toEqual([]);
  } finally {
    await env.close();
  }
});

const user = (text: string) => [{ role: 'user' as const, content: text }];

describe('a cost the hold could not foresee', () => {
  it('is charged in full from the wallet beyond the hold (input the request size cannot bound: images, documents)', async () => {
    await env.fund('big-input', 50_000_000);
    const { data, response } = await env
      .openai({ customer: 'big-input' })
      .chat.completions.create({ model: OPENAI_MODEL, messages: user(`look ${mockDirective({ input_tokens: 200_000, output_tokens: 3 })}`), max_tokens: 5 })
      .withResponse();
    const reserved = Number(response.headers.get('x-service-reserved-credits'));
    const cost = expectedCost({ input: 200_000, output: 3 });
    expect(data.usage?.prompt_tokens).toBe(200_000);
    expect(cost).toBeGreaterThan(reserved);
    expect(Number(response.headers.get('x-service-cost-credits'))).toBe(cost);
    const balance = await env.balance('big-input');
    expect(balance).toMatchObject({ used: cost, frozen: 0, available: 50_000_000 - cost });
    expect(Number(response.headers.get('x-service-balance-credits'))).toBe(50_000_000 - cost);
  });

  it('takes what the wallet has and no more: the balance reaches zero, never below', async () => {
    await env.fund('short', 100_000);
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'short' },
      body: { model: OPENAI_MODEL, messages: user(`look ${mockDirective({ input_tokens: 1_000_000, output_tokens: 3 })}`), max_tokens: 5 },
    });
    expect(res.status).toBe(200);
    expect(expectedCost({ input: 1_000_000, output: 3 })).toBeGreaterThan(100_000);
    expect(Number(res.headers['x-service-cost-credits'])).toBe(100_000);
    expect(res.headers['x-service-balance-credits']).toBe('0');
    expect(await env.balance('short')).toMatchObject({ total: 100_000, used: 100_000, frozen: 0, available: 0 });
    const [entry] = await env.ledger('short', 'GATEWAY');
    expect(entry.amount).toBe(100_000);
  });
});

describe('OpenAI n', () => {
  it('bounds the hold by n answers and bills the output of all of them', async () => {
    await env.fund('n3', 10_000_000);
    const one = await env.openai({ customer: 'n3' }).chat.completions.create({ model: OPENAI_MODEL, messages: user(`hi ${mockDirective({ output_tokens: 4 })}`), max_tokens: 100 }).withResponse();
    const three = await env.openai({ customer: 'n3' }).chat.completions.create({ model: OPENAI_MODEL, messages: user(`hi ${mockDirective({ output_tokens: 4 })}`), max_tokens: 100, n: 3 }).withResponse();
    expect(three.data.choices).toHaveLength(3);
    expect(three.data.usage?.completion_tokens).toBe(12);
    const reservedOne = Number(one.response.headers.get('x-service-reserved-credits'));
    const reservedThree = Number(three.response.headers.get('x-service-reserved-credits'));
    // Same request size, so the input bound is the same: the output bound triples.
    const outputBound = Math.ceil((100 * PRICES.output) / 1_000_000);
    expect(reservedThree - reservedOne).toBeGreaterThanOrEqual(2 * outputBound - 1);
    const input = three.data.usage!.prompt_tokens;
    expect(Number(three.response.headers.get('x-service-cost-credits'))).toBe(expectedCost({ input, output: 12 }));
  });

  it('lowers the default output limit so that n answers fit the wallet', async () => {
    const perAnswer = Math.ceil((MAX_OUTPUT_TOKENS * PRICES.output) / 1_000_000);
    await env.fund('n-poor', perAnswer * 2);
    const { response } = await env
      .openai({ customer: 'n-poor' })
      .chat.completions.create({ model: OPENAI_MODEL, messages: user('hi'), n: 4 })
      .withResponse();
    const maxTokens = Number(response.headers.get('x-service-max-tokens'));
    expect(maxTokens).toBeLessThan(MAX_OUTPUT_TOKENS / 2);
    expect(Number(response.headers.get('x-service-reserved-credits'))).toBeLessThanOrEqual(perAnswer * 2);
    expect((await env.balance('n-poor')).available).toBeGreaterThanOrEqual(0);
  });

  it.each([[0], [129], [1.5], ['2']])('n = %j is 400 invalid_request with param n', async (n) => {
    await env.fund('n-bad', 1_000_000);
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'n-bad' },
      body: { model: OPENAI_MODEL, messages: user('hi'), n },
    });
    expectError(res, 400, 'invalid_request', { param: 'n' });
    expect((await env.balance('n-bad')).used).toBe(0);
  });
});

describe('a model priced at zero', () => {
  it('is still a settled call: a GATEWAY entry of amount 0, a receipt, and one billable operation', async () => {
    await env.putModel('free-model', { provider: 'openai', input_price_per_million_credits: 0, output_price_per_million_credits: 0, cache_read_price_per_million_credits: 0, cache_write_price_per_million_credits: 0 });
    await env.fund('free-user', 1_000);
    const opsBefore = await env.ops();
    const { response } = await env.openai({ customer: 'free-user' }).chat.completions.create({ model: 'free-model', messages: user('hi') }).withResponse();
    expect(response.headers.get('x-service-cost-credits')).toBe('0');
    const txid = response.headers.get('x-service-transaction-id');
    expect(await env.ops()).toBe(opsBefore + 1);
    const entries = await env.ledger('free-user', 'GATEWAY');
    expect(entries.map((e) => [e.transaction_id, e.amount])).toEqual([[txid, 0]]);
    await env.svc.drained();
    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect(receipt.status).toBe(200);
    expect(receipt.body).toMatchObject({ transaction_id: txid, status: 'settled', cost_credits: 0 });
    expect((await env.ledger('free-user', 'GATEWAY')).map((e) => e.amount)).toEqual([0]);
  });
});

describe('a stream whose upstream sends no usage', () => {
  it('is charged an estimate of the relayed answer, marked usage_estimated', async () => {
    await env.fund('no-usage', 1_000_000);
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'no-usage', 'x-service-trace-id': 'no-usage' },
      body: { model: OPENAI_MODEL, messages: user(`hi ${mockDirective({ no_usage: 1, output_tokens: 20 })}`), stream: true },
    });
    expect(res.status).toBe(200);
    expect(sseData(res.text).at(-1)).toBe('[DONE]');
    const cost = Number(res.trailers['x-service-cost-credits']);
    expect(cost).toBeGreaterThan(0);
    expect(await env.balance('no-usage')).toMatchObject({ used: cost, frozen: 0 });
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?trace_id=no-usage', { key: env.p.projectKey });
    expect(usage.body.data).toEqual([expect.objectContaining({ status: 'settled', usage_estimated: true, cost_credits: cost })]);
    expect(usage.body.data[0].output_tokens).toBeGreaterThan(0);
  });
});

describe('a settlement whose reply is lost', () => {
  it('is sent again and charges once; the Idempotency-Key stays taken', async () => {
    await env.fund('lost-reply', 1_000_000);
    // The script layer under the ledger: the first settlement runs and applies, and its
    // caller gets the error of a connection that closed before the reply
    // (src/redis/sent.ts). The ledger learns the outcome by sending it again
    // (OutcomeLearner.learn), which answers its stored result.
    const api = (env.svc.rt.ledger as unknown as { api: ScriptApi }).api;
    const customer = api.customer;
    let lost = 0;
    api.customer = (async (...args: Parameters<ScriptApi['customer']>) => {
      const reply = await customer(...args);
      if (args[0] === 'gateway_settle' && lost++ === 0) throw new OutcomeUnknownError(new Error('Connection is closed.'));
      return reply;
    }) as ScriptApi['customer'];
    try {
      const headers = { 'x-service-customer': 'lost-reply', 'idempotency-key': 'lost-1' };
      const body = { model: OPENAI_MODEL, messages: user(`hi ${mockDirective({ output_tokens: 5 })}`) };
      const res = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers, body });
      expect(res.status).toBe(200);
      expect(lost).toBe(2);
      const cost = Number(res.headers['x-service-cost-credits']);
      expect(cost).toBe(expectedCost({ input: res.json().usage.prompt_tokens, output: 5 }));
      expect(await env.balance('lost-reply')).toMatchObject({ used: cost, frozen: 0 });
      expect((await env.ledger('lost-reply', 'GATEWAY')).map((e) => e.amount)).toEqual([cost]);
      const again = await rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers, body });
      expect(again.status).toBe(409);
      expect(again.json().error.transaction_id).toBe(res.headers['x-service-transaction-id']);
    } finally {
      api.customer = customer;
    }
  });
});
