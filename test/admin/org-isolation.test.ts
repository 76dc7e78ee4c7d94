/**
 * A session (and an admin key) of organization A can neither see nor change organization
 * B through any management operation: every listing answers A's rows only, and every
 * path naming one of B's projects, keys, models, customers, members or invoices is 404
 * not_found, with B unchanged. A has the same customer id as B, so a lookup that ignored
 * the organization would find B's.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { Invoicing } from '../../src/billing/invoices.js';
import type { ApiResponse, TestProject } from '../helpers.js';
import { addMember, dash, signIn, type SignedIn } from './dashboard-support.js';
import { operatorSetsPlan } from '../support/plans.js';
import { svc, useTestService } from '../support/service.js';

let a: TestProject;
let b: TestProject;
let session: SignedIn;
const ids = { keys: [] as string[], members: [] as string[], emails: [] as string[], invoices: [] as string[] };

async function organization(): Promise<TestProject> {
  const p = await svc.project();
  // Started 70 days ago: it has closed periods to invoice.
  await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = now() - interval '70 days' WHERE id = ${p.organizationId}`);
  await operatorSetsPlan(svc, p.organizationId, 'enterprise');
  expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'shared-id', amount: 1_000, name: 'Same Name' } })).status).toBe(200);
  expect((await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'shared-id', transaction_id: 't1', amount: 10 } })).status).toBe(200);
  const model = await svc.call('PUT', `/v1/admin/projects/${p.projectId}/models/m1`, {
    key: p.adminKey,
    body: { provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: 'x', context_window: 100, max_output_tokens: 10,
      supports_streaming: false, input_price_per_million_credits: 1, output_price_per_million_credits: 1 },
  });
  expect(model.status).toBe(201);
  return p;
}

useTestService({ workers: true, variants: [] });
beforeAll(async () => {
  a = await organization();
  b = await organization();
  const owner = await addMember(svc, a, 'owner');
  session = await signIn(svc, owner.email, owner.password);
  const bMember = await addMember(svc, b, 'owner');
  ids.members.push(bMember.id);
  ids.emails.push(bMember.email);
  ids.keys.push((await svc.call('POST', `/v1/admin/projects/${b.projectId}/keys`, { key: b.adminKey, body: { type: 'project' } })).body.id);
  await svc.drained();
  const invoicing = new Invoicing(svc.rt.db, svc.rt.redis, svc.rt.config.REDIS_PREFIX, 0, svc.rt.logger);
  for (const p of [a, b]) await invoicing.closeOrganization(p.organizationId, Date.now());
  const invoices = (await svc.call('GET', '/v1/admin/invoices', { key: b.adminKey })).body.data;
  expect(invoices).toHaveLength(2);
  ids.invoices.push(...invoices.map((i: { id: string }) => i.id));
});

/** Everything of B that a change could reach. */
async function stateOfB() {
  const get = async (path: string) => (await svc.call('GET', `/v1/admin${path}`, { key: b.adminKey })).body;
  return {
    org: await get('/organization'),
    projects: await get('/projects'),
    // Without last use: B's own requests before the test are written by a timer
    // (KEY_LAST_USED_FLUSH_MS), which may land between the two reads.
    keys: (await get(`/projects/${b.projectId}/keys`)).data.map(({ last_used_at: _u, ...k }: { last_used_at: unknown }) => k),
    models: await get(`/projects/${b.projectId}/models`),
    customers: await get(`/projects/${b.projectId}/customers`),
    members: await get('/members'),
    invoices: await get('/invoices'),
  };
}

type Caller = (method: string, path: string, body?: unknown) => Promise<ApiResponse>;
const callers: [string, Caller][] = [
  ['session', (method, path, body) => dash(svc, session, method, path, { body })],
  ['admin key', (method, path, body) => svc.call(method, `/v1/admin${path}`, { key: a.adminKey, body })],
];

describe.each(callers)('organization A through its %s', (_name, call) => {
  it('lists only A\'s rows in every listing', async () => {
    const listings = ['/organization', '/projects', `/projects/${a.projectId}/keys`, `/projects/${a.projectId}/models`,
      `/projects/${a.projectId}/customers`, `/projects/${a.projectId}/customers?search=shared`, `/projects/${a.projectId}/customers/shared-id`,
      '/usage/daily', `/usage/daily?project_id=${a.projectId}`, '/usage', `/usage?project_id=${a.projectId}&customer_id=shared-id`, '/members', '/invoices', '/organization/plan/preview?plan=free'];
    for (const path of listings) {
      const r = await call('GET', path);
      expect([path, r.status]).toEqual([path, 200]);
      const text = JSON.stringify(r.body);
      for (const id of [b.organizationId, b.projectId, ...ids.keys, ...ids.members, ...ids.emails, ...ids.invoices]) {
        expect([path, text.includes(id)]).toEqual([path, false]);
      }
    }
    // Non-empty answers: the filters are at work, not lists that are always empty.
    expect((await call('GET', `/projects/${a.projectId}/customers`)).body.data).toHaveLength(1);
    expect((await call('GET', '/invoices')).body.data).toHaveLength(2);
    expect((await call('GET', '/usage/daily')).body.data[0].operations).toBe(1);
  });

  it('finds none of B\'s things and changes none of them', async () => {
    const before = await stateOfB();
    const [bKey, bMember, bInvoice] = [ids.keys[0], ids.members[0], ids.invoices[0]];
    const attempts: [string, string, unknown][] = [
      ['GET', `/projects/${b.projectId}`, undefined],
      ['GET', `/projects/${b.projectId}/keys`, undefined],
      ['GET', `/projects/${b.projectId}/models`, undefined],
      ['GET', `/projects/${b.projectId}/customers`, undefined],
      ['GET', `/projects/${b.projectId}/customers/shared-id`, undefined],
      ['GET', `/usage/daily?project_id=${b.projectId}`, undefined],
      ['GET', `/usage?project_id=${b.projectId}`, undefined],
      ['GET', `/members/${bMember}`, undefined],
      ['GET', `/invoices/${bInvoice}`, undefined],
      ['PATCH', `/projects/${b.projectId}`, { name: 'taken over' }],
      ['POST', `/projects/${b.projectId}/keys`, { type: 'project' }],
      ['POST', `/projects/${a.projectId}/keys/${bKey}/revoke`, undefined],
      ['POST', `/projects/${b.projectId}/keys/${bKey}/revoke`, undefined],
      ['PUT', `/projects/${b.projectId}/models/m1`, { provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: 'y', context_window: 100,
        max_output_tokens: 10, supports_streaming: false, input_price_per_million_credits: 0, output_price_per_million_credits: 0 }],
      ['PATCH', `/projects/${b.projectId}/models/m1`, { upstream_model: 'y' }],
      ['DELETE', `/projects/${b.projectId}/models/m1`, undefined],
      ['DELETE', `/projects/${b.projectId}`, undefined],
      ['POST', `/projects/${b.projectId}/reconcile`, { repair: true }],
      ['PATCH', `/members/${bMember}`, { role: 'viewer' }],
      ['DELETE', `/members/${bMember}`, undefined],
    ];
    for (const [method, path, body] of attempts) {
      const r = await call(method, path, body);
      expect([method, path, r.status]).toEqual([method, path, 404]);
    }
    // Organization-level changes are A's own.
    expect((await call('PUT', '/organization/plan', { plan: 'pro_2m' })).body.id).toBe(a.organizationId);
    await call('PUT', '/organization/plan', { plan: 'pro_50m' });
    expect(await stateOfB()).toEqual(before);
  });
});
