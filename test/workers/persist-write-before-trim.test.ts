/**
 * The persist loop trims an entry from its customer's outbox only once PostgreSQL has it:
 * a write that PostgreSQL fails leaves every entry in the outbox (and the customer dirty),
 * and the pass after PostgreSQL is back writes them, then trims them. The loop here is the
 * worker's (workers/persist.ts, with its COPY writer), reaching PostgreSQL through a TCP
 * proxy that the test closes; its passes are called one by one.
 */
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createDb } from '../../src/db/pool.js';
import { CopyEntryWriter } from '../../src/ledger/copy-writer.js';
import { createLedgerQueries } from '../../src/ledger/queries.js';
import { customerKeys, dirtyKeyOf } from '../../src/redis/keys.js';
import { PersistLoop } from '../../workers/persist.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { p, svc, useTestService } from '../support/service.js';

// No workers of the service's own: the loop below is the only one copying its entries.
useTestService({ workers: false });

const url = process.env.TEST_DATABASE_URL!;
const proxy = TcpProxy.to(url, 5432);
let db: Awaited<ReturnType<typeof createDb>>;
let loop: PersistLoop;

beforeAll(async () => {
  await proxy.start();
  db = await createDb(proxy.via(url), 2);
  const queries = createLedgerQueries(db);
  loop = new PersistLoop(svc.rt.redis, queries, svc.rt.config.REDIS_PREFIX, 5, svc.rt.logger, {}, new CopyEntryWriter(proxy.via(url), queries, svc.rt.logger));
});
afterAll(async () => {
  await db?.end();
  await proxy.close();
});

/** The customer's entries PostgreSQL holds, read directly (not through the proxy). */
const stored = (customerId: string) =>
  svc.rt.db.oneFirst(sql.type(z.object({ n: z.number() }))`
    SELECT count(*)::int AS n FROM ledger_entries WHERE project_id = ${p.projectId} AND customer_id = ${customerId}`);

describe('the persist loop', () => {
  it('trims entries from the outbox only after PostgreSQL has them', async () => {
    const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'w1');
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'w1', amount: 100 } })).status).toBe(200);
    expect((await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'w1', transaction_id: 'd1', amount: 10 } })).status).toBe(200);
    // The deposit's entry, its deposit.created event, the deduct's entry.
    expect(await svc.rt.redis.xlen(k.outbox)).toBe(3);

    // PostgreSQL unreachable: the write fails, nothing is trimmed, the customer stays dirty.
    proxy.cut();
    await proxy.refuse();
    const failed = await loop.pass();
    expect(failed).toMatchObject({ moved: 0, failed: true });
    expect(await svc.rt.redis.xlen(k.outbox)).toBe(3);
    expect(await stored('w1')).toBe(0);
    expect(await svc.rt.redis.sismember(dirtyKeyOf(svc.rt.config.REDIS_PREFIX, k.base), k.base)).toBe(1);

    // Back: the next pass writes, and only then trims (checked at the trim itself).
    await proxy.start();
    const redis = svc.rt.redis;
    const xdel = redis.xdel.bind(redis);
    const storedAtTrim: number[] = [];
    redis.xdel = (async (key: string, ...ids: string[]) => {
      if (key === k.outbox) storedAtTrim.push(await stored('w1'));
      return xdel(key, ...ids);
    }) as typeof redis.xdel;
    try {
      expect(await loop.pass()).toMatchObject({ moved: 3, failed: false });
    } finally {
      redis.xdel = xdel;
    }
    expect(storedAtTrim).toEqual([2]);
    expect(await svc.rt.redis.xlen(k.outbox)).toBe(0);
    expect(await stored('w1')).toBe(2);
  });
});
