/**
 * The source layout (lua/includes/customer.lua, "Sources"): draws walk the live set in
 * draw order, spent and expired sources move to the dead set, no script reads a dead
 * source, and archived ones (gone from Redis, kept in PostgreSQL) still count where the
 * contract shows them: wallet totals, the customer's source list, the deposit cap.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { customerKeys, type CustomerKeys } from '../../src/redis/keys.js';
import { readSources } from '../../src/ledger/sources.js';
import { reconcile } from '../../src/reconcile/walk.js';
import { PersistLoop } from '../../workers/persist.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

let persist: PersistLoop;

// No workers: the test decides when the outbox reaches PostgreSQL.
useTestService();
beforeAll(() => {
  persist = new PersistLoop(svc.rt.redis, svc.rt.ledgerQueries, svc.rt.config.REDIS_PREFIX, 0, svc.rt.logger);
});

const scope = () => ({ projectId: p.projectId, organizationId: p.organizationId });
const keysOf = (customerId: string): CustomerKeys => customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, customerId);
const post = async (path: string, body: Record<string, unknown>) => {
  const res = await svc.call('POST', path, { key: p.projectKey, body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as Record<string, unknown>;
};
const get = async (path: string) => {
  const res = await svc.call('GET', path, { key: p.projectKey });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as Record<string, unknown>;
};
const drawn = (body: Record<string, unknown>, field: string) =>
  (body[field] as { account_id: string; amount: string | number }[]).map((d) => [d.account_id, Number(d.amount)]);
const liveIds = async (k: CustomerKeys) => (await svc.rt.redis.zrange(k.live, 0, -1)).map((m) => m.slice(m.indexOf(':') + 1));
const noDrift = async () => {
  const report = await reconcile(svc.rt, { projectId: p.projectId, repair: false });
  expect(report.drift).toEqual([]);
  expect(report.errors).toEqual([]);
};

describe('draw order through the live set', () => {
  it('soonest expiry first, none last, then oldest; not started skipped; spent and expired leave the live set', async () => {
    const c = 'order';
    const k = keysOf(c);
    const now = Date.now() + svc.rt.clock.offsetMs();
    const at = (ms: number) => new Date(now + ms).toISOString();
    const hour = 3_600_000;
    const dep = async (extra: Record<string, unknown>) =>
      (await post('/v1/customers/deposit', { customer_id: c, amount: 10, ...extra })).account_id as string;
    const s1 = await dep({});
    const s2 = await dep({ expires_at: at(3 * hour) });
    const s3 = await dep({ starts_at: at(hour / 2), expires_at: at(hour) });
    const s4 = await dep({ expires_at: at(2 * hour) });
    const s5 = await dep({});
    const s6 = await dep({ expires_at: at(hour) });

    // s3 (same expiry as s6, older) has not started.
    let d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'o1', amount: 25 });
    expect(drawn(d, 'deduct_details')).toEqual([[s6, 10], [s4, 10], [s2, 5]]);
    expect(await liveIds(k)).toEqual([s3, s2, s1, s5]);
    expect(await svc.rt.redis.zrange(k.dead, 0, -1)).toEqual(expect.arrayContaining([s4, s6]));

    svc.rt.clock.advance(hour / 2 + 60_000);
    d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'o2', amount: 5 });
    expect(drawn(d, 'deduct_details')).toEqual([[s3, 5]]);

    // s3 expires with 5 left: the next draw passes it and moves it to dead.
    svc.rt.clock.advance(hour / 2);
    d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'o3', amount: 10 });
    expect(drawn(d, 'deduct_details')).toEqual([[s2, 5], [s1, 5]]);
    expect(await liveIds(k)).toEqual([s1, s5]);
    expect((await svc.rt.redis.zrange(k.dead, 0, -1)).sort()).toEqual([s2, s3, s4, s6].sort());

    // Spent sources count in the totals until they expire (s2 at 3 h, s4 at 2 h); s3 and
    // s6 expired. Active: s1 (5 used), s2 and s4 (spent), s5.
    let b = await get(`/v1/customers/${c}/balance`);
    expect(b).toMatchObject({ total: 40, used: 25, frozen: 0, available: 15 });
    await noDrift();
    svc.rt.clock.advance(hour);
    b = await get(`/v1/customers/${c}/balance`);
    expect(b).toMatchObject({ total: 30, used: 15, frozen: 0, available: 15 });
    svc.rt.clock.advance(hour);
    b = await get(`/v1/customers/${c}/balance`);
    expect(b).toMatchObject({ total: 20, used: 5, frozen: 0, available: 15 });
    await noDrift();

    const e = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: c, transaction_id: 'o4', amount: 16 } });
    expectError(e, 400, 'insufficient_balance');
    const w = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: c, transaction_id: 'o5', amount: 15, wallet: 'other' } });
    expectError(w, 400, 'insufficient_balance_in_selected_credit_types');
  });

  it('walks past several reads of the live set, in order', async () => {
    const c = 'many-live';
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) ids.push((await post('/v1/customers/deposit', { customer_id: c, amount: 1 })).account_id as string);
    const refused = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: c, transaction_id: 'ml0', amount: 41 } });
    expectError(refused, 400, 'insufficient_balance');
    const d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'ml1', amount: 37 });
    expect(drawn(d, 'deduct_details')).toEqual(ids.slice(0, 37).map((id) => [id, 1]));
    expect(await liveIds(keysOf(c))).toEqual(ids.slice(37));
  });

  it('a frozen source stays live past its expiry until its hold ends', async () => {
    const c = 'frozen-expired';
    const k = keysOf(c);
    const now = Date.now() + svc.rt.clock.offsetMs();
    const s1 = (await post('/v1/customers/deposit', { customer_id: c, amount: 10, expires_at: new Date(now + 60_000).toISOString() })).account_id as string;
    const s2 = (await post('/v1/customers/deposit', { customer_id: c, amount: 10 })).account_id as string;
    await post('/v1/billing/freeze', { customer_id: c, transaction_id: 'f1', amount: 4 });
    svc.rt.clock.advance(120_000);
    const d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'd1', amount: 3 });
    expect(drawn(d, 'deduct_details')).toEqual([[s2, 3]]);
    expect(await liveIds(k)).toEqual([s1, s2]);
    const consumed = await post('/v1/billing/consume', { transaction_id: 'f1', amount: 1 });
    expect(drawn(consumed, 'consume_details')).toEqual([[s1, 1]]);
    // The rest of the hold returns to an expired source: it is dead now.
    expect(await liveIds(k)).toEqual([s2]);
    expect(await svc.rt.redis.zrange(k.dead, 0, -1)).toEqual([s1]);
    await noDrift();
  });
});

describe('reconcile of the layout', () => {
  it('reports a live source missing from the live set and a wrong wallet counter, and --repair restores both', async () => {
    const c = 'layout-drift';
    const k = keysOf(c);
    const spent = (await post('/v1/customers/deposit', { customer_id: c, amount: 10 })).account_id as string;
    const live = (await post('/v1/customers/deposit', { customer_id: c, amount: 50 })).account_id as string;
    await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'ld1', amount: 15 });
    const [member] = await svc.rt.redis.zrange(k.live, 0, -1);
    expect(member.endsWith(`:${live}`)).toBe(true);
    await svc.rt.redis.zrem(k.live, member);
    await svc.rt.redis.hincrby(k.meta, 'wt:credits', 3);
    // Without the live member the credits cannot be drawn.
    const refused = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: c, transaction_id: 'ld2', amount: 1 } });
    expectError(refused, 400, 'insufficient_balance');

    const base = { project_id: p.projectId, customer_id: c };
    const found = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
    expect(found.drift).toEqual([
      { ...base, field: 'source.live', source: live, redis: null, expected: 'inf' },
      { ...base, field: 'meta.wt:credits', redis: 13, expected: 10 },
    ]);
    expect(await svc.rt.redis.zrange(k.dead, 0, -1)).toEqual([spent]);
    const d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'ld3', amount: 45 });
    expect(drawn(d, 'deduct_details')).toEqual([[live, 45]]);
    expect(await get(`/v1/customers/${c}/balance`)).toMatchObject({ total: 60, used: 60, available: 0 });
    await noDrift();
  });
});

describe('dead sources', () => {
  const c = 'many-spent';
  const n = 120;
  let live: string;
  let spent: string[];

  it('are never read by a script: corrupted, they change no answer', async () => {
    const k = keysOf(c);
    spent = [];
    for (let i = 0; i < n; i++) spent.push((await post('/v1/customers/deposit', { customer_id: c, amount: 10, idempotency_key: `ms-${i}` })).account_id as string);
    for (let i = 0; i < n; i++) await post('/v1/billing/deduct', { customer_id: c, transaction_id: `ms-d${i}`, amount: 10 });
    live = (await post('/v1/customers/deposit', { customer_id: c, amount: 1000 })).account_id as string;
    expect(await svc.rt.redis.zcard(k.dead)).toBe(n);
    expect(await liveIds(k)).toEqual([live]);

    // A script that decoded a dead source would fail on these.
    const saved = await svc.rt.redis.hmget(k.src, ...spent);
    for (const id of spent) await svc.rt.redis.hset(k.src, id, 'not json', `${id}:u`, 'x');
    const d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'ms-x1', amount: 7 });
    expect(drawn(d, 'deduct_details')).toEqual([[live, 7]]);
    const f = await post('/v1/billing/freeze', { customer_id: c, transaction_id: 'ms-x2', amount: 3 });
    await post('/v1/billing/unfreeze', { transaction_id: 'ms-x2' });
    expect(drawn(f, 'freeze_details')).toEqual([[live, 3]]);
    const dep = await post('/v1/customers/deposit', { customer_id: c, amount: 5 });
    expect(dep.total_amount).toBe(n * 10 + 1005);
    expect(await get(`/v1/customers/${c}/balance`)).toMatchObject({ total: n * 10 + 1005, used: n * 10 + 7, frozen: 0, available: 998 });
    for (const [i, id] of spent.entries()) await svc.rt.redis.hset(k.src, id, saved[i]!, `${id}:u`, '10');
  });

  it('leave Redis once PostgreSQL holds their last entry, and still count where the contract shows them', async () => {
    const k = keysOf(c);
    const before = await get(`/v1/customers/${c}`);
    const balance = await get(`/v1/customers/${c}/balance`);

    // Their entries are still in the outbox: nothing leaves.
    expect(await svc.rt.redis.xlen(k.outbox)).toBeGreaterThan(0);
    expect(await svc.rt.ledger.trimSources(scope(), c, 0, 1000)).toBe(0);
    await persist.outbox.drain(k.base);
    // A later entry still in the outbox does not hold back the sources that died before it.
    await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'ms-late', amount: 1 });
    expect(await svc.rt.ledger.trimSources(scope(), c, 3_600_000, 1000)).toBe(0);
    expect(await svc.rt.ledger.trimSources(scope(), c, 0, 50)).toBe(50);
    expect(await svc.rt.ledger.trimSources(scope(), c, 0, 1000)).toBe(n - 50);
    expect(await svc.rt.redis.zcard(k.dead)).toBe(0);
    expect((await readSources(svc.rt.redis, k)).map((s) => s.id).sort()).toEqual([live, (before.wallets as Record<string, { sources: { account_id: string }[] }>).credits.sources.at(-1)!.account_id].sort());
    for (const id of spent) expect(await svc.rt.redis.hexists(k.src, `${id}:u`)).toBe(0);

    expect(await get(`/v1/customers/${c}/balance`)).toMatchObject({
      total: balance.total, used: (balance.used as number) + 1, frozen: 0, available: (balance.available as number) - 1,
    });
    const after = await get(`/v1/customers/${c}`);
    const sources = (after.wallets as Record<string, { sources: Record<string, unknown>[] }>).credits.sources;
    expect(sources).toHaveLength(n + 2);
    expect(sources.slice(0, n)).toEqual((before.wallets as Record<string, { sources: unknown[] }>).credits.sources.slice(0, n));
    expect(sources[n]).toMatchObject({ account_id: live, used: 8 });

    const d = await post('/v1/billing/deduct', { customer_id: c, transaction_id: 'ms-after', amount: 900 });
    expect(drawn(d, 'deduct_details')).toEqual([[live, 900]]);
    await persist.outbox.drain(k.base);
    await noDrift();
  });

  it('stay archived through a repair of a lost customer, which rebuilds the rest', async () => {
    const k = keysOf(c);
    const before = { customer: await get(`/v1/customers/${c}`), balance: await get(`/v1/customers/${c}/balance`) };
    await svc.rt.redis.del(k.meta, k.src, k.tx, k.dep, k.ttl, k.live, k.dead, k.spent);
    const report = await reconcile(svc.rt, { projectId: p.projectId, repair: true });
    expect(report.drift).toEqual([{ project_id: p.projectId, customer_id: c, field: 'customer', redis: null, expected: 'present' }]);
    expect((await readSources(svc.rt.redis, k)).map((s) => s.id)).toEqual([live, expect.any(String)]);
    expect(await svc.rt.redis.hget(k.meta, 'src_archived')).toBe('1');
    expect(await get(`/v1/customers/${c}`)).toEqual(before.customer);
    expect(await get(`/v1/customers/${c}/balance`)).toEqual({ ...before.balance, as_of: expect.any(String) });
    await noDrift();
  });

  it('keep counting in the deposit cap once archived', async () => {
    const cap = 'cap';
    const k = keysOf(cap);
    const big = 1_000_000_000_000_000;
    for (let i = 0; i < 9; i++) await post('/v1/customers/deposit', { customer_id: cap, amount: big });
    for (let i = 0; i < 9; i++) await post('/v1/billing/deduct', { customer_id: cap, transaction_id: `cap-d${i}`, amount: big });
    await persist.outbox.drain(k.base);
    expect(await svc.rt.ledger.trimSources(scope(), cap, 0, 100)).toBe(9);
    expect(await svc.rt.redis.hlen(k.src)).toBe(0);
    const refused = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: cap, amount: big } });
    expectError(refused, 400, 'invalid_amount');
    await post('/v1/customers/deposit', { customer_id: cap, amount: Number.MAX_SAFE_INTEGER - 9 * big });
    await persist.outbox.drain(k.base);
    await noDrift();
  });
});
