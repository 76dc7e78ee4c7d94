/**
 * Money events written by the scripts (lua/includes/events.lua): an EVENT entry in the
 * customer's outbox, written with the change, copied to the events table by the persist
 * worker in the transaction of the ledger entries, listed by GET /v1/events; a persist
 * pass repeated writes it once; the ledger readers and reconcile ignore it.
 */
import { describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { parseOutboxEntry } from '../../src/redis/codec.js';
import { customerKeys } from '../../src/redis/keys.js';
import { reconcileOverApi, waitFor, type Json } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ workers: true });

const deposit = (body: Record<string, unknown>) => svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body });

async function events(query: string): Promise<Json[]> {
  const r = await svc.call('GET', `/v1/events${query}`, { key: p.projectKey });
  expect(r.status).toBe(200);
  return r.body.data as Json[];
}

const countRow = z.object({ n: z.number() });
async function eventRows(id: string): Promise<number> {
  return svc.rt.db.oneFirst(sql.type(countRow)`SELECT count(*)::int AS n FROM events WHERE id = ${id}`);
}

describe('deposit.created', () => {
  it('is written by the deposit script, persisted with its entry and listed by GET /v1/events', async () => {
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const r = await deposit({ customer_id: 'ev-dep', amount: 1500, wallet: 'credits', idempotency_key: 'dep-1', expires_at: expires });
    expect(r.status).toBe(200);
    await svc.drained();
    const [e] = await waitFor(async () => {
      const list = await events('?customer_id=ev-dep&type=deposit.created');
      return list.length > 0 ? list : null;
    }, 10_000, 'the deposit.created event');
    expect(e).toMatchObject({
      type: 'deposit.created',
      project_id: p.projectId,
      data: {
        customer_id: 'ev-dep', deposit_id: r.body.record_id, account_id: r.body.account_id, wallet: 'credits', amount: 1500,
        wallet_total: 1500, expires_at: expires, starts_at: null, idempotency_key: 'dep-1',
      },
    });
    expect(e.id).toMatch(/^evt_/);
    // A replay of the deposit writes no second event.
    expect((await deposit({ customer_id: 'ev-dep', amount: 1500, wallet: 'credits', idempotency_key: 'dep-1', expires_at: expires })).status).toBe(200);
    await svc.drained();
    expect(await events('?customer_id=ev-dep')).toHaveLength(1);
  });

  it('a persist pass run twice writes the event once; the ledger lists no EVENT entry', async () => {
    // Without the workers' loop in the way: the outbox is read and written by hand.
    await svc.workers!.persist.stop();
    try {
      const r = await deposit({ customer_id: 'ev-twice', amount: 7, wallet: 'credits' });
      expect(r.status).toBe(200);
      const k = customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, 'ev-twice');
      const entries = (await svc.rt.redis.xrange(k.outbox, '-', '+')).map(([, f]) => parseOutboxEntry(f));
      expect(entries.map((e) => e.type)).toEqual(['DEPOSIT', 'EVENT']);
      const ev = entries[1];
      expect(ev).toMatchObject({ state: 'deposit.created', seq: entries[0].seq, transaction_id: entries[0].id });
      expect(await svc.rt.ledgerQueries.insertEntries(entries)).toBe(1);
      expect(await svc.rt.ledgerQueries.insertEntries(entries)).toBe(0);
      expect(await eventRows(ev.id)).toBe(1);
      // The pending outbox is merged into the ledger pages: the event is not a ledger entry.
      const ledger = await svc.call('GET', '/v1/customers/ev-twice/ledger', { key: p.projectKey });
      expect(ledger.status).toBe(200);
      expect(ledger.body.data.map((e: Json) => e.type)).toEqual(['DEPOSIT']);
    } finally {
      svc.workers!.persist.start();
    }
    await svc.drained();
    expect(await eventRows((await events('?customer_id=ev-twice'))[0].id)).toBe(1);
  });

  it('freeze.released and freeze.consumed: written when a TTL settles a freeze, not when the API does', async () => {
    expect((await deposit({ customer_id: 'ev-ttl', amount: 100, wallet: 'credits' })).status).toBe(200);
    const freeze = (body: Record<string, unknown>) => svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'ev-ttl', ...body } });
    expect((await freeze({ transaction_id: 'ttl-r', amount: 10, release_after_seconds: 5, business_type: 'JOB' })).status).toBe(200);
    expect((await freeze({ transaction_id: 'ttl-c', amount: 20, consume_after_seconds: 5 })).status).toBe(200);
    expect((await freeze({ transaction_id: 'api-u', amount: 5, release_after_seconds: 5 })).status).toBe(200);
    expect((await svc.call('POST', '/v1/billing/unfreeze', { key: p.projectKey, body: { transaction_id: 'api-u' } })).status).toBe(200);
    svc.rt.clock.advance(6_000);
    // The next script on the customer settles what is due (or the expiry job does).
    expect((await svc.call('GET', '/v1/customers/ev-ttl/balance', { key: p.projectKey })).body).toMatchObject({ frozen: 0, used: 20 });
    await svc.drained();
    const released = await events('?customer_id=ev-ttl&type=freeze.released');
    expect(released.map((e) => e.data)).toEqual([{ customer_id: 'ev-ttl', transaction_id: 'ttl-r', amount: 10, wallet: 'credits', business_type: 'JOB' }]);
    const consumed = await events('?customer_id=ev-ttl&type=freeze.consumed');
    expect(consumed.map((e) => e.data)).toEqual([{ customer_id: 'ev-ttl', transaction_id: 'ttl-c', amount: 20, wallet: 'credits', business_type: null }]);
  });

  it('reconcile reports no drift for a customer whose outbox and ledger hold events', async () => {
    expect((await deposit({ customer_id: 'ev-rec', amount: 10, wallet: 'credits' })).status).toBe(200);
    const report = await reconcileOverApi(svc, p);
    expect(report.drift ?? []).toEqual([]);
  });
});
