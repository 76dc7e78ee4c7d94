/**
 * A freeze whose hold names a source that Redis no longer has (a state only corruption
 * can make) is refused as a whole with 500 billing_account_not_found: no script changes
 * one source and then fails on the next, which would keep the first change. A TTL freeze
 * in that state stays for reconcile to report, and the customer's other operations go on.
 */
import { describe, expect, it } from 'vitest';
import { customerKeys, type CustomerKeys } from '../../src/redis/keys.js';
import { readSources } from '../../src/ledger/sources.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService();

const soon = () => new Date(Date.now() + 86_400_000).toISOString();

const sourceOf = async (k: CustomerKeys, id: string) => (await readSources(svc.rt.redis, k)).find((s) => s.id === id);

/** A customer with two sources, and a freeze of `amount` drawing from both. */
async function frozenOverTwoSources(customerId: string, transactionId: string, extra: Record<string, unknown> = {}) {
  const call = (path: string, body: Record<string, unknown>) => svc.call('POST', path, { key: p.projectKey, body });
  expect((await call('/v1/customers/deposit', { customer_id: customerId, amount: 100, expires_at: soon() })).status).toBe(200);
  expect((await call('/v1/customers/deposit', { customer_id: customerId, amount: 100 })).status).toBe(200);
  const freeze = await call('/v1/billing/freeze', { customer_id: customerId, transaction_id: transactionId, amount: 150, ...extra });
  expect(freeze.status).toBe(200);
  const [first, second] = freeze.body.freeze_details as { account_id: string }[];
  const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customerId);
  const before = await sourceOf(k, first.account_id);
  expect(before).toMatchObject({ frozen: 100 });
  await svc.rt.redis.hdel(k.src, second.account_id, `${second.account_id}:u`, `${second.account_id}:f`);
  return { k, first: first.account_id, before };
}

describe('a hold whose source is missing', () => {
  it.each([
    ['consume', '/v1/billing/consume'],
    ['unfreeze', '/v1/billing/unfreeze'],
  ])('%s: 500 billing_account_not_found, the other source untouched', async (op, path) => {
    const { k, first, before } = await frozenOverTwoSources(`c-${op}`, `t-${op}`);
    const res = await svc.call('POST', path, { key: p.projectKey, body: { transaction_id: `t-${op}` } });
    expectError(res, 500, 'billing_account_not_found');
    expect(await sourceOf(k, first)).toEqual(before);
    // Two deposits with their deposit.created events, and the freeze: nothing more.
    expect(await svc.rt.redis.xlen(k.outbox)).toBe(5);
  });

  it('a due TTL freeze in that state is left for reconcile; other operations go on', async () => {
    const { k, first, before } = await frozenOverTwoSources('c-ttl', 't-ttl', { release_after_seconds: 1 });
    await svc.rt.clock.advance(2_000);
    const dep = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c-ttl', amount: 7 } });
    expect(dep.status).toBe(200);
    expect(await sourceOf(k, first)).toEqual(before);
    expect(await svc.rt.redis.zscore(k.ttl, 't-ttl')).not.toBeNull();
  });
});
