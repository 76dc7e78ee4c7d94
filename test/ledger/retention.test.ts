/**
 * Bounded idempotency state (src/ledger/retention.ts), with REDIS_RETENTION_SECONDS=1:
 * final records leave Redis once persisted and past the retention, open freezes stay, a
 * replay of an archived id is answered from PostgreSQL as it was, a refused operation's id
 * may be used again once archived, reconcile sees no drift, a rebuild of an empty Redis
 * still recognises archived ids, and a customer script refuses a binding read that the
 * archive overtook (the grace), so that an archived id is never applied twice.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BindStatus } from '../../src/ledger/bindings.js';
import { archive_grace_ms } from '../../src/ledger/retention.js';
import { requestHash } from '../../src/ledger/service.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { recoverForgotten, recoveryBaselineKey } from '../../src/reconcile/recovery.js';
import { PersistLoop } from '../../workers/persist.js';
import { binding_buckets, bindingKeysOfBucket, customerKeys } from '../../src/redis/keys.js';
import { scriptSource, ScriptStatus } from '../../src/redis/scripts.js';
import { startTestService, waitFor, type ApiResponse } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

/** A grace well under the default (archive_grace_ms), to wait less; still many times a request's binding read. */
const grace_ms = 500;
const config = { REDIS_RETENTION_SECONDS: 1, ARCHIVE_GRACE_MS: grace_ms };
/** Time for a record to be archived and deleted: the retention, the grace, and trim passes. */
const archived_within_ms = 1_000 + grace_ms + 10_000;

function post(path: string, body: Record<string, unknown>): Promise<ApiResponse> {
  return svc.call('POST', path, { key: p.projectKey, body });
}

async function ok(path: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await post(path, body);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body.is_idempotent_replay).toBe(false);
  return res.body;
}

const keysOf = (customerId: string) => customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customerId);
const binding = (kind: 't' | 'd', id: string) => svc.rt.ledger.bindings.command(p.projectId, kind, id, '');
async function balance(customerId: string): Promise<Record<string, unknown>> {
  const { as_of: _asOf, ...amounts } = (await svc.call('GET', `/v1/customers/${customerId}/balance`, { key: p.projectKey })).body;
  return amounts;
}

async function recordGone(customerId: string, kind: 'tx' | 'dep', id: string): Promise<boolean> {
  return (await svc.rt.redis.hexists(keysOf(customerId)[kind], id)) === 0;
}

useTestService({ workers: true, config });

describe('retention of idempotency records', () => {
  it('deletes a record no sooner than the customer scripts stop trusting a binding read', () => {
    const lua = readFileSync(new URL('../../lua/includes/customer.lua', import.meta.url), 'utf8');
    expect(Number(/^local BINDING_GRACE_MS = (\d+)$/m.exec(lua)?.[1])).toBe(archive_grace_ms);
    // ARCHIVE_GRACE_MS: the trim waits it (svc.rt.retention) and the scripts are loaded with it.
    expect(svc.rt.retention.graceMs).toBe(grace_ms);
    const loaded = scriptSource('deduct', grace_ms);
    expect(loaded.library).toContain(`local BINDING_GRACE_MS = ${grace_ms}\n`);
    expect(loaded.library).not.toContain(`local BINDING_GRACE_MS = ${archive_grace_ms}\n`);
    expect(loaded.fn).not.toBe(scriptSource('deduct').fn);
  });

  it('archives nothing whose entries are still in the outbox', async () => {
    // A service without workers: nothing persists the outbox unless the test does.
    const alone = await startTestService({ config });
    try {
      const q = await alone.project('B');
      const send = (path: string, body: Record<string, unknown>) => alone.call('POST', path, { key: q.projectKey, body });
      expect((await send('/v1/customers/deposit', { customer_id: 'o1', amount: 100 })).status).toBe(200);
      expect((await send('/v1/billing/deduct', { customer_id: 'o1', transaction_id: 'o1-d1', amount: 10 })).status).toBe(200);
      const k = customerKeys(alone.rt.config.REDIS_PREFIX, q.projectId, 'o1');
      const finalAt = Number(await alone.rt.redis.zscore(k.fin, 't:o1-d1'));
      await waitFor(async () => Number((await alone.rt.redis.time())[0]) * 1000 > finalAt + 1_500, 5_000, 'the retention to pass');

      await alone.rt.retention.trimCustomer(k.base);
      expect(await alone.rt.redis.zscore(k.fin, 't:o1-d1')).not.toBeNull();
      expect((await alone.rt.ledger.bindings.command(q.projectId, 't', 'o1-d1', '')).status).toBe(BindStatus.Bound);

      await new PersistLoop(alone.rt.redis, alone.rt.ledgerQueries, alone.rt.config.REDIS_PREFIX, 0, alone.rt.logger).outbox.drain(k.base);
      await alone.rt.retention.trimCustomer(k.base);
      expect(await alone.rt.redis.zscore(k.fin, 't:o1-d1')).toBeNull();
      expect(await alone.rt.redis.zscore(k.arch, 't:o1-d1')).not.toBeNull();
      expect((await alone.rt.ledger.bindings.command(q.projectId, 't', 'o1-d1', '')).status).toBe(BindStatus.Archived);
      // The record itself waits for the grace.
      expect(await alone.rt.redis.hexists(k.tx, 'o1-d1')).toBe(1);
    } finally {
      await alone.close();
    }
  });

  it('archives final records, keeps open freezes, and answers replays of archived ids from PostgreSQL', async () => {
    const dep = await ok('/v1/customers/deposit', { customer_id: 'r1', amount: 1000, idempotency_key: 'r1-k1' });
    const ded = await ok('/v1/billing/deduct', { customer_id: 'r1', transaction_id: 'r1-d1', amount: 100, description: 'first' });
    const frz = await ok('/v1/billing/freeze', { customer_id: 'r1', transaction_id: 'r1-f1', amount: 50 });
    await ok('/v1/billing/freeze', { customer_id: 'r1', transaction_id: 'r1-f2', amount: 60 });
    const con = await ok('/v1/billing/consume', { transaction_id: 'r1-f2', amount: 40 });
    const refused = await post('/v1/billing/deduct', { customer_id: 'r1', transaction_id: 'r1-big', amount: 10_000 });
    expectError(refused, 400, 'insufficient_balance');
    await svc.drained();

    await waitFor(async () => (await recordGone('r1', 'tx', 'r1-d1')) && (await recordGone('r1', 'tx', 'r1-f2')) && (await recordGone('r1', 'dep', 'r1-k1')), archived_within_ms, 'the records to be archived');
    // Archived: no binding, and the filter has the id. The open freeze stays, bound.
    expect((await binding('t', 'r1-d1')).status).toBe(BindStatus.Archived);
    expect((await binding('d', 'r1-k1')).status).toBe(BindStatus.Archived);
    expect(await recordGone('r1', 'tx', 'r1-f1')).toBe(false);
    expect(await binding('t', 'r1-f1')).toMatchObject({ status: BindStatus.Bound, owner: 'r1' });
    await waitFor(async () => (await binding('t', 'r1-big')).status === BindStatus.Archived, archived_within_ms, 'the refused id to be archived');
    expect(await svc.rt.redis.zcard(keysOf('r1').fin)).toBe(0);

    const before = await balance('r1');
    // Replays answer the original bodies, through PostgreSQL.
    expect((await post('/v1/customers/deposit', { customer_id: 'r1', amount: 1000, idempotency_key: 'r1-k1' })).body).toEqual({ ...dep, is_idempotent_replay: true });
    expect((await post('/v1/billing/deduct', { customer_id: 'r1', transaction_id: 'r1-d1', amount: 100, description: 'first' })).body).toEqual({ ...ded, is_idempotent_replay: true });
    expect((await post('/v1/billing/consume', { transaction_id: 'r1-f2', amount: 40 })).body).toEqual({ ...con, is_idempotent_replay: true });
    // Conflicts too: other parameters, another customer, another state.
    expectError(await post('/v1/billing/deduct', { customer_id: 'r1', transaction_id: 'r1-d1', amount: 101, description: 'first' }), 409, 'transaction_conflict');
    expectError(await post('/v1/billing/deduct', { customer_id: 'r2', transaction_id: 'r1-d1', amount: 100 }), 409, 'transaction_conflict');
    expectError(await post('/v1/billing/unfreeze', { transaction_id: 'r1-f2' }), 400, 'no_unfreezable_records');
    expect(await balance('r1')).toEqual(before);
    // The open freeze was never archived: it still settles.
    expect((await post('/v1/billing/unfreeze', { transaction_id: 'r1-f1' })).status).toBe(200);
    expect(frz.frozen_amount).toBe(50);
    // A refused operation kept no record: once archived, its id applies as new.
    expect(await ok('/v1/billing/deduct', { customer_id: 'r1', transaction_id: 'r1-big', amount: 10 })).toMatchObject({ deducted_amount: 10 });

    await svc.drained();
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: false });
    expect([report.drift, report.errors]).toEqual([[], []]);
  });

  it('asks PostgreSQL for an archived id, never for a new one', async () => {
    const archive = svc.rt.ledger.bindings.archived!;
    const record = archive.record;
    const asked: string[] = [];
    archive.record = (projectId, kind, id) => {
      asked.push(id);
      return record(projectId, kind, id);
    };
    try {
      await ok('/v1/customers/deposit', { customer_id: 'n1', amount: 1000 });
      const first = await ok('/v1/billing/deduct', { customer_id: 'n1', transaction_id: 'n1-old', amount: 1 });
      await svc.drained();
      await waitFor(() => recordGone('n1', 'tx', 'n1-old'), archived_within_ms, 'the deduct to be archived');
      for (let i = 0; i < 50; i++) await ok('/v1/billing/deduct', { customer_id: 'n1', transaction_id: `n1-new-${i}`, amount: 1 });
      expect(asked).toEqual([]);
      expect((await post('/v1/billing/deduct', { customer_id: 'n1', transaction_id: 'n1-old', amount: 1 })).body).toEqual({ ...first, is_idempotent_replay: true });
      expect(asked).toEqual(['n1-old']);
    } finally {
      archive.record = record;
    }
  });

  it('the recovery rebuilds an empty Redis with the archived ids in the Bloom filters', async () => {
    await ok('/v1/customers/deposit', { customer_id: 'e1', amount: 500, idempotency_key: 'e1-k1' });
    const ded = await ok('/v1/billing/deduct', { customer_id: 'e1', transaction_id: 'e1-d1', amount: 7 });
    await svc.drained();
    await waitFor(() => recordGone('e1', 'tx', 'e1-d1'), archived_within_ms, 'the deduct to be archived');
    await ok('/v1/billing/deduct', { customer_id: 'e1', transaction_id: 'e1-d2', amount: 8 });
    await svc.drained();

    // Redis loses the customer and every binding bucket of the project, filters included,
    // and the recovery's baseline: it came back empty.
    const k = keysOf('e1');
    const buckets = (['t', 'd'] as const).flatMap((kind) =>
      Array.from({ length: binding_buckets }, (_, b) => Object.values(bindingKeysOfBucket(svc.rt.config.REDIS_PREFIX, p.projectId, kind, b))).flat(),
    );
    // One DEL per key: on a cluster the buckets and the baseline are in other slots.
    const lost = [k.meta, k.src, k.live, k.dead, k.spent, k.tx, k.dep, k.ttl, k.fin, k.arch, recoveryBaselineKey(svc.rt.config.REDIS_PREFIX), ...buckets];
    await Promise.all(lost.map((key) => svc.rt.redis.del(key)));
    // The recovery after a Redis restart (src/reconcile/recovery.ts) rebuilds it.
    const repaired = await recoverForgotten(svc.rt, svc.rt.config.REDIS_RECOVERY_WINDOW_MS);
    expect(repaired?.drift.filter((d) => d.customer_id === 'e1').map((d) => d.field)).toContain('customer');
    expect(repaired?.errors).toEqual([]);

    // The recent deduct is back with its binding; the archived ones are in the filters only.
    expect(await recordGone('e1', 'tx', 'e1-d2')).toBe(false);
    expect(await binding('t', 'e1-d2')).toMatchObject({ status: BindStatus.Bound, owner: 'e1' });
    expect(await recordGone('e1', 'tx', 'e1-d1')).toBe(true);
    expect((await binding('t', 'e1-d1')).status).toBe(BindStatus.Archived);
    expect((await binding('d', 'e1-k1')).status).toBe(BindStatus.Archived);
    expect((await post('/v1/billing/deduct', { customer_id: 'e1', transaction_id: 'e1-d1', amount: 7 })).body).toEqual({ ...ded, is_idempotent_replay: true });
    expect(await balance('e1')).toMatchObject({ used: 15 });
    const again = await reconcile(svc.rt, { projectId: p.projectId, customers: [{ projectId: p.projectId, customerId: 'e1' }], repair: false });
    expect(again.drift).toEqual([]);
  });

  it('refuses a binding read that the archive overtook, so an archived id never applies twice', async () => {
    await ok('/v1/customers/deposit', { customer_id: 's1', amount: 1000 });
    const first = await ok('/v1/billing/deduct', { customer_id: 's1', transaction_id: 's1-d1', amount: 30 });
    await svc.drained();
    // A request reads the binding (as the API does before the customer script)...
    const read = await svc.rt.ledger.bindings.command(p.projectId, 't', 's1-d1', 's1');
    expect(read).toMatchObject({ status: BindStatus.Bound, owner: 's1' });
    // ...then stalls while the trim archives the binding and, a grace later, the record.
    await waitFor(() => recordGone('s1', 'tx', 's1-d1'), archived_within_ms, 'the record to be archived');
    expect((await binding('t', 's1-d1')).status).toBe(BindStatus.Archived);

    // Its customer script finds no record: without the check it would apply the id again.
    const scope = { projectId: p.projectId, organizationId: p.organizationId };
    const hash = requestHash(['deduct', 30, null, null, null]);
    const stale = await svc.rt.ledger.run('deduct', scope, 's1', {
      transactionId: 's1-d1', amount: 30, requestHash: hash, walletFilter: '', entryWallet: '', businessType: '', description: '', admitted: '1', keyBudget: '', requestFields: '',
    }, read.readAtMs);
    expect(stale[0]).toBe(ScriptStatus.StaleBinding);
    expect(await balance('s1')).toMatchObject({ used: 30 });
    expect(await recordGone('s1', 'tx', 's1-d1')).toBe(true);

    // Started over from the binding, the request is the replay it always was.
    const replay = await post('/v1/billing/deduct', { customer_id: 's1', transaction_id: 's1-d1', amount: 30 });
    expect(replay.body).toEqual({ ...first, is_idempotent_replay: true });
    expect(await balance('s1')).toMatchObject({ used: 30 });
  });
});
