/**
 * An outbox entry PostgreSQL refuses for good (docs/OPERATIONS.md, "Quarantined ledger
 * entries") is parked in persist_quarantine with its raw fields and trimmed: the
 * customer's later entries and other customers' reach PostgreSQL within the usual lag,
 * and /health, /metrics and reconcile name the hole. Entries the edge refuses are planted
 * straight into the outbox: a NUL byte in a text column (22021), an amount bigint cannot
 * hold (22003), an `x` our own serialization cannot write, and fields that do not parse.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { sql } from 'slonik';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { outboxEntryFields, type OutboxEntry } from '../../src/redis/codec.js';
import { customerKeys, dirtyKeyOf } from '../../src/redis/keys.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { unwritableReason } from '../../src/ledger/write-refusals.js';
import { reconcileOverApi, waitFor, type TestProject } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });
let other: TestProject;

/** The longest an entry may take to reach PostgreSQL here: the usual lag (a pass and its wait, 250 ms at most) with room for a busy machine. */
const usual_lag_ms_max = 2_000;

beforeAll(async () => {
  other = await svc.project('B');
  for (const [project, customer] of [[p, 'bad'], [p, 'good'], [other, 'tenant']] as const) {
    expect((await svc.call('POST', '/v1/customers/deposit', { key: project.projectKey, body: { customer_id: customer, amount: 1000 } })).status).toBe(200);
  }
  await svc.drained();
});

/**
 * A DEDUCT entry of `customer` at the next seq its Redis would give, with `over` changed
 * and the stream fields in `raw` replaced as they are; or stream fields of its own.
 */
async function plant(customer: string, over: Partial<OutboxEntry> | string[], raw: Record<string, string> = {}): Promise<number> {
  const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customer);
  const seq = await svc.rt.redis.hincrby(k.meta, 'seq', 1);
  const fields = Array.isArray(over)
    ? over
    : outboxEntryFields({
      id: `le_planted_${p.projectId}_${seq}`, seq: String(seq), project_id: p.projectId, customer_id: customer, at: String(Date.now()), type: 'DEDUCT',
      transaction_id: `planted-${seq}`, amount: '5', details: [], result: '{"amount":"5"}', ...over,
    } as OutboxEntry);
  for (const [name, value] of Object.entries(raw)) fields[fields.indexOf(name) + 1] = value;
  await svc.rt.redis.xadd(k.outbox, '*', ...fields);
  await svc.rt.redis.sadd(dirtyKeyOf(svc.rt.config.REDIS_PREFIX, k.base), k.base);
  return seq;
}

const persistedRow = z.object({ seq: z.number() });
async function persistedSeq(project: TestProject, transactionId: string): Promise<number | null> {
  return svc.rt.db.maybeOneFirst(sql.type(persistedRow)`SELECT seq FROM ledger_entries WHERE project_id = ${project.projectId} AND transaction_id = ${transactionId}`);
}

/** Deducts, and how long the entry took to reach PostgreSQL (throws past `usual_lag_ms_max`). */
async function deductPersisted(project: TestProject, customer: string, transactionId: string): Promise<number> {
  const res = await svc.call('POST', '/v1/billing/deduct', { key: project.projectKey, body: { customer_id: customer, transaction_id: transactionId, amount: 5 } });
  expect(res.status).toBe(200);
  const started = Date.now();
  await waitFor(() => persistedSeq(project, transactionId), usual_lag_ms_max, `${transactionId} in PostgreSQL`);
  return Date.now() - started;
}

const deep = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;

describe('an entry PostgreSQL refuses for good', () => {
  const planted: Record<string, number> = {};

  it('is quarantined, and the customer\'s later entries and other customers\' persist within the usual lag', async () => {
    planted.nul = await plant('bad', { description: 'a\u0000b' });
    planted.amount = await plant('bad', { amount: '99999999999999999999' });
    planted.deep = await plant('bad', {}, { x: deep(200_000) });
    planted.unreadable = await plant('bad', ['garbage', 'not an entry']);

    // Later entries of the same customer, of another customer, of another tenant.
    for (const [project, customer, txid] of [[p, 'bad', 'after-1'], [p, 'good', 'good-1'], [other, 'tenant', 'tenant-1'], [p, 'bad', 'after-2']] as const) {
      expect(await deductPersisted(project, customer, txid)).toBeLessThan(usual_lag_ms_max);
    }
    expect(await persistedSeq(p, 'after-1')).toBeGreaterThan(planted.unreadable);
    // The outbox is empty: the refused entries are parked, not waiting.
    await svc.drained();

    const rows = await svc.rt.ledgerQueries.quarantine(svc.rt.config.REDIS_PREFIX).open({ projectId: p.projectId, customerId: 'bad' });
    expect(rows.map((r) => [r.seq, r.sqlstate])).toEqual([
      [planted.nul, '22021'],
      [planted.amount, '22003'],
      [planted.deep, null],
      [null, null],
    ]);
    // The fields as Redis held them, byte for byte: the NUL included.
    const nul = rows[0].fields.map((f) => f.toString('utf8'));
    expect(nul[nul.indexOf('description') + 1]).toBe('a\u0000b');
    expect(rows[2].error).toMatch(/call stack/);
    expect(rows[3].fields.map((f) => f.toString('utf8'))).toEqual(['garbage', 'not an entry']);
    // Nothing of theirs reached the ledger.
    for (const seq of [planted.nul, planted.amount, planted.deep]) expect(await persistedSeq(p, `planted-${seq}`)).toBeNull();
  });

  it('shows in /health (degraded, never 503) and in svc_persist_quarantined_entries', async () => {
    const health = await svc.call('GET', '/health');
    expect(health.status).toBe(200);
    expect(health.body.status).toBe('degraded');
    expect(health.body.checks.postgres).toEqual({ status: 'ok', quarantined_entries: 4 });
    expect(health.body.warnings.join('\n')).toMatch(/4 ledger entries .* quarantined/);
    const metrics = await fetch(`${svc.url}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(/^svc_persist_quarantined_entries 4$/m);
  });

  it('is a hole that reconcile names, and a repair leaves that customer\'s Redis alone', async () => {
    const report = await reconcileOverApi(svc, p);
    expect(report.quarantined_total).toBe(4);
    expect(report.quarantined.map((q) => [q.customer_id, q.seq])).toEqual([
      ['bad', planted.nul], ['bad', planted.amount], ['bad', planted.deep], ['bad', null],
    ]);
    const balance = async () => {
      const { as_of: _asOf, ...rest } = (await svc.call('GET', '/v1/customers/bad/balance', { key: p.projectKey })).body as Record<string, unknown>;
      return rest;
    };
    const before = await balance();
    expect(before).toMatchObject({ used: 10 });
    const repaired = await reconcile(svc.rt, { repair: true, projectId: p.projectId });
    expect(repaired.quarantined_total).toBe(4);
    expect(await balance()).toEqual(before);
    // Another tenant's report has none.
    expect((await reconcileOverApi(svc, other)).quarantined_total).toBe(0);
  });

  it('an operator fixes a field and releases the entry: written at its seq, the hole filled, /health counts one less', async () => {
    const cli = async (...args: string[]) => {
      const env = { ...process.env, DATABASE_URL: process.env.TEST_DATABASE_URL, REDIS_PREFIX: svc.rt.config.REDIS_PREFIX, LOG_LEVEL: 'warn' };
      try {
        const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'src/cli/quarantine.ts', ...args], { env });
        return { code: 0, out: stdout };
      } catch (err) {
        const e = err as { code: number; stdout: string; stderr: string };
        return { code: e.code, out: e.stdout + e.stderr };
      }
    };
    const quarantine = svc.rt.ledgerQueries.quarantine(svc.rt.config.REDIS_PREFIX);
    const [nul] = await quarantine.open({ projectId: p.projectId, customerId: 'bad' });
    expect(nul.seq).toBe(planted.nul);
    // Refused as it stands: PostgreSQL still cannot store it.
    const refused = await cli('release', String(nul.id));
    expect(refused.code).toBe(1);
    expect(refused.out).toMatch(/not released: PostgreSQL refused it/);
    const fixed = await cli('set', String(nul.id), 'description', 'ab');
    expect(fixed.code).toBe(0);
    expect(fixed.out).toContain('description = "ab"');
    const released = await cli('release', String(nul.id));
    expect(released).toEqual({ code: 0, out: `released ${nul.id}: written to the ledger\n` });
    expect(await persistedSeq(p, `planted-${planted.nul}`)).toBe(planted.nul);
    expect((await svc.call('GET', '/health')).body.checks.postgres.quarantined_entries).toBe(3);
    // Released once: a second release says so.
    expect((await cli('release', String(nul.id))).out).toMatch(/released already/);
  });

  it('our own serialization failing is a data refusal (unwritableReason), a sound entry is not', () => {
    const base = { id: 'le_x', seq: '1', project_id: 'p', customer_id: 'c', at: '1', type: 'DEDUCT', transaction_id: 't', amount: '5', details: [], result: '{}' } as OutboxEntry;
    expect(unwritableReason(base)).toBeNull();
    expect(unwritableReason({ ...base, x: JSON.parse(deep(200_000)) as Record<string, unknown> })).toBeInstanceOf(RangeError);
    expect(unwritableReason({ ...base, at: 'not a time' })).toBeInstanceOf(RangeError);
  });
});
