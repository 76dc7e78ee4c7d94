/**
 * The dashboard's deposit form reads its amount as the JSON API does: a number the text
 * does not write exactly (`100.0000000000000001`, which Number() reads as 100) deposits
 * nothing and says why; an exact spelling (`1e2`, `1,000`) deposits what it says.
 */
import { describe, expect, it } from 'vitest';
import { addMember } from '../admin/dashboard-support.js';
import { p, svc, useTestService } from '../support/service.js';
import { pageCall, pageSignIn } from './support.js';

useTestService({ workers: true });

describe('the deposit form', () => {
  it('refuses an amount its text does not write exactly, and deposits an exact one', async () => {
    const owner = await addMember(svc, p, 'owner');
    const s = await pageSignIn(svc, owner.email, owner.password);
    const path = `/dashboard/projects/${p.projectId}/customers/form-c1/deposits`;
    const total = async () => (await svc.call('GET', '/v1/customers/form-c1/balance', { key: p.projectKey })).body.total;
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'form-c1', amount: 1 } })).status).toBe(200);
    // The customer screens read PostgreSQL.
    await svc.drained();

    const refused = await pageCall(svc, s, 'POST', path, { _csrf: s.csrf, amount: '100.0000000000000001' });
    expect(refused.status).toBe(400);
    expect(refused.text).toMatch(/amount/);
    expect(await total()).toBe(1);

    for (const amount of ['1e2', '1,000']) {
      const ok = await pageCall(svc, s, 'POST', path, { _csrf: s.csrf, amount });
      expect(ok.status, amount).toBeLessThan(400);
    }
    expect(await total()).toBe(1_101);
  });
});
