/**
 * The persist loop's COPY writer (src/ledger/copy-writer.ts): what it writes is what the
 * statement path writes, column for column; a repeated batch (the worker died between the
 * commit and the outbox trim) and a batch that overlaps one already written insert each
 * entry once; a COPY cut off half-way (the connection dies mid-stream) leaves nothing, and
 * the batch written again afterwards lands whole, once; a connection cut between batches
 * costs nothing; batches with deposits or usage records take the statement path.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { sql } from 'slonik';
import { customerKeys } from '../../src/redis/keys.js';
import { readOutboxEntries } from '../../src/ledger/outbox.js';
import { CopyEntryWriter } from '../../src/ledger/copy-writer.js';
import { copy_columns, copyRow } from '../../src/ledger/copy-row.js';
import type { OutboxEntry } from '../../src/redis/codec.js';
import { waitFor } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

let writer: CopyEntryWriter;

useTestService();
beforeAll(() => {
  writer = new CopyEntryWriter(svc.rt.config.DATABASE_URL, svc.rt.ledgerQueries, svc.rt.logger, 30_000, `persist-copy-test-${svc.rt.config.REDIS_PREFIX}`);
});
afterAll(async () => {
  await writer?.close();
});

const post = async (path: string, body: Record<string, unknown>) => {
  const res = await svc.call('POST', path, { key: p.projectKey, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
};

/**
 * A customer with a deposit, then `n` deducts, a freeze, a consume and an unfreeze; its
 * outbox's ledger entries, in order (the deposit's deposit.created event left out: a batch
 * with an event takes the statement path, see the last test).
 */
async function customerWithEntries(id: string, n: number): Promise<OutboxEntry[]> {
  await post('/v1/customers/deposit', { customer_id: id, amount: 1_000_000 });
  for (let i = 0; i < n; i++) {
    await post('/v1/billing/deduct', {
      customer_id: id, transaction_id: `${id}-d${i}`, amount: 3 + i, business_type: 'TASK\tA',
      // Every character COPY's text format escapes, and some it does not.
      description: `line 1\nline 2\r\ttab \\ backslash \\N "quote" é ${i}`,
    });
  }
  await post('/v1/billing/freeze', { customer_id: id, transaction_id: `${id}-f1`, amount: 50 });
  await post('/v1/billing/consume', { customer_id: id, transaction_id: `${id}-f1`, amount: 20 });
  await post('/v1/billing/freeze', { customer_id: id, transaction_id: `${id}-f2`, amount: 40 });
  await post('/v1/billing/unfreeze', { customer_id: id, transaction_id: `${id}-f2` });
  return (await readOutboxEntries(svc.rt.redis, customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, id).outbox)).filter((e) => e.type !== 'EVENT');
}

/** Every column of a customer's ledger rows but persisted_at, in seq order, as text. */
async function rows(customerId: string): Promise<Record<string, unknown>[]> {
  return [...(await svc.rt.db.any(sql.unsafe`
    SELECT ${sql.join(copy_columns.map((c) => sql.fragment`${sql.identifier([c])}::text AS ${sql.identifier([c])}`), sql.fragment`, `)}
    FROM ledger_entries WHERE project_id = ${p.projectId} AND customer_id = ${customerId} ORDER BY ledger_entries.seq`))];
}

describe('the COPY writer', () => {
  it('writes what the statement path writes, column for column', async () => {
    const entries = await customerWithEntries('cw1', 3);
    const [deposit, ...rest] = entries;
    expect(rest.map((e) => e.type)).toEqual(['DEDUCT', 'DEDUCT', 'DEDUCT', 'FREEZE', 'CONSUME', 'FREEZE', 'UNFREEZE']);
    // The deposit creates the customer and its source: the statement path writes it.
    const before = { ...writer.stats };
    expect(await writer.insertEntries([deposit])).toBe(1);
    expect(writer.stats.statements).toBe(before.statements + 1);
    expect(await writer.insertEntries(rest)).toBe(rest.length);
    expect(writer.stats.copied).toBe(before.copied + 1);
    const copied = await rows('cw1');
    expect(copied).toHaveLength(entries.length);
    expect(copied[1]).toMatchObject({ type: 'DEDUCT', amount: '3', business_type: 'TASK\tA', description: 'line 1\nline 2\r\ttab \\ backslash \\N "quote" é 0' });

    // The same entries through the statement path give the same rows.
    await svc.rt.db.query(sql.unsafe`DELETE FROM ledger_entries WHERE project_id = ${p.projectId} AND customer_id = 'cw1' AND seq > 1`);
    expect(await svc.rt.ledgerQueries.insertEntries(rest)).toBe(rest.length);
    expect(await rows('cw1')).toEqual(copied);
  });

  it('inserts each entry once when a batch is repeated, whole or overlapping', async () => {
    const [deposit, ...entries] = await customerWithEntries('cw2', 6);
    await writer.insertEntries([deposit]);
    const first = entries.slice(0, 4);
    expect(await writer.insertEntries(first)).toBe(4);
    // A worker that died after the commit and before the trim repeats the batch.
    const before = { ...writer.stats };
    expect(await writer.insertEntries(first)).toBe(0);
    expect(writer.stats.fellBack).toBe(before.fellBack + 1);
    // The next pass reads the repeated entries and the newer ones.
    expect(await writer.insertEntries(entries)).toBe(entries.length - 4);
    const written = await rows('cw2');
    expect(written.map((r) => Number(r.seq))).toEqual(Array.from({ length: entries.length + 1 }, (_, i) => i + 1));
    expect(new Set(written.map((r) => r.id)).size).toBe(written.length);
    // The connection is still usable: the next batch is a COPY again.
    await post('/v1/billing/deduct', { customer_id: 'cw2', transaction_id: 'cw2-more-1', amount: 1 });
    await post('/v1/billing/deduct', { customer_id: 'cw2', transaction_id: 'cw2-more-2', amount: 1 });
    const more = (await readOutboxEntries(svc.rt.redis, customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'cw2').outbox)).slice(-2);
    expect(more.map((e) => e.transaction_id)).toEqual(['cw2-more-1', 'cw2-more-2']);
    expect(await writer.insertEntries(more)).toBe(more.length);
    expect(writer.stats.copied).toBe(before.copied + 1);
  });

  it('leaves nothing of a COPY cut off half-way, and the batch written again lands whole, once', async () => {
    const [deposit, ...entries] = await customerWithEntries('cw3', 20);
    await writer.insertEntries([deposit]);
    // A COPY that sends half the rows, then loses its connection (a worker killed mid-COPY).
    const doomed = new pg.Client({ connectionString: svc.rt.config.DATABASE_URL, application_name: 'persist-copy-doomed' });
    await doomed.connect();
    doomed.on('error', () => undefined);
    const pid = (await doomed.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    const stream = doomed.query(copyFrom(`COPY ledger_entries (${copy_columns.join(', ')}) FROM STDIN`));
    stream.on('error', () => undefined);
    stream.write(entries.slice(0, 10).map(copyRow).join(''));
    // The server has the rows once its backend waits for more of the COPY.
    await waitFor(async () => {
      const r = await svc.rt.db.maybeOne(sql.unsafe`SELECT wait_event FROM pg_stat_activity WHERE pid = ${pid}`);
      return r !== null && (r as { wait_event: string | null }).wait_event === 'ClientRead';
    }, 10_000, 'the COPY to wait for more data');
    (doomed as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
    await waitFor(async () => (await svc.rt.db.maybeOne(sql.unsafe`SELECT 1 FROM pg_stat_activity WHERE pid = ${pid}`)) === null, 10_000, 'the backend to exit');
    expect(await rows('cw3')).toHaveLength(1);

    expect(await writer.insertEntries(entries)).toBe(entries.length);
    const written = await rows('cw3');
    expect(written.map((r) => Number(r.seq))).toEqual(Array.from({ length: entries.length + 1 }, (_, i) => i + 1));
  });

  it('writes through a connection that was cut between two batches, then copies on a new one', async () => {
    const [deposit, ...entries] = await customerWithEntries('cw5', 4);
    await writer.insertEntries([deposit]);
    expect(await writer.insertEntries(entries.slice(0, 2))).toBe(2);
    const application = `persist-copy-test-${svc.rt.config.REDIS_PREFIX}`;
    const killed = await svc.rt.db.anyFirst(sql.unsafe`
      SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ${application} AND datname = current_database()`);
    expect(killed.length).toBeGreaterThan(0);
    // pg_terminate_backend only signals: until the backend is gone, the next batch may still copy on it.
    await waitFor(async () => (await svc.rt.db.anyFirst(sql.unsafe`SELECT pid FROM pg_stat_activity WHERE application_name = ${application}`)).length === 0, 5_000, 'the writer\'s backend to end');
    // The batch is written, by the statement path if the COPY found its connection dead.
    expect(await writer.insertEntries(entries.slice(2, 4))).toBe(2);
    const before = { ...writer.stats };
    expect(await writer.insertEntries(entries.slice(4))).toBe(entries.length - 4);
    expect(writer.stats.copied).toBe(before.copied + 1);
    expect(await rows('cw5')).toHaveLength(entries.length + 1);
  });

  it('writes nothing of a batch one of whose entries PostgreSQL refuses, and the good ones after', async () => {
    const [deposit, ...entries] = await customerWithEntries('cw4', 4);
    await writer.insertEntries([deposit]);
    // The last entry breaks a check (amount > 0) after the COPY took the others.
    const bad = { ...entries[entries.length - 1], amount: '0' };
    await expect(writer.insertEntries([...entries.slice(0, -1), bad])).rejects.toThrow();
    expect(await rows('cw4')).toHaveLength(1);
    // An entry that cannot even be put into COPY's format (a time that is no number)
    // fails before the COPY starts, and leaves the connection usable.
    await expect(writer.insertEntries([{ ...entries[0], at: 'x' }])).rejects.toThrow();
    const before = { ...writer.stats };
    expect(await writer.insertEntries(entries)).toBe(entries.length);
    expect(writer.stats.copied).toBe(before.copied + 1);
    expect(await rows('cw4')).toHaveLength(entries.length + 1);
  });

  it('hands a batch that carries an event to the statement path, which writes the event with the entries', async () => {
    await post('/v1/customers/deposit', { customer_id: 'cw6', amount: 5 });
    const all = await readOutboxEntries(svc.rt.redis, customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'cw6').outbox);
    expect(all.map((e) => e.type)).toEqual(['DEPOSIT', 'EVENT']);
    const before = { ...writer.stats };
    expect(await writer.insertEntries(all)).toBe(1);
    expect(writer.stats.statements).toBe(before.statements + 1);
    expect(await svc.rt.db.oneFirst(sql.unsafe`SELECT count(*)::int FROM events WHERE id = ${all[1].id}`)).toBe(1);
  });
});
