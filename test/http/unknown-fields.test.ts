/**
 * Unknown body fields and query parameters (issue 8, item 11): every ledger, billing,
 * customer, usage and admin endpoint refuses a field it does not read with 400
 * invalid_request naming it, suggests the field a caller likely meant, and changes nothing.
 * What an endpoint reads depends on the contract variant, so the ledger's are checked in
 * both. Gateway bodies stay pass-through (test/gateway covers them).
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ApiResponse } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { pA, pB, svc, useTestService } from '../support/service.js';

useTestService({ variants: ['A', 'B'] });

const newId = (p: string) => `${p}_${randomBytes(6).toString('hex')}`;

const escaped = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function expectUnknown(res: ApiResponse, param: string, meant?: string): void {
  expectError(res, 400, 'invalid_request', { param, message: meant === undefined ? undefined : new RegExp(`; did you mean ${escaped(meant)}\\?`), label: param });
}

type Variant = 'A' | 'B';
const project = (v: Variant) => (v === 'A' ? pA : pB);
const amount = (v: Variant, credits: number) => (v === 'A' ? { amount_credits: credits } : { amount: credits });

/** A customer with 1000 credits and an open freeze of 100. */
async function funded(v: Variant): Promise<{ id: string; frozenTx: string }> {
  const id = newId('uf');
  const frozenTx = newId('frz');
  const key = project(v).projectKey;
  expect((await svc.call('POST', '/v1/customers/deposit', { key, body: { customer_id: id, ...amount(v, 1000) } })).status).toBe(200);
  expect((await svc.call('POST', '/v1/billing/freeze', { key, body: { customer_id: id, transaction_id: frozenTx, ...amount(v, 100) } })).status).toBe(200);
  return { id, frozenTx };
}

async function state(v: Variant, id: string) {
  const key = project(v).projectKey;
  const { as_of: _asOf, ...balance } = (await svc.call('GET', `/v1/customers/${id}/balance`, { key })).body;
  const ledger = (await svc.call('GET', `/v1/customers/${id}/ledger`, { key })).body.data;
  return { balance, ledger };
}

/** A valid body of each money endpoint in variant `v`. */
function bodies(v: Variant, id: string, frozenTx: string): Record<string, Record<string, unknown>> {
  return {
    '/v1/customers/deposit': { customer_id: id, ...amount(v, 5) },
    '/v1/billing/deduct': { customer_id: id, transaction_id: newId('ded'), ...amount(v, 5) },
    '/v1/billing/freeze': { customer_id: id, transaction_id: newId('frz'), ...amount(v, 5) },
    '/v1/billing/consume': { transaction_id: frozenTx, ...(v === 'A' ? { actual_amount_credits: 5 } : { amount: 5 }) },
    '/v1/billing/unfreeze': { transaction_id: frozenTx },
  };
}

describe('money endpoints', () => {
  for (const v of ['A', 'B'] as const) {
    it(`Variant ${v}: an unknown body field or query parameter on each is refused, naming it, with nothing changed`, async () => {
      const { id, frozenTx } = await funded(v);
      const key = project(v).projectKey;
      const before = await state(v, id);
      for (const [path, body] of Object.entries(bodies(v, id, frozenTx))) {
        expectUnknown(await svc.call('POST', path, { key, body: { ...body, colour: 'blue' } }), 'colour');
        expectUnknown(await svc.call('POST', `${path}?colour=blue`, { key, body }), 'colour');
      }
      expect(await state(v, id)).toEqual(before);
      // The same bodies without the extra field apply: the refusals were about the field.
      // (The freeze is unfrozen; consume would leave nothing to unfreeze.)
      for (const [path, body] of Object.entries(bodies(v, id, frozenTx)).filter(([p]) => p !== '/v1/billing/consume')) {
        const r = await svc.call('POST', path, { key, body });
        expect(r.status, `${path}: ${JSON.stringify(r.body)}`).toBe(200);
      }
    });
  }

  it('refuses a deposit keyed by transaction_id, suggesting idempotency_key: a retry cannot pay twice', async () => {
    const id = newId('dep');
    const body = { customer_id: id, amount: 1000, transaction_id: 'pay_123' };
    for (let i = 0; i < 2; i++) expectUnknown(await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, body }), 'transaction_id', 'idempotency_key');
    expect((await svc.call('GET', `/v1/customers/${id}/balance`, { key: pB.projectKey })).status).toBe(404);
  });

  it('suggests the field a caller likely meant, by endpoint and variant', async () => {
    const { id, frozenTx } = await funded('B');
    const { id: idA, frozenTx: frozenA } = await funded('A');
    const cases: [Variant, string, Record<string, unknown>, string, string | undefined][] = [
      ['B', '/v1/customers/deposit', { customer_id: id, amount: 5, expires: '2099-01-01' }, 'expires', 'expires_at'],
      ['B', '/v1/customers/deposit', { customer_id: id, amount: 5, customerId: 'x' }, 'customerId', 'customer_id'],
      ['B', '/v1/customers/deposit', { customer_id: id, amout: 5 }, 'amout', 'amount'],
      ['B', '/v1/billing/deduct', { customer_id: id, idempotency_key: 'k', amount: 5 }, 'idempotency_key', 'transaction_id'],
      ['B', '/v1/billing/freeze', { customer_id: id, transaction_id: newId('f'), amount: 5, ttl: 60 }, 'ttl', 'release_after_seconds or consume_after_seconds'],
      ['B', '/v1/billing/deduct', { customer_id: id, transaction_id: newId('d'), amount: 5, wallets: ['credits'] }, 'wallets', 'wallet'],
      ['B', '/v1/billing/consume', { transaction_id: frozenTx, amount: 5, release_after_seconds: 5 }, 'release_after_seconds', undefined],
      ['A', '/v1/billing/deduct', { customer_id: idA, transaction_id: newId('d'), amount_credits: 5, credit_type: 'default' }, 'credit_type', 'credit_types'],
      ['A', '/v1/customers/deposit', { customer_id: idA, amount_credits: 5, credit_types: ['default'] }, 'credit_types', 'credit_type'],
      ['A', '/v1/billing/consume', { transaction_id: frozenA, amount_usd: 0.000005 }, 'amount_usd', 'actual_amount_usd'],
      ['A', '/v1/customers/deposit', { customer_id: idA, actual_amount_credits: 5 }, 'actual_amount_credits', 'amount_credits'],
    ];
    const before = { A: await state('A', idA), B: await state('B', id) };
    for (const [v, path, body, param, meant] of cases) {
      expectUnknown(await svc.call('POST', path, { key: project(v).projectKey, body }), param, meant);
    }
    expect({ A: await state('A', idA), B: await state('B', id) }).toEqual(before);
  });

  it('keeps the answers of fields that belong to the other variant', async () => {
    const r = await svc.call('POST', '/v1/customers/deposit', { key: pB.projectKey, body: { customer_id: newId('x'), amount_cents: 5 } });
    expectError(r, 400, 'unsupported_amount_field', { param: 'amount_cents' });
    const a = await svc.call('POST', '/v1/customers/deposit', { key: pA.projectKey, body: { customer_id: newId('x'), amount_credits: 5, wallet: 'w' } });
    expectError(a, 400, 'invalid_request', { param: 'wallet', message: /credit_type/ });
  });
});

describe('customer and usage reads', () => {
  it('refuses an unknown query parameter on each read, and suggests the filter meant', async () => {
    const { id } = await funded('B');
    const key = pB.projectKey;
    for (const path of [`/v1/customers/${id}`, `/v1/customers/${id}/balance`, `/v1/customers/${id}/ledger`, '/v1/usage', '/v1/billing/receipts/nope']) {
      expectUnknown(await svc.call('GET', `${path}?colour=blue`, { key }), 'colour');
    }
    // The usage filter is customer_id: `customer` must not list every customer's records.
    expectUnknown(await svc.call('GET', `/v1/usage?customer=${id}`, { key }), 'customer', 'customer_id');
    expectUnknown(await svc.call('GET', `/v1/customers/${id}/ledger?transaction=x`, { key }), 'transaction', 'transaction_id');
    // What the reads do read still works.
    expect((await svc.call('GET', `/v1/usage?customer_id=${id}&limit=5`, { key })).status).toBe(200);
    expect((await svc.call('GET', `/v1/customers/${id}/ledger?limit=5&type=DEPOSIT`, { key })).status).toBe(200);
  });

  it('refuses an unknown field or query parameter on PATCH /v1/customers/{id}, changing nothing', async () => {
    const { id } = await funded('B');
    const key = pB.projectKey;
    const before = (await svc.call('GET', `/v1/customers/${id}`, { key })).body;
    expectUnknown(await svc.call('PATCH', `/v1/customers/${id}`, { key, body: { name: 'n', mail: 'a@b.c' } }), 'mail', 'email');
    expectUnknown(await svc.call('PATCH', `/v1/customers/${id}?name=n`, { key, body: { email: 'a@b.c' } }), 'name');
    expect((await svc.call('GET', `/v1/customers/${id}`, { key })).body).toEqual(before);
  });
});

describe('admin endpoints', () => {
  it('refuses an unknown body field or query parameter on each, changing nothing', async () => {
    const key = pB.adminKey;
    const projects = `/v1/admin/projects/${pB.projectId}`;
    const created = await svc.call('POST', `${projects}/keys`, { key, body: { type: 'project' } });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const keyId = created.body.id as string;
    const snapshot = async () => ({
      org: (await svc.call('GET', '/v1/admin/organization', { key })).body,
      projects: (await svc.call('GET', '/v1/admin/projects', { key })).body,
      keys: (await svc.call('GET', `${projects}/keys`, { key })).body,
      models: (await svc.call('GET', `${projects}/models`, { key })).body,
    });
    const before = await snapshot();
    const cases: [string, string, Record<string, unknown> | undefined, string, string?][] = [
      ['GET', '/v1/admin/organization?colour=1', undefined, 'colour'],
      ['PUT', '/v1/admin/organization/plan', { plan: 'pro', colour: 1 }, 'colour'],
      ['PUT', '/v1/admin/organization/plan?colour=1', { plan: 'pro' }, 'colour'],
      ['POST', '/v1/admin/projects', { name: 'p', contrat: 'A' }, 'contrat', 'contract'],
      ['POST', '/v1/admin/projects?colour=1', { name: 'p' }, 'colour'],
      ['GET', '/v1/admin/projects?colour=1', undefined, 'colour'],
      ['GET', `${projects}?colour=1`, undefined, 'colour'],
      ['PATCH', projects, { rate_limit: 5 }, 'rate_limit'],
      ['POST', `${projects}/keys`, { type: 'project', expires: '2099-01-01' }, 'expires', 'expires_at'],
      ['GET', `${projects}/keys?colour=1`, undefined, 'colour'],
      ['POST', `${projects}/keys/${keyId}/revoke`, { colour: 1 }, 'colour'],
      ['POST', `${projects}/keys/${keyId}/revoke?colour=1`, undefined, 'colour'],
      ['GET', `${projects}/models?colour=1`, undefined, 'colour'],
      ['PUT', `${projects}/models/m1`, { provider: 'openai', colour: 1 }, 'colour'],
      ['POST', `${projects}/reconcile`, { repiar: true }, 'repiar', 'repair'],
    ];
    for (const [method, path, body, param, meant] of cases) {
      expectUnknown(await svc.call(method, path, { key, body }), param, meant);
    }
    expect(await snapshot()).toEqual(before);
  });
});
