/**
 * Tenant isolation: a project's keys never reach another project's customers,
 * transactions or models, whether that project is in the same organization or another.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createModelQueries } from '../../src/admin/models.js';
import { expectError } from '../support/errors.js';
import { svc, useTestService } from '../support/service.js';

const masterKey = randomBytes(32);

useTestService({ config: { SVC_MASTER_KEY: masterKey.toString('hex') }, variants: [] });

interface Tenant {
  name: string;
  projectId: string;
  projectKey: string;
  customerKey: string;
}

/** Project A and, as project B, either a second project of A's organization or another organization's. */
async function tenants(): Promise<{ a: Tenant; bs: Tenant[]; adminA: string; adminOther: string }> {
  const a = await svc.project('B');
  await svc.call('PUT', '/v1/admin/organization/plan', { key: a.adminKey, body: { plan: 'pro_500k' } });
  const sibling = await svc.call('POST', '/v1/admin/projects', { key: a.adminKey, body: { name: 'sibling' } });
  const siblingKey = await svc.call('POST', `/v1/admin/projects/${sibling.body.id}/keys`, { key: a.adminKey, body: { type: 'project' } });
  const siblingCustomerKey = await svc.call('POST', `/v1/admin/projects/${sibling.body.id}/keys`, { key: a.adminKey, body: { type: 'customer', customer_id: 'shared' } });
  const other = await svc.project('B');
  return {
    a: { name: 'A', projectId: a.projectId, projectKey: a.projectKey, customerKey: await a.customerKey('shared') },
    bs: [
      { name: 'same organization', projectId: sibling.body.id, projectKey: siblingKey.body.key, customerKey: siblingCustomerKey.body.key },
      { name: 'other organization', projectId: other.projectId, projectKey: other.projectKey, customerKey: await other.customerKey('shared') },
    ],
    adminA: a.adminKey,
    adminOther: other.adminKey,
  };
}

describe('tenant isolation', () => {
  it("project A's keys never see project B's customers or transactions, and cannot settle them", async () => {
    const { a, bs } = await tenants();
    for (const b of bs) {
      const at = (path: string) => `${b.name}: ${path}`;
      await svc.call('POST', '/v1/customers/deposit', { key: b.projectKey, body: { customer_id: 'shared', amount: 100 } });
      expect((await svc.call('POST', '/v1/billing/freeze', { key: b.projectKey, body: { customer_id: 'shared', transaction_id: 'f1', amount: 10 } })).status).toBe(200);
      expect((await svc.call('POST', '/v1/billing/freeze', { key: b.projectKey, body: { customer_id: 'shared', transaction_id: 'f2', amount: 10 } })).status).toBe(200);

      for (const key of [a.projectKey, a.customerKey]) {
        for (const path of ['/v1/customers/shared', '/v1/customers/shared/balance', '/v1/customers/shared/ledger']) {
          const res = await svc.call('GET', path, { key });
          expectError(res, 404, 'customer_not_found', { label: at(path) });
        }
      }
      const consume = await svc.call('POST', '/v1/billing/consume', { key: a.projectKey, body: { transaction_id: 'f1' } });
      expectError(consume, 400, 'no_consumable_freeze_records', { label: at('consume') });
      const unfreeze = await svc.call('POST', '/v1/billing/unfreeze', { key: a.projectKey, body: { transaction_id: 'f2' } });
      expectError(unfreeze, 400, 'no_unfreezable_records', { label: at('unfreeze') });

      // B's holds are untouched and still B's to settle.
      const bBalance = await svc.call('GET', '/v1/customers/shared/balance', { key: b.customerKey });
      expect([at('balance'), bBalance.body.frozen, bBalance.body.available]).toEqual([at('balance'), 20, 80]);
      const consumed = await svc.call('POST', '/v1/billing/consume', { key: b.projectKey, body: { transaction_id: 'f1' } });
      expect([at('consume by B'), consumed.status]).toEqual([at('consume by B'), 200]);
      const unfrozen = await svc.call('POST', '/v1/billing/unfreeze', { key: b.projectKey, body: { transaction_id: 'f2' } });
      expect([at('unfreeze by B'), unfrozen.status]).toEqual([at('unfreeze by B'), 200]);
      expect((await svc.call('GET', '/v1/customers/shared/balance', { key: b.projectKey })).body).toMatchObject({ frozen: 0, available: 90 });
    }
    // A never had a customer: its own first deposit starts from zero.
    const own = await svc.call('POST', '/v1/customers/deposit', { key: a.projectKey, body: { customer_id: 'shared', amount: 1 } });
    expect(own.body.total_amount).toBe(1);
  });

  it("project A's models do not include project B's, for the gateway lookup or the admin list", async () => {
    const { a, bs, adminA, adminOther } = await tenants();
    const model = { provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: 'm', upstream_api_key: 'sk-b', context_window: 100, max_output_tokens: 10, supports_streaming: false, input_price_per_million_credits: 1, output_price_per_million_credits: 1 };
    const [sibling, other] = bs;
    expect((await svc.call('PUT', `/v1/admin/projects/${sibling.projectId}/models/only-b`, { key: adminA, body: model })).status).toBe(201);
    expect((await svc.call('PUT', `/v1/admin/projects/${other.projectId}/models/only-b`, { key: adminOther, body: model })).status).toBe(201);
    const models = createModelQueries(svc.rt.db, masterKey);
    expect(await models.findModel(a.projectId, 'only-b')).toBeNull();
    expect(await models.listActiveModels(a.projectId)).toEqual([]);
    expect((await models.findModel(sibling.projectId, 'only-b'))?.upstream_api_key).toBe('sk-b');
    const adminList = await svc.call('GET', `/v1/admin/projects/${a.projectId}/models`, { key: adminA });
    expect(adminList.body.data).toEqual([]);
  });
});
