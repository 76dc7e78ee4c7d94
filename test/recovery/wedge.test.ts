/**
 * The wedge (issue 8, item 3) without a Redis restart: a customer's keys go back to an
 * older state in place (DUMP before, RESTORE after), so run_id does not change and the
 * generation guard has nothing to see. PostgreSQL then holds entries seq N+1..N+k that
 * Redis forgot, and the next operations write seq N+1... under new ids, which
 * UNIQUE(project_id, customer_id, seq) refuses.
 *
 * The operations on the stale state cover the class: a new deduct, a retry of a forgotten
 * deduct (applied again, as the stale Redis did not know it), and a release of a freeze
 * that a forgotten entry had consumed. Whatever path brings the customer back (the
 * workers' automatic repair, or reconcile --repair after the loop set the customer
 * aside), the loop must never spin, other customers keep draining, the forgotten
 * operations answer as replays, every acknowledged entry is in the ledger with a
 * gapless seq, and reconcile finds no drift, reporting what it kept as anomalies.
 */
import { Redis } from 'ioredis';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcile } from '../../src/reconcile/walk.js';
import { customerKeys, dirtyKeyOf, scriptKeys } from '../../src/redis/keys.js';
import { setAsideKey } from '../../src/ledger/outbox.js';
import { PersistLoop } from '../../workers/persist.js';
import { startTestService, waitFor, type ApiResponse, type TestProject, type TestService } from '../helpers.js';

let auto: TestService;
let manual: TestService;

beforeAll(async () => {
  [auto, manual] = await Promise.all([startTestService({ workers: true }), startTestService()]);
}, 30_000);

afterAll(async () => {
  await Promise.all([auto?.close(), manual?.close()]);
});

interface Applied {
  path: string;
  body: Record<string, unknown>;
  response: Record<string, unknown>;
}

class Scenario {
  readonly applied: Record<string, Applied> = {};

  constructor(
    readonly svc: TestService,
    readonly p: TestProject,
  ) {}

  post(path: string, body: Record<string, unknown>): Promise<ApiResponse> {
    return this.svc.call('POST', path, { key: this.p.projectKey, body });
  }

  async apply(name: string, path: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const res = await this.post(path, body);
    expect([name, res.status, res.body.is_idempotent_replay]).toEqual([name, 200, false]);
    this.applied[name] = { path, body, response: res.body };
    return res.body;
  }

  keys(customer: string): string[] {
    return scriptKeys(customerKeys(this.svc.rt.config.REDIS_PREFIX, this.p.projectId, customer));
  }

  async outboxLength(customer: string): Promise<number> {
    return this.svc.rt.redis.xlen(customerKeys(this.svc.rt.config.REDIS_PREFIX, this.p.projectId, customer).outbox);
  }

  async ledger(customer: string): Promise<{ seq: number; type: string; transaction_id: string }[]> {
    return [
      ...(await this.svc.rt.db.any(sql.unsafe`
        SELECT seq::int AS seq, type, transaction_id FROM ledger_entries
        WHERE project_id = ${this.p.projectId} AND customer_id = ${customer} ORDER BY seq`)),
    ] as { seq: number; type: string; transaction_id: string }[];
  }

  /**
   * Runs the story up to the clash. `persist` copies the outboxes to PostgreSQL. Returns
   * once alice's stale entries (seq numbers PostgreSQL already holds) are in her outbox.
   */
  async runUpToTheClash(persist: () => Promise<void>): Promise<void> {
    await this.apply('deposit alice', '/v1/customers/deposit', { customer_id: 'alice', amount: 1000, idempotency_key: 'dep-alice' });
    await this.apply('freeze f0', '/v1/billing/freeze', { customer_id: 'alice', transaction_id: 'f0', amount: 40 });
    await this.apply('deposit bob', '/v1/customers/deposit', { customer_id: 'bob', amount: 500 });
    await persist();

    const conn = new Redis(this.svc.rt.config.REDIS_URL);
    const saved = await Promise.all(this.keys('alice').map(async (k) => [k, await conn.dumpBuffer(k)] as const));

    // Acknowledged and persisted, then forgotten by alice's keys.
    await this.apply('deduct d1', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd1', amount: 100 });
    await this.apply('deduct d2', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd2', amount: 50 });
    await this.apply('freeze f1', '/v1/billing/freeze', { customer_id: 'alice', transaction_id: 'f1', amount: 30 });
    await this.apply('consume f0', '/v1/billing/consume', { transaction_id: 'f0', amount: 25 });
    await persist();

    for (const [k, dump] of saved) {
      if (dump === null) await conn.del(k);
      else await conn.restore(k, 0, dump, 'REPLACE');
    }
    conn.disconnect();

    // On the stale state: a new deduct, a retry of a forgotten one (the stale Redis does
    // not know it and applies it again) and a release of the freeze that was consumed.
    await this.apply('deduct d3 (stale)', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd3', amount: 20 });
    await this.apply('deduct d1 again (stale)', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd1', amount: 100 });
    await this.apply('unfreeze f0 (stale)', '/v1/billing/unfreeze', { transaction_id: 'f0' });
    await this.apply('deduct b1', '/v1/billing/deduct', { customer_id: 'bob', transaction_id: 'b1', amount: 5 });
  }

  /** What must hold once alice is repaired, whichever way. */
  async expectWhole(): Promise<void> {
    const entries = await this.ledger('alice');
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
    // Every acknowledged entry, in the order of the story: the forgotten ones, then the
    // stale ones after them.
    expect(entries.map((e) => (e.type === 'DEPOSIT' ? 'DEPOSIT' : `${e.type} ${e.transaction_id}`))).toEqual([
      'DEPOSIT', 'FREEZE f0', 'DEDUCT d1', 'DEDUCT d2', 'FREEZE f1', 'CONSUME f0', 'DEDUCT d3', 'DEDUCT d1', 'UNFREEZE f0',
    ]);
    // The forgotten operations are back: replays with their original results.
    for (const name of ['deduct d2', 'freeze f1', 'consume f0', 'deduct d3 (stale)']) {
      const { path, body, response } = this.applied[name];
      const res = await this.post(path, body);
      expect([name, res.status, res.body]).toEqual([name, 200, { ...response, is_idempotent_replay: true }]);
    }
    // Used: f0's 25, d1 twice (both acknowledged as applied), d2 50, d3 20; f1 frozen.
    const balance = await this.svc.call('GET', '/v1/customers/alice/balance', { key: this.p.projectKey });
    expect([balance.body.total, balance.body.used, balance.body.frozen, balance.body.available]).toEqual([1000, 295, 30, 675]);

    await this.apply('deduct d4', '/v1/billing/deduct', { customer_id: 'alice', transaction_id: 'd4', amount: 5 });
    await waitFor(async () => (await this.outboxLength('alice')) === 0, 10_000, "alice's outbox to drain");
    expect((await this.ledger('alice')).at(-1)).toMatchObject({ type: 'DEDUCT', transaction_id: 'd4', seq: entries.length + 1 });

    const report = await reconcile(this.svc.rt, { projectId: this.p.projectId, repair: false });
    expect(report).toMatchObject({ customers_with_drift: 0, drift: [], errors: [] });
    const anomalies = report.anomalies.map((a) => a.message).join('\n');
    expect(anomalies).toMatch(/DEDUCT entry seq \d+ applied transaction d1 again/);
    expect(anomalies).toMatch(/UNFREEZE entry seq \d+ settles f0, which an earlier entry had already settled/);
    const health = await this.svc.call('GET', '/health');
    expect(health.body.checks.redis).toMatchObject({ persist_set_aside: 0, ledger_anomalies: 1 });
  }
}

describe('a customer whose Redis state went back in place (the wedge)', () => {
  it('the workers repair it by themselves: renumbered after the ledger, rebuilt, other customers drain', async () => {
    const s = new Scenario(auto, await auto.project('B'));
    await s.runUpToTheClash(() => auto.drained());
    await waitFor(async () => (await s.outboxLength('alice')) === 0 && (await s.outboxLength('bob')) === 0, 15_000, 'both outboxes to drain');
    expect((await s.ledger('bob')).map((e) => e.transaction_id)).toContain('b1');
    await s.expectWhole();
  }, 60_000);

  it('without a repair hook the loop sets the customer aside and goes on; reconcile --repair brings it back', async () => {
    const s = new Scenario(manual, await manual.project('B'));
    const { rt } = manual;
    const prefix = rt.config.REDIS_PREFIX;
    let inserts = 0;
    const counted = { ...rt.ledgerQueries, insertEntries: (e: Parameters<typeof rt.ledgerQueries.insertEntries>[0]) => (inserts++, rt.ledgerQueries.insertEntries(e)) };
    const drainAll = async () => {
      const loop = new PersistLoop(rt.redis, rt.ledgerQueries, prefix, 0, rt.logger);
      for (const c of ['alice', 'bob']) await loop.outbox.drain(customerKeys(prefix, s.p.projectId, c).base);
      for (const c of ['alice', 'bob']) await rt.redis.del(dirtyKeyOf(prefix, customerKeys(prefix, s.p.projectId, c).base));
    };
    await s.runUpToTheClash(drainAll);

    const loop = new PersistLoop(rt.redis, counted, prefix, 5, rt.logger);
    loop.start();
    try {
      const alice = customerKeys(prefix, s.p.projectId, 'alice').base;
      await waitFor(async () => (await s.outboxLength('bob')) === 0 && (await rt.redis.hexists(setAsideKey(prefix), alice)) === 1, 10_000, 'bob drained, alice set aside');
      // Set aside, not back in the dirty set: the loop has nothing left to retry, so it
      // cannot spin (the sweeper finds the outbox again on its schedule).
      expect(await rt.redis.sismember(dirtyKeyOf(prefix, alice), alice)).toBe(0);
      expect(inserts).toBeLessThanOrEqual(3);
      expect(await s.outboxLength('alice')).toBe(3);
      const health = await manual.call('GET', '/health');
      expect(health.body.checks.redis.persist_set_aside).toBe(1);
      expect(health.body.warnings.join('\n')).toMatch(/set aside: run npm run reconcile -- --repair/);

      const report = await reconcile(rt, { projectId: s.p.projectId, repair: true });
      expect(report.errors).toEqual([]);
      expect(report.anomalies.map((a) => a.message).join('\n')).toMatch(/3 entries written on a Redis that had forgotten entries in PostgreSQL, renumbered from seq 7/);
      expect(await s.outboxLength('alice')).toBe(0);
      await s.expectWhole();
    } finally {
      await loop.stop();
    }
  }, 60_000);
});
