/**
 * Gateway Idempotency-Key claims leave Redis with their call (REDIS_RETENTION_SECONDS=1):
 * once a settled call is archived, the same key is still 409 idempotency_key_reused naming
 * the first call (answered from PostgreSQL), charged once; the call's receipt is still
 * found; reconcile finds no drift.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BindStatus, claimId } from '../../src/ledger/bindings.js';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { customerKeys } from '../../src/redis/keys.js';
import { waitFor } from '../helpers.js';
import { OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv } from './support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;
/** A short archive grace (ARCHIVE_GRACE_MS), to wait less for the archive. */
const grace_ms = 500;

beforeAll(async () => {
  env = await startGatewayEnv({ config: { REDIS_RETENTION_SECONDS: 1, ARCHIVE_GRACE_MS: grace_ms } });
});
afterAll(() => env?.close());

const body = (controls: Record<string, unknown> = {}) => ({
  model: OPENAI_MODEL,
  messages: [{ role: 'user', content: `a question ${mockDirective({ output_tokens: 5, ...controls })}` }],
});

function call(customer: string, key: string, controls: Record<string, unknown> = {}) {
  return rawPost(env.svc.url, '/v1/chat/completions', { key: env.p.projectKey, headers: { 'x-service-customer': customer, 'idempotency-key': key }, body: body(controls) });
}

async function balance(customer: string): Promise<Record<string, unknown>> {
  const { as_of: _asOf, ...amounts } = (await env.balance(customer)) as unknown as Record<string, unknown>;
  return amounts;
}

const claim = (customer: string, key: string) => env.svc.rt.ledger.bindings.command(env.p.projectId, 'g', claimId(customer, key), '');

describe('Idempotency-Key after the retention', () => {
  it('answers a reused key from PostgreSQL once its call is archived', async () => {
    await env.fund('gk1', 1_000_000);
    const first = await call('gk1', 'order-old');
    expect(first.status, first.text).toBe(200);
    const txid = String(first.headers['x-service-transaction-id']);
    await env.svc.drained();

    const tx = customerKeys(env.svc.rt.config.REDIS_PREFIX, env.p.projectId, 'gk1').tx;
    await waitFor(async () => (await env.svc.rt.redis.hexists(tx, txid)) === 0, 1_000 + grace_ms + 10_000, 'the call to be archived');
    expect((await claim('gk1', 'order-old')).status).toBe(BindStatus.Archived);

    const before = await balance('gk1');
    const again = await call('gk1', 'order-old');
    expectError(again, 409, 'idempotency_key_reused', { fields: { transaction_id: txid } });
    expect(await balance('gk1')).toEqual(before);
    // The receipt of the archived call is PostgreSQL's.
    const receipt = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
    expect([receipt.status, receipt.body.transaction_id]).toEqual([200, txid]);
    // Another customer's key of the same name is its own.
    await env.fund('gk2', 1_000_000);
    expect((await call('gk2', 'order-old')).status).toBe(200);

    await env.svc.drained();
    const report = await reconcile(env.svc.rt, { projectId: env.p.projectId, repair: false });
    expect([report.drift, report.errors]).toEqual([[], []]);
  });
});
