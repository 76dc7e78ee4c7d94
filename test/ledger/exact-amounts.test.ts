/**
 * Amounts are read from the request's text: a number that JSON.parse would round
 * (`100.0000000000000001` -> 100, `0.1000000000000000001` USD -> 0.1 USD) is 400
 * invalid_amount with nothing applied, in both variants, for every amount field, whichever
 * body reader read the request (the service's own for a plain JSON body with a length, or
 * express.json for a chunked one). Exact spellings (`1e2`, `100.0`, `100.00`) still pass.
 */
import { describe, expect, it } from 'vitest';
import type { Json } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { pA, pB, svc, useTestService } from '../support/service.js';

useTestService({ variants: ['A', 'B'] });

type Reader = 'fast' | 'slow';

/** Posts `text` as it is: with a Content-Length (the fast reader) or chunked (express.json). */
async function post(path: string, key: string, text: string, reader: Reader): Promise<{ status: number; body: Json }> {
  const bytes = new TextEncoder().encode(text);
  const body = reader === 'fast'
    ? text
    : new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(bytes.slice(0, 5));
        c.enqueue(bytes.slice(5));
        c.close();
      },
    });
  const r = await fetch(`${svc.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body,
    duplex: 'half',
  } as RequestInit);
  return { status: r.status, body: (await r.json()) as Json };
}

async function balanceOf(key: string, customer: string): Promise<Json> {
  return (await svc.call('GET', `/v1/customers/${customer}/balance`, { key })).body;
}

describe.each(['fast', 'slow'] as const)('amounts read from the text (%s body reader)', (reader) => {
  it('Variant B: an amount a double rounds is refused; exact spellings are accepted', async () => {
    const k = pB.projectKey;
    const c = `b-${reader}`;
    expect((await post('/v1/customers/deposit', k, `{"customer_id":"${c}","amount":1e6}`, reader)).status).toBe(200);
    const refusedDeposit = await post('/v1/customers/deposit', k, `{"customer_id":"${c}","amount":100.0000000000000001}`, reader);
    expectError(refusedDeposit, 400, 'invalid_amount', { param: 'amount', message: /100\.0000000000000001/ });
    for (const [path, extra] of [['/v1/billing/deduct', ''], ['/v1/billing/freeze', ',"consume_after_seconds":60']] as const) {
      const r = await post(path, k, `{"customer_id":"${c}","transaction_id":"${reader}-${path}-x","amount":100.0000000000000001${extra}}`, reader);
      expectError(r, 400, 'invalid_amount', { param: 'amount' });
    }
    expect(await balanceOf(k, c)).toMatchObject({ total: 1_000_000, used: 0, frozen: 0 });
    for (const [i, spelling] of ['1e2', '100.0', '100.00', '100'].entries()) {
      const r = await post('/v1/billing/deduct', k, `{"customer_id":"${c}","transaction_id":"${reader}-ok-${i}","amount":${spelling}}`, reader);
      expect([r.status, r.body.deducted_amount], spelling).toEqual([200, 100]);
    }
    expect((await post('/v1/billing/freeze', k, `{"customer_id":"${c}","transaction_id":"${reader}-fz","amount":500}`, reader)).status).toBe(200);
    const consume = await post('/v1/billing/consume', k, `{"transaction_id":"${reader}-fz","amount":100.0000000000000001}`, reader);
    expectError(consume, 400, 'invalid_amount', { param: 'amount' });
    // A number of the same name elsewhere in the body is not the amount.
    const nested = `{"customer_id":"${c}","transaction_id":"${reader}-nested","amount":5,"description":"\\"amount\\":0.1000000000000000001"}`;
    expect((await post('/v1/billing/deduct', k, nested, reader)).status).toBe(200);
    expect(await balanceOf(k, c)).toMatchObject({ used: 405, frozen: 500 });
  });

  it('Variant A: every unit field and the bare amount (cents), consume\'s actual_amount_* too', async () => {
    const k = pA.projectKey;
    const c = `a-${reader}`;
    expect((await post('/v1/customers/deposit', k, `{"customer_id":"${c}","amount_usd":10}`, reader)).status).toBe(200);
    const inexact = {
      amount_usd: '0.1000000000000000001',
      amount_cents: '100.0000000000000001',
      amount_credits: '100.0000000000000001',
      amount: '100.0000000000000001',
    };
    for (const [field, number] of Object.entries(inexact)) {
      const deduct = await post('/v1/billing/deduct', k, `{"customer_id":"${c}","transaction_id":"${reader}-x-${field}","${field}":${number}}`, reader);
      expectError(deduct, 400, 'invalid_amount', { param: field, label: field });
      const deposit = await post('/v1/customers/deposit', k, `{"customer_id":"${c}","${field}":${number}}`, reader);
      expectError(deposit, 400, 'invalid_amount', { param: field, label: field });
    }
    expect(await balanceOf(k, c)).toMatchObject({ total: 10_000_000, used: 0 });
    const tenth = await post('/v1/billing/deduct', k, `{"customer_id":"${c}","transaction_id":"${reader}-tenth","amount_usd":0.1}`, reader);
    expect([tenth.status, tenth.body.deducted_amount]).toEqual([200, 100_000]);
    const cents = await post('/v1/billing/deduct', k, `{"customer_id":"${c}","transaction_id":"${reader}-cents","amount_cents":1e2}`, reader);
    expect([cents.status, cents.body.deducted_amount]).toEqual([200, 1_000_000]);
    expect((await post('/v1/billing/freeze', k, `{"customer_id":"${c}","transaction_id":"${reader}-fz","amount_credits":5000.00}`, reader)).status).toBe(200);
    for (const field of ['actual_amount_usd', 'actual_amount_cents', 'actual_amount_credits', 'actual_amount']) {
      const r = await post('/v1/billing/consume', k, `{"transaction_id":"${reader}-fz","${field}":0.1000000000000000001}`, reader);
      expectError(r, 400, 'invalid_amount', { param: field, label: field });
    }
    const consumed = await post('/v1/billing/consume', k, `{"transaction_id":"${reader}-fz","actual_amount_credits":100.0}`, reader);
    expect([consumed.status, consumed.body.consumed_amount]).toEqual([200, 100]);
  });
});
