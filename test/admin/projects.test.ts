/**
 * Management API: who may call it, projects, the organization and its plan, plan limits
 * on projects, tenant scoping between organizations, and the reconcile route.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdminQueries } from '../../src/admin/queries.js';
import { startTestService, type TestProject, type TestService } from '../helpers.js';

let svc: TestService;
let p: TestProject;

beforeAll(async () => {
  svc = await startTestService({ config: { SVC_MASTER_KEY: randomBytes(32).toString('base64') } });
  p = await svc.project('B');
});
afterAll(() => svc.close());

const setPlan = (adminKey: string, plan: string) => svc.call('PUT', '/v1/admin/organization/plan', { key: adminKey, body: { plan } });

describe('who may call /v1/admin', () => {
  it('refuses project and customer keys with 403 permission_denied and requests without a key with 401', async () => {
    const customerKey = await p.customerKey('c1');
    const routes: [string, string, unknown?][] = [
      ['GET', '/v1/admin/projects'],
      ['POST', '/v1/admin/projects', { name: 'x' }],
      ['GET', '/v1/admin/organization'],
      ['PUT', '/v1/admin/organization/plan', { plan: 'pro_2m' }],
      ['POST', `/v1/admin/projects/${p.projectId}/keys`, { type: 'project' }],
      ['GET', `/v1/admin/projects/${p.projectId}/models`],
      ['POST', `/v1/admin/projects/${p.projectId}/reconcile`, {}],
      ['GET', '/v1/admin/no-such-route'],
    ];
    for (const [method, path, body] of routes) {
      for (const key of [p.projectKey, customerKey]) {
        const res = await svc.call(method, path, { key, body });
        expect([method, path, res.status, res.body.error.code]).toEqual([method, path, 403, 'permission_denied']);
      }
      const none = await svc.call(method, path, { body });
      expect(none.status).toBe(401);
    }
    expect((await svc.call('GET', '/v1/admin/organization', { key: p.adminKey })).body.plan).toBe('free');
  });

  it('refuses an admin key on the customer and billing endpoints', async () => {
    const routes: [string, string, unknown?][] = [
      ['POST', '/v1/customers/deposit', { customer_id: 'c1', amount: 10 }],
      ['POST', '/v1/billing/deduct', { customer_id: 'c1', transaction_id: 't1', amount: 1 }],
      ['POST', '/v1/billing/freeze', { customer_id: 'c1', transaction_id: 't2', amount: 1 }],
      ['POST', '/v1/billing/consume', { transaction_id: 't2' }],
      ['POST', '/v1/billing/unfreeze', { transaction_id: 't2' }],
      ['GET', '/v1/customers/c1'],
      ['GET', '/v1/customers/c1/balance'],
      ['GET', '/v1/customers/c1/ledger'],
    ];
    for (const [method, path, body] of routes) {
      const res = await svc.call(method, path, { key: p.adminKey, body });
      expect([path, res.status, res.body.error.code]).toEqual([path, 403, 'permission_denied']);
    }
  });
});

describe('projects', () => {
  it('Free plan: a second project is 403 plan_limit_reached; an upgrade lifts the limit at once', async () => {
    const q = await svc.project('B');
    const refused = await svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: 'second' } });
    expect([refused.status, refused.body.error.code, refused.body.error.type]).toEqual([403, 'plan_limit_reached', 'auth_error']);
    expect((await svc.call('GET', '/v1/admin/projects', { key: q.adminKey })).body.data).toHaveLength(1);

    const up = await setPlan(q.adminKey, 'pro_500k');
    expect([up.status, up.body.plan, up.body.pending_plan]).toEqual([200, 'pro_500k', null]);
    const created = await svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: 'second' } });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: expect.stringMatching(/^proj_/), name: 'second', contract: 'B', rate_limit_per_minute: null, active: true, deactivated_at: null, created_at: expect.any(String),
    });
    expect(Math.abs(Date.parse(created.body.created_at) - Date.now())).toBeLessThan(60_000);
    const third = await svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: ' third ', contract: 'A', rate_limit_per_minute: 120 } });
    expect(third.body).toMatchObject({ name: 'third', contract: 'A', rate_limit_per_minute: 120 });
  });

  it('Free plan: concurrent project creation in an empty organization admits exactly one', async () => {
    const org = await createAdminQueries(svc.rt.db).createOrganization('empty');
    const { secret } = await svc.rt.keyQueries.insertKey({ organizationId: org.id, projectId: null, type: 'admin' });
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => svc.call('POST', '/v1/admin/projects', { key: secret, body: { name: `p${i}` } })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 403, 403, 403, 403, 403]);
    expect((await svc.call('GET', '/v1/admin/projects', { key: secret })).body.data).toHaveLength(1);
  });

  it('rejects bad project input with 400 and the param', async () => {
    const q = await svc.project('B');
    await setPlan(q.adminKey, 'pro_500k');
    const cases: [unknown, string, string | undefined][] = [
      [{}, 'invalid_request', 'name'],
      [{ name: '' }, 'invalid_request', 'name'],
      [{ name: '   ' }, 'invalid_request', 'name'],
      [{ name: 'x'.repeat(129) }, 'invalid_request', 'name'],
      [{ name: 5 }, 'invalid_request', 'name'],
      [{ name: 'x', contract: 'C' }, 'invalid_request', 'contract'],
      [{ name: 'x', rate_limit_per_minute: 0 }, 'invalid_request', 'rate_limit_per_minute'],
      [{ name: 'x', rate_limit_per_minute: 1.5 }, 'invalid_request', 'rate_limit_per_minute'],
      [{ name: 'x', rate_limit_per_minute: '10' }, 'invalid_request', 'rate_limit_per_minute'],
      [{ name: 'x', plan: 'pro_2m' }, 'invalid_request', 'plan'],
      ['[1]', 'invalid_json', undefined],
      ['{"name":', 'invalid_json', undefined],
    ];
    for (const [body, code, param] of cases) {
      const res = await svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body });
      expect([JSON.stringify(body), res.status, res.body.error.code, res.body.error.param]).toEqual([JSON.stringify(body), 400, code, param]);
    }
    expect((await svc.call('GET', '/v1/admin/projects', { key: q.adminKey })).body.data).toHaveLength(1);
  });

  it('lists projects newest first in pages that together hold each project once', async () => {
    const q = await svc.project('B');
    await setPlan(q.adminKey, 'pro_500k');
    for (let i = 0; i < 4; i++) await svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: `n${i}` } });
    const all = await svc.call('GET', '/v1/admin/projects', { key: q.adminKey });
    expect(all.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(all.body.data.map((x: { name: string }) => x.name)).toEqual(['n3', 'n2', 'n1', 'n0', 'test project']);

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { body: { data: { id: string }[]; has_more: boolean; next_cursor: string | null } } = await svc.call(
        'GET',
        `/v1/admin/projects?limit=2${cursor ? `&cursor=${cursor}` : ''}`,
        { key: q.adminKey },
      );
      expect(page.body.data.length).toBeLessThanOrEqual(2);
      expect(page.body.has_more).toBe(page.body.next_cursor !== null);
      seen.push(...page.body.data.map((x) => x.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual(all.body.data.map((x: { id: string }) => x.id));

    for (const [query, param] of [['limit=0', 'limit'], ['limit=501', 'limit'], ['cursor=nonsense', 'cursor']]) {
      const bad = await svc.call('GET', `/v1/admin/projects?${query}`, { key: q.adminKey });
      expect([bad.status, bad.body.error.code, bad.body.error.param]).toEqual([400, 'invalid_request', param]);
    }
  });

  it('PATCH changes name, contract and rate limit, and API processes use them on the next request', async () => {
    const q = await svc.project('B');
    const deposit = (body: Record<string, unknown>) => svc.call('POST', '/v1/customers/deposit', { key: q.projectKey, body: { customer_id: 'pc', ...body } });
    // The first request caches the key record with contract B and the default rate limit.
    const b = await deposit({ amount_cents: 1 });
    expect(b.body.error.code).toBe('unsupported_amount_field');
    expect(b.headers.get('x-ratelimit-limit')).toBe(String(svc.rt.config.RATE_LIMIT_PER_MINUTE));

    const patched = await svc.call('PATCH', `/v1/admin/projects/${q.projectId}`, { key: q.adminKey, body: { name: 'renamed', contract: 'A', rate_limit_per_minute: 1000 } });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ id: q.projectId, name: 'renamed', contract: 'A', rate_limit_per_minute: 1000 });
    await expect.poll(async () => (await deposit({ amount_cents: 1 })).status, { timeout: 2_000, interval: 20 }).toBe(200);
    const a = await deposit({ amount_cents: 2 });
    expect([a.body.credit_type, a.body.added_amount, a.headers.get('x-ratelimit-limit')]).toEqual(['default', 20_000, '1000']);

    const reset = await svc.call('PATCH', `/v1/admin/projects/${q.projectId}`, { key: q.adminKey, body: { rate_limit_per_minute: null } });
    expect(reset.body).toMatchObject({ name: 'renamed', contract: 'A', rate_limit_per_minute: null });
    const empty = await svc.call('PATCH', `/v1/admin/projects/${q.projectId}`, { key: q.adminKey, body: {} });
    expect(empty.body).toEqual(reset.body);
    const listed = await svc.call('GET', '/v1/admin/projects', { key: q.adminKey });
    expect(listed.body.data).toEqual([reset.body]);
    expect((await svc.call('GET', `/v1/admin/projects/${q.projectId}`, { key: q.adminKey })).body).toEqual(reset.body);

    for (const [body, param] of [[{ name: '' }, 'name'], [{ contract: 'X' }, 'contract'], [{ rate_limit_per_minute: -1 }, 'rate_limit_per_minute'], [{ id: 'x' }, 'id']] as const) {
      const bad = await svc.call('PATCH', `/v1/admin/projects/${q.projectId}`, { key: q.adminKey, body });
      expect([bad.status, bad.body.error.code, bad.body.error.param]).toEqual([400, 'invalid_request', param]);
    }
    const missing = await svc.call('PATCH', '/v1/admin/projects/proj_nope', { key: q.adminKey, body: { name: 'x' } });
    expect([missing.status, missing.body.error.code]).toEqual([404, 'not_found']);
  });
});

describe('organization scoping', () => {
  it("an admin key never sees or changes another organization's projects, keys or models", async () => {
    const a = await svc.project('B');
    const b = await svc.project('B');
    const bKey = await svc.call('POST', `/v1/admin/projects/${b.projectId}/keys`, { key: b.adminKey, body: { type: 'customer', customer_id: 'cb' } });
    expect(bKey.status).toBe(201);
    const model = { provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: 'm', context_window: 100, max_output_tokens: 10, supports_streaming: false, input_price_per_million_credits: 1, output_price_per_million_credits: 1 };
    expect((await svc.call('PUT', `/v1/admin/projects/${b.projectId}/models/mb`, { key: b.adminKey, body: model })).status).toBe(201);

    const listed = await svc.call('GET', '/v1/admin/projects', { key: a.adminKey });
    expect(listed.body.data.map((x: { id: string }) => x.id)).toEqual([a.projectId]);
    const foreign: [string, string, unknown?][] = [
      ['GET', `/v1/admin/projects/${b.projectId}`],
      ['PATCH', `/v1/admin/projects/${b.projectId}`, { name: 'stolen' }],
      ['GET', `/v1/admin/projects/${b.projectId}/keys`],
      ['POST', `/v1/admin/projects/${b.projectId}/keys`, { type: 'project' }],
      ['POST', `/v1/admin/projects/${b.projectId}/keys/${bKey.body.id}/revoke`],
      ['POST', `/v1/admin/projects/${a.projectId}/keys/${bKey.body.id}/revoke`],
      ['GET', `/v1/admin/projects/${b.projectId}/models`],
      ['PUT', `/v1/admin/projects/${b.projectId}/models/mb`, { ...model, upstream_model: 'changed' }],
      ['POST', `/v1/admin/projects/${b.projectId}/reconcile`, {}],
    ];
    for (const [method, path, body] of foreign) {
      const res = await svc.call(method, path, { key: a.adminKey, body });
      expect([method, path, res.status, res.body.error.code]).toEqual([method, path, 404, 'not_found']);
    }
    const bProject = await svc.call('GET', `/v1/admin/projects/${b.projectId}`, { key: b.adminKey });
    expect(bProject.body.name).toBe('test project');
    const bKeys = await svc.call('GET', `/v1/admin/projects/${b.projectId}/keys`, { key: b.adminKey });
    expect(bKeys.body.data.map((k: { revoked_at: string | null }) => k.revoked_at)).toEqual([null, null]);
    const bModels = await svc.call('GET', `/v1/admin/projects/${b.projectId}/models`, { key: b.adminKey });
    expect(bModels.body.data.map((m: { upstream_model: string }) => m.upstream_model)).toEqual(['m']);
  });
});

describe('reconcile', () => {
  it('queues a job for the project (202, its Location), the same one while it waits, and refuses bad input', async () => {
    const q = await svc.project('B');
    await svc.call('POST', '/v1/customers/deposit', { key: q.projectKey, body: { customer_id: 'rc1', amount: 50 } });
    const res = await svc.call('POST', `/v1/admin/projects/${q.projectId}/reconcile`, { key: q.adminKey });
    expect(res.status).toBe(202);
    // This service runs no workers: the job waits (test/admin/reconcile-jobs.test.ts runs them).
    expect(res.body).toMatchObject({ object: 'reconcile_job', project_id: q.projectId, repair: false, status: 'queued' });
    expect(res.headers.get('location')).toBe(`/v1/admin/projects/${q.projectId}/reconcile/${res.body.id}`);
    const emptyJson = await svc.call('POST', `/v1/admin/projects/${q.projectId}/reconcile`, { key: q.adminKey, body: '' });
    expect([emptyJson.status, emptyJson.body.id]).toEqual([202, res.body.id]);
    const bad = await svc.call('POST', `/v1/admin/projects/${q.projectId}/reconcile`, { key: q.adminKey, body: { repair: 'yes' } });
    expect([bad.status, bad.body.error.code, bad.body.error.param]).toEqual([400, 'invalid_request', 'repair']);
    await svc.rt.reconcileQueue.remove(res.body.id);
  });
});

// Last in the file: it moves the service clock past the billing period.
describe('organization and plan', () => {
  it('shows the organization; an upgrade applies at once, a downgrade from the next period', async () => {
    const q = await svc.project('B');
    const org = await svc.call('GET', '/v1/admin/organization', { key: q.adminKey });
    expect(org.status).toBe(200);
    expect(org.body).toMatchObject({ id: q.organizationId, plan: 'free', pending_plan: null, billable_ops: 0, included_ops: 50_000, overage_ops: 0, overage_cost_usd: 0 });
    expect(Date.parse(org.body.period_end)).toBeGreaterThan(Date.now());

    for (const [body, param] of [[{ plan: 'gold' }, 'plan'], [{ plan: 'FREE' }, 'plan'], [{}, 'plan'], [{ plan: 'pro_2m', extra: 1 }, 'extra']] as const) {
      const bad = await svc.call('PUT', '/v1/admin/organization/plan', { key: q.adminKey, body });
      expect([bad.status, bad.body.error.code, bad.body.error.param]).toEqual([400, 'invalid_request', param]);
    }
    expect((await svc.call('GET', '/v1/admin/organization', { key: q.adminKey })).body.plan).toBe('free');

    const up = await setPlan(q.adminKey, 'pro_2m');
    expect(up.body).toMatchObject({ plan: 'pro_2m', pending_plan: null, included_ops: 2_000_000 });
    const down = await setPlan(q.adminKey, 'free');
    expect(down.body).toMatchObject({ plan: 'pro_2m', pending_plan: 'free', pending_plan_from: org.body.period_end });
    // Pro limits still hold until the period ends: a second project is allowed.
    expect((await svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: 'while pro' } })).status).toBe(201);

    svc.rt.clock.advance(Date.parse(org.body.period_end) - Date.now() + 1_000);
    const next = await svc.call('GET', '/v1/admin/organization', { key: q.adminKey });
    expect(next.body).toMatchObject({ plan: 'free', pending_plan: null, period_start: org.body.period_end, included_ops: 50_000 });
    const refused = await svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: 'after downgrade' } });
    expect([refused.status, refused.body.error.code]).toEqual([403, 'plan_limit_reached']);
  });
});
