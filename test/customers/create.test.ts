/**
 * Customers beyond deposits: POST /v1/customers creates one with no money (idempotent on
 * the same fields, 409 customer_exists on others), the ledger's `type` filter in any
 * case, and a customer-scoped key that names another customer in X-Service-Customer.
 */
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { reconcile } from '../../src/reconcile/walk.js';
import { expectError } from '../support/errors.js';
import type { ErrorCode } from '../../src/errors/catalogue.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

const create = (body: unknown, key = p.projectKey) => svc.call('POST', '/v1/customers', { key, body });
const pgRow = (id: string) =>
  svc.rt.db.maybeOne(sql.type(z.object({ name: z.string().nullable(), email: z.string().nullable(), metadata: z.unknown() }))`
    SELECT name, email, metadata FROM customers WHERE project_id = ${p.projectId} AND id = ${id}`);

describe('POST /v1/customers', () => {
  it('creates a customer with no deposit: readable at once, listed, empty wallets, and Redis agrees with PostgreSQL', async () => {
    const r = await create({ customer_id: 'new-1', name: 'Ann', email: 'ann@example.com', metadata: { tier: 'gold' } });
    expect(r.status).toBe(201);
    expect(r.body).toEqual({
      id: 'new-1', name: 'Ann', email: 'ann@example.com', metadata: { tier: 'gold' }, low_balance_threshold: null, auto_top_up: null, created_at: expect.any(String),
    });
    expect(Math.abs(Date.parse(r.body.created_at) - Date.now())).toBeLessThan(60_000);
    const got = await svc.call('GET', '/v1/customers/new-1', { key: p.projectKey });
    expect(got.body).toMatchObject({ id: 'new-1', name: 'Ann', wallets: {}, created_at: r.body.created_at });
    const balance = await svc.call('GET', '/v1/customers/new-1/balance', { key: p.projectKey });
    expect(balance.body).toMatchObject({ total: 0, available: 0, wallets: {} });
    expect((await svc.call('GET', '/v1/customers/new-1/ledger', { key: p.projectKey })).body.data).toEqual([]);
    const listed = await svc.call('GET', `/v1/admin/projects/${p.projectId}/customers?search=new-1`, { key: p.adminKey });
    expect(listed.body.data.map((c: { id: string }) => c.id)).toEqual(['new-1']);
    expect(await pgRow('new-1')).toEqual({ name: 'Ann', email: 'ann@example.com', metadata: { tier: 'gold' } });

    // A first deposit funds it and leaves the profile as created.
    const dep = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'new-1', amount: 500, name: 'Other' } });
    expect(dep.status).toBe(200);
    await svc.drained();
    expect((await svc.call('GET', '/v1/customers/new-1', { key: p.projectKey })).body).toMatchObject({ name: 'Ann', created_at: r.body.created_at });
    // One that stays without money folds from its row alone.
    expect((await create({ customer_id: 'never-funded', metadata: { k: 'v' } })).status).toBe(201);
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: false });
    expect(report.customers_checked).toBeGreaterThanOrEqual(2);
    expect(report.drift).toEqual([]);
    expect(report.errors).toEqual([]);
  });

  it('a repeat with the same fields answers 200 and the customer; other fields are 409 customer_exists, changing nothing', async () => {
    const first = await create({ customer_id: 'twice', name: 'Bob' });
    expect(first.status).toBe(201);
    const again = await create({ customer_id: 'twice', name: 'Bob' });
    expect([again.status, again.body]).toEqual([200, first.body]);
    expect((await create({ customer_id: 'twice' })).status).toBe(200);
    // No metadata reads as {}: null and {} are the same as none.
    expect((await create({ customer_id: 'twice', metadata: {} })).status).toBe(200);
    expect((await create({ customer_id: 'twice', metadata: null, email: null })).status).toBe(200);
    for (const [field, value] of [['name', 'Robert'], ['email', 'bob@example.com'], ['metadata', { a: 1 }]] as const) {
      const r = await create({ customer_id: 'twice', name: 'Bob', [field]: value });
      expectError(r, 409, 'customer_exists', { param: field, label: field });
      expect(r.body.error.message).toContain('PATCH /v1/customers/{id}');
    }
    expect((await svc.call('GET', '/v1/customers/twice', { key: p.projectKey })).body).toMatchObject({ name: 'Bob', email: null, metadata: {} });
    expect(await pgRow('twice')).toEqual({ name: 'Bob', email: null, metadata: null });
  });

  it('a customer a deposit made counts as existing', async () => {
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'funded', amount: 5, name: 'Cy' } });
    expect((await create({ customer_id: 'funded', name: 'Cy' })).status).toBe(200);
    const other = await create({ customer_id: 'funded', name: 'Dee' });
    expectError(other, 409, 'customer_exists');
    expect((await svc.call('GET', '/v1/customers/funded/balance', { key: p.projectKey })).body.available).toBe(5);
  });

  it('a creation whose Redis write was lost is completed by its retry', async () => {
    expect((await create({ customer_id: 'half', email: 'half@example.com' })).status).toBe(201);
    await svc.rt.redis.del(svc.rt.ledger.keys({ projectId: p.projectId, organizationId: p.organizationId }, 'half').meta);
    expect((await svc.call('GET', '/v1/customers/half', { key: p.projectKey })).status).toBe(404);
    const retry = await create({ customer_id: 'half', email: 'half@example.com' });
    expect([retry.status, retry.body.email]).toEqual([200, 'half@example.com']);
    expect((await svc.call('GET', '/v1/customers/half', { key: p.projectKey })).body.email).toBe('half@example.com');
  });

  it('one that Redis lost is rebuilt from its row by reconcile --repair', async () => {
    expect((await create({ customer_id: 'lost', name: 'Lo', metadata: { n: 1 } })).status).toBe(201);
    await svc.rt.redis.del(svc.rt.ledger.keys({ projectId: p.projectId, organizationId: p.organizationId }, 'lost').meta);
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
    expect(report.customers_repaired).toBeGreaterThanOrEqual(1);
    const got = await svc.call('GET', '/v1/customers/lost', { key: p.projectKey });
    expect([got.status, got.body.name, got.body.metadata]).toEqual([200, 'Lo', { n: 1 }]);
  });

  it('refuses bad input and keys other than a project key, creating nothing', async () => {
    const cases: [unknown, ErrorCode, string | undefined][] = [
      [{}, 'invalid_request', 'customer_id'],
      [{ customer_id: '' }, 'invalid_request', 'customer_id'],
      [{ customer_id: 'x'.repeat(257) }, 'invalid_request', 'customer_id'],
      [{ customer_id: 'bad', email: 'nope' }, 'invalid_request', 'email'],
      [{ customer_id: 'bad', metadata: [1] }, 'invalid_request', 'metadata'],
      [{ customer_id: 'bad', name: 'x'.repeat(257) }, 'invalid_request', 'name'],
      [{ customer_id: 'bad', amount: 5 }, 'invalid_request', 'amount'],
      [{ customer_id: 'bad\u0000' }, 'invalid_request', 'customer_id'],
      ['[]', 'invalid_json', undefined],
    ];
    for (const [body, code, param] of cases) {
      const r = await create(body);
      expectError(r, 400, code, { param, label: JSON.stringify(body) });
    }
    const ck = await p.customerKey('bad');
    for (const key of [ck, p.adminKey]) {
      const r = await create({ customer_id: 'bad' }, key);
      expectError(r, 403, 'permission_denied');
    }
    expect(await pgRow('bad')).toBeNull();
    expect((await svc.call('GET', '/v1/customers/bad', { key: p.projectKey })).status).toBe(404);
  });

  it("is scoped to the key's project: the same id in another organization is another customer", async () => {
    const other = await svc.project('B');
    expect((await create({ customer_id: 'shared-id', name: 'Mine' })).status).toBe(201);
    const theirs = await create({ customer_id: 'shared-id', name: 'Theirs' }, other.projectKey);
    expect([theirs.status, theirs.body.name]).toEqual([201, 'Theirs']);
    expect((await svc.call('GET', '/v1/customers/shared-id', { key: p.projectKey })).body.name).toBe('Mine');
  });
});

describe('GET /v1/customers/{id}/ledger?type=', () => {
  it('matches the type in any case, and refuses an unknown one', async () => {
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'typed', amount: 50 } });
    await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'typed', transaction_id: 'typed-d1', amount: 5 } });
    for (const type of ['deduct', 'Deduct', 'DEDUCT']) {
      const r = await svc.call('GET', `/v1/customers/typed/ledger?type=${type}`, { key: p.projectKey });
      expect([type, r.status, r.body.data.map((e: { type: string }) => e.type)]).toEqual([type, 200, ['DEDUCT']]);
    }
    const admin = await svc.call('GET', `/v1/admin/projects/${p.projectId}/customers/typed/ledger?type=deposit`, { key: p.adminKey });
    expect(admin.body.data.map((e: { type: string }) => e.type)).toEqual(['DEPOSIT']);
    const bad = await svc.call('GET', '/v1/customers/typed/ledger?type=refund', { key: p.projectKey });
    expectError(bad, 400, 'invalid_request', { param: 'type' });
  });
});

describe('X-Service-Customer with a customer-scoped key', () => {
  const chat = (key: string, headers: Record<string, string>) =>
    svc.call('POST', '/v1/chat/completions', { key, headers, body: { model: 'none', messages: [{ role: 'user', content: 'hi' }] } });

  it('naming another customer is 403 permission_denied naming the header; naming its own is allowed', async () => {
    const ck = await p.customerKey('own');
    const other = await chat(ck, { 'X-Service-Customer': 'someone-else' });
    expectError(other, 403, 'permission_denied', { param: 'X-Service-Customer' });
    expect(other.body.error.message).toContain('"own"');
    // Past the customer check: the next check (the model) answers.
    const own = await chat(ck, { 'X-Service-Customer': 'own' });
    expectError(own, 404, 'model_not_found');
    const none = await chat(ck, {});
    expectError(none, 404, 'model_not_found');
    const project = await chat(p.projectKey, { 'X-Service-Customer': 'someone-else' });
    expectError(project, 404, 'model_not_found');
  });

  it('an Idempotency-Key is held to 1-256 characters, as transaction ids are', async () => {
    const long = await chat(p.projectKey, { 'X-Service-Customer': 'own', 'Idempotency-Key': 'k'.repeat(257) });
    expectError(long, 400, 'invalid_request', { param: 'Idempotency-Key' });
    const fits = await chat(p.projectKey, { 'X-Service-Customer': 'own', 'Idempotency-Key': 'k'.repeat(256) });
    expectError(fits, 404, 'model_not_found');
  });
});
