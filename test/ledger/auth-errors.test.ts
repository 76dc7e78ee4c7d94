/**
 * Authentication and request-level errors of the ledger endpoints: missing and invalid
 * keys, key types (permission_denied), bodies that are not JSON objects, the body size
 * limit, and the X-Service-Api-Variant override. Each error is checked for the contract's
 * shape, and rejected money requests for having no effect.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { expectError } from '../support/errors.js';
import { pA, pB, svc, useTestService } from '../support/service.js';

type Body = Record<string, unknown>;

useTestService({ variants: ['A', 'B'] });

const newCustomer = () => `auth_${randomBytes(6).toString('hex')}`;
const newTx = () => `tx_${randomBytes(6).toString('hex')}`;

const moneyEndpoints = ['/v1/customers/deposit', '/v1/billing/deduct', '/v1/billing/freeze', '/v1/billing/consume', '/v1/billing/unfreeze'];
const readPaths = (id: string) => [`/v1/customers/${id}`, `/v1/customers/${id}/balance`, `/v1/customers/${id}/ledger`];

/**
 * The contract's error body: only `error`, holding message, type, code and maybe param,
 * plus the fields docs/API.md lists for some errors ("Errors": details, errors, the key
 * types of a permission_denied, the customer id of a customer_not_found).
 */
const envelope = { onlyFields: ['details', 'errors', 'key_types_allowed', 'key_type', 'customer_id'] };

/** A B-project customer with 1000 credits and one open freeze of 100. */
async function fundedCustomer(): Promise<{ id: string; frozenTx: string }> {
  const id = newCustomer();
  const frozenTx = newTx();
  const dep = await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, body: { customer_id: id, amount: 1000 } });
  expect(dep.status).toBe(200);
  const frz = await svc.call('POST', '/v1/billing/freeze', { key: pB.projectKey, body: { customer_id: id, transaction_id: frozenTx, amount: 100 } });
  expect(frz.status).toBe(200);
  return { id, frozenTx };
}

/** A valid body for each money endpoint, for the customer and its open freeze. */
function validBody(path: string, id: string, frozenTx: string): Body {
  if (path.endsWith('/deposit')) return { customer_id: id, amount: 5 };
  if (path.endsWith('/deduct') || path.endsWith('/freeze')) return { customer_id: id, transaction_id: newTx(), amount: 5 };
  return { transaction_id: frozenTx };
}

async function ledgerState(id: string) {
  const { as_of: _asOf, ...balance } = (await svc.call('GET', `/v1/customers/${id}/balance`, { key: pB.projectKey })).body;
  const ledger = (await svc.call('GET', `/v1/customers/${id}/ledger`, { key: pB.projectKey })).body.data;
  return { balance, ledger };
}

describe('API keys', () => {
  // A bare `Bearer` is what curl sends when the variable holding the key is unset: no key either.
  it.each([
    ['no Authorization header', {}],
    ['a bare Bearer', { authorization: 'Bearer ' }],
  ])('answers 401 missing_api_key on every ledger endpoint with %s, applying nothing', async (_case, headers: Record<string, string>) => {
    const { id, frozenTx } = await fundedCustomer();
    const before = await ledgerState(id);
    for (const path of moneyEndpoints) expectError(await svc.call('POST', path, { headers, body: validBody(path, id, frozenTx) }), 401, 'missing_api_key', envelope);
    for (const path of readPaths(id)) expectError(await svc.call('GET', path, { headers }), 401, 'missing_api_key', envelope);
    expect(await ledgerState(id)).toEqual(before);
  });

  const wellFormedUnknown = `svc_live_${randomBytes(32).toString('base64url')}`;
  it.each([
    ['a malformed bearer token', { authorization: 'Bearer not-a-key' }],
    ['a well-formed unknown project key', { authorization: `Bearer ${wellFormedUnknown}` }],
    ['an unknown customer key', { authorization: `Bearer svc_customer_${randomBytes(32).toString('base64url')}` }],
    ['Basic credentials', { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }],
    ['an upper-cased prefix', { authorization: `Bearer ${wellFormedUnknown.toUpperCase()}` }],
    ['an unknown x-api-key', { 'x-api-key': wellFormedUnknown }],
  ])('answers 401 invalid_api_key for %s', async (_case, headers) => {
    const { id, frozenTx } = await fundedCustomer();
    const before = await ledgerState(id);
    for (const path of moneyEndpoints) expectError(await svc.call('POST', path, { headers, body: validBody(path, id, frozenTx) }), 401, 'invalid_api_key', envelope);
    for (const path of readPaths(id)) expectError(await svc.call('GET', path, { headers }), 401, 'invalid_api_key', envelope);
    expect(await ledgerState(id)).toEqual(before);
  });

  it('accepts the key in x-api-key as well as in Authorization', async () => {
    const { id } = await fundedCustomer();
    const viaHeader = await svc.call('POST', '/v1/billing/deduct', { headers: { 'x-api-key': pB.projectKey }, body: { customer_id: id, transaction_id: newTx(), amount: 7 } });
    expect(viaHeader.status, JSON.stringify(viaHeader.body)).toBe(200);
    const read = await svc.call('GET', `/v1/customers/${id}/balance`, { headers: { 'x-api-key': pB.projectKey } });
    expect(read.body).toMatchObject({ used: 7, frozen: 100 });
  });

  it('answers 401 api_key_expired for a customer key past its expiry', async () => {
    const { id } = await fundedCustomer();
    const key = await pB.customerKey(id, { expiresAtMs: Date.now() - 1000 });
    for (const path of readPaths(id)) expectError(await svc.call('GET', path, { key }), 401, 'api_key_expired', envelope);
  });

  it('answers 403 permission_denied to a customer key on every money endpoint, even for its own customer', async () => {
    const { id, frozenTx } = await fundedCustomer();
    const key = await pB.customerKey(id);
    const before = await ledgerState(id);
    for (const path of moneyEndpoints) expectError(await svc.call('POST', path, { key, body: validBody(path, id, frozenTx) }), 403, 'permission_denied', envelope);
    expect(await ledgerState(id)).toEqual(before);
    for (const path of readPaths(id)) expect((await svc.call('GET', path, { key })).status).toBe(200);
  });

  it('answers 403 permission_denied to an admin key on the ledger endpoints', async () => {
    const { id, frozenTx } = await fundedCustomer();
    const before = await ledgerState(id);
    for (const path of moneyEndpoints) expectError(await svc.call('POST', path, { key: pB.adminKey, body: validBody(path, id, frozenTx) }), 403, 'permission_denied', envelope);
    for (const path of readPaths(id)) expectError(await svc.call('GET', path, { key: pB.adminKey }), 403, 'permission_denied', envelope);
    expect(await ledgerState(id)).toEqual(before);
  });

  it('answers 404 not_found for an unknown route, after authentication', async () => {
    expectError(await svc.call('POST', '/v1/billing/refund', { key: pB.projectKey, body: {} }), 404, 'not_found', envelope);
    expectError(await svc.call('GET', '/v1/nothing-here', { key: pB.projectKey }), 404, 'not_found', envelope);
    expectError(await svc.call('GET', '/v1/nothing-here'), 401, 'missing_api_key', envelope);
  });
});

describe('request bodies', () => {
  const notObjects: [string, string, string | undefined][] = [
    ['truncated JSON', '{"customer_id": "x", "amount": ', undefined],
    ['not JSON at all', 'amount=5', undefined],
    ['a JSON array', '[{"customer_id": "x", "amount": 5}]', undefined],
    ['a JSON string', '"deposit"', undefined],
    ['a JSON number', '42', undefined],
    ['JSON null', 'null', undefined],
    ['an empty body', '', undefined],
    ['JSON sent as text/plain', '{"customer_id": "x", "amount": 5}', 'text/plain'],
  ];
  it.each(notObjects)('answers 400 invalid_json to %s on every money endpoint', async (_case, raw, contentType) => {
    for (const path of moneyEndpoints) {
      const res = await svc.call('POST', path, { key: pB.projectKey, body: raw, headers: contentType ? { 'content-type': contentType } : { 'content-type': 'application/json' } });
      expectError(res, 400, 'invalid_json', envelope);
    }
  });

  it('accepts a body just under 1 MiB and answers 413 payload_too_large just over it, applying nothing', async () => {
    const id = newCustomer();
    // Padded with whitespace after the object: an unknown field would be refused.
    const body = (padBytes: number) => JSON.stringify({ customer_id: id, amount: 5 }) + ' '.repeat(padBytes);
    const overhead = body(0).length;
    const limit = 1024 * 1024;
    const under = await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, body: body(limit - overhead) });
    expect(under.status, JSON.stringify(under.body).slice(0, 300)).toBe(200);
    const over = await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, body: body(limit - overhead + 1) });
    expectError(over, 413, 'payload_too_large', envelope);
    for (const path of moneyEndpoints.slice(1)) {
      expectError(await svc.call('POST', path, { key: pB.projectKey, body: body(2 * limit) }), 413, 'payload_too_large', envelope);
    }
    expect((await svc.call('GET', `/v1/customers/${id}/balance`, { key: pB.projectKey })).body).toMatchObject({ total: 5 });
  });
});

describe('X-Service-Api-Variant', () => {
  it('lets a B project speak Variant A for one request', async () => {
    const id = newCustomer();
    const plain = await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, body: { customer_id: id, amount_cents: 5 } });
    expectError(plain, 400, 'unsupported_amount_field', { ...envelope, param: 'amount_cents' });
    const asA = await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, headers: { 'X-Service-Api-Variant': 'A' }, body: { customer_id: id, amount_cents: 5 } });
    expect(asA.status, JSON.stringify(asA.body)).toBe(200);
    expect(asA.body).toMatchObject({ credit_type: 'default', added_amount: 50_000 });
    const legacy = await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, headers: { 'X-Service-Api-Variant': 'A' }, body: { customer_id: id, amount: 5 } });
    expect(legacy.body).toMatchObject({ credit_type: 'default', added_amount: 50_000 });
    const filtered = await svc.call('POST', '/v1/billing/deduct', {
      key: pB.projectKey,
      headers: { 'X-Service-Api-Variant': 'A' },
      body: { customer_id: id, transaction_id: newTx(), amount_usd: 0.01, credit_types: ['default'] },
    });
    expect(filtered.body).toMatchObject({ deducted_amount: 10_000 });
  });

  it('lets an A project speak Variant B for one request', async () => {
    const id = newCustomer();
    const plain = await svc.call('POST', '/v1/customers/deposit', { key: pA.projectKey, body: { customer_id: id, amount: 5 } });
    expect(plain.body).toMatchObject({ credit_type: 'default', added_amount: 50_000 });
    const asB = await svc.call('POST', '/v1/customers/deposit', { key: pA.projectKey, headers: { 'X-Service-Api-Variant': 'B' }, body: { customer_id: id, amount: 5 } });
    expect(asB.body).toMatchObject({ credit_type: 'credits', added_amount: 5 });
    const unit = await svc.call('POST', '/v1/billing/deduct', {
      key: pA.projectKey,
      headers: { 'X-Service-Api-Variant': 'B' },
      body: { customer_id: id, transaction_id: newTx(), amount_credits: 5 },
    });
    expectError(unit, 400, 'unsupported_amount_field', { ...envelope, param: 'amount_credits' });
    const consumeAll = newTx();
    await svc.call('POST', '/v1/billing/freeze', { key: pA.projectKey, body: { customer_id: id, transaction_id: consumeAll, amount_credits: 40, credit_types: ['default'] } });
    const whole = await svc.call('POST', '/v1/billing/consume', { key: pA.projectKey, headers: { 'X-Service-Api-Variant': 'B' }, body: { transaction_id: consumeAll } });
    expect(whole.body).toMatchObject({ consumed_amount: 40, returned_amount: 0 });
  });

  it.each(['C', 'a', 'b', 'AB', '1', 'B, A'])('answers 400 invalid_request to the value %j, applying nothing', async (value) => {
    const id = newCustomer();
    const headers = { 'X-Service-Api-Variant': value };
    expectError(await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, headers, body: { customer_id: id, amount: 5 } }), 400, 'invalid_request', { ...envelope, param: 'X-Service-Api-Variant' });
    expectError(await svc.call(`GET`, `/v1/customers/${id}`, { key: pB.projectKey }), 404, 'customer_not_found', envelope);
    const { id: funded } = await fundedCustomer();
    expectError(await svc.call('GET', `/v1/customers/${funded}/balance`, { key: pB.projectKey, headers }), 400, 'invalid_request', { ...envelope, param: 'X-Service-Api-Variant' });
  });
});
