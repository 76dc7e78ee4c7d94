/**
 * GET /v1/events: newest first, paged by cursor, filtered by type and customer, one
 * project's only; insertEvents writes each id once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertEvents, type StoredEvent } from '../../src/events/store.js';
import { newId } from '../../src/ids.js';
import { startTestService, type TestProject, type TestService } from '../helpers.js';

let svc: TestService;
let p: TestProject;
let events: StoredEvent[];

beforeAll(async () => {
  svc = await startTestService();
  p = await svc.project();
  const t0 = Date.parse('2026-01-01T00:00:00.000Z');
  const at = (i: number) => new Date(t0 + i * 1000).toISOString();
  const customers = ['alice', 'bob', 'alice', 'carol', 'alice'];
  const types = ['deposit.created', 'balance.low', 'deposit.created', 'charge.uncovered', 'balance.depleted'] as const;
  events = customers.map((c, i) => ({ id: newId('evt'), type: types[i], created_at: at(i), project_id: p.projectId, data: { customer_id: c, n: i } }));
  await insertEvents(svc.rt.db, events);
  // Another project's event is never listed.
  const other = await svc.project();
  await insertEvents(svc.rt.db, [{ id: newId('evt'), type: 'deposit.created', created_at: at(9), project_id: other.projectId, data: { customer_id: 'alice' } }]);
});

afterAll(async () => {
  await svc?.close();
});

async function list(query: string) {
  return svc.call('GET', `/v1/events${query}`, { key: p.projectKey });
}

describe('GET /v1/events', () => {
  it('pages newest first', async () => {
    const newest = [...events].reverse();
    const first = await list('?limit=2');
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ object: 'list', has_more: true });
    expect(first.body.data).toEqual(newest.slice(0, 2));
    const second = await list(`?limit=2&cursor=${first.body.next_cursor}`);
    expect(second.body.data).toEqual(newest.slice(2, 4));
    const third = await list(`?limit=2&cursor=${second.body.next_cursor}`);
    expect(third.body).toMatchObject({ data: newest.slice(4), has_more: false, next_cursor: null });
  });

  it('filters by type and customer', async () => {
    expect((await list('?type=deposit.created')).body.data.map((e: StoredEvent) => e.id)).toEqual([events[2].id, events[0].id]);
    expect((await list('?customer_id=alice')).body.data.map((e: StoredEvent) => e.id)).toEqual([events[4].id, events[2].id, events[0].id]);
    expect((await list('?customer_id=alice&type=balance.depleted')).body.data.map((e: StoredEvent) => e.id)).toEqual([events[4].id]);
    expect((await list('?customer_id=nobody')).body).toMatchObject({ data: [], has_more: false });
  });

  it('refuses bad parameters and other keys', async () => {
    for (const [query, param] of [['?type=deposit', 'type'], ['?cursor=abc', 'cursor'], ['?limit=0', 'limit'], ['?after=x', 'after']]) {
      const r = await list(query);
      expect(r.status, query).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', param });
    }
    const customerKey = await p.customerKey('alice');
    expect((await svc.call('GET', '/v1/events', { key: customerKey })).status).toBe(403);
  });

  it('stores an event once, whatever is sent again under its id', async () => {
    await insertEvents(svc.rt.db, [{ ...events[0], data: { customer_id: 'mallory' } }]);
    expect((await list('?customer_id=mallory')).body.data).toEqual([]);
  });
});
