/**
 * Tenant isolation on every endpoint (another project's customers, transactions, receipts
 * and models do not exist for a key: 404 as for unknown ones, docs/API.md). Project B,
 * once a sibling in A's organization and once in another organization, has a customer,
 * billing transactions and real gateway calls (usage records and receipts, through the
 * mock upstream). Project A's project key and customer-scoped key then try every endpoint
 * on B's customer id, transaction ids, trace ids and models, and B's state must be what
 * it was. The customer id is the same in both projects, so a lookup that ignored the
 * project would find B's customer.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import type { ApiResponse, TestProject } from '../helpers.js';
import { ANTHROPIC_MODEL, OPENAI_MODEL, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;
/** Project A: the gateway environment's project, with the two default models. */
let a: TestProject;

beforeAll(async () => {
  env = await startGatewayEnv();
  a = env.p;
  // A second project in A's organization needs a paid plan.
  const up = await env.svc.call('PUT', '/v1/admin/organization/plan', { key: a.adminKey, body: { plan: 'pro_500k' } });
  expect(up.status).toBe(200);
  // A's own customer and gateway call: A's lists are not empty, so an empty answer for
  // B's ids is a filter at work rather than a list that is always empty.
  await env.fund('a-payer', 10_000_000);
});
afterAll(() => env?.close());

/** A project in A's organization, managed with A's admin key. */
async function siblingProject(): Promise<TestProject> {
  const created = await env.svc.call('POST', '/v1/admin/projects', { key: a.adminKey, body: { name: 'sibling' } });
  expect(created.status).toBe(201);
  const projectId = created.body.id as string;
  const newKey = async (body: Record<string, unknown>) => {
    const r = await env.svc.call('POST', `/v1/admin/projects/${projectId}/keys`, { key: a.adminKey, body });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.key as string;
  };
  return {
    organizationId: a.organizationId,
    projectId,
    projectKey: await newKey({ type: 'project' }),
    adminKey: a.adminKey,
    customerKey: (customerId) => newKey({ type: 'customer', customer_id: customerId }),
  };
}

const question = () => [{ role: 'user', content: `a question ${mockDirective({ output_tokens: 3 })}` }];
const openaiCall = (model: string) => ({ path: '/v1/chat/completions', body: { model, messages: question() } });
const anthropicCall = (model: string) => ({ path: '/v1/messages', body: { model, max_tokens: 20, messages: question() } });

function gateway(key: string, c: { path: string; body: unknown }, headers: Record<string, string> = {}): Promise<ApiResponse> {
  return env.svc.call('POST', c.path, { key, body: c.body, headers });
}

/** Everything of B's customer that A could have changed or revealed. */
async function stateOf(b: TestProject, customer: string, txids: string[]) {
  const { as_of: _asOf, ...balance } = (await env.balance(customer, b)) as unknown as Record<string, unknown>;
  const profile = await env.svc.call('GET', `/v1/customers/${customer}`, { key: b.projectKey });
  const usage = await env.svc.call('GET', `/v1/usage?customer_id=${customer}`, { key: b.projectKey });
  const receipts = await Promise.all(txids.map((t) => env.svc.call('GET', `/v1/billing/receipts/${t}`, { key: b.projectKey })));
  return {
    balance,
    ledger: await env.ledger(customer, undefined, b),
    profile: [profile.status, profile.body],
    usage: [usage.status, usage.body],
    receipts: receipts.map((r) => [r.status, r.body]),
  };
}

const tenants: { name: string; make: () => Promise<TestProject> }[] = [
  { name: 'B in the same organization', make: siblingProject },
  { name: 'B in another organization', make: () => env.svc.project('B') },
];

for (const tenant of tenants) {
  describe(`project A against ${tenant.name}`, () => {
    // A is one project across both tenants, and transaction ids are bound within a
    // project, so each tenant gets its own ids (each the same in A and B).
    const n = tenants.indexOf(tenant);
    const customer = `shared-${n}`;
    const bDeduct = `b-deduct-${n}`;
    const bFreeze = `b-freeze-${n}`;
    // Trace ids are free-form and the database outlives a run: a per-run tag keeps a
    // trace filter that ignored the project from matching an earlier run's calls only.
    const run = randomBytes(4).toString('hex');
    let b: TestProject;
    let aKeys: { label: string; key: string; type: 'project' | 'customer' }[];
    /** B's settled gateway calls: one persisted per format, one still in the outbox. */
    const bCalls: { txid: string; trace: string }[] = [];
    let aCall: { txid: string; trace: string };
    let before: Awaited<ReturnType<typeof stateOf>>;
    const gwTxids = () => bCalls.map((c) => c.txid);

    beforeAll(async () => {
      b = await tenant.make();
      await env.putModel('b-gpt', { provider: 'openai' }, b);
      await env.putModel('b-claude', { provider: 'anthropic' }, b);
      const bCustomerKey = await b.customerKey(customer);
      const profile = await env.svc.call('POST', '/v1/customers/deposit', {
        key: b.projectKey,
        body: { customer_id: customer, amount: 10_000_000, name: 'B customer', email: 'b@example.com' },
      });
      expect(profile.status).toBe(200);
      expect((await env.svc.call('POST', '/v1/billing/deduct', { key: b.projectKey, body: { customer_id: customer, transaction_id: bDeduct, amount: 100 } })).status).toBe(200);
      expect((await env.svc.call('POST', '/v1/billing/freeze', { key: b.projectKey, body: { customer_id: customer, transaction_id: bFreeze, amount: 50 } })).status).toBe(200);

      const calls: { key: string; headers: Record<string, string>; path: string; body: unknown }[] = [
        { key: b.projectKey, headers: { 'x-service-customer': customer }, ...openaiCall('b-gpt') },
        { key: bCustomerKey, headers: {}, ...anthropicCall('b-claude') },
      ];
      for (const [i, c] of calls.entries()) {
        const trace = `b-trace-${run}-${i}`;
        const res = await gateway(c.key, c, { ...c.headers, 'x-service-trace-id': trace });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        bCalls.push({ txid: res.headers.get('x-service-transaction-id')!, trace });
      }
      // A's own call, on A's model, for A's customer.
      const own = await gateway(a.projectKey, openaiCall(OPENAI_MODEL), { 'x-service-customer': 'a-payer', 'x-service-trace-id': `a-trace-${run}` });
      expect(own.status).toBe(200);
      aCall = { txid: own.headers.get('x-service-transaction-id')!, trace: `a-trace-${run}` };
      await env.svc.drained();

      // One more call whose receipt stays in B's outbox (workers paused): the receipt
      // route reads it from there, by the project's transaction index.
      await env.svc.workers!.persist.stop();
      const pending = await gateway(b.projectKey, openaiCall('b-gpt'), { 'x-service-customer': customer, 'x-service-trace-id': `b-trace-${run}-pending` });
      expect(pending.status).toBe(200);
      bCalls.push({ txid: pending.headers.get('x-service-transaction-id')!, trace: `b-trace-${run}-pending` });

      aKeys = [
        { label: 'A project key', key: a.projectKey, type: 'project' },
        { label: 'A customer key', key: await a.customerKey(customer), type: 'customer' },
      ];

      // B sees all of its own records: what A must not see exists.
      for (const c of bCalls) {
        const usage = await env.svc.call('GET', `/v1/usage?trace_id=${c.trace}`, { key: b.projectKey });
        expect(usage.status).toBe(200);
        expect(usage.body.data.map((r: { transaction_id: string }) => r.transaction_id)).toEqual(c.trace.endsWith('pending') ? [] : [c.txid]);
        expect((await env.svc.call('GET', `/v1/billing/receipts/${c.txid}`, { key: b.projectKey })).status).toBe(200);
      }
      const bModels = await env.svc.call('GET', '/v1/models', { key: b.projectKey });
      expect(bModels.body.data.map((m: { id: string }) => m.id).sort()).toEqual(['b-claude', 'b-gpt']);
      before = await stateOf(b, customer, gwTxids());
    });

    afterAll(() => env.svc.workers?.persist.start());

    it("reads of B's customer, balance and ledger (with and without a transaction_id filter) are customer_not_found", async () => {
      const paths = [
        `/v1/customers/${customer}`,
        `/v1/customers/${customer}/balance`,
        `/v1/customers/${customer}/ledger`,
        `/v1/customers/${customer}/ledger?transaction_id=${bDeduct}`,
        `/v1/customers/${customer}/ledger?transaction_id=${bFreeze}`,
        ...gwTxids().map((t) => `/v1/customers/${customer}/ledger?transaction_id=${t}`),
        `/v1/customers/${customer}/ledger?type=GATEWAY`,
      ];
      for (const { label, key } of aKeys) {
        for (const path of paths) expectError(await env.svc.call('GET', path, { key }), 404, 'customer_not_found', { label: `${label} GET ${path}` });
      }
      expect(await stateOf(b, customer, gwTxids())).toEqual(before);
    });

    it("B's receipts are not_found, and B's usage records are not listed by customer, trace or model", async () => {
      for (const { label, key } of aKeys) {
        for (const txid of gwTxids()) {
          const res = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key });
          expectError(res, 404, 'not_found', { label: [label, txid].join(' ') });
        }
        for (const query of [`customer_id=${customer}`, ...bCalls.map((c) => `trace_id=${c.trace}`), 'model=b-gpt', 'model=b-claude']) {
          const res = await env.svc.call('GET', `/v1/usage?${query}`, { key });
          expect([label, query, res.status, res.body.data]).toEqual([label, query, 200, []]);
        }
      }
      // A's unfiltered list holds A's own call only (the customer key: none, its customer has made none).
      const all = await env.svc.call('GET', '/v1/usage?limit=500', { key: a.projectKey });
      const listed = all.body.data.map((r: { transaction_id: string }) => r.transaction_id);
      expect(listed).toContain(aCall.txid);
      for (const txid of gwTxids()) expect(listed).not.toContain(txid);
      const mine = await env.svc.call('GET', '/v1/usage', { key: aKeys[1].key });
      expect([mine.status, mine.body.data]).toEqual([200, []]);
      expect(await stateOf(b, customer, gwTxids())).toEqual(before);
    });

    it("GET /v1/models lists A's models only", async () => {
      for (const { label, key } of aKeys) {
        const res = await env.svc.call('GET', '/v1/models', { key });
        expect([label, res.status, res.body.data.map((m: { id: string }) => m.id).sort()]).toEqual([label, 200, [ANTHROPIC_MODEL, OPENAI_MODEL].sort()]);
      }
    });

    it("PATCH, deduct, freeze, consume and unfreeze naming B's customer or transactions change nothing of B's", async () => {
      const [project, customerKey] = aKeys;
      const patch = await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: project.key, body: { name: 'stolen', metadata: { owner: 'A' } } });
      expectError(patch, 404, 'customer_not_found', { label: 'PATCH with A project key' });
      expectError(await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: customerKey.key, body: { name: 'stolen' } }), 403, 'permission_denied', { label: 'PATCH with A customer key' });

      const draws: [string, Record<string, unknown>][] = [
        ['/v1/billing/deduct', { customer_id: customer, transaction_id: `a-new-deduct-${n}`, amount: 1 }],
        ['/v1/billing/deduct', { customer_id: customer, transaction_id: bDeduct, amount: 100 }],
        ['/v1/billing/freeze', { customer_id: customer, transaction_id: `a-new-freeze-${n}`, amount: 1 }],
        ['/v1/billing/freeze', { customer_id: customer, transaction_id: bFreeze, amount: 50 }],
      ];
      for (const [path, body] of draws) {
        expectError(await env.svc.call('POST', path, { key: project.key, body }), 404, 'customer_not_found', { label: `A project key ${path} ${body.transaction_id}` });
        expectError(await env.svc.call('POST', path, { key: customerKey.key, body }), 403, 'permission_denied', { label: `A customer key ${path} ${body.transaction_id}` });
      }

      // B's open hold, B's deduct and B's gateway calls are unknown transactions to A.
      for (const txid of [bFreeze, bDeduct, ...gwTxids()]) {
        for (const extra of [{}, { customer_id: customer }]) {
          const body = { transaction_id: txid, ...extra };
          const label = `${txid} ${JSON.stringify(extra)}`;
          expectError(await env.svc.call('POST', '/v1/billing/consume', { key: project.key, body }), 400, 'no_consumable_freeze_records', { label: `consume ${label}` });
          expectError(await env.svc.call('POST', '/v1/billing/unfreeze', { key: project.key, body }), 400, 'no_unfreezable_records', { label: `unfreeze ${label}` });
          expectError(await env.svc.call('POST', '/v1/billing/consume', { key: customerKey.key, body }), 403, 'permission_denied', { label: `consume ${label} (customer key)` });
          expectError(await env.svc.call('POST', '/v1/billing/unfreeze', { key: customerKey.key, body }), 403, 'permission_denied', { label: `unfreeze ${label} (customer key)` });
        }
      }
      expect(await stateOf(b, customer, gwTxids())).toEqual(before);
    });

    it("the gateway answers model_not_found for B's models and customer_not_found for B's customer, and relays nothing", async () => {
      const sent = env.mock.requests.length;
      const [project, customerKey] = aKeys;
      for (const c of [openaiCall('b-gpt'), anthropicCall('b-claude')]) {
        const res = await gateway(project.key, c, { 'x-service-customer': 'a-payer' });
        expectError(res, 404, 'model_not_found', { param: 'model', label: c.path });
        expectError(await gateway(customerKey.key, c), 404, 'model_not_found', { label: `${c.path} b model, customer key` });
      }
      for (const c of [openaiCall(OPENAI_MODEL), anthropicCall(ANTHROPIC_MODEL), { ...openaiCall(OPENAI_MODEL), body: { ...openaiCall(OPENAI_MODEL).body, stream: true } }]) {
        expectError(await gateway(project.key, c, { 'x-service-customer': customer }), 404, 'customer_not_found', { label: `${c.path} X-Service-Customer of B` });
        // The customer key's own customer does not exist in A either.
        expectError(await gateway(customerKey.key, c), 404, 'customer_not_found', { label: `${c.path} customer key` });
      }
      expect(env.mock.requests.length).toBe(sent);
      expect(await stateOf(b, customer, gwTxids())).toEqual(before);
    });

    it("a deposit by A creates A's own customer of the same id; B's ids stay unknown to it and B's balance is untouched", async () => {
      // Another project of A's organization plays A here: a customer created in A itself
      // would change what the other tests of this block expect, whichever runs first.
      const a2 = await siblingProject();
      const a2Keys = [
        { label: 'A2 project key', key: a2.projectKey },
        { label: 'A2 customer key', key: await a2.customerKey(customer) },
      ];
      const [project, customerKey] = a2Keys;
      const deposit = await env.svc.call('POST', '/v1/customers/deposit', { key: project.key, body: { customer_id: customer, amount: 7 } });
      expect(deposit.status, JSON.stringify(deposit.body)).toBe(200);
      expect(deposit.body).toMatchObject({ total_amount: 7, is_idempotent_replay: false });
      expect(await stateOf(b, customer, gwTxids())).toEqual(before);

      for (const { label, key } of a2Keys) {
        const balance = await env.svc.call('GET', `/v1/customers/${customer}/balance`, { key });
        expect([label, balance.body.total, balance.body.frozen, balance.body.available]).toEqual([label, 7, 0, 7]);
        const profile = await env.svc.call('GET', `/v1/customers/${customer}`, { key });
        expect([label, profile.body.name, profile.body.email]).toEqual([label, null, null]);
        const ledger = await env.svc.call('GET', `/v1/customers/${customer}/ledger`, { key });
        expect([label, ledger.body.data.map((e: { type: string; amount: number }) => [e.type, e.amount])]).toEqual([label, [['DEPOSIT', 7]]]);
        for (const txid of [bDeduct, bFreeze, ...gwTxids()]) {
          const filtered = await env.svc.call('GET', `/v1/customers/${customer}/ledger?transaction_id=${txid}`, { key });
          expect([label, txid, filtered.status, filtered.body.data]).toEqual([label, txid, 200, []]);
        }
        for (const txid of gwTxids()) expectError(await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key }), 404, 'not_found', { label: `${label} receipt ${txid}` });
        const usage = await env.svc.call('GET', `/v1/usage?customer_id=${customer}`, { key });
        expect([label, usage.body.data]).toEqual([label, []]);
      }

      // B's transaction ids are free in A: new operations, not replays of B's results.
      const deduct = await env.svc.call('POST', '/v1/billing/deduct', { key: project.key, body: { customer_id: customer, transaction_id: bDeduct, amount: 2 } });
      expect([deduct.status, deduct.body.is_idempotent_replay]).toEqual([200, false]);
      const freeze = await env.svc.call('POST', '/v1/billing/freeze', { key: project.key, body: { customer_id: customer, transaction_id: bFreeze, amount: 3 } });
      expect([freeze.status, freeze.body.is_idempotent_replay]).toEqual([200, false]);
      const consume = await env.svc.call('POST', '/v1/billing/consume', { key: project.key, body: { transaction_id: bFreeze, amount: 1 } });
      expect(consume.status, JSON.stringify(consume.body)).toBe(200);
      expect((await env.balance(customer, a2))).toMatchObject({ total: 7, used: 3, frozen: 0, available: 4 });

      const patched = await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: project.key, body: { name: 'A customer' } });
      expect([patched.status, patched.body.name]).toEqual([200, 'A customer']);
      expectError(await env.svc.call('PATCH', `/v1/customers/${customer}`, { key: customerKey.key, body: { name: 'x' } }), 403, 'permission_denied', { label: 'customer key PATCH' });

      // B's hold is still B's, frozen as it was (the other tests of this block compare B's state with `before`, so it stays unsettled).
      expect(await stateOf(b, customer, gwTxids())).toEqual(before);
      expect((await env.balance(customer, b)).frozen).toBe(50);
    });

    if (tenant.name.includes('another organization')) {
      it("A's admin key finds none of B's project ids: keys, models and reconcile are not_found and change nothing", async () => {
        const bKeys = await env.svc.call('GET', `/v1/admin/projects/${b.projectId}/keys`, { key: b.adminKey });
        const bModels = await env.svc.call('GET', `/v1/admin/projects/${b.projectId}/models`, { key: b.adminKey });
        expect(bKeys.body.data.length).toBeGreaterThanOrEqual(2);
        expect(bModels.body.data.map((m: { id: string }) => m.id).sort()).toEqual(['b-claude', 'b-gpt']);
        const foreign: [string, string, unknown?][] = [
          ['GET', `/v1/admin/projects/${b.projectId}`],
          ['GET', `/v1/admin/projects/${b.projectId}/keys`],
          ['POST', `/v1/admin/projects/${b.projectId}/keys`, { type: 'project' }],
          ['POST', `/v1/admin/projects/${b.projectId}/keys`, { type: 'customer', customer_id: customer }],
          ...bKeys.body.data.map((k: { id: string }) => ['POST', `/v1/admin/projects/${b.projectId}/keys/${k.id}/revoke`] as [string, string]),
          // B's key under A's own project id.
          ...bKeys.body.data.map((k: { id: string }) => ['POST', `/v1/admin/projects/${a.projectId}/keys/${k.id}/revoke`] as [string, string]),
          ['GET', `/v1/admin/projects/${b.projectId}/models`],
          ['PUT', `/v1/admin/projects/${b.projectId}/models/b-gpt`, { provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: 'hijacked', context_window: 100, max_output_tokens: 10, supports_streaming: false, input_price_per_million_credits: 0, output_price_per_million_credits: 0 }],
          ['PUT', `/v1/admin/projects/${b.projectId}/models/b-new`, { provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: 'planted', context_window: 100, max_output_tokens: 10, supports_streaming: false, input_price_per_million_credits: 0, output_price_per_million_credits: 0 }],
          ['POST', `/v1/admin/projects/${b.projectId}/reconcile`, { repair: true }],
          ['POST', `/v1/admin/projects/${b.projectId}/reconcile`],
        ];
        for (const [method, path, body] of foreign) {
          const res = await env.svc.call(method, path, { key: a.adminKey, body });
          expectError(res, 404, 'not_found', { label: [method, path].join(' ') });
        }
        // A's project and customer keys are refused on the management API altogether.
        for (const { label, key } of aKeys) {
          expectError(await env.svc.call('GET', `/v1/admin/projects/${b.projectId}/keys`, { key }), 403, 'permission_denied', { label: `${label} admin` });
        }
        expect(await env.svc.call('GET', `/v1/admin/projects/${b.projectId}/keys`, { key: b.adminKey })).toMatchObject({ status: 200, body: bKeys.body });
        expect(await env.svc.call('GET', `/v1/admin/projects/${b.projectId}/models`, { key: b.adminKey })).toMatchObject({ status: 200, body: bModels.body });
        // B's keys still work, and B's model still reaches the mock (billed to another of B's
        // customers: the other tests of this block compare the shared customer with `before`).
        const other = `${customer}-other`;
        expect((await env.svc.call('POST', '/v1/customers/deposit', { key: b.projectKey, body: { customer_id: other, amount: 1_000_000 } })).status).toBe(200);
        const call = await gateway(b.projectKey, openaiCall('b-gpt'), { 'x-service-customer': other });
        expect(call.status, JSON.stringify(call.body)).toBe(200);
      });
    }
  });
}
