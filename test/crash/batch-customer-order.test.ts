/**
 * The order of rows within one written batch, not the order of writing and trimming
 * (test/workers/persist-write-before-trim.test.ts): the persist loop writes one batch of
 * many customers' outbox entries in one transaction, and the deposit that creates a
 * customer must reach PostgreSQL before a later deposit of the same customer in the same
 * batch, whatever the (random) entry ids are: the later deposit's source row references
 * the customer row (a foreign key).
 */
import { describe, expect, it } from 'vitest';
import { parseOutboxEntry } from '../../src/redis/codec.js';
import { customerKeys } from '../../src/redis/keys.js';
import { p, svc, useTestService } from '../support/service.js';

// No workers: the outbox stays for the test to read and write as one batch.
useTestService();

describe('a batch written to PostgreSQL: the customer row before the rows that reference it', () => {
  it('stores a new customer and its second deposit whichever entry id sorts first', async () => {
    for (const amount of [100, 200]) {
      expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'po1', amount } })).status).toBe(200);
    }
    const outbox = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'po1').outbox;
    // The two DEPOSIT entries (their deposit.created events left out).
    const [creating, later] = (await svc.rt.redis.xrange(outbox, '-', '+')).map(([, fields]) => parseOutboxEntry(fields)).filter((e) => e.type !== 'EVENT');
    // Ids are random: give the later deposit the id that sorts first.
    const entries = [{ ...creating, id: `${creating.id}_z` }, { ...later, id: `${creating.id}_a` }];
    await expect(svc.rt.ledgerQueries.insertEntries(entries)).resolves.toBe(2);
  });
});
