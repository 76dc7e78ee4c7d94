/**
 * The outbox entry format (src/redis/codec.ts): the scripts write each entry field as a
 * stream field, the nested parts as JSON of their own; an entry of the earlier format
 * (the whole entry as JSON in one field `e`, still in an outbox during a rolling upgrade)
 * reads the same and reaches PostgreSQL the same.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { customerKeys } from '../../src/redis/keys.js';
import { outbox_entry_fields, outboxEntryFields, parseOutboxEntry } from '../../src/redis/codec.js';
import { readOutboxEntries } from '../../src/ledger/outbox.js';
import { PersistLoop } from '../../workers/persist.js';
import { p, svc, useTestService } from '../support/service.js';

let persist: PersistLoop;

useTestService();
beforeAll(async () => {
  persist = new PersistLoop(svc.rt.redis, svc.rt.ledgerQueries, svc.rt.config.REDIS_PREFIX, 0, svc.rt.logger);
});

const post = async (path: string, body: Record<string, unknown>) => {
  const res = await svc.call('POST', path, { key: p.projectKey, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
};

describe('outbox entries', () => {
  it('are stream fields, with JSON only one level deep, and the earlier `e` format reads the same', async () => {
    const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'of1');
    await post('/v1/customers/deposit', { customer_id: 'of1', amount: 100 });
    await post('/v1/billing/deduct', { customer_id: 'of1', amount: 7, transaction_id: 'of-tx-1', description: 'a note' });
    const stream = await svc.rt.redis.xrange(k.outbox, '-', '+');
    // The deposit's entry, its deposit.created event (lua/includes/events.lua), the deduct's entry.
    expect(stream).toHaveLength(3);
    const [streamId, fields] = stream[2];
    // The event has the same fields in the same order.
    expect(stream[1][1].filter((_, i) => i % 2 === 0)).toEqual([...outbox_entry_fields]);
    const byName = new Map<string, string>();
    for (let i = 0; i < fields.length; i += 2) byName.set(fields[i], fields[i + 1]);
    expect(byName.has('e')).toBe(false);
    expect(byName.get('type')).toBe('DEDUCT');
    expect(byName.get('transaction_id')).toBe('of-tx-1');
    expect(byName.get('amount')).toBe('7');
    expect(byName.get('seq')).toBe('2');
    expect(byName.get('description')).toBe('a note');
    // Every entry has the same fields in the same order; a null one is ''. The nested
    // parts are JSON once.
    expect(fields.filter((_, i) => i % 2 === 0)).toEqual([...outbox_entry_fields]);
    expect(byName.get('returned_amount')).toBe('');
    expect(JSON.parse(byName.get('result')!)).toMatchObject({ transaction_id: 'of-tx-1', deducted_amount: '7' });
    expect(JSON.parse(byName.get('details')!)).toEqual([expect.objectContaining({ amount: '7' })]);
    expect(JSON.parse(byName.get('x')!)).toHaveProperty('h');

    const entry = parseOutboxEntry(fields);
    expect(entry).not.toHaveProperty('returned_amount');
    expect(outboxEntryFields(entry)).toEqual(fields);
    expect(entry).toMatchObject({ type: 'DEDUCT', seq: '2', amount: '7', transaction_id: 'of-tx-1' });
    // Written again in the earlier format, the entry reads the same.
    await svc.rt.redis.xdel(k.outbox, streamId);
    await svc.rt.redis.xadd(k.outbox, '*', 'e', JSON.stringify({ ...entry, returned_amount: null }));
    const [, , legacy] = await readOutboxEntries(svc.rt.redis, k.outbox);
    expect({ ...legacy, returned_amount: undefined }).toEqual({ ...entry, returned_amount: undefined });

    // Both formats reach PostgreSQL.
    expect(await persist.outbox.drain(k.base)).toBe(3);
    const rows = await svc.rt.db.any(sql.unsafe`
      SELECT type, seq, amount, description, result->>'deducted_amount' AS deducted, extra->>'h' AS h FROM ledger_entries
      WHERE project_id = ${p.projectId} AND customer_id = 'of1' ORDER BY seq`);
    expect(rows).toEqual([
      expect.objectContaining({ type: 'DEPOSIT', seq: 1 }),
      { type: 'DEDUCT', seq: 2, amount: 7, description: 'a note', deducted: '7', h: entry.x!.h },
    ]);
  });
});
