/**
 * GET /v1/customers/{id}, /balance and /ledger in both contract variants: the exact
 * fields (docs/API.md, the sections of these three routes), customer-key scoping, ledger
 * order, page sizes, cursors and filters, and read-your-writes before the workers
 * have copied the outbox to PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorkers } from '../../workers/index.js';
import { startTestService, type ApiResponse, type TestProject, type TestService } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { projects, svc, useTestService } from '../support/service.js';

type Variant = 'A' | 'B';
type Body = Record<string, unknown>;

useTestService({ workers: true, variants: ['A', 'B'] });

const defaultWallet: Record<Variant, string> = { A: 'default', B: 'credits' };
const credits = (v: Variant, n: number): Body => (v === 'A' ? { amount_credits: n } : { amount: n });
const actual = (v: Variant, n: number): Body => (v === 'A' ? { actual_amount_credits: n } : { amount: n });
const walletField = (v: Variant): string => (v === 'A' ? 'credit_type' : 'wallet');
const onlyWallet = (v: Variant, w: string): Body => (v === 'A' ? { credit_types: [w] } : { wallet: w });
const newCustomer = () => `cus_${randomBytes(6).toString('hex')}`;
const newTx = () => `tx_${randomBytes(6).toString('hex')}`;
const iso = (ms: number) => new Date(ms).toISOString();
const isoPattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const sortedKeys = (o: object) => Object.keys(o).sort();

/** Runs requests against one project and checks each answered 200. */
function client(s: () => TestService, key: () => string) {
  const ok = async (method: string, path: string, body?: Body) => {
    const res = await s().call(method, path, { key: key(), body });
    expect(res.status, `${method} ${path}: ${JSON.stringify(res.body)}`).toBe(200);
    return res.body;
  };
  return {
    deposit: (body: Body) => ok('POST', '/v1/customers/deposit', body),
    billing: (op: string, body: Body) => ok('POST', `/v1/billing/${op}`, body),
    get: (path: string) => s().call('GET', path, { key: key() }),
  };
}

/** Every page of a ledger listing, following next_cursor; checks each page's shape. */
async function allPages(get: (path: string) => Promise<ApiResponse>, id: string, query: string): Promise<Body[]> {
  const limit = Number(/limit=(\d+)/.exec(query)?.[1] ?? 50);
  const seen: Body[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 100; pages++) {
    const res = await get(`/v1/customers/${id}/ledger?${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.object).toBe('list');
    seen.push(...res.body.data);
    expect(res.body.has_more).toBe(res.body.next_cursor !== null);
    // A page with more after it is full; the last one may be short.
    if (res.body.has_more) expect(res.body.data).toHaveLength(limit);
    else expect(res.body.data.length).toBeLessThanOrEqual(limit);
    if (!res.body.has_more) return seen;
    cursor = res.body.next_cursor;
  }
  throw new Error('ledger paging did not end');
}

describe.each(['A', 'B'] as const)('customer reads, variant %s', (v) => {
  const W = defaultWallet[v];
  // The service and projects exist only once beforeAll ran, so the client reads them lazily.
  const c = client(() => svc, () => projects[v].projectKey);

  describe('GET customer and balance', () => {
    it('returns the customer with its wallets and every source, active or not', async () => {
      const id = newCustomer();
      const startsAt = Date.now() + 86_400_000;
      const expiresAt = startsAt + 86_400_000;
      const main = await c.deposit({ customer_id: id, ...credits(v, 1000), name: 'Ada', email: 'ada@example.com', metadata: { plan: 'x' }, description: 'welcome' });
      const later = await c.deposit({ customer_id: id, ...credits(v, 200), [walletField(v)]: 'promo', starts_at: iso(startsAt), expires_at: iso(expiresAt) });
      const deducted = await c.billing('deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 100) });
      await c.billing('freeze', { customer_id: id, transaction_id: newTx(), ...credits(v, 50) });

      const res = await c.get(`/v1/customers/${id}`);
      expect(res.status).toBe(200);
      expect(sortedKeys(res.body)).toEqual(['auto_top_up', 'budget', 'created_at', 'email', 'id', 'key_budgets', 'low_balance_threshold', 'metadata', 'name', 'wallets']);
      expect(res.body).toMatchObject({ id, name: 'Ada', email: 'ada@example.com', metadata: { plan: 'x' }, created_at: expect.stringMatching(isoPattern) });
      expect(Math.abs(Date.parse(res.body.created_at) - Date.now())).toBeLessThan(10_000);
      expect(sortedKeys(res.body.wallets)).toEqual([W, 'promo'].sort());
      for (const w of Object.values(res.body.wallets) as Body[]) {
        expect(sortedKeys(w)).toEqual(['available', 'frozen', 'sources', 'total', 'used']);
      }

      const expectedKeys = ['account_id', 'available', 'expires_at', 'frozen', 'source', 'starts_at', 'total', 'used'];
      const [active] = res.body.wallets[W].sources;
      expect(sortedKeys(active)).toEqual(expect.arrayContaining(expectedKeys));
      expect(res.body.wallets[W]).toMatchObject({ total: 1000, used: 100, frozen: 50, available: 850 });
      expect(active).toMatchObject({ account_id: main.account_id, source: 'welcome', total: 1000, used: 100, frozen: 50, available: 850, starts_at: null, expires_at: null });
      expect((deducted.deduct_details as Body[])[0].account_id).toBe(active.account_id);

      expect(res.body.wallets.promo).toMatchObject({ total: 0, used: 0, frozen: 0, available: 0 });
      expect(res.body.wallets.promo.sources).toEqual([
        expect.objectContaining({ account_id: later.account_id, total: 200, used: 0, frozen: 0, available: 0, starts_at: iso(startsAt), expires_at: iso(expiresAt) }),
      ]);
    });

    it('returns the balance summary with exactly the contract fields, available = total - used - frozen', async () => {
      const id = newCustomer();
      await c.deposit({ customer_id: id, ...credits(v, 1000) });
      await c.deposit({ customer_id: id, ...credits(v, 200), [walletField(v)]: 'promo' });
      await c.deposit({ customer_id: id, ...credits(v, 5000), [walletField(v)]: 'promo', starts_at: iso(Date.now() + 86_400_000) });
      await c.billing('deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 100), ...onlyWallet(v, W) });
      await c.billing('freeze', { customer_id: id, transaction_id: newTx(), ...credits(v, 50), ...onlyWallet(v, W) });
      const consumed = newTx();
      await c.billing('freeze', { customer_id: id, transaction_id: consumed, ...credits(v, 80), ...onlyWallet(v, 'promo') });
      await c.billing('consume', { transaction_id: consumed, ...actual(v, 30) });
      await c.billing('freeze', { customer_id: id, transaction_id: newTx(), ...credits(v, 20), ...onlyWallet(v, 'promo') });

      const res = await c.get(`/v1/customers/${id}/balance`);
      expect(res.status).toBe(200);
      expect(sortedKeys(res.body)).toEqual(['as_of', 'available', 'customer_id', 'frozen', 'total', 'used', 'wallets']);
      expect(res.body).toEqual({
        customer_id: id,
        total: 1200,
        used: 130,
        frozen: 70,
        available: 1000,
        wallets: {
          [W]: { total: 1000, used: 100, frozen: 50, available: 850 },
          promo: { total: 200, used: 30, frozen: 20, available: 150 },
        },
        as_of: expect.stringMatching(isoPattern),
      });
      expect(Math.abs(Date.parse(res.body.as_of) - Date.now())).toBeLessThan(10_000);
    });

    it('lets a customer key read its own customer, balance and ledger, and nobody else', async () => {
      const id = newCustomer();
      const other = newCustomer();
      await c.deposit({ customer_id: id, ...credits(v, 10) });
      await c.deposit({ customer_id: other, ...credits(v, 10) });
      const key = await projects[v].customerKey(id);
      for (const path of ['', '/balance', '/ledger']) {
        const own = await svc.call('GET', `/v1/customers/${id}${path}`, { key });
        expect(own.status, `${path}: ${JSON.stringify(own.body)}`).toBe(200);
        const { as_of: _asOf, ...asProjectSeesIt } = (await c.get(`/v1/customers/${id}${path}`)).body;
        expect(own.body).toMatchObject(asProjectSeesIt);
        expectError(await svc.call('GET', `/v1/customers/${other}${path}`, { key }), 404, 'customer_not_found');
        expectError(await svc.call('GET', `/v1/customers/${newCustomer()}${path}`, { key }), 404, 'customer_not_found');
      }
      expect((await svc.call('GET', `/v1/customers/${id}/balance`, { key })).body).toMatchObject({ customer_id: id, total: 10 });
    });

    it.each(['a{b}c', 'with/slash', 'colon:and space', 'ünï-cødé', '%41'])('keeps the customer id %j intact in paths and keys', async (id) => {
      const unique = `${id}_${randomBytes(3).toString('hex')}`;
      const dep = await c.deposit({ customer_id: unique, ...credits(v, 10) });
      expect(dep.customer_id).toBe(unique);
      const path = `/v1/customers/${encodeURIComponent(unique)}`;
      expect((await c.get(path)).body).toMatchObject({ id: unique });
      expect((await c.get(`${path}/balance`)).body).toMatchObject({ customer_id: unique, total: 10 });
      expect((await c.get(`${path}/ledger`)).body.data).toEqual([expect.objectContaining({ customer_id: unique, type: 'DEPOSIT' })]);
      const key = await projects[v].customerKey(unique);
      expect((await svc.call('GET', `${path}/balance`, { key })).status).toBe(200);
    });

    it('answers 404 customer_not_found for an unknown customer and for another project\'s customer', async () => {
      const id = newCustomer();
      const elsewhere = await svc.project(v);
      await client(() => svc, () => elsewhere.projectKey).deposit({ customer_id: id, ...credits(v, 10) });
      for (const path of ['', '/balance', '/ledger']) {
        expectError(await c.get(`/v1/customers/${id}${path}`), 404, 'customer_not_found');
        expectError(await c.get(`/v1/customers/${newCustomer()}${path}`), 404, 'customer_not_found');
      }
    });
  });

  describe('GET ledger', () => {
    it('lists entries newest first with exactly the contract fields', async () => {
      const id = newCustomer();
      const dep = await c.deposit({ customer_id: id, ...credits(v, 1000), description: 'grant' });
      const [t1, t2, t3] = [newTx(), newTx(), newTx()];
      await c.billing('deduct', { customer_id: id, transaction_id: t1, ...credits(v, 100), business_type: 'TASK', description: 'job' });
      await c.billing('freeze', { customer_id: id, transaction_id: t2, ...credits(v, 300) });
      await c.billing('consume', { transaction_id: t2, ...actual(v, 200) });
      await c.billing('freeze', { customer_id: id, transaction_id: t3, ...credits(v, 50) });
      await c.billing('unfreeze', { transaction_id: t3 });

      const res = await c.get(`/v1/customers/${id}/ledger`);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
      const entries = res.body.data as Body[];
      expect(entries.map((e) => [e.type, e.transaction_id, e.amount])).toEqual([
        ['UNFREEZE', t3, 50],
        ['FREEZE', t3, 50],
        ['CONSUME', t2, 200],
        ['FREEZE', t2, 300],
        ['DEDUCT', t1, 100],
        ['DEPOSIT', dep.record_id, 1000],
      ]);
      const fields = ['amount', 'business_type', 'created_at', 'customer_id', 'description', 'details', 'id', 'reason', 'returned_amount', 'transaction_id', 'type', 'wallet'];
      for (const e of entries) {
        expect(sortedKeys(e)).toEqual(fields);
        expect(e).toMatchObject({ customer_id: id, wallet: W, reason: null, created_at: expect.stringMatching(isoPattern) });
        expect(e.returned_amount).toBe(e.type === 'CONSUME' ? 100 : null);
      }
      expect(new Set(entries.map((e) => e.id)).size).toBe(entries.length);
      const times = entries.map((e) => Date.parse(e.created_at as string));
      expect([...times].sort((a, b) => b - a)).toEqual(times);
      expect(entries[4]).toMatchObject({ business_type: 'TASK', description: 'job' });
      expect(entries[5]).toMatchObject({ id: dep.record_id, description: 'grant', details: [{ account_id: dep.account_id, credit_type: W, amount: 1000 }] });
    });

    describe('paging and filters over 52 entries', () => {
      const id = newCustomer();
      const txids = Array.from({ length: 51 }, newTx);
      let everything: Body[];

      beforeAll(async () => {
        await c.deposit({ customer_id: id, ...credits(v, 1000) });
        for (const txid of txids) await c.billing('deduct', { customer_id: id, transaction_id: txid, ...credits(v, 1) });
        const res = await c.get(`/v1/customers/${id}/ledger?limit=500`);
        everything = res.body.data;
      });

      it('returns 50 entries by default and up to 500 on request', async () => {
        expect(everything).toHaveLength(52);
        expect(everything.map((e) => e.transaction_id).slice(0, 51)).toEqual([...txids].reverse());
        const first = await c.get(`/v1/customers/${id}/ledger`);
        expect(first.body.data).toEqual(everything.slice(0, 50));
        expect(first.body).toMatchObject({ has_more: true, next_cursor: expect.any(String) });
        const all = await c.get(`/v1/customers/${id}/ledger?limit=500`);
        expect(all.body).toMatchObject({ has_more: false, next_cursor: null });
      });

      it('visits every entry exactly once through the cursor, before and after persistence', async () => {
        expect(await allPages(c.get, id, 'limit=7')).toEqual(everything);
        await svc.drained();
        const stored = await svc.rt.ledgerQueries.findEntriesPage(projects[v].projectId, id, { beforeSeq: null, type: null, transactionId: null, limit: 500 });
        expect(stored.map((e) => e.id)).toEqual(everything.map((e) => e.id));
        expect(await allPages(c.get, id, 'limit=7')).toEqual(everything);
        expect(await allPages(c.get, id, 'limit=52')).toEqual(everything);
      });

      it('filters by type and by transaction_id, also across pages', async () => {
        expect(await allPages(c.get, id, 'type=DEDUCT&limit=20')).toEqual(everything.filter((e) => e.type === 'DEDUCT'));
        expect(await allPages(c.get, id, 'type=DEPOSIT')).toEqual(everything.filter((e) => e.type === 'DEPOSIT'));
        expect(await allPages(c.get, id, 'type=FREEZE')).toEqual([]);
        expect(await allPages(c.get, id, `transaction_id=${txids[10]}`)).toEqual(everything.filter((e) => e.transaction_id === txids[10]));
        expect(await allPages(c.get, id, `transaction_id=${txids[10]}&type=DEDUCT`)).toHaveLength(1);
        expect(await allPages(c.get, id, `transaction_id=${txids[10]}&type=DEPOSIT`)).toEqual([]);
        expect(await allPages(c.get, id, 'transaction_id=unknown')).toEqual([]);
      });

      const badCursor = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
      it.each([
        ['limit=501', 'limit'],
        ['limit=0', 'limit'],
        ['limit=-1', 'limit'],
        ['limit=1.5', 'limit'],
        ['limit=ten', 'limit'],
        ['type=FOO', 'type'],
        ['type=deducts', 'type'],
        ['cursor=garbage', 'cursor'],
        [`cursor=${badCursor({ s: 0 })}`, 'cursor'],
        [`cursor=${badCursor({ s: 'x' })}`, 'cursor'],
        [`cursor=${'a'.repeat(201)}`, 'cursor'],
      ])('rejects %s with invalid_request', async (query, param) => {
        expectError(await c.get(`/v1/customers/${id}/ledger?${query}`), 400, 'invalid_request', { param });
      });
    });
  });
});

describe('ledger reads before the workers run', () => {
  let cold: TestService;
  let p: TestProject;

  beforeAll(async () => {
    cold = await startTestService();
    p = await cold.project('B');
  });
  afterAll(() => cold.close());

  it('lists acknowledged entries from the outbox, and the same entries once they are in PostgreSQL', async () => {
    const c = client(() => cold, () => p.projectKey);
    const id = newCustomer();
    await c.deposit({ customer_id: id, amount: 100 });
    for (let i = 0; i < 4; i++) await c.billing('deduct', { customer_id: id, transaction_id: newTx(), amount: 1 });
    const scope = { projectId: p.projectId, organizationId: p.organizationId };
    const fromPg = () => cold.rt.ledgerQueries.findEntriesPage(p.projectId, id, { beforeSeq: null, type: null, transactionId: null, limit: 10 });

    expect(await fromPg()).toEqual([]);
    const before = await allPages(c.get, id, 'limit=2');
    expect(before.map((e) => e.type)).toEqual(['DEDUCT', 'DEDUCT', 'DEDUCT', 'DEDUCT', 'DEPOSIT']);

    const workers = await startWorkers(cold.rt);
    try {
      const outbox = cold.rt.ledger.keys(scope, id).outbox;
      const deadline = Date.now() + 10_000;
      while ((await cold.rt.redis.xlen(outbox)) > 0) {
        if (Date.now() > deadline) throw new Error('the workers did not drain the outbox');
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      await workers.stop();
    }
    expect((await fromPg()).map((e) => e.id)).toEqual(before.map((e) => e.id));
    expect(await allPages(c.get, id, 'limit=2')).toEqual(before);
  });
});
