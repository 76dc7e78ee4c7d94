/**
 * Limits on nesting at the edge (docs/API.md, "Limits"): free-form JSON the service stores
 * (`metadata`) at most 32 levels and 16 KiB serialized, any request body at most 64 levels.
 * Past them: 400 invalid_request naming the field, before any money moves; never a 500
 * from a walk of the body that overflows the stack.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { body_depth_max, stored_json_bytes_max, stored_json_depth_max } from '../../src/schema/json.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });
beforeAll(async () => {
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'payer', amount: 1000 } })).status).toBe(200);
});

/** An object nested `levels` deep (itself level 1). */
function nested(levels: number): Record<string, unknown> {
  let v: Record<string, unknown> = {};
  for (let i = 1; i < levels; i++) v = { a: v };
  return v;
}
/** JSON text of an object nested `levels` deep: JSON.stringify cannot write 10,000 levels. */
const deepText = (levels: number) => `${'{"a":'.repeat(levels - 1)}{}${'}'.repeat(levels - 1)}`;

async function untouched() {
  const bal = await svc.call('GET', '/v1/customers/payer/balance', { key: p.projectKey });
  expect(bal.body).toMatchObject({ total: 1000, used: 0, frozen: 0, available: 1000 });
  expect((await svc.call('GET', '/v1/customers/fresh', { key: p.projectKey })).status).toBe(404);
}

describe('metadata limits', () => {
  it(`takes metadata ${stored_json_depth_max} levels deep and stores it as sent`, async () => {
    const metadata = nested(stored_json_depth_max);
    const res = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'deep-ok', amount: 5, metadata } });
    expect(res.status).toBe(200);
    await svc.drained();
    expect((await svc.call('GET', '/v1/customers/deep-ok', { key: p.projectKey })).body.metadata).toEqual(metadata);
  });

  it(`refuses metadata ${stored_json_depth_max + 1} levels deep: 400 naming metadata and the limit`, async () => {
    const res = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'fresh', amount: 5, metadata: nested(stored_json_depth_max + 1) } });
    expectError(res, 400, 'invalid_request', { param: 'metadata' });
    expect(res.body.error.message).toContain(String(stored_json_depth_max));
    await untouched();
  });

  it('refuses metadata over 16 KiB serialized, on deposit, customer create and PATCH', async () => {
    const metadata = { blob: 'x'.repeat(stored_json_bytes_max) };
    const dep = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'fresh', amount: 5, metadata } });
    expectError(dep, 400, 'invalid_request', { param: 'metadata' });
    expect(dep.body.error.message).toContain(String(stored_json_bytes_max));
    expectError(await svc.call('POST', '/v1/customers', { key: p.projectKey, body: { customer_id: 'fresh', metadata } }), 400, 'invalid_request', { param: 'metadata' });
    expectError(await svc.call('PATCH', '/v1/customers/payer', { key: p.projectKey, body: { metadata: nested(stored_json_depth_max + 1) } }), 400, 'invalid_request', { param: 'metadata' });
    expectError(await svc.call('PATCH', '/v1/customers/payer', { key: p.projectKey, body: { metadata } }), 400, 'invalid_request', { param: 'metadata' });
    await untouched();
    expect((await svc.call('GET', '/v1/customers/payer', { key: p.projectKey })).body.metadata).toEqual({});
  });

  it('takes metadata of exactly 16 KiB', async () => {
    const metadata = { blob: 'x'.repeat(stored_json_bytes_max - '{"blob":""}'.length) };
    expect((await svc.call('POST', '/v1/customers', { key: p.projectKey, body: { customer_id: 'big-ok', metadata } })).status).toBe(201);
  });
});

describe('bodies nested 10,000 deep', () => {
  const cases: [string, string, string, string][] = [
    ['deposit metadata', 'POST', '/v1/customers/deposit', `{"customer_id":"fresh","amount":5,"metadata":${deepText(10_000)}}`],
    ['deduct description', 'POST', '/v1/billing/deduct', `{"customer_id":"payer","transaction_id":"d1","amount":5,"description":${deepText(10_000)}}`],
    ['freeze business_type', 'POST', '/v1/billing/freeze', `{"customer_id":"payer","transaction_id":"f1","amount":5,"business_type":${deepText(10_000)}}`],
    ['customer create metadata', 'POST', '/v1/customers', `{"customer_id":"fresh","metadata":${deepText(10_000)}}`],
    ['customer PATCH metadata', 'PATCH', '/v1/customers/payer', `{"metadata":${deepText(10_000)}}`],
  ];
  it.each(cases)('%s: 400 invalid_request naming the field, not a 500, nothing applied', async (_, method, path, text) => {
    const param = /"(\w+)":\{"a"/.exec(text)![1];
    const res = await svc.call(method, path, { key: p.projectKey, body: text, headers: { 'content-type': 'application/json' } });
    expectError(res, 400, 'invalid_request', { param });
    expect(res.body.error.message).toContain(String(body_depth_max));
    await untouched();
  });
});
