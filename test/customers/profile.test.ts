import { describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { expectError } from '../support/errors.js';
import type { ErrorCode } from '../../src/errors/catalogue.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService();

describe('PATCH /v1/customers/{id}', () => {
  it('changes the profile in Redis and PostgreSQL, even before the worker persisted the customer', async () => {
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'pc1', amount: 5, name: 'Old', email: 'old@example.com' } });
    const res = await svc.call('PATCH', '/v1/customers/pc1', { key: p.projectKey, body: { name: 'New', metadata: { tier: 'gold' }, email: null } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: 'pc1', name: 'New', email: null, metadata: { tier: 'gold' } });
    const got = await svc.call('GET', '/v1/customers/pc1', { key: p.projectKey });
    expect(got.body).toMatchObject({ name: 'New', email: null, metadata: { tier: 'gold' } });
    const row = await svc.rt.db.one(sql.type(z.object({ name: z.string().nullable(), email: z.string().nullable(), metadata: z.unknown() }))`
      SELECT name, email, metadata FROM customers WHERE project_id = ${p.projectId} AND id = 'pc1'`);
    expect(row).toEqual({ name: 'New', email: null, metadata: { tier: 'gold' } });
  });

  it('rejects unknown fields, bad emails, unknown customers and customer-scoped keys, changing nothing', async () => {
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'pc2', amount: 5, name: 'Kept' } });
    const cases: [string, unknown, number, ErrorCode][] = [
      ['pc2', { nickname: 'x' }, 400, 'invalid_request'],
      ['pc2', { email: 'not-an-email' }, 400, 'invalid_request'],
      ['pc2', '[1]', 400, 'invalid_json'],
      ['nobody', { name: 'x' }, 404, 'customer_not_found'],
    ];
    for (const [id, body, status, code] of cases) {
      const res = await svc.call('PATCH', `/v1/customers/${id}`, { key: p.projectKey, body });
      expectError(res, status, code);
    }
    const ck = await p.customerKey('pc2');
    const denied = await svc.call('PATCH', '/v1/customers/pc2', { key: ck, body: { name: 'x' } });
    expectError(denied, 403, 'permission_denied');
    expect((await svc.call('GET', '/v1/customers/pc2', { key: p.projectKey })).body.name).toBe('Kept');
  });
});
