/**
 * GET /v1/billing/receipts (docs/API.md): the receipts of a project's gateway calls,
 * newest first, in cursor pages; a failed call has none; `customer_id` narrows a project
 * key's list, and a customer-scoped key lists only its own customer's; a cursor or limit
 * this API would not take is 400 invalid_request naming it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective, type MockControls } from '../../src/gateway/mock/controls.js';
import { expectError } from '../support/errors.js';
import { OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv } from './support.js';

let env: GatewayEnv;
/** The transaction ids of the calls made here, oldest first, per customer. */
const calls: { customer: string; transactionId: string }[] = [];

const ask = (controls: MockControls) => [{ role: 'user' as const, content: `a receipt please ${mockDirective(controls)}` }];

async function gatewayCall(customer: string, controls: MockControls = { output_tokens: 3 }) {
  const r = await rawPost(env.svc.url, '/v1/chat/completions', {
    key: env.p.projectKey,
    headers: { 'x-service-customer': customer },
    body: { model: OPENAI_MODEL, messages: ask(controls) },
  });
  return { status: r.status, transactionId: r.headers['x-service-transaction-id'] as string | undefined };
}

beforeAll(async () => {
  env = await startGatewayEnv();
  await env.fund('rl1', 1_000_000);
  await env.fund('rl2', 1_000_000);
  for (const customer of ['rl1', 'rl2', 'rl1', 'rl1', 'rl2']) {
    const c = await gatewayCall(customer);
    expect(c.status).toBe(200);
    calls.push({ customer, transactionId: c.transactionId! });
  }
  // A call the upstream refused: a usage record, no receipt.
  expect((await gatewayCall('rl1', { fail: 500 })).status).toBe(500);
  await env.svc.drained();
});
afterAll(() => env?.close());

interface ReceiptList {
  object: string;
  data: { transaction_id: string; customer_id: string; status: string; prices: unknown; details: unknown; reserved_credits: number }[];
  has_more: boolean;
  next_cursor: string | null;
}

async function receipts(query: string, key = env.p.projectKey): Promise<ReceiptList> {
  const r = await env.svc.call('GET', `/v1/billing/receipts${query}`, { key });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as ReceiptList;
}

/** Every page from the first, following next_cursor. */
async function allPages(query: string, limit: number, key?: string): Promise<ReceiptList[]> {
  const pages: ReceiptList[] = [];
  let cursor: string | null = null;
  do {
    const sep: string = query === '' ? '?' : '&';
    const page: ReceiptList = await receipts(`${query}${sep}limit=${limit}${cursor === null ? '' : `&cursor=${cursor}`}`, key);
    pages.push(page);
    cursor = page.next_cursor;
    expect(page.has_more).toBe(cursor !== null);
  } while (cursor !== null);
  return pages;
}

const newestFirst = (customer?: string) => calls.filter((c) => customer === undefined || c.customer === customer).map((c) => c.transactionId).reverse();

describe('GET /v1/billing/receipts', () => {
  it("lists a project key's receipts, every customer's, newest first, the failed call left out", async () => {
    const list = await receipts('');
    expect(list).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(list.data.map((r) => r.transaction_id)).toEqual(newestFirst());
    expect(list.data.every((r) => r.status === 'settled')).toBe(true);
    // Whole receipts: what the one-call read answers.
    const one = await env.svc.call('GET', `/v1/billing/receipts/${list.data[0].transaction_id}`, { key: env.p.projectKey });
    expect(list.data[0]).toEqual(one.body);
  });

  it('pages by cursor: each receipt once, in order, the last page without a cursor', async () => {
    const pages = await allPages('', 2);
    expect(pages.map((p) => p.data.length)).toEqual([2, 2, 1]);
    expect(pages.flatMap((p) => p.data.map((r) => r.transaction_id))).toEqual(newestFirst());
    const rl1 = await allPages('?customer_id=rl1', 2);
    expect(rl1.map((p) => p.data.length)).toEqual([2, 1]);
    expect(rl1.flatMap((p) => p.data.map((r) => r.transaction_id))).toEqual(newestFirst('rl1'));
  });

  it("narrows to customer_id; a customer that made no call has an empty list", async () => {
    expect((await receipts('?customer_id=rl2')).data.map((r) => r.transaction_id)).toEqual(newestFirst('rl2'));
    expect(await receipts('?customer_id=nobody')).toEqual({ object: 'list', data: [], has_more: false, next_cursor: null });
  });

  it("a customer-scoped key lists its own customer's receipts only; another customer_id is customer_not_found", async () => {
    const key = await env.p.customerKey('rl2');
    expect((await receipts('', key)).data.map((r) => r.transaction_id)).toEqual(newestFirst('rl2'));
    expect((await receipts('?customer_id=rl2', key)).data.map((r) => r.transaction_id)).toEqual(newestFirst('rl2'));
    const paged = await allPages('', 1, key);
    expect(paged.flatMap((p) => p.data.map((r) => r.customer_id))).toEqual(['rl2', 'rl2']);
    expectError(await env.svc.call('GET', '/v1/billing/receipts?customer_id=rl1', { key }), 404, 'customer_not_found');
  });

  it('refuses a cursor it did not make, a limit out of 1-500 and an unknown parameter: 400 invalid_request naming it', async () => {
    const bad = (query: string) => env.svc.call('GET', `/v1/billing/receipts?${query}`, { key: env.p.projectKey });
    for (const cursor of ['not-a-cursor', Buffer.from('{"t":"x","i":1}').toString('base64url')]) {
      expectError(await bad(`cursor=${cursor}`), 400, 'invalid_request', { param: 'cursor', label: cursor });
    }
    for (const limit of ['0', '501', 'ten', '1.5']) expectError(await bad(`limit=${limit}`), 400, 'invalid_request', { param: 'limit', label: limit });
    expectError(await bad('customer=rl1'), 400, 'invalid_request', { param: 'customer' });
  });
});
