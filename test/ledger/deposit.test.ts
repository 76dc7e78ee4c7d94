/**
 * POST /v1/customers/deposit in both contract variants: customer creation, amounts per
 * variant, wallets, validity windows, idempotency. Every rejected request is checked to
 * have left nothing behind.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ApiResponse } from '../helpers.js';
import { expectError } from '../support/errors.js';
import type { ErrorCode } from '../../src/errors/catalogue.js';
import { projects, svc, useTestService } from '../support/service.js';

type Variant = 'A' | 'B';
type Body = Record<string, unknown>;

useTestService({ variants: ['A', 'B'] });

const defaultWallet: Record<Variant, string> = { A: 'default', B: 'credits' };
const credits = (v: Variant, n: number): Body => (v === 'A' ? { amount_credits: n } : { amount: n });
const walletField = (v: Variant): string => (v === 'A' ? 'credit_type' : 'wallet');
const newCustomer = () => `dep_${randomBytes(6).toString('hex')}`;
/** The service's clock: tests in this file move it forward. */
const nowMs = () => Date.now() + svc.rt.clock.offsetMs();
const iso = (ms: number) => new Date(ms).toISOString();

function deposit(v: Variant, body: Body): Promise<ApiResponse> {
  return svc.call('POST', '/v1/customers/deposit', { key: projects[v].projectKey, body });
}

function get(v: Variant, path: string): Promise<ApiResponse> {
  return svc.call('GET', path, { key: projects[v].projectKey });
}

/** A rejected deposit for a new customer must not have created it. */
async function expectNoCustomer(v: Variant, id: string): Promise<void> {
  expectError(await get(v, `/v1/customers/${id}`), 404, 'customer_not_found');
}

describe.each(['A', 'B'] as const)('deposit, variant %s', (v) => {
  it('creates the customer with name, email and metadata, and ignores them afterwards', async () => {
    const id = newCustomer();
    const first = await deposit(v, { customer_id: id, ...credits(v, 1000), name: 'Ada', email: 'ada@example.com', metadata: { tier: 'gold', n: 1 } });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body).toEqual({
      customer_id: id,
      account_id: expect.any(String),
      credit_type: defaultWallet[v],
      wallet: defaultWallet[v],
      total_amount: 1000,
      added_amount: 1000,
      starts_at: null,
      expires_at: null,
      record_id: expect.any(String),
      is_idempotent_replay: false,
    });

    const second = await deposit(v, { customer_id: id, ...credits(v, 500), name: 'Bob', email: 'bob@example.com', metadata: { tier: 'none' } });
    expect(second.status).toBe(200);
    expect(second.body.total_amount).toBe(1500);
    expect(second.body.account_id).not.toBe(first.body.account_id);
    expect(second.body.record_id).not.toBe(first.body.record_id);

    const customer = await get(v, `/v1/customers/${id}`);
    expect(customer.status).toBe(200);
    expect(customer.body).toMatchObject({ id, name: 'Ada', email: 'ada@example.com', metadata: { tier: 'gold', n: 1 } });
  });

  it('creates a customer without profile fields as null name and email and empty metadata', async () => {
    const id = newCustomer();
    expect((await deposit(v, { customer_id: id, ...credits(v, 1) })).status).toBe(200);
    const customer = await get(v, `/v1/customers/${id}`);
    expect(customer.body).toMatchObject({ id, name: null, email: null, metadata: {} });
  });

  it('writes one DEPOSIT ledger entry whose transaction_id is the record_id', async () => {
    const id = newCustomer();
    const dep = await deposit(v, { customer_id: id, ...credits(v, 42), description: 'welcome grant' });
    const ledger = await get(v, `/v1/customers/${id}/ledger`);
    expect(ledger.body.data).toEqual([
      expect.objectContaining({
        id: dep.body.record_id,
        type: 'DEPOSIT',
        transaction_id: dep.body.record_id,
        amount: 42,
        wallet: defaultWallet[v],
        details: [{ account_id: dep.body.account_id, credit_type: defaultWallet[v], amount: 42 }],
        description: 'welcome grant',
        reason: null,
      }),
    ]);
  });

  it.each([
    ['customer_id missing', { customer_id: undefined }, 'customer_id'],
    ['customer_id empty', { customer_id: '' }, 'customer_id'],
    ['customer_id not a string', { customer_id: 7 }, 'customer_id'],
    ['customer_id too long', { customer_id: 'x'.repeat(257) }, 'customer_id'],
    ['email malformed', { email: 'not-an-email' }, 'email'],
    ['metadata an array', { metadata: [1, 2] }, 'metadata'],
    ['metadata a string', { metadata: 'x' }, 'metadata'],
    ['name not a string', { name: 5 }, 'name'],
  ])('rejects %s with invalid_request', async (_case, fields, param) => {
    const id = newCustomer();
    const res = await deposit(v, { customer_id: id, ...credits(v, 10), ...fields });
    expectError(res, 400, 'invalid_request', { param });
    await expectNoCustomer(v, id);
  });

  describe('wallets', () => {
    it(`defaults to the wallet '${defaultWallet[v]}' and keeps total_amount per wallet`, async () => {
      const id = newCustomer();
      const a = await deposit(v, { customer_id: id, ...credits(v, 100) });
      const b = await deposit(v, { customer_id: id, ...credits(v, 50), [walletField(v)]: 'promo' });
      const c = await deposit(v, { customer_id: id, ...credits(v, 200) });
      expect([a.body.credit_type, b.body.credit_type, c.body.credit_type]).toEqual([defaultWallet[v], 'promo', defaultWallet[v]]);
      expect([a.body.total_amount, b.body.total_amount, c.body.total_amount]).toEqual([100, 50, 300]);
      const balance = await get(v, `/v1/customers/${id}/balance`);
      expect(balance.body.wallets).toEqual({
        [defaultWallet[v]]: { total: 300, used: 0, frozen: 0, available: 300 },
        promo: { total: 50, used: 0, frozen: 0, available: 50 },
      });
    });

    it.each(['a', 'a.b:c-d_E9', 'x'.repeat(64)])('accepts the wallet name %s', async (name) => {
      const res = await deposit(v, { customer_id: newCustomer(), ...credits(v, 1), [walletField(v)]: name });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.credit_type).toBe(name);
    });

    const badNames: [string, unknown][] = [
      ['empty', ''],
      ['with a space', 'my wallet'],
      ['65 characters', 'x'.repeat(65)],
      ['non-ASCII', 'crédits'],
      ['with a slash', 'a/b'],
      ['a number', 12],
    ];
    const fields = v === 'A' ? ['credit_type'] : ['wallet', 'credit_type'];
    for (const field of fields) {
      it.each(badNames)(`rejects a ${field} that is %s with invalid_request`, async (_case, name) => {
        const id = newCustomer();
        expectError(await deposit(v, { customer_id: id, ...credits(v, 1), [field]: name }), 400, 'invalid_request', { param: field });
        await expectNoCustomer(v, id);
      });
    }

    if (v === 'A') {
      it('rejects the Variant B field wallet instead of ignoring it', async () => {
        const id = newCustomer();
        expectError(await deposit(v, { customer_id: id, amount_credits: 1, wallet: 'promo' }), 400, 'invalid_request', { param: 'wallet' });
        await expectNoCustomer(v, id);
      });
    } else {
      it('accepts credit_type as the deprecated alias of wallet', async () => {
        const alias = await deposit(v, { customer_id: newCustomer(), amount: 1, credit_type: 'promo' });
        expect(alias.body).toMatchObject({ credit_type: 'promo', wallet: 'promo' });
        const both = await deposit(v, { customer_id: newCustomer(), amount: 1, wallet: 'promo', credit_type: 'promo' });
        expect(both.body).toMatchObject({ credit_type: 'promo', wallet: 'promo' });
      });

      it('rejects wallet and credit_type that differ with invalid_request', async () => {
        const id = newCustomer();
        const res = await deposit(v, { customer_id: id, amount: 1, wallet: 'promo', credit_type: 'credits' });
        expectError(res, 400, 'invalid_request');
        expect(['wallet', 'credit_type']).toContain(res.body.error.param);
        await expectNoCustomer(v, id);
      });
    }
  });

  describe('validity window', () => {
    it('echoes starts_at and expires_at and does not count a source before it starts', async () => {
      const id = newCustomer();
      await deposit(v, { customer_id: id, ...credits(v, 100) });
      const startsAt = nowMs() + 3_600_000;
      const expiresAt = startsAt + 3_600_000;
      const later = await deposit(v, { customer_id: id, ...credits(v, 50), starts_at: iso(startsAt), expires_at: iso(expiresAt) });
      expect(later.status, JSON.stringify(later.body)).toBe(200);
      expect(later.body).toMatchObject({ starts_at: iso(startsAt), expires_at: iso(expiresAt), added_amount: 50, total_amount: 100 });
      expect((await get(v, `/v1/customers/${id}/balance`)).body).toMatchObject({ total: 100, available: 100 });

      svc.rt.clock.advance(startsAt - nowMs() + 1);
      expect((await get(v, `/v1/customers/${id}/balance`)).body).toMatchObject({ total: 150, available: 150 });
      const next = await deposit(v, { customer_id: id, ...credits(v, 1) });
      expect(next.body.total_amount).toBe(151);
    });

    it('stops counting a source once it expires, and cannot spend it', async () => {
      const id = newCustomer();
      await deposit(v, { customer_id: id, ...credits(v, 100) });
      const expiresAt = nowMs() + 60_000;
      const expiring = await deposit(v, { customer_id: id, ...credits(v, 40), expires_at: iso(expiresAt) });
      expect(expiring.body).toMatchObject({ total_amount: 140, starts_at: null, expires_at: iso(expiresAt) });

      svc.rt.clock.advance(expiresAt - nowMs() + 1);
      expect((await get(v, `/v1/customers/${id}/balance`)).body).toMatchObject({ total: 100, used: 0, frozen: 0, available: 100 });
      const customer = await get(v, `/v1/customers/${id}`);
      const source = customer.body.wallets[defaultWallet[v]].sources.find((s: { account_id: string }) => s.account_id === expiring.body.account_id);
      expect(source).toMatchObject({ total: 40, available: 0, expires_at: iso(expiresAt) });
      const deduct = await svc.call('POST', '/v1/billing/deduct', {
        key: projects[v].projectKey,
        body: { customer_id: id, transaction_id: `tx_${id}`, ...credits(v, 101) },
      });
      expectError(deduct, 400, 'insufficient_balance');
    });

    it('reads a timestamp without a zone as UTC and accepts numeric offsets', async () => {
      const day = new Date(nowMs() + 86_400_000 * 2).toISOString().slice(0, 10);
      const res = await deposit(v, { customer_id: newCustomer(), ...credits(v, 1), starts_at: `${day}T10:00:00`, expires_at: `${day}T12:00:00+01:00` });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toMatchObject({ starts_at: `${day}T10:00:00.000Z`, expires_at: `${day}T11:00:00.000Z` });
    });

    const hour = 3_600_000;
    const windowErrors: [string, () => Body, ErrorCode][] = [
      ['starts_at not a date', () => ({ starts_at: 'tomorrow' }), 'invalid_starts_at'],
      ['starts_at a number', () => ({ starts_at: nowMs() }), 'invalid_starts_at'],
      ['starts_at month 13', () => ({ starts_at: '2030-13-01T00:00:00Z' }), 'invalid_starts_at'],
      ['starts_at on February 30', () => ({ starts_at: '2030-02-30T00:00:00Z' }), 'invalid_starts_at'],
      ['expires_at not a date', () => ({ expires_at: 'never' }), 'invalid_expires_at'],
      ['expires_at an object', () => ({ expires_at: {} }), 'invalid_expires_at'],
      ['expires_at on April 31', () => ({ expires_at: '2030-04-31T00:00:00Z' }), 'invalid_expires_at'],
      ['expires_at in the past', () => ({ expires_at: iso(nowMs() - 1000) }), 'invalid_expires_at'],
      ['expires_at before starts_at', () => ({ starts_at: iso(nowMs() + 2 * hour), expires_at: iso(nowMs() + hour) }), 'invalid_expires_at'],
      [
        'expires_at equal to starts_at',
        () => {
          const at = iso(nowMs() + hour);
          return { starts_at: at, expires_at: at };
        },
        'invalid_expires_at',
      ],
    ];
    it.each(windowErrors)('rejects %s', async (_case, fields, code) => {
      const id = newCustomer();
      const res = await deposit(v, { customer_id: id, ...credits(v, 10), ...fields() });
      expectError(res, 400, code, { param: code === 'invalid_starts_at' ? 'starts_at' : 'expires_at' });
      await expectNoCustomer(v, id);
    });
  });

  describe('idempotency_key', () => {
    it('replays an identical deposit without depositing twice', async () => {
      const id = newCustomer();
      const key = `idem_${id}`;
      const body = { customer_id: id, ...credits(v, 700), idempotency_key: key, name: 'Ada' };
      const first = await deposit(v, body);
      expect(first.body.is_idempotent_replay).toBe(false);
      const again = await deposit(v, body);
      expect(again.status).toBe(200);
      expect(again.body).toEqual({ ...first.body, is_idempotent_replay: true });
      expect((await get(v, `/v1/customers/${id}/balance`)).body).toMatchObject({ total: 700, available: 700 });
      const ledger = await get(v, `/v1/customers/${id}/ledger`);
      expect(ledger.body.data).toHaveLength(1);
    });

    if (v === 'A') {
      it('treats the same amount in another unit as the same request', async () => {
        const id = newCustomer();
        const first = await deposit(v, { customer_id: id, amount_usd: 0.05, idempotency_key: `idem_${id}` });
        const inCents = await deposit(v, { customer_id: id, amount_cents: 5, idempotency_key: `idem_${id}` });
        const legacy = await deposit(v, { customer_id: id, amount: 5, idempotency_key: `idem_${id}` });
        expect(inCents.body).toEqual({ ...first.body, is_idempotent_replay: true });
        expect(legacy.body).toEqual({ ...first.body, is_idempotent_replay: true });
        expect((await get(v, `/v1/customers/${id}/balance`)).body.total).toBe(50_000);
      });
    }

    const conflicts: [string, Body][] = [
      ['another amount', credits(v, 701)],
      ['another wallet', { [walletField(v)]: 'promo' }],
      ['another description', { description: 'changed' }],
      ['an expiry', { expires_at: iso(Date.now() + 86_400_000 * 365) }],
    ];
    it.each(conflicts)('answers 409 transaction_conflict for the same key with %s', async (_case, change) => {
      const id = newCustomer();
      const body = { customer_id: id, ...credits(v, 700), idempotency_key: `idem_${id}` };
      await deposit(v, body);
      expectError(await deposit(v, { ...body, ...change }), 409, 'transaction_conflict');
      expect((await get(v, `/v1/customers/${id}/balance`)).body).toMatchObject({ total: 700, wallets: { [defaultWallet[v]]: { total: 700 } } });
      expect((await get(v, `/v1/customers/${id}/ledger`)).body.data).toHaveLength(1);
    });

    it('answers 409 transaction_conflict for the same key on another customer, which stays absent', async () => {
      const id = newCustomer();
      const other = newCustomer();
      await deposit(v, { customer_id: id, ...credits(v, 700), idempotency_key: `idem_${id}` });
      const res = await deposit(v, { customer_id: other, ...credits(v, 700), idempotency_key: `idem_${id}` });
      expectError(res, 409, 'transaction_conflict');
      await expectNoCustomer(v, other);
    });

    it('applies 20 concurrent identical deposits once', async () => {
      const id = newCustomer();
      const body = { customer_id: id, ...credits(v, 25), idempotency_key: `idem_${id}` };
      const results = await Promise.all(Array.from({ length: 20 }, () => deposit(v, body)));
      expect(results.map((r) => r.status)).toEqual(Array(20).fill(200));
      expect(results.filter((r) => !r.body.is_idempotent_replay)).toHaveLength(1);
      expect(new Set(results.map((r) => r.body.record_id)).size).toBe(1);
      expect((await get(v, `/v1/customers/${id}/balance`)).body).toMatchObject({ total: 25 });
    });

    it('gives a key raced by two customers to exactly one of them', async () => {
      const key = `idem_${newCustomer()}`;
      const ids = Array.from({ length: 6 }, newCustomer);
      const results = await Promise.all(ids.map((id) => deposit(v, { customer_id: id, ...credits(v, 25), idempotency_key: key })));
      const winners = results.filter((r) => r.status === 200);
      expect(winners).toHaveLength(1);
      for (const r of results.filter((x) => x.status !== 200)) expectError(r, 409, 'transaction_conflict');
      for (const id of ids.filter((x) => x !== winners[0].body.customer_id)) await expectNoCustomer(v, id);
    });

    it('names idempotency_key as the param of every transaction_conflict', async () => {
      const id = newCustomer();
      const body = { customer_id: id, ...credits(v, 700), idempotency_key: `idem_${id}` };
      await deposit(v, body);
      expectError(await deposit(v, { ...body, customer_id: newCustomer() }), 409, 'transaction_conflict', { param: 'idempotency_key' });
      expectError(await deposit(v, { ...body, ...credits(v, 1) }), 409, 'transaction_conflict', { param: 'idempotency_key' });
    });

    it('keeps deposits with different keys apart', async () => {
      const id = newCustomer();
      const a = await deposit(v, { customer_id: id, ...credits(v, 10), idempotency_key: `a_${id}` });
      const b = await deposit(v, { customer_id: id, ...credits(v, 10), idempotency_key: `b_${id}` });
      expect([a.body.is_idempotent_replay, b.body.is_idempotent_replay]).toEqual([false, false]);
      expect(b.body.total_amount).toBe(20);
    });

    it('scopes keys to the project: another project may use the same key', async () => {
      const id = newCustomer();
      const key = `idem_${id}`;
      const here = await deposit(v, { customer_id: id, ...credits(v, 10), idempotency_key: key });
      const elsewhere = await svc.project(v);
      const there = await svc.call('POST', '/v1/customers/deposit', {
        key: elsewhere.projectKey,
        body: { customer_id: id, ...credits(v, 10), idempotency_key: key },
      });
      expect(there.status).toBe(200);
      expect(there.body.is_idempotent_replay).toBe(false);
      expect(there.body.record_id).not.toBe(here.body.record_id);
    });
  });
});

describe('deposit amounts, variant A', () => {
  const valid: [string, Body, number][] = [
    ['amount_usd 1.5', { amount_usd: 1.5 }, 1_500_000],
    ['amount_usd 0.1 exactly', { amount_usd: 0.1 }, 100_000],
    ['amount_usd one micro-dollar', { amount_usd: 0.000001 }, 1],
    ['amount_cents 250', { amount_cents: 250 }, 2_500_000],
    ['amount_cents 0.0001', { amount_cents: 0.0001 }, 1],
    ['amount_credits 7', { amount_credits: 7 }, 7],
    ['bare amount as legacy cents', { amount: 3 }, 30_000],
    ['amount_credits 10^15', { amount_credits: 1e15 }, 1e15],
    ['amount_usd 10^9 (10^15 credits)', { amount_usd: 1e9 }, 1e15],
  ];
  it.each(valid)('deposits %s', async (_case, amount, expected) => {
    const res = await deposit('A', { customer_id: newCustomer(), ...amount });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ added_amount: expected, total_amount: expected });
  });

  const invalid: [string, Body, string | undefined][] = [
    ['no amount', {}, undefined],
    ['amount_usd and amount_cents', { amount_usd: 1, amount_cents: 100 }, undefined],
    ['amount and amount_credits', { amount: 1, amount_credits: 10_000 }, undefined],
    ['all three unit fields', { amount_usd: 1, amount_cents: 100, amount_credits: 1_000_000 }, undefined],
    ['amount_usd below one credit', { amount_usd: 0.0000001 }, 'amount_usd'],
    ['amount_cents below one credit', { amount_cents: 0.00001 }, 'amount_cents'],
    ['fractional amount_credits', { amount_credits: 1.5 }, 'amount_credits'],
    ['fractional legacy cents below a credit', { amount: 0.00005 }, 'amount'],
    ['zero', { amount_credits: 0 }, 'amount_credits'],
    ['negative usd', { amount_usd: -1 }, 'amount_usd'],
    ['negative cents', { amount_cents: -0.5 }, 'amount_cents'],
    ['more than 10^15 credits', { amount_credits: 1e15 + 1 }, 'amount_credits'],
    ['more than 10^15 credits in usd', { amount_usd: 1_000_000_000.000001 }, 'amount_usd'],
    ['a huge usd amount', { amount_usd: 1e300 }, 'amount_usd'],
    ['a string', { amount_credits: '100' }, 'amount_credits'],
    ['a boolean', { amount_usd: true }, 'amount_usd'],
  ];
  it.each(invalid)('rejects %s with invalid_amount', async (_case, amount, param) => {
    const id = newCustomer();
    expectError(await deposit('A', { customer_id: id, ...amount }), 400, 'invalid_amount', { param });
    await expectNoCustomer('A', id);
  });
});

describe('deposit amounts, variant B', () => {
  it.each([1, 5, 1e15])('deposits amount %d credits', async (n) => {
    const res = await deposit('B', { customer_id: newCustomer(), amount: n });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ added_amount: n, total_amount: n });
  });

  const invalid: [string, Body, ErrorCode, string][] = [
    ['no amount', {}, 'invalid_amount', 'amount'],
    ['a fractional amount', { amount: 1.5 }, 'invalid_amount', 'amount'],
    ['zero', { amount: 0 }, 'invalid_amount', 'amount'],
    ['a negative amount', { amount: -3 }, 'invalid_amount', 'amount'],
    ['more than 10^15', { amount: 1e15 + 1 }, 'invalid_amount', 'amount'],
    ['a string', { amount: '5' }, 'invalid_amount', 'amount'],
    ['amount_usd', { amount_usd: 1 }, 'unsupported_amount_field', 'amount_usd'],
    ['amount_cents', { amount_cents: 1 }, 'unsupported_amount_field', 'amount_cents'],
    ['amount_credits', { amount_credits: 1 }, 'unsupported_amount_field', 'amount_credits'],
    ['amount_credits beside amount', { amount: 5, amount_credits: 5 }, 'unsupported_amount_field', 'amount_credits'],
  ];
  it.each(invalid)('rejects %s', async (_case, amount, code, param) => {
    const id = newCustomer();
    expectError(await deposit('B', { customer_id: id, ...amount }), 400, code, { param });
    await expectNoCustomer('B', id);
  });
});
