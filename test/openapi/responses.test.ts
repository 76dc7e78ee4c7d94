/**
 * The document against the service: every described operation is called on a live service
 * (real Redis and PostgreSQL, a mock upstream for the gateway), with project keys of both
 * contract variants, customer keys, an admin key and a dashboard session, and each answer's
 * body is validated (ajv, JSON Schema 2020-12) against the schema the document gives for
 * that operation and status. Each operation must have answered at least one success that
 * matches, and every error answered on the way must match the error the document lists.
 * A new operation needs a call here. OPENAPI_DUMP=1 writes every answer to
 * .tmp/openapi-answers.json, to write a response schema from real answers.
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Invoicing } from '../../src/billing/invoices.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { openApiDocument } from '../../src/openapi/routes.js';
import { startTestService, waitFor, type ApiResponse, type Json, type TestProject, type TestService } from '../helpers.js';
import { ownDatabase } from '../support/own-database.js';
import { addMember, signIn, type SignedIn } from '../admin/dashboard-support.js';
import { operatorSetsPlan } from '../support/plans.js';

interface Answer {
  method: string;
  /** The documented path (`/v1/customers/{customer_id}`). */
  path: string;
  url: string;
  status: number;
  contentType: string;
  body: unknown;
}

let svc: TestService;
let mock: MockUpstream;
let doc: Json;
const answers: Answer[] = [];
const upstreamKey = `sk-upstream-${randomBytes(6).toString('hex')}`;

/** Calls `url`, records its answer under the documented `path`, and returns it. */
async function call(method: string, path: string, url: string, o: { key?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<ApiResponse> {
  const r = await svc.call(method, url, o);
  answers.push({ method, path, url, status: r.status, contentType: r.headers.get('content-type') ?? '', body: r.body });
  return r;
}

/** A management operation through the admin key and through the session (`/dashboard/api`). */
async function both(s: SignedIn, p: TestProject, method: string, path: string, url: string, body?: unknown): Promise<[ApiResponse, ApiResponse]> {
  const a = await call(method, `/v1/admin${path}`, `/v1/admin${url}`, { key: p.adminKey, body });
  const d = await call(method, `/dashboard/api${path}`, `/dashboard/api${url}`, { body, headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  return [a, d];
}

const modelBody = (provider: 'openai' | 'anthropic') => ({
  provider,
  upstream_base_url: mock.url,
  upstream_model: provider === 'openai' ? 'gpt-upstream' : 'claude-upstream',
  upstream_api_key: upstreamKey,
  context_window: 100_000,
  max_output_tokens: 1000,
  supports_streaming: true,
  input_price_per_million_credits: 1_000_000,
  output_price_per_million_credits: 2_000_000,
});

beforeAll(async () => {
  // Invoices are closed here for an organization made months old: on a database of this file's own.
  const DATABASE_URL = await ownDatabase('openapi');
  mock = await startMockUpstream({ requireKey: upstreamKey });
  svc = await startTestService({ workers: true, config: { DATABASE_URL, SVC_MASTER_KEY: randomBytes(32).toString('hex') } });
  doc = openApiDocument();
  await exercise();
}, 120_000);

afterAll(async () => {
  await svc?.close();
  await mock?.close();
});

async function exercise(): Promise<void> {
  const p = await svc.project('B');
  const pa = await svc.project('A');
  const P = p.projectId;

  await call('GET', '/health', '/health');
  await call('GET', '/openapi.json', '/openapi.json');
  await call('GET', '/health/live', '/health/live');
  await call('GET', '/health/ready', '/health/ready');
  await call('GET', '/metrics', '/metrics');

  // Management: an enterprise plan first, so that no plan limit stops the calls below.
  const owner = await addMember(svc, p, 'owner');
  const s = await signIn(svc, owner.email, owner.password);
  await call('POST', '/dashboard/api/session', '/dashboard/api/session', { body: { email: owner.email, password: owner.password } });
  await call('GET', '/v1/customers/{customer_id}', '/v1/customers/alice');
  await call('GET', '/v1/customers/{customer_id}', '/v1/customers/alice', { key: 'svc_live_not-a-key' });
  await call('GET', '/dashboard/api/session', '/dashboard/api/session', { headers: { cookie: s.cookie } });
  await both(s, p, 'GET', '/organization/plan/preview', '/organization/plan/preview?plan=pro_2m');
  await call('PUT', '/v1/admin/organization/plan', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_2m' } });
  await call('PUT', '/dashboard/api/organization/plan', '/dashboard/api/organization/plan', { body: { plan: 'pro_50m' }, headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  // Enterprise is the operator's to set (an owner's PUT is 403).
  await operatorSetsPlan(svc, p.organizationId, 'enterprise');
  await both(s, p, 'GET', '/organization', '/organization');

  // Models, for the gateway.
  await both(s, p, 'PUT', '/projects/{project_id}/models/{model_id}', `/projects/${P}/models/gpt-test`, modelBody('openai'));
  await call('PUT', '/v1/admin/projects/{project_id}/models/{model_id}', `/v1/admin/projects/${P}/models/openai%2Fclaude-test`, { key: p.adminKey, body: modelBody('anthropic') });
  await call('PUT', '/v1/admin/projects/{project_id}/models/{model_id}', `/v1/admin/projects/${P}/models/gpt-responses`, { key: p.adminKey, body: { ...modelBody('openai'), wire_format: 'responses' } });
  await both(s, p, 'GET', '/projects/{project_id}/models', `/projects/${P}/models`);
  await both(s, p, 'GET', '/projects/{project_id}/models/{model_id}', `/projects/${P}/models/gpt-test`);
  await call('GET', '/v1/admin/projects/{project_id}/models/{model_id}', `/v1/admin/projects/${P}/models/no-such-model`, { key: p.adminKey });
  // A model without its provider key: the write answers a warning; PATCH and DELETE through both mounts.
  const keyless: Record<string, unknown> = { ...modelBody('openai') };
  delete keyless.upstream_api_key;
  const [w] = await both(s, p, 'PUT', '/projects/{project_id}/models/{model_id}', `/projects/${P}/models/tmp-model`, keyless);
  expect(w.body.warnings.map((x: { code: string }) => x.code)).toEqual(['byok_key_required']);
  await both(s, p, 'PATCH', '/projects/{project_id}/models/{model_id}', `/projects/${P}/models/tmp-model`, { display_name: 'Temporary', active: false });
  await both(s, p, 'PATCH', '/projects/{project_id}/models/{model_id}', `/projects/${P}/models/tmp-model`, { input_price_per_million_usd: 0.0000001 });
  await both(s, p, 'PATCH', '/projects/{project_id}/models/{model_id}', `/projects/${P}/models/no-such-model`, { active: true });
  await call('DELETE', '/v1/admin/projects/{project_id}/models/{model_id}', `/v1/admin/projects/${P}/models/tmp-model`, { key: p.adminKey });
  await call('PUT', '/dashboard/api/projects/{project_id}/models/{model_id}', `/dashboard/api/projects/${P}/models/tmp-model`, { body: keyless, headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  await call('DELETE', '/dashboard/api/projects/{project_id}/models/{model_id}', `/dashboard/api/projects/${P}/models/tmp-model`, { headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  await both(s, p, 'DELETE', '/projects/{project_id}/models/{model_id}', `/projects/${P}/models/tmp-model`);

  // Money operations, variant B.
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', {
    key: p.projectKey,
    body: { customer_id: 'alice', amount: 50_000_000, name: 'Alice', email: 'alice@example.com', metadata: { tier: 'gold' }, idempotency_key: 'dep-1' },
  });
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'alice', amount: 50_000_000, name: 'Alice', email: 'alice@example.com', metadata: { tier: 'gold' }, idempotency_key: 'dep-1' } });
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', {
    key: p.projectKey,
    body: { customer_id: 'alice', amount: 1000, wallet: 'promo', expires_at: new Date(Date.now() + 86_400_000).toISOString() },
  });
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'alice', amount_usd: '1' } });
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'alice', amount: -1 } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'd1', amount: 100, business_type: 'API_CALL', description: 'one' } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'd2', amount: 10 ** 14 } });
  await call('POST', '/v1/billing/freeze', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'f1', amount: 500, release_after_seconds: 600 } });
  await call('POST', '/v1/billing/consume', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'f1', amount: 200 } });
  await call('POST', '/v1/billing/freeze', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'f2', amount: 300, wallet: 'credits' } });
  await call('POST', '/v1/billing/unfreeze', '/v1/billing/unfreeze', { key: p.projectKey, body: { transaction_id: 'f2', customer_id: 'alice' } });
  await call('POST', '/v1/billing/unfreeze', '/v1/billing/unfreeze', { key: p.projectKey, body: { transaction_id: 'f1' } });
  await call('POST', '/v1/billing/consume', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'f2', customer_id: 'bob' } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'd1', amount: 101 } });
  await call('POST', '/v1/billing/consume', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'f1', amount: 250 } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'd3', amount: 1, credit_types: ['credits'] } });

  // Errors with their numbers (error.details): a consume over the frozen amount, a freeze its TTL released, a body over the limit.
  await call('POST', '/v1/billing/freeze', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'f3', amount: 100 } });
  await call('POST', '/v1/billing/consume', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'f3', amount: 150 } });
  await call('POST', '/v1/billing/freeze', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'alice', transaction_id: 'f4', amount: 100, release_after_seconds: 1 } });
  svc.rt.clock.advance(1_500);
  await call('POST', '/v1/billing/consume', '/v1/billing/consume', { key: p.projectKey, body: { transaction_id: 'f4' } });
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'alice', amount: 1, description: 'x'.repeat(1 << 20) } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: '', transaction_id: 42, amount: -5, colour: 'red' } });

  // Variant A: unit-suffixed amounts, credit_type(s).
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', { key: pa.projectKey, body: { customer_id: 'carol', amount_usd: 2.5, credit_type: 'default' } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: pa.projectKey, body: { customer_id: 'carol', transaction_id: 'a1', amount_cents: 5, credit_types: ['default'] } });
  await call('POST', '/v1/billing/freeze', '/v1/billing/freeze', { key: pa.projectKey, body: { customer_id: 'carol', transaction_id: 'a2', amount_credits: 1000 } });
  await call('POST', '/v1/billing/consume', '/v1/billing/consume', { key: pa.projectKey, body: { transaction_id: 'a2', actual_amount_credits: 400 } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: p.projectKey, headers: { 'x-service-api-variant': 'A' }, body: { customer_id: 'alice', transaction_id: 'a3', amount_cents: 1 } });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: p.projectKey, headers: { 'x-service-api-variant': 'C' }, body: { customer_id: 'alice', transaction_id: 'a4', amount: 1 } });

  // Reads of a customer.
  const aliceKey = await p.customerKey('alice', { allowedModels: ['gpt-test'] });
  for (const key of [p.projectKey, aliceKey]) {
    await call('GET', '/v1/customers/{customer_id}', '/v1/customers/alice', { key });
    await call('GET', '/v1/customers/{customer_id}/balance', '/v1/customers/alice/balance', { key });
    await call('GET', '/v1/customers/{customer_id}/ledger', '/v1/customers/alice/ledger?limit=3', { key });
  }
  await call('GET', '/v1/customers/{customer_id}', '/v1/customers/nobody', { key: p.projectKey });
  await call('GET', '/v1/customers/{customer_id}/ledger', '/v1/customers/alice/ledger?type=FREEZE&transaction_id=f1', { key: p.projectKey });
  await call('POST', '/v1/billing/deduct', '/v1/billing/deduct', { key: aliceKey, body: { customer_id: 'alice', transaction_id: 'x1', amount: 1 } });
  await call('PATCH', '/v1/customers/{customer_id}', '/v1/customers/alice', { key: p.projectKey, body: { name: 'Alice A.', metadata: null } });
  await call('PATCH', '/v1/customers/{customer_id}', '/v1/customers/alice', { key: p.projectKey, body: { nickname: 'x' } });
  const erin = { customer_id: 'erin', name: 'Erin', email: 'erin@example.com', metadata: { plan: 'trial' } };
  await call('POST', '/v1/customers', '/v1/customers', { key: p.projectKey, body: erin });
  await call('POST', '/v1/customers', '/v1/customers', { key: p.projectKey, body: erin });
  await call('POST', '/v1/customers', '/v1/customers', { key: p.projectKey, body: { ...erin, name: 'Erin B.' } });
  await call('POST', '/v1/customers', '/v1/customers', { key: p.projectKey, body: { name: 'no id' } });
  await call('POST', '/v1/customers', '/v1/customers', { key: aliceKey, body: { customer_id: 'frank' } });

  // Gateway.
  await call('GET', '/v1/models', '/v1/models', { key: p.projectKey });
  await call('GET', '/v1/models', '/v1/models', { key: aliceKey });
  const chat = { model: 'gpt-test', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 50 };
  const g1 = await call('POST', '/v1/chat/completions', '/v1/chat/completions', { key: p.projectKey, headers: { 'x-service-customer': 'alice', 'x-service-trace-id': 'trace-1' }, body: chat });
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', { key: aliceKey, body: { ...chat, stream: true } });
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', { key: aliceKey, headers: { 'x-service-stream-billing': 'inline' }, body: { ...chat, stream: true } });
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', { key: aliceKey, headers: { 'x-service-stream-billing': 'sideways' }, body: chat });
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', { key: p.projectKey, body: chat });
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', { key: p.projectKey, headers: { 'x-service-customer': 'alice' }, body: { ...chat, model: 'nope' } });
  await call('POST', '/v1/messages', '/v1/messages', {
    key: p.projectKey,
    headers: { 'x-service-customer': 'alice' },
    body: { model: 'openai/claude-test', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] },
  });
  await call('POST', '/v1/messages', '/v1/messages', { key: aliceKey, body: { model: 'openai/claude-test', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] } });
  await call('POST', '/v1/embeddings', '/v1/embeddings', { key: aliceKey, body: { model: 'gpt-test', input: ['hello there', 'again'] } });
  await call('POST', '/v1/embeddings', '/v1/embeddings', { key: aliceKey, body: { model: 'gpt-test', input: 'hello', encoding_format: 'base64' } });
  await call('POST', '/v1/embeddings', '/v1/embeddings', { key: p.projectKey, headers: { 'x-service-customer': 'alice' }, body: { model: 'openai/claude-test', input: 'hello' } });
  const asAlice = { 'x-service-customer': 'alice' };
  await call('POST', '/v1/responses', '/v1/responses', { key: p.projectKey, headers: asAlice, body: { model: 'gpt-responses', input: 'hello', max_output_tokens: 50 } });
  await call('POST', '/v1/responses', '/v1/responses', { key: p.projectKey, headers: asAlice, body: { model: 'gpt-responses', input: 'hello', stream: true } });
  await call('POST', '/v1/responses', '/v1/responses', { key: aliceKey, body: { model: 'gpt-test', input: 'hello', background: true } });
  await call('POST', '/v1/messages/count_tokens', '/v1/messages/count_tokens', { key: p.projectKey, headers: { 'x-service-customer': 'alice' }, body: { model: 'openai/claude-test', messages: [{ role: 'user', content: 'hello' }] } });
  await call('POST', '/v1/messages/count_tokens', '/v1/messages/count_tokens', { key: p.projectKey, body: { model: 'openai/claude-test', messages: [] } });
  // The service's own errors on /v1/messages, in Anthropic's envelope.
  await call('POST', '/v1/messages', '/v1/messages', { body: { model: 'openai/claude-test', max_tokens: 50, messages: [] } });
  await call('POST', '/v1/messages', '/v1/messages', { key: p.projectKey, headers: { 'x-service-customer': 'alice' }, body: { model: 'nope', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] } });
  const once = { key: p.projectKey, headers: { 'x-service-customer': 'alice', 'idempotency-key': 'call-1' }, body: chat };
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', once);
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', once);
  await call('POST', '/v1/customers/deposit', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'poor', amount: 1 } });
  await call('POST', '/v1/chat/completions', '/v1/chat/completions', { key: p.projectKey, headers: { 'x-service-customer': 'poor' }, body: chat });
  const tx = g1.headers.get('x-service-transaction-id')!;
  await call('GET', '/v1/billing/receipts/{transaction_id}', `/v1/billing/receipts/${tx}`, { key: p.projectKey });
  await call('GET', '/v1/billing/receipts/{transaction_id}', '/v1/billing/receipts/none', { key: p.projectKey });
  await svc.drained();
  await call('GET', '/v1/billing/receipts/{transaction_id}', `/v1/billing/receipts/${tx}`, { key: aliceKey });
  await call('GET', '/v1/billing/receipts', '/v1/billing/receipts?limit=1', { key: p.projectKey });
  await call('GET', '/v1/billing/receipts', '/v1/billing/receipts', { key: aliceKey });
  await call('GET', '/v1/billing/receipts', '/v1/billing/receipts?cursor=nope', { key: p.projectKey });
  await call('GET', '/v1/billing/receipts', '/v1/billing/receipts?customer_id=poor', { key: aliceKey });
  await call('GET', '/v1/usage', '/v1/usage?limit=1', { key: p.projectKey });
  await call('GET', '/v1/usage', '/v1/usage', { key: aliceKey });
  await call('GET', '/v1/usage', '/v1/usage?customer=alice', { key: p.projectKey });
  // Events and webhooks (src/events/, src/webhooks/).
  await call('GET', '/v1/events', '/v1/events?limit=2', { key: p.projectKey });
  await call('GET', '/v1/events', '/v1/events?type=nope', { key: p.projectKey });
  const hook = await call('POST', '/v1/webhooks', '/v1/webhooks', { key: p.projectKey, body: { url: 'https://example.com/hook', events: ['balance.low'] } });
  await call('POST', '/v1/webhooks', '/v1/webhooks', { key: p.projectKey, body: { url: 'ftp://example.com' } });
  await call('GET', '/v1/webhooks', '/v1/webhooks', { key: p.projectKey });
  const hookPath = `/v1/webhooks/${hook.body.id}`;
  await call('PATCH', '/v1/webhooks/{webhook_id}', hookPath, { key: p.projectKey, body: { description: 'billing alerts', events: null } });
  await call('PATCH', '/v1/webhooks/{webhook_id}', '/v1/webhooks/whk_none', { key: p.projectKey, body: { enabled: true } });
  const sent = await call('POST', '/v1/webhooks/{webhook_id}/test', `${hookPath}/test`, { key: p.projectKey });
  await call('GET', '/v1/webhooks/{webhook_id}/deliveries', `${hookPath}/deliveries?limit=5`, { key: p.projectKey });
  await call('POST', '/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/replay', `${hookPath}/deliveries/${sent.body.id}/replay`, { key: p.projectKey });
  await call('POST', '/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/replay', `${hookPath}/deliveries/dlv_none/replay`, { key: p.projectKey });
  await call('DELETE', '/v1/webhooks/{webhook_id}', hookPath, { key: p.projectKey });
  // The same through the management operations (the dashboard's screens), and the events.
  const mhooks = `/projects/${P}/webhooks`;
  const [mhook, mhook2] = await both(s, p, 'POST', '/projects/{project_id}/webhooks', mhooks, { url: 'https://example.com/managed', events: ['deposit.created'] });
  await both(s, p, 'POST', '/projects/{project_id}/webhooks', mhooks, { url: 'https://example.com/x', secret: 'mine' });
  await both(s, p, 'GET', '/projects/{project_id}/webhooks', mhooks);
  const mhookPath = `${mhooks}/${mhook.body.id}`;
  await both(s, p, 'PATCH', '/projects/{project_id}/webhooks/{webhook_id}', mhookPath, { enabled: false });
  await both(s, p, 'PATCH', '/projects/{project_id}/webhooks/{webhook_id}', `${mhooks}/whk_none`, { enabled: true });
  const [msent] = await both(s, p, 'POST', '/projects/{project_id}/webhooks/{webhook_id}/test', `${mhookPath}/test`);
  await both(s, p, 'GET', '/projects/{project_id}/webhooks/{webhook_id}/deliveries', `${mhookPath}/deliveries?limit=5`);
  await both(s, p, 'POST', '/projects/{project_id}/webhooks/{webhook_id}/deliveries/{delivery_id}/replay', `${mhookPath}/deliveries/${msent.body.id}/replay`);
  await both(s, p, 'POST', '/projects/{project_id}/webhooks/{webhook_id}/deliveries/{delivery_id}/replay', `${mhookPath}/deliveries/dlv_none/replay`);
  await call('DELETE', '/v1/admin/projects/{project_id}/webhooks/{webhook_id}', `/v1/admin${mhookPath}`, { key: p.adminKey });
  await call('DELETE', '/dashboard/api/projects/{project_id}/webhooks/{webhook_id}', `/dashboard/api${mhooks}/${mhook2.body.id}`, { headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  await call('DELETE', '/dashboard/api/projects/{project_id}/webhooks/{webhook_id}', `/dashboard/api${mhookPath}`, { headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  await both(s, p, 'GET', '/projects/{project_id}/events', `/projects/${P}/events?limit=2&type=deposit.created`);
  await both(s, p, 'GET', '/projects/{project_id}/events', `/projects/${P}/events?type=nope`);

  // Projects, keys, customers, usage through both mounts.
  const [second, third] = await both(s, p, 'POST', '/projects', '/projects', { name: 'second', contract: 'A' });
  await both(s, p, 'GET', '/projects', '/projects?limit=1');
  await both(s, p, 'GET', '/projects/{project_id}', `/projects/${P}`);
  await both(s, p, 'GET', '/projects/{project_id}', '/projects/proj_nope');
  await both(s, p, 'PATCH', '/projects/{project_id}', `/projects/${P}`, { rate_limit_per_minute: 100_000 });
  const [job] = await both(s, p, 'POST', '/projects/{project_id}/reconcile', `/projects/${P}/reconcile`, { repair: false });
  // The job, then the job once finished (its report), through both mounts.
  await both(s, p, 'GET', '/projects/{project_id}/reconcile/{job_id}', `/projects/${P}/reconcile/${job.body.id}`);
  await waitFor(async () => (await svc.call('GET', `/v1/admin/projects/${P}/reconcile/${job.body.id}`, { key: p.adminKey })).body.status === 'completed', 60_000, 'the reconcile job');
  await both(s, p, 'GET', '/projects/{project_id}/reconcile/{job_id}', `/projects/${P}/reconcile/${job.body.id}`);
  await both(s, p, 'GET', '/projects/{project_id}/reconcile/{job_id}', `/projects/${P}/reconcile/rcj_AAAAAAAAAAAAAAAA`);
  const [k] = await both(s, p, 'POST', '/projects/{project_id}/keys', `/projects/${P}/keys`, { type: 'customer', customer_id: 'alice', name: 'alice key', expires_at: new Date(Date.now() + 86_400_000).toISOString() });
  await both(s, p, 'GET', '/projects/{project_id}/keys', `/projects/${P}/keys`);
  await both(s, p, 'PATCH', '/projects/{project_id}/keys/{key_id}', `/projects/${P}/keys/${k.body.id}`, { budget: { limit: 1000, period: 'day' } });
  await both(s, p, 'POST', '/projects/{project_id}/keys/{key_id}/revoke', `/projects/${P}/keys/${k.body.id}/revoke`);
  await both(s, p, 'POST', '/projects/{project_id}/keys', `/projects/${P}/keys`, { type: 'project', customer_id: 'alice' });
  await both(s, p, 'GET', '/projects/{project_id}/customers', `/projects/${P}/customers?search=ali`);
  await both(s, p, 'POST', '/projects/{project_id}/customers', `/projects/${P}/customers`, { customer_id: 'gina', name: 'Gina', metadata: { plan: 'trial' } });
  await both(s, p, 'POST', '/projects/{project_id}/customers', `/projects/${P}/customers`, { customer_id: 'gina', name: 'Gina B.' });
  await both(s, p, 'PATCH', '/projects/{project_id}/customers/{customer_id}', `/projects/${P}/customers/alice`, { budget: { limit: 900_000_000, period: 'month' }, low_balance_threshold: 5 });
  await both(s, p, 'GET', '/projects/{project_id}/customers/{customer_id}', `/projects/${P}/customers/alice`);
  await both(s, p, 'GET', '/projects/{project_id}/customers/{customer_id}/ledger', `/projects/${P}/customers/alice/ledger?type=DEDUCT`);
  await both(s, p, 'POST', '/projects/{project_id}/customers/{customer_id}/deposits', `/projects/${P}/customers/dave/deposits`, { amount: 5_000, source: 'support credit', idempotency_key: 'd-dave' });
  await both(s, p, 'GET', '/projects/{project_id}/usage', `/projects/${P}/usage?model=gpt-test`);
  await both(s, p, 'GET', '/projects/{project_id}/receipts/{transaction_id}', `/projects/${P}/receipts/${tx}`);
  await both(s, p, 'GET', '/usage/daily', `/usage/daily?project_id=${P}`);
  await both(s, p, 'GET', '/queues', '/queues');
  await both(s, p, 'GET', '/usage', '/usage');
  await both(s, p, 'GET', '/usage', `/usage?group_by=model,day&project_id=${P}&limit=1`);
  await both(s, p, 'GET', '/usage', `/usage?group_by=&customer_id=alice&from=2020-01-01T00:00:00Z`);
  await both(s, p, 'GET', '/usage', '/usage?group_by=week');
  await both(s, p, 'GET', '/usage', '/usage?project_id=proj_nope');

  // Deactivation: a project of each mount; changes to it answer 409 project_deactivated, its records stay readable.
  await call('POST', '/v1/admin/projects/{project_id}/keys', `/v1/admin/projects/${second.body.id}/keys`, { key: p.adminKey, body: { type: 'project' } });
  await call('DELETE', '/v1/admin/projects/{project_id}', `/v1/admin/projects/${second.body.id}`, { key: p.adminKey });
  await call('DELETE', '/dashboard/api/projects/{project_id}', `/dashboard/api/projects/${third.body.id}`, { headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  await both(s, p, 'DELETE', '/projects/{project_id}', `/projects/${second.body.id}`);
  await both(s, p, 'DELETE', '/projects/{project_id}', '/projects/proj_nope');
  await both(s, p, 'PATCH', '/projects/{project_id}', `/projects/${second.body.id}`, { name: 'renamed' });
  await both(s, p, 'PUT', '/projects/{project_id}/models/{model_id}', `/projects/${third.body.id}/models/gpt-test`, modelBody('openai'));
  await both(s, p, 'POST', '/projects/{project_id}/keys', `/projects/${third.body.id}/keys`, { type: 'project' });
  await both(s, p, 'GET', '/projects/{project_id}', `/projects/${second.body.id}`);

  // Members.
  const [m1, m2] = await both(s, p, 'POST', '/members', '/members', undefined);
  void m1;
  void m2;
  const [created] = await both(s, p, 'POST', '/members', '/members', { email: `m-${P}@example.com`, role: 'viewer' });
  const made = await call('POST', '/dashboard/api/members', '/dashboard/api/members', {
    body: { email: `n-${P}@example.com`, role: 'viewer', password: 'a-long-enough-password' },
    headers: { cookie: s.cookie, 'x-csrf-token': s.csrf },
  });
  await both(s, p, 'GET', '/members', '/members');
  await both(s, p, 'GET', '/members/{member_id}', `/members/${created.body.id}`);
  await both(s, p, 'PATCH', '/members/{member_id}', `/members/${created.body.id}`, { role: 'admin' });
  await call('DELETE', '/v1/admin/members/{member_id}', `/v1/admin/members/${created.body.id}`, { key: p.adminKey });
  await call('DELETE', '/dashboard/api/members/{member_id}', `/dashboard/api/members/${made.body.id}`, { headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  await call('DELETE', '/v1/admin/members/{member_id}', `/v1/admin/members/${created.body.id}`, { key: p.adminKey });
  await call('PATCH', '/v1/admin/members/{member_id}', `/v1/admin/members/${owner.id}`, { key: p.adminKey, body: { role: 'viewer' } });
  const viewer = await addMember(svc, p, 'viewer');
  const vs = await signIn(svc, viewer.email, viewer.password);
  await call('POST', '/dashboard/api/projects', '/dashboard/api/projects', { body: { name: 'nope' }, headers: { cookie: vs.cookie, 'x-csrf-token': vs.csrf } });
  await call('POST', '/dashboard/api/projects', '/dashboard/api/projects', { body: { name: 'nope' }, headers: { cookie: s.cookie } });
  await call('GET', '/dashboard/api/organization', '/dashboard/api/organization');
  await call('GET', '/v1/admin/organization', '/v1/admin/organization', { key: p.projectKey });

  // Invoices: an organization made months ago has a closed period.
  await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = now() - interval '75 days', next_invoice_at = NULL WHERE id = ${p.organizationId}`);
  await new Invoicing(svc.rt.db, svc.rt.redis, svc.rt.config.REDIS_PREFIX, 0, svc.rt.logger).closeOrganization(p.organizationId, Date.now());
  const [inv] = await both(s, p, 'GET', '/invoices', '/invoices');
  await both(s, p, 'GET', '/invoices/upcoming', '/invoices/upcoming');
  await both(s, p, 'GET', '/invoices/{invoice_id}', `/invoices/${inv.body.data?.[0]?.id ?? 'none'}`);
  await both(s, p, 'GET', '/invoices/{invoice_id}', '/invoices/inv_none');

  // The session's own operations, last.
  await call('PUT', '/dashboard/api/session/password', '/dashboard/api/session/password', {
    body: { current_password: owner.password, new_password: 'another-long-password' },
    headers: { cookie: s.cookie, 'x-csrf-token': s.csrf },
  });
  await call('POST', '/dashboard/api/session', '/dashboard/api/session', { body: { email: owner.email, password: 'wrong-password-here' } });
  await call('DELETE', '/dashboard/api/session', '/dashboard/api/session', { headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });

  if (process.env.OPENAPI_DUMP) {
    mkdirSync('.tmp', { recursive: true });
    writeFileSync('.tmp/openapi-answers.json', JSON.stringify(answers, null, 1));
  }
}

/** The operation of the document for a recorded answer, and the schema of its status. */
function schemaOf(a: Answer): { schema: unknown; mediaType: string } | string {
  const operation = doc.paths?.[a.path]?.[a.method.toLowerCase()];
  if (operation === undefined) return `${a.method} ${a.path} is not in the document`;
  const response = operation.responses?.[String(a.status)];
  if (response === undefined) return `${a.method} ${a.path} (${a.url}) answered ${a.status}, which the document does not list: ${JSON.stringify(a.body).slice(0, 300)}`;
  const mediaType = a.contentType.split(';')[0]!.trim();
  const media = response.content?.[mediaType];
  if (media === undefined) return `${a.method} ${a.path} answered ${a.status} as ${mediaType}, which the document does not list`;
  return { schema: media.schema, mediaType };
}

describe('the OpenAPI document against real answers', () => {
  it('is a valid OpenAPI 3.1 document whose schemas compile', () => {
    expect(doc.openapi).toBe('3.1.0');
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(ajv);
    ajv.addSchema({ $id: 'doc', components: doc.components });
    expect(Object.keys(doc.paths).length).toBeGreaterThan(40);
  });

  it('describes the status and body of every answer the service gave', () => {
    const ajv = new Ajv2020({ strict: false });
    addFormats.default(ajv);
    // The document's components are one schema resource: `#/components/...` references resolve in it.
    ajv.addSchema({ ...doc, $id: 'openapi.json' });
    const problems: string[] = [];
    for (const a of answers) {
      const found = schemaOf(a);
      if (typeof found === 'string') {
        problems.push(found);
        continue;
      }
      if (found.mediaType !== 'application/json') continue;
      const validate = ajv.compile({ $ref: `openapi.json#/paths/${pointer(a.path)}/${a.method.toLowerCase()}/responses/${a.status}/content/application~1json/schema` });
      if (!validate(a.body)) {
        problems.push(`${a.method} ${a.url} ${a.status}: ${ajv.errorsText(validate.errors)}\n  ${JSON.stringify(a.body).slice(0, 600)}`);
      }
    }
    expect(problems, problems.join('\n')).toEqual([]);
  });

  it('checked errors of many kinds along the way', () => {
    const codes = new Set(answers.filter((a) => a.status >= 400).map((a) => (a.body as { error?: { code?: string } })?.error?.code));
    for (const code of ['invalid_request', 'invalid_amount', 'unsupported_amount_field', 'transaction_conflict', 'insufficient_balance', 'customer_not_found', 'permission_denied', 'not_signed_in', 'csrf_token_invalid', 'invalid_api_key', 'missing_api_key', 'idempotency_key_reused', 'last_owner', 'email_taken', 'model_not_allowed', 'model_not_found', 'customer_required', 'not_found', 'invalid_credentials', 'invalid_json', 'freeze_records_already_consumed', 'customer_exists', 'project_deactivated', 'actual_amount_exceeds_frozen_amount', 'no_consumable_freeze_records', 'payload_too_large']) {
      expect(codes, code).toContain(code);
    }
  });

  it('saw each shape of error.details, every invalid field at once, and the Anthropic envelope', () => {
    const errors = answers.filter((a) => a.status >= 400).map((a) => a.body as { type?: string; error?: { details?: Record<string, unknown>; errors?: unknown[] } });
    const shapes = new Set(errors.map((b) => b.error?.details).filter((d) => d !== undefined).map((d) => Object.keys(d!).sort().join(',')));
    for (const key of ['wallets', 'input_bound_credits', 'frozen_credits', 'settled_by', 'limit_bytes']) {
      expect([...shapes].some((s) => s.split(',').includes(key)), `details with ${key}: ${[...shapes].join(' | ')}`).toBe(true);
    }
    expect(errors.some((b) => (b.error?.errors?.length ?? 0) >= 4)).toBe(true);
    expect(answers.filter((a) => a.path === '/v1/messages' && a.status >= 400 && a.status < 500).every((a) => (a.body as { type?: string }).type === 'error')).toBe(true);
  });

  it('saw a success of every operation of the document', () => {
    const succeeded = new Set(answers.filter((a) => a.status < 300).map((a) => `${a.method} ${a.path}`));
    const missing: string[] = [];
    for (const [path, item] of Object.entries<Record<string, unknown>>(doc.paths)) {
      for (const method of Object.keys(item)) {
        const key = `${method.toUpperCase()} ${path}`;
        if (!succeeded.has(key)) missing.push(key);
      }
    }
    expect(missing, `operations never answered with a success here: ${missing.join(', ')}`).toEqual([]);
  });
});

/** A path as a JSON pointer segment. */
function pointer(path: string): string {
  return path.replace(/~/g, '~0').replace(/\//g, '~1');
}
