import { describe, expect, it } from 'vitest';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

describe('ledger round trip', () => {
  it('deposits, deducts and shows both in the ledger before and after persistence', async () => {
    const dep = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1000 } });
    expect(dep.status).toBe(200);
    expect(dep.body).toMatchObject({ customer_id: 'c1', credit_type: 'credits', total_amount: 1000, added_amount: 1000, is_idempotent_replay: false });
    const ded = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 't1', amount: 300 } });
    expect(ded.status).toBe(200);
    expect(ded.body.deducted_amount).toBe(300);
    const ledger = await svc.call('GET', '/v1/customers/c1/ledger', { key: p.projectKey });
    expect(ledger.body.data.map((e: { type: string }) => e.type)).toEqual(['DEDUCT', 'DEPOSIT']);
    await svc.drained();
    const after = await svc.call('GET', '/v1/customers/c1/ledger', { key: p.projectKey });
    expect(after.body.data).toEqual(ledger.body.data);
    const bal = await svc.call('GET', '/v1/customers/c1/balance', { key: p.projectKey });
    expect(bal.body).toMatchObject({ total: 1000, used: 300, frozen: 0, available: 700 });
  });
});
