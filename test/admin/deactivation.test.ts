/**
 * DELETE /v1/admin/projects/{id}: a deactivation, not a deletion. The project's keys stop
 * at once, a call already in flight finishes and is billed, every money record stays
 * readable through the management API, nothing can be added any more, and the project no
 * longer takes one of the plan's project slots.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGatewayEnv, OPENAI_MODEL, type GatewayEnv } from '../gateway/support.js';
import { waitFor, type TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env?.close());

const adminCall = (q: TestProject, method: string, path: string, body?: unknown) =>
  env.svc.call(method, `/v1/admin/projects/${q.projectId}${path}`, { key: q.adminKey, body });

describe('deactivating a project', () => {
  it('revokes its keys, lets a call in flight finish and bill, keeps its records readable and refuses every change', async () => {
    const q = await env.svc.project('B');
    await env.putModel(OPENAI_MODEL, {}, q);
    await env.fund('alice', 10_000_000, { project: q });
    const customerKey = await q.customerKey('alice');
    const frozen = await env.svc.call('POST', '/v1/billing/freeze', {
      key: q.projectKey,
      body: { customer_id: 'alice', transaction_id: 'held', amount: 1_000 },
    });
    expect(frozen.status).toBe(200);

    // A gateway call that is still waiting for its upstream when the project goes.
    const sent = env.mock.requests.length;
    const inFlight = env.svc.call('POST', '/v1/chat/completions', {
      key: q.projectKey,
      headers: { 'X-Service-Customer': 'alice' },
      body: { model: OPENAI_MODEL, messages: [{ role: 'user', content: 'slow [[mock latency_ms=1500]]' }], max_tokens: 16 },
    });
    await waitFor(() => env.mock.requests.length > sent, 5_000, 'the call to reach its upstream');

    const del = await adminCall(q, 'DELETE', '');
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ id: q.projectId, active: false, deactivated_at: expect.any(String), keys_revoked: 2 });

    const call = await inFlight;
    expect(call.status, JSON.stringify(call.body)).toBe(200);
    const txid = call.headers.get('x-service-transaction-id');
    expect(Number(call.headers.get('x-service-cost-credits'))).toBeGreaterThan(0);

    for (const key of [q.projectKey, customerKey]) {
      const r = await env.svc.call('GET', '/v1/customers/alice/balance', { key });
      expectError(r, 401, 'api_key_revoked');
    }
    const keys = await adminCall(q, 'GET', '/keys');
    expect(keys.body.data.every((k: { revoked_at: string | null }) => k.revoked_at !== null)).toBe(true);

    // The money records stay: the customer, its ledger (the call's GATEWAY entry, the
    // open freeze), the call's receipt, usage.
    await env.svc.drained();
    const customer = await adminCall(q, 'GET', '/customers/alice');
    expect(customer.status).toBe(200);
    expect(customer.body.balance.frozen).toBe(1_000);
    const ledger = await adminCall(q, 'GET', '/customers/alice/ledger');
    expect(ledger.body.data.map((e: { type: string }) => e.type)).toEqual(['GATEWAY', 'FREEZE', 'DEPOSIT']);
    expect((await adminCall(q, 'GET', `/receipts/${txid}`)).status).toBe(200);
    expect((await adminCall(q, 'GET', '/usage')).body.data).toHaveLength(1);
    expect((await adminCall(q, 'GET', '/models')).body.data).toHaveLength(1);

    // Nothing can be added or changed.
    const before = await adminCall(q, 'GET', '');
    const changes: [string, string, unknown][] = [
      ['POST', '/keys', { type: 'project' }],
      ['PUT', `/models/${OPENAI_MODEL}`, (await adminCall(q, 'GET', '/models')).body.data[0]],
      ['PATCH', `/models/${OPENAI_MODEL}`, { active: false }],
      ['DELETE', `/models/${OPENAI_MODEL}`, undefined],
      ['POST', '/customers/alice/deposits', { amount: 5 }],
      ['PATCH', '', { name: 'renamed' }],
    ];
    for (const [method, path, body] of changes) {
      const r = await adminCall(q, method, path, body);
      expectError(r, 409, 'project_deactivated', { label: [method, path].join(' ') });
    }
    expect((await adminCall(q, 'GET', '')).body).toEqual(before.body);
    expect((await adminCall(q, 'GET', '/keys')).body.data).toHaveLength(2);
    expect((await adminCall(q, 'GET', '/customers/alice')).body.balance).toEqual(customer.body.balance);

    // Again: the first time stands, nothing more is revoked.
    const again = await adminCall(q, 'DELETE', '');
    expect([again.status, again.body.deactivated_at, again.body.keys_revoked]).toEqual([200, del.body.deactivated_at, 0]);
  });

  it('frees its slot of the plan: on Free another project can be made', async () => {
    const q = await env.svc.project('B');
    const refused = await env.svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: 'second' } });
    expectError(refused, 403, 'plan_limit_reached');
    expect((await adminCall(q, 'DELETE', '')).status).toBe(200);
    const made = await env.svc.call('POST', '/v1/admin/projects', { key: q.adminKey, body: { name: 'second' } });
    expect(made.status).toBe(201);
    const listed = await env.svc.call('GET', '/v1/admin/projects', { key: q.adminKey });
    expect(listed.body.data.map((p: { name: string; active: boolean }) => [p.name, p.active])).toEqual([
      ['second', true],
      ['test project', false],
    ]);
  });

  it("another organization's project is 404 and keeps working", async () => {
    const a = await env.svc.project('B');
    const b = await env.svc.project('B');
    const r = await env.svc.call('DELETE', `/v1/admin/projects/${b.projectId}`, { key: a.adminKey });
    expectError(r, 404, 'not_found');
    expect((await adminCall(b, 'GET', '')).body.active).toBe(true);
    const dep = await env.svc.call('POST', '/v1/customers/deposit', { key: b.projectKey, body: { customer_id: 'c', amount: 5 } });
    expect(dep.status).toBe(200);
    const viewer = await env.svc.call('DELETE', `/v1/admin/projects/${a.projectId}`, { key: a.projectKey });
    expectError(viewer, 403, 'permission_denied');
  });
});
