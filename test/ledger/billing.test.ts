/**
 * POST /v1/billing/{deduct,freeze,consume,unfreeze} in both contract variants: draw order,
 * wallet filters, every state of a freeze and what each operation answers in it (docs/API.md,
 * "POST /v1/billing/consume" and "POST /v1/billing/unfreeze"), TTL settlement,
 * idempotency and concurrency.
 * Every rejected request is checked to have changed neither the balance nor the ledger.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ApiResponse } from '../helpers.js';
import { expectError } from '../support/errors.js';
import type { ErrorCode } from '../../src/errors/catalogue.js';
import { projects, svc, useTestService } from '../support/service.js';

type Variant = 'A' | 'B';
type Body = Record<string, unknown>;
type Op = 'deduct' | 'freeze' | 'consume' | 'unfreeze';

useTestService({ variants: ['A', 'B'] });

const defaultWallet: Record<Variant, string> = { A: 'default', B: 'credits' };
const credits = (v: Variant, n: number): Body => (v === 'A' ? { amount_credits: n } : { amount: n });
const actual = (v: Variant, n: number): Body => (v === 'A' ? { actual_amount_credits: n } : { amount: n });
const onlyWallets = (v: Variant, ...wallets: string[]): Body => (v === 'A' ? { credit_types: wallets } : { wallet: wallets[0] });
const newCustomer = () => `bil_${randomBytes(6).toString('hex')}`;
const newTx = () => `tx_${randomBytes(6).toString('hex')}`;
/** The service's clock: the TTL tests move it forward. */
const nowMs = () => Date.now() + svc.rt.clock.offsetMs();
const iso = (ms: number) => new Date(ms).toISOString();
const isoPattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function post(v: Variant, op: Op, body: Body): Promise<ApiResponse> {
  return svc.call('POST', `/v1/billing/${op}`, { key: projects[v].projectKey, body });
}

async function balance(v: Variant, id: string) {
  const res = await svc.call('GET', `/v1/customers/${id}/balance`, { key: projects[v].projectKey });
  expect(res.status).toBe(200);
  return res.body;
}

async function ledger(v: Variant, id: string, query = ''): Promise<Body[]> {
  const res = await svc.call('GET', `/v1/customers/${id}/ledger?limit=500${query}`, { key: projects[v].projectKey });
  expect(res.status).toBe(200);
  return res.body.data;
}

/** Balance and ledger length, to show that a rejected request left no trace. */
async function state(v: Variant, id: string) {
  const { as_of: _asOf, ...b } = await balance(v, id);
  return { balance: b, entries: (await ledger(v, id)).length };
}

interface SourceSpec {
  credits: number;
  wallet?: string;
  expiresAt?: string;
}

/** A new customer funded with one deposit per source, in order; returns the account ids. */
async function customerWith(v: Variant, ...sources: SourceSpec[]): Promise<{ id: string; accounts: string[] }> {
  const id = newCustomer();
  const accounts: string[] = [];
  for (const s of sources) {
    const res = await svc.call('POST', '/v1/customers/deposit', {
      key: projects[v].projectKey,
      body: {
        customer_id: id,
        ...credits(v, s.credits),
        ...(s.wallet ? { [v === 'A' ? 'credit_type' : 'wallet']: s.wallet } : {}),
        ...(s.expiresAt ? { expires_at: s.expiresAt } : {}),
      },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    accounts.push(res.body.account_id);
  }
  return { id, accounts };
}

/** One more deposit into the default wallet of an existing customer. */
async function depositMore(v: Variant, id: string, n: number): Promise<void> {
  const res = await svc.call('POST', '/v1/customers/deposit', { key: projects[v].projectKey, body: { customer_id: id, ...credits(v, n) } });
  expect(res.status).toBe(200);
}

describe.each(['A', 'B'] as const)('billing, variant %s', (v) => {
  const W = defaultWallet[v];

  it('refuses a customer-scoped key on every money operation, whichever customer it names, and bills neither', async () => {
    const own = await customerWith(v, { credits: 1000 });
    const other = await customerWith(v, { credits: 1000 });
    const key = await projects[v].customerKey(own.id);
    const frozen = newTx();
    expect((await post(v, 'freeze', { customer_id: other.id, transaction_id: frozen, ...credits(v, 100) })).status).toBe(200);
    const before = { own: await state(v, own.id), other: await state(v, other.id) };
    // Another customer named in X-Service-Customer (as on the gateway), in the body, or both.
    const names: [Record<string, string>, string][] = [
      [{ 'x-service-customer': other.id }, other.id],
      [{ 'x-service-customer': other.id }, own.id],
      [{}, other.id],
    ];
    for (const [headers, customerId] of names) {
      for (const [op, body] of [
        ['deduct', { customer_id: customerId, transaction_id: newTx(), ...credits(v, 10) }],
        ['freeze', { customer_id: customerId, transaction_id: newTx(), ...credits(v, 10) }],
        ['consume', { customer_id: customerId, transaction_id: frozen, ...actual(v, 10) }],
        ['unfreeze', { customer_id: customerId, transaction_id: frozen }],
      ] as const) {
        const res = await svc.call('POST', `/v1/billing/${op}`, { key, headers, body });
        expectError(res, 403, 'permission_denied');
      }
    }
    expect({ own: await state(v, own.id), other: await state(v, other.id) }).toEqual(before);
  });

  describe('deduct', () => {
    it('deducts at once and reports the source drawn from', async () => {
      const { id, accounts } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      const res = await post(v, 'deduct', { customer_id: id, transaction_id: txid, ...credits(v, 300), business_type: 'TASK', description: 'job 1' });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toEqual({
        transaction_id: txid,
        deducted_amount: 300,
        deduct_details: [{ account_id: accounts[0], credit_type: W, amount: 300 }],
        deducted_at: expect.stringMatching(isoPattern),
        is_idempotent_replay: false,
      });
      expect(await balance(v, id)).toMatchObject({ total: 1000, used: 300, frozen: 0, available: 700, wallets: { [W]: { total: 1000, used: 300, frozen: 0, available: 700 } } });
      expect(await ledger(v, id, '&type=DEDUCT')).toEqual([
        expect.objectContaining({
          type: 'DEDUCT',
          transaction_id: txid,
          amount: 300,
          wallet: W,
          details: res.body.deduct_details,
          business_type: 'TASK',
          description: 'job 1',
          reason: null,
        }),
      ]);
    });

    it('draws the soonest expiry first, then the oldest source, and lists every source drawn', async () => {
      const hour = 3_600_000;
      const inOneHour = iso(nowMs() + hour);
      const { id, accounts } = await customerWith(
        v,
        { credits: 100 }, // 0: no expiry, oldest
        { credits: 100, expiresAt: iso(nowMs() + 2 * hour) }, // 1
        { credits: 100, expiresAt: inOneHour }, // 2: soonest
        { credits: 100 }, // 3: no expiry, newest
        { credits: 100, expiresAt: inOneHour }, // 4: soonest, newer than 2
      );
      const first = await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 350) });
      expect(first.body.deduct_details).toEqual([
        { account_id: accounts[2], credit_type: W, amount: 100 },
        { account_id: accounts[4], credit_type: W, amount: 100 },
        { account_id: accounts[1], credit_type: W, amount: 100 },
        { account_id: accounts[0], credit_type: W, amount: 50 },
      ]);
      const second = await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 100) });
      expect(second.body.deduct_details).toEqual([
        { account_id: accounts[0], credit_type: W, amount: 50 },
        { account_id: accounts[3], credit_type: W, amount: 50 },
      ]);
      expect(await balance(v, id)).toMatchObject({ total: 500, used: 450, available: 50 });
    });

    it('spans wallets without a filter and names no single wallet on the ledger entry', async () => {
      const { id, accounts } = await customerWith(v, { credits: 100 }, { credits: 100, wallet: 'promo', expiresAt: iso(nowMs() + 3_600_000) });
      const res = await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 150) });
      expect(res.body.deduct_details).toEqual([
        { account_id: accounts[1], credit_type: 'promo', amount: 100 },
        { account_id: accounts[0], credit_type: W, amount: 50 },
      ]);
      const b = await balance(v, id);
      expect(b.wallets).toEqual({
        [W]: { total: 100, used: 50, frozen: 0, available: 50 },
        promo: { total: 100, used: 100, frozen: 0, available: 0 },
      });
      const [entry] = await ledger(v, id, '&type=DEDUCT');
      expect(entry).toMatchObject({ amount: 150, wallet: null, details: res.body.deduct_details });
    });

    it('draws only from the selected wallet', async () => {
      const { id, accounts } = await customerWith(v, { credits: 100, wallet: 'promo' }, { credits: 100 }, { credits: 100, wallet: 'vip' });
      const res = await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 80), ...onlyWallets(v, 'vip') });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.deduct_details).toEqual([{ account_id: accounts[2], credit_type: 'vip', amount: 80 }]);
      expect((await ledger(v, id, '&type=DEDUCT'))[0]).toMatchObject({ wallet: 'vip' });
      expect((await balance(v, id)).wallets).toMatchObject({ promo: { used: 0 }, [W]: { used: 0 }, vip: { used: 80, available: 20 } });
    });

    if (v === 'A') {
      it('draws from several whitelisted wallets in draw order', async () => {
        const { id, accounts } = await customerWith(v, { credits: 100, wallet: 'promo' }, { credits: 100 }, { credits: 100, wallet: 'vip' });
        const res = await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), amount_credits: 150, credit_types: ['vip', 'promo'] });
        expect(res.body.deduct_details).toEqual([
          { account_id: accounts[0], credit_type: 'promo', amount: 100 },
          { account_id: accounts[2], credit_type: 'vip', amount: 50 },
        ]);
      });
    } else {
      it('accepts credit_type as the deprecated alias of wallet', async () => {
        const { id, accounts } = await customerWith(v, { credits: 100 }, { credits: 100, wallet: 'promo' });
        const res = await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), amount: 10, credit_type: 'promo' });
        expect(res.body.deduct_details).toEqual([{ account_id: accounts[1], credit_type: 'promo', amount: 10 }]);
      });
    }

    // The customer holds 60 in the default wallet and 40 in promo. Each refusal names the
    // wallets it looked at, what they hold and what was needed, and points to the field
    // that selects another wallet when one holds credits (issue 12); the numbers are in
    // error.details too.
    const main = v === 'A' ? 'default' : 'credits';
    const field = v === 'A' ? 'credit_types' : 'wallet';
    const pointTo = (w: string) => (v === 'A' ? `add ${w} to credit_types, or leave credit_types out to draw from every wallet` : `send "wallet": "${w}"`);
    const shortfalls: [string, () => Body, ErrorCode, string, Record<string, unknown>, string | undefined][] = [
      [
        'more than all wallets hold', () => credits(v, 101), 'insufficient_balance',
        `insufficient balance: 101 credits needed, 100 available across all wallets (${main} 60, promo 40).`,
        { wallets: null, required_credits: 101, available_credits: 100, available_credits_by_wallet: { [main]: 60, promo: 40 }, wallets_without_sources: [] },
        undefined,
      ],
      [
        'more than the selected wallet holds, all wallets could pay', () => ({ ...credits(v, 50), ...onlyWallets(v, 'promo') }),
        'insufficient_balance_in_selected_credit_types',
        `insufficient balance in selected credit_types: wallet promo has 40 credits available, 50 needed. Other wallets of this customer hold credits: ${main} (60 available); to draw from one, ${pointTo(main)}.`,
        { wallets: ['promo'], required_credits: 50, available_credits: 40, available_credits_by_wallet: { [main]: 60, promo: 40 }, wallets_without_sources: [] },
        undefined,
      ],
      [
        'an unknown selected wallet, all wallets could pay', () => ({ ...credits(v, 10), ...onlyWallets(v, 'nope') }),
        'insufficient_balance_in_selected_credit_types',
        `wallet nope has no sources: nothing was ever deposited to it (10 credits needed). Other wallets of this customer hold credits: ${main} (60 available), promo (40 available); to draw from one, ${pointTo(main)}.`,
        { wallets: ['nope'], required_credits: 10, available_credits: 0, available_credits_by_wallet: { [main]: 60, promo: 40 }, wallets_without_sources: ['nope'] },
        field,
      ],
      [
        'more than all wallets hold, with a filter', () => ({ ...credits(v, 101), ...onlyWallets(v, 'promo') }), 'insufficient_balance',
        `insufficient balance: wallet promo has 40 credits available, 101 needed. Other wallets of this customer hold credits: ${main} (60 available); to draw from one, ${pointTo(main)}.`,
        { wallets: ['promo'], required_credits: 101, available_credits: 40, available_credits_by_wallet: { [main]: 60, promo: 40 }, wallets_without_sources: [] },
        undefined,
      ],
    ];
    it.each(shortfalls)('rejects %s without partial effect, saying why', async (_case, fields, code, message, details, param) => {
      const { id } = await customerWith(v, { credits: 60 }, { credits: 40, wallet: 'promo' });
      const before = await state(v, id);
      for (const op of ['deduct', 'freeze'] as const) {
        const res = await post(v, op, { customer_id: id, transaction_id: newTx(), ...fields() });
        expectError(res, 400, code, { message, param: param ?? null, fields: { details } });
      }
      expect(await state(v, id)).toEqual(before);
    });

    if (v === 'A') {
      it('names every wallet of a credit_types filter, and those that never had a source', async () => {
        const { id } = await customerWith(v, { credits: 60 }, { credits: 40, wallet: 'promo' });
        const res = await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), amount_credits: 70, credit_types: ['promo', 'nope', 'promo'] });
        expectError(res, 400, 'insufficient_balance_in_selected_credit_types');
        expect(res.body.error.message).toBe(
          'insufficient balance in selected credit_types: wallets promo, nope have 40 credits available, 70 needed. Wallet nope has no sources. ' +
            'Other wallets of this customer hold credits: default (60 available); to draw from one, add default to credit_types, or leave credit_types out to draw from every wallet.',
        );
        expect(res.body.error.details).toMatchObject({ wallets: ['promo', 'nope'], available_credits: 40, wallets_without_sources: ['nope'] });
      });
    }

    it('processes a transaction id normally once a failed attempt can be paid', async () => {
      const { id } = await customerWith(v, { credits: 10 });
      const txid = newTx();
      expectError(await post(v, 'deduct', { customer_id: id, transaction_id: txid, ...credits(v, 20) }), 400, 'insufficient_balance');
      await depositMore(v, id, 10);
      const res = await post(v, 'deduct', { customer_id: id, transaction_id: txid, ...credits(v, 20) });
      expect(res.status).toBe(200);
      expect(res.body.is_idempotent_replay).toBe(false);
    });

    it('answers 404 customer_not_found for an unknown customer and creates nothing', async () => {
      const id = newCustomer();
      for (const op of ['deduct', 'freeze'] as const) {
        expectError(await post(v, op, { customer_id: id, transaction_id: newTx(), ...credits(v, 1) }), 404, 'customer_not_found');
      }
      expectError(await svc.call('GET', `/v1/customers/${id}`, { key: projects[v].projectKey }), 404, 'customer_not_found');
    });

    it('replays an identical deduct without deducting twice', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const body = { customer_id: id, transaction_id: newTx(), ...credits(v, 300), business_type: 'ORDER' };
      const first = await post(v, 'deduct', body);
      const after = await state(v, id);
      const again = await post(v, 'deduct', body);
      expect(again.status).toBe(200);
      expect(again.body).toEqual({ ...first.body, is_idempotent_replay: true });
      if (v === 'A') {
        const inUsd = await post(v, 'deduct', { ...body, amount_credits: undefined, amount_usd: 0.0003 });
        expect(inUsd.body).toEqual({ ...first.body, is_idempotent_replay: true });
      }
      expect(await state(v, id)).toEqual(after);
      expect(after.balance).toMatchObject({ used: 300 });
    });

    const conflicts: [string, Body][] = [
      ['another amount', credits(v, 301)],
      ['another business_type', { business_type: 'OTHER' }],
      ['another description', { description: 'changed' }],
      ['a wallet filter', onlyWallets(v, W)],
    ];
    it.each(conflicts)('answers 409 transaction_conflict for the same transaction_id with %s', async (_case, change) => {
      const { id } = await customerWith(v, { credits: 1000 });
      const body = { customer_id: id, transaction_id: newTx(), ...credits(v, 300) };
      await post(v, 'deduct', body);
      const before = await state(v, id);
      expectError(await post(v, 'deduct', { ...body, ...change }), 409, 'transaction_conflict');
      expect(await state(v, id)).toEqual(before);
    });

    it('answers 409 transaction_conflict for a transaction_id used by another customer', async () => {
      const a = await customerWith(v, { credits: 1000 });
      const b = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'deduct', { customer_id: a.id, transaction_id: txid, ...credits(v, 300) });
      const before = await state(v, b.id);
      for (const op of ['deduct', 'freeze'] as const) {
        expectError(await post(v, op, { customer_id: b.id, transaction_id: txid, ...credits(v, 300) }), 409, 'transaction_conflict');
      }
      expect(await state(v, b.id)).toEqual(before);
    });

    it('names transaction_id as the param of every transaction_conflict', async () => {
      const a = await customerWith(v, { credits: 1000 });
      const b = await customerWith(v, { credits: 1000 });
      for (const op of ['deduct', 'freeze'] as const) {
        const txid = newTx();
        await post(v, op, { customer_id: a.id, transaction_id: txid, ...credits(v, 10) });
        expectError(await post(v, op, { customer_id: b.id, transaction_id: txid, ...credits(v, 10) }), 409, 'transaction_conflict', { param: 'transaction_id' });
        expectError(await post(v, op, { customer_id: a.id, transaction_id: txid, ...credits(v, 11) }), 409, 'transaction_conflict', { param: 'transaction_id' });
      }
    });

    it('answers 409 transaction_conflict when deduct and freeze share a transaction_id', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const deducted = newTx();
      const frozen = newTx();
      await post(v, 'deduct', { customer_id: id, transaction_id: deducted, ...credits(v, 100) });
      await post(v, 'freeze', { customer_id: id, transaction_id: frozen, ...credits(v, 100) });
      const before = await state(v, id);
      expectError(await post(v, 'freeze', { customer_id: id, transaction_id: deducted, ...credits(v, 100) }), 409, 'transaction_conflict');
      expectError(await post(v, 'deduct', { customer_id: id, transaction_id: frozen, ...credits(v, 100) }), 409, 'transaction_conflict');
      expect(await state(v, id)).toEqual(before);
      expect((await post(v, 'unfreeze', { transaction_id: frozen })).body.unfrozen_amount).toBe(100);
    });

    it('scopes transaction ids to the project', async () => {
      const { id } = await customerWith(v, { credits: 100 });
      const txid = newTx();
      await post(v, 'deduct', { customer_id: id, transaction_id: txid, ...credits(v, 10) });
      const other = await svc.project(v);
      await svc.call('POST', '/v1/customers/deposit', { key: other.projectKey, body: { customer_id: id, ...credits(v, 100) } });
      const res = await svc.call('POST', '/v1/billing/deduct', { key: other.projectKey, body: { customer_id: id, transaction_id: txid, ...credits(v, 20) } });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ deducted_amount: 20, is_idempotent_replay: false });
    });
  });

  describe('request validation of deduct and freeze', () => {
    type Row = [string, Body, number, ErrorCode, string | undefined];
    const invalid: Row[] = [
      ['customer_id missing', { customer_id: undefined }, 400, 'invalid_request', 'customer_id'],
      ['transaction_id missing', { transaction_id: undefined }, 400, 'invalid_request', 'transaction_id'],
      ['transaction_id empty', { transaction_id: '' }, 400, 'invalid_request', 'transaction_id'],
      ['transaction_id a number', { transaction_id: 12 }, 400, 'invalid_request', 'transaction_id'],
      ['business_type empty', { business_type: '' }, 400, 'invalid_request', 'business_type'],
      ['description too long', { description: 'x'.repeat(1025) }, 400, 'invalid_request', 'description'],
      ['zero amount', credits(v, 0), 400, 'invalid_amount', v === 'A' ? 'amount_credits' : 'amount'],
      ['amount over 10^15', credits(v, 1e15 + 1), 400, 'invalid_amount', v === 'A' ? 'amount_credits' : 'amount'],
      ...(v === 'A'
        ? ([
            ['no amount', { amount_credits: undefined }, 400, 'invalid_amount', undefined],
            ['two amounts', { amount_cents: 1 }, 400, 'invalid_amount', undefined],
            ['amount_usd below a credit', { amount_credits: undefined, amount_usd: 0.0000001 }, 400, 'invalid_amount', 'amount_usd'],
            ['credit_types empty', { credit_types: [] }, 400, 'invalid_credit_types', 'credit_types'],
            ['credit_types with a number', { credit_types: ['promo', 1] }, 400, 'invalid_credit_types', 'credit_types'],
            ['credit_types with an empty name', { credit_types: [''] }, 400, 'invalid_credit_types', 'credit_types'],
            ['credit_types with a bad name', { credit_types: ['my wallet'] }, 400, 'invalid_credit_types', 'credit_types'],
            ['credit_types a string', { credit_types: 'promo' }, 400, 'invalid_credit_types', 'credit_types'],
            ['credit_types an object', { credit_types: { promo: true } }, 400, 'invalid_credit_types', 'credit_types'],
            ['the Variant B field wallet', { wallet: 'promo' }, 400, 'invalid_request', 'wallet'],
          ] satisfies Row[])
        : ([
            ['no amount', { amount: undefined }, 400, 'invalid_amount', 'amount'],
            ['a fractional amount', { amount: 1.5 }, 400, 'invalid_amount', 'amount'],
            ['amount_credits', { amount: undefined, amount_credits: 5 }, 400, 'unsupported_amount_field', 'amount_credits'],
            ['amount_usd', { amount_usd: 1 }, 400, 'unsupported_amount_field', 'amount_usd'],
            ['a bad wallet name', { wallet: 'a/b' }, 400, 'invalid_request', 'wallet'],
            ['a wallet of 65 characters', { wallet: 'w'.repeat(65) }, 400, 'invalid_request', 'wallet'],
            ['wallet and credit_type differing', { wallet: 'promo', credit_type: 'vip' }, 400, 'invalid_request', undefined],
            ['the Variant A field credit_types', { credit_types: ['promo'] }, 400, 'invalid_request', 'credit_types'],
          ] satisfies Row[])),
    ];
    it.each(invalid)('rejects %s', async (_case, change, status, code, param) => {
      const { id } = await customerWith(v, { credits: 100 });
      const before = await state(v, id);
      for (const op of ['deduct', 'freeze'] as const) {
        expectError(await post(v, op, { customer_id: id, transaction_id: newTx(), ...credits(v, 10), ...change }), status, code, { param });
      }
      expect(await state(v, id)).toEqual(before);
    });
  });

  describe('freeze, consume, unfreeze', () => {
    it('freezes: available decreases, frozen increases, and the ledger has a FREEZE entry', async () => {
      const { id, accounts } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      const res = await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300), business_type: 'TOKEN_USAGE' });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toMatchObject({
        transaction_id: txid,
        frozen_amount: 300,
        freeze_details: [{ account_id: accounts[0], credit_type: W, amount: 300 }],
        is_idempotent_replay: false,
      });
      expect(await balance(v, id)).toMatchObject({ total: 1000, used: 0, frozen: 300, available: 700 });
      expect(await ledger(v, id, `&transaction_id=${txid}`)).toEqual([
        expect.objectContaining({ type: 'FREEZE', amount: 300, wallet: W, business_type: 'TOKEN_USAGE', details: res.body.freeze_details }),
      ]);
    });

    it('holds frozen credits for their transaction only', async () => {
      const { id } = await customerWith(v, { credits: 100 });
      await post(v, 'freeze', { customer_id: id, transaction_id: newTx(), ...credits(v, 70) });
      expectError(await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 31) }), 400, 'insufficient_balance');
      expectError(await post(v, 'freeze', { customer_id: id, transaction_id: newTx(), ...credits(v, 31) }), 400, 'insufficient_balance');
      expect((await post(v, 'deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 30) })).status).toBe(200);
      expect(await balance(v, id)).toMatchObject({ total: 100, used: 30, frozen: 70, available: 0 });
    });

    it('consumes part of a freeze and returns the rest: returned_amount, balance and ledger', async () => {
      const { id, accounts } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const res = await post(v, 'consume', { transaction_id: txid, ...actual(v, 200) });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toEqual({
        transaction_id: txid,
        consumed_amount: 200,
        returned_amount: 100,
        consume_details: [{ account_id: accounts[0], credit_type: W, amount: 200 }],
        consumed_at: expect.stringMatching(isoPattern),
        is_idempotent_replay: false,
      });
      expect(await balance(v, id)).toMatchObject({ total: 1000, used: 200, frozen: 0, available: 800 });
      expect(await ledger(v, id, '&type=CONSUME')).toEqual([
        expect.objectContaining({ transaction_id: txid, amount: 200, returned_amount: 100, wallet: W, reason: null }),
      ]);
    });

    it('consumes a freeze spanning sources in draw order and returns the rest to its source', async () => {
      const { id, accounts } = await customerWith(v, { credits: 100 }, { credits: 100, expiresAt: iso(nowMs() + 3_600_000) });
      const txid = newTx();
      const frozen = await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 150) });
      expect(frozen.body.freeze_details).toEqual([
        { account_id: accounts[1], credit_type: W, amount: 100 },
        { account_id: accounts[0], credit_type: W, amount: 50 },
      ]);
      const res = await post(v, 'consume', { transaction_id: txid, ...actual(v, 120) });
      expect(res.body).toMatchObject({
        consumed_amount: 120,
        returned_amount: 30,
        consume_details: [
          { account_id: accounts[1], credit_type: W, amount: 100 },
          { account_id: accounts[0], credit_type: W, amount: 20 },
        ],
      });
      const customer = await svc.call('GET', `/v1/customers/${id}`, { key: projects[v].projectKey });
      const byAccount = Object.fromEntries(customer.body.wallets[W].sources.map((s: Body) => [s.account_id, s]));
      expect(byAccount[accounts[0]]).toMatchObject({ total: 100, used: 20, frozen: 0, available: 80 });
      expect(byAccount[accounts[1]]).toMatchObject({ total: 100, used: 100, frozen: 0, available: 0 });
    });

    it('consumes the whole frozen amount, returning nothing', async () => {
      const { id } = await customerWith(v, { credits: 500 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const res = await post(v, 'consume', { transaction_id: txid, ...actual(v, 300) });
      expect(res.body).toMatchObject({ consumed_amount: 300, returned_amount: 0 });
      expect(await balance(v, id)).toMatchObject({ used: 300, frozen: 0, available: 200 });
    });

    it('replays an identical consume; another amount afterwards is freeze_records_already_consumed', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const first = await post(v, 'consume', { transaction_id: txid, ...actual(v, 200) });
      const after = await state(v, id);
      const again = await post(v, 'consume', { transaction_id: txid, ...actual(v, 200) });
      expect(again.body).toEqual({ ...first.body, is_idempotent_replay: true });
      expectError(await post(v, 'consume', { transaction_id: txid, ...actual(v, 100) }), 400, 'freeze_records_already_consumed');
      expectError(await post(v, 'consume', { transaction_id: txid, ...actual(v, 300) }), 400, 'freeze_records_already_consumed');
      expect(await state(v, id)).toEqual(after);
    });

    it('rejects a consume above the frozen amount and leaves the freeze consumable', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const before = await state(v, id);
      const over = await post(v, 'consume', { transaction_id: txid, ...actual(v, 301) });
      // The refusal states the frozen amount, naming the amount field the request used.
      expectError(over, 400, 'actual_amount_exceeds_frozen_amount', { param: v === 'A' ? 'actual_amount_credits' : 'amount' });
      expect(over.body.error.message).toBe('actual amount exceeds the frozen amount: 301 credits asked, 300 credits frozen; consume at most 300');
      expect(over.body.error.details).toEqual({ frozen_credits: 300, requested_credits: 301 });
      expect(await state(v, id)).toEqual(before);
      expect((await post(v, 'consume', { transaction_id: txid, ...actual(v, 300) })).body).toMatchObject({ consumed_amount: 300, is_idempotent_replay: false });
    });

    it('unfreezes everything; a repeated unfreeze is a replay', async () => {
      const { id, accounts } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const res = await post(v, 'unfreeze', { transaction_id: txid });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toEqual({
        transaction_id: txid,
        unfrozen_amount: 300,
        unfreeze_details: [{ account_id: accounts[0], credit_type: W, amount: 300 }],
        unfrozen_at: expect.stringMatching(isoPattern),
        is_idempotent_replay: false,
      });
      const after = await state(v, id);
      expect(after.balance).toMatchObject({ total: 1000, used: 0, frozen: 0, available: 1000 });
      const again = await post(v, 'unfreeze', { transaction_id: txid, customer_id: id });
      expect(again.body).toEqual({ ...res.body, is_idempotent_replay: true });
      expect(await state(v, id)).toEqual(after);
      expect(await ledger(v, id, '&type=UNFREEZE')).toHaveLength(1);
    });

    it('answers consume after unfreeze with no_consumable_freeze_records', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      await post(v, 'unfreeze', { transaction_id: txid });
      const before = await state(v, id);
      expectError(await post(v, 'consume', { transaction_id: txid, ...actual(v, 100) }), 400, 'no_consumable_freeze_records');
      expect(await state(v, id)).toEqual(before);
    });

    it('answers unfreeze after consume with no_unfreezable_records', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      await post(v, 'consume', { transaction_id: txid, ...actual(v, 100) });
      const before = await state(v, id);
      expectError(await post(v, 'unfreeze', { transaction_id: txid }), 400, 'no_unfreezable_records');
      expect(await state(v, id)).toEqual(before);
    });

    it('answers consume and unfreeze of an unknown or a deduct transaction with no_*_records', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const deducted = newTx();
      await post(v, 'deduct', { customer_id: id, transaction_id: deducted, ...credits(v, 100) });
      const before = await state(v, id);
      for (const txid of [newTx(), deducted]) {
        expectError(await post(v, 'consume', { transaction_id: txid, ...actual(v, 100) }), 400, 'no_consumable_freeze_records');
        expectError(await post(v, 'unfreeze', { transaction_id: txid }), 400, 'no_unfreezable_records');
      }
      expect(await state(v, id)).toEqual(before);
    });

    it('answers 409 customer_scope_mismatch when customer_id names another customer', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const other = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const before = await state(v, id);
      expectError(await post(v, 'consume', { transaction_id: txid, customer_id: other.id, ...actual(v, 100) }), 409, 'customer_scope_mismatch');
      expectError(await post(v, 'unfreeze', { transaction_id: txid, customer_id: other.id }), 409, 'customer_scope_mismatch');
      expectError(await post(v, 'unfreeze', { transaction_id: txid, customer_id: 'never-seen' }), 409, 'customer_scope_mismatch');
      expect(await state(v, id)).toEqual(before);
      const ok = await post(v, 'consume', { transaction_id: txid, customer_id: id, ...actual(v, 100) });
      expect(ok.body).toMatchObject({ consumed_amount: 100, returned_amount: 200 });
    });

    it('replays an identical freeze and rejects a changed one with transaction_conflict', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const body = { customer_id: id, transaction_id: newTx(), ...credits(v, 300), release_after_seconds: 600 };
      const first = await post(v, 'freeze', body);
      const after = await state(v, id);
      expect((await post(v, 'freeze', body)).body).toEqual({ ...first.body, is_idempotent_replay: true });
      expectError(await post(v, 'freeze', { ...body, ...credits(v, 299) }), 409, 'transaction_conflict');
      expectError(await post(v, 'freeze', { ...body, release_after_seconds: 601 }), 409, 'transaction_conflict');
      expectError(await post(v, 'freeze', { ...body, release_after_seconds: undefined }), 409, 'transaction_conflict');
      expect(await state(v, id)).toEqual(after);
      expect(after.balance).toMatchObject({ frozen: 300 });
    });

    it.each([
      ['transaction_id missing', 'consume', {}],
      ['transaction_id a number', 'unfreeze', { transaction_id: 5 }],
      ['customer_id empty', 'unfreeze', { transaction_id: 'x', customer_id: '' }],
    ] as const)('rejects %s on %s with invalid_request', async (_case, op, body) => {
      expectError(await post(v, op, { ...body, ...(op === 'consume' ? actual(v, 1) : {}) }), 400, 'invalid_request');
    });

    const consumeAmounts: [string, Body, string][] = [
      ['zero', actual(v, 0), v === 'A' ? 'actual_amount_credits' : 'amount'],
      ['a negative amount', actual(v, -1), v === 'A' ? 'actual_amount_credits' : 'amount'],
      ['a fractional credit', actual(v, 0.5), v === 'A' ? 'actual_amount_credits' : 'amount'],
      ['more than 10^15', actual(v, 1e15 + 1), v === 'A' ? 'actual_amount_credits' : 'amount'],
      ['a string', actual(v, '5' as unknown as number), v === 'A' ? 'actual_amount_credits' : 'amount'],
    ];
    it.each(consumeAmounts)('rejects a consume of %s with invalid_amount, leaving the freeze consumable', async (_case, amount, param) => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const before = await state(v, id);
      expectError(await post(v, 'consume', { transaction_id: txid, ...amount }), 400, 'invalid_amount', { param });
      expect(await state(v, id)).toEqual(before);
      expect((await post(v, 'consume', { transaction_id: txid, ...actual(v, 1) })).status).toBe(200);
    });

    if (v === 'A') {
      it('requires an actual_amount_* on consume and reads the bare actual_amount as cents', async () => {
        const { id } = await customerWith(v, { credits: 1_000_000 });
        const txid = newTx();
        await post(v, 'freeze', { customer_id: id, transaction_id: txid, amount_cents: 50 });
        const before = await state(v, id);
        expectError(await post(v, 'consume', { transaction_id: txid }), 400, 'invalid_amount');
        // A deposit's amount field on a consume is no amount of it: an unknown field.
        expectError(await post(v, 'consume', { transaction_id: txid, amount_credits: 10 }), 400, 'invalid_request', { param: 'amount_credits' });
        expectError(await post(v, 'consume', { transaction_id: txid, actual_amount_usd: 0.1, actual_amount_cents: 10 }), 400, 'invalid_amount');
        expectError(await post(v, 'consume', { transaction_id: txid, actual_amount_usd: 0.0000001 }), 400, 'invalid_amount', { param: 'actual_amount_usd' });
        expect(await state(v, id)).toEqual(before);
        const res = await post(v, 'consume', { transaction_id: txid, actual_amount: 20 });
        expect(res.body).toMatchObject({ consumed_amount: 200_000, returned_amount: 300_000 });
        const sameInUsd = await post(v, 'consume', { transaction_id: txid, actual_amount_usd: 0.2 });
        expect(sameInUsd.body).toEqual({ ...res.body, is_idempotent_replay: true });
      });
    } else {
      it('consumes the whole frozen amount when amount is omitted; either form then replays', async () => {
        const { id } = await customerWith(v, { credits: 1000 });
        const txid = newTx();
        await post(v, 'freeze', { customer_id: id, transaction_id: txid, amount: 300 });
        const res = await post(v, 'consume', { transaction_id: txid });
        expect(res.body).toMatchObject({ consumed_amount: 300, returned_amount: 0, is_idempotent_replay: false });
        expect((await post(v, 'consume', { transaction_id: txid })).body).toEqual({ ...res.body, is_idempotent_replay: true });
        expect((await post(v, 'consume', { transaction_id: txid, amount: 300 })).body).toEqual({ ...res.body, is_idempotent_replay: true });
        expectError(await post(v, 'consume', { transaction_id: txid, amount: 299 }), 400, 'freeze_records_already_consumed');
        expect(await balance(v, id)).toMatchObject({ used: 300, frozen: 0, available: 700 });
      });

      it.each([
        ['actual_amount_credits', { actual_amount_credits: 10 }],
        ['actual_amount', { actual_amount: 10 }],
        ['amount_usd', { amount_usd: 0.00001 }],
      ])('rejects %s on consume with unsupported_amount_field', async (field, amount) => {
        const { id } = await customerWith(v, { credits: 1000 });
        const txid = newTx();
        await post(v, 'freeze', { customer_id: id, transaction_id: txid, amount: 300 });
        expectError(await post(v, 'consume', { transaction_id: txid, ...amount }), 400, 'unsupported_amount_field', { param: field });
        expect(await balance(v, id)).toMatchObject({ used: 0, frozen: 300 });
      });
    }
  });

  describe('freeze TTL', () => {
    const ttlSeconds = 60;

    it('releases an unsettled freeze after release_after_seconds, with a ttl_release entry', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      const frozen = await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300), release_after_seconds: ttlSeconds });
      expect(frozen.body).toMatchObject({ auto_settle: 'release', auto_settle_at: iso(Date.parse(frozen.body.frozen_at) + ttlSeconds * 1000) });

      svc.rt.clock.advance(ttlSeconds * 1000 - 10_000);
      expect(await balance(v, id)).toMatchObject({ frozen: 300, available: 700 });
      svc.rt.clock.advance(10_001);
      // The consume is the first request after the TTL: it must see the release itself.
      const consume = await post(v, 'consume', { transaction_id: txid, ...actual(v, 300) });
      expectError(consume, 400, 'no_consumable_freeze_records');
      const unfreeze = await post(v, 'unfreeze', { transaction_id: txid });
      expectError(unfreeze, 400, 'no_unfreezable_records');
      expect(await balance(v, id)).toMatchObject({ total: 1000, used: 0, frozen: 0, available: 1000 });
      const entries = await ledger(v, id, `&transaction_id=${txid}`);
      expect(entries).toEqual([
        expect.objectContaining({ type: 'UNFREEZE', amount: 300, reason: 'ttl_release', details: frozen.body.freeze_details }),
        expect.objectContaining({ type: 'FREEZE', amount: 300, reason: null }),
      ]);
      // Both refusals say when the TTL released the freeze (its UNFREEZE entry's time) and when it was due.
      const releasedAt = entries[0].created_at as string;
      const due = frozen.body.auto_settle_at as string;
      expect(consume.body.error.message).toBe(
        `no consumable freeze records: nothing is left to consume; the freeze's TTL (release_after_seconds) released it at ${releasedAt} (due at ${due})`,
      );
      expect(consume.body.error.details).toEqual({ settled_by: 'ttl_release', settled_at: releasedAt, auto_settle_at: due });
      expect(unfreeze.body.error.message).toBe(
        `no unfreezable records: its credits are back in their wallet already; the freeze's TTL (release_after_seconds) released it at ${releasedAt} (due at ${due})`,
      );
    });

    it('consumes an unsettled freeze after consume_after_seconds, with a ttl_consume entry', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      const frozen = await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300), consume_after_seconds: ttlSeconds });
      expect(frozen.body).toMatchObject({ auto_settle: 'consume' });

      svc.rt.clock.advance(ttlSeconds * 1000 + 1);
      expect(await balance(v, id)).toMatchObject({ total: 1000, used: 300, frozen: 0, available: 700 });
      expect(await ledger(v, id, `&transaction_id=${txid}`)).toEqual([
        expect.objectContaining({ type: 'CONSUME', amount: 300, returned_amount: 0, reason: 'ttl_consume', details: frozen.body.freeze_details }),
        expect.objectContaining({ type: 'FREEZE', amount: 300 }),
      ]);
      const before = await state(v, id);
      const consume = await post(v, 'consume', { transaction_id: txid, ...actual(v, 300) });
      expectError(consume, 400, 'freeze_records_already_consumed');
      const unfreeze = await post(v, 'unfreeze', { transaction_id: txid });
      expectError(unfreeze, 400, 'no_unfreezable_records');
      expect(await state(v, id)).toEqual(before);
      const consumedAt = (await ledger(v, id, `&transaction_id=${txid}&type=CONSUME`))[0].created_at as string;
      const due = frozen.body.auto_settle_at as string;
      expect(consume.body.error.message).toBe(
        `the frozen funds of this transaction are already consumed; the freeze's TTL (consume_after_seconds) consumed them at ${consumedAt} (due at ${due})`,
      );
      expect(consume.body.error.details).toEqual({ settled_by: 'ttl_consume', settled_at: consumedAt, auto_settle_at: due });
      expect(unfreeze.body.error.message).toMatch(/^no unfreezable records: the frozen funds were consumed; the freeze's TTL \(consume_after_seconds\) consumed them at /);
    });

    it('does nothing when the freeze was settled before its TTL', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const consumed = newTx();
      const unfrozen = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: consumed, ...credits(v, 300), release_after_seconds: ttlSeconds });
      await post(v, 'freeze', { customer_id: id, transaction_id: unfrozen, ...credits(v, 300), consume_after_seconds: ttlSeconds });
      await post(v, 'consume', { transaction_id: consumed, ...actual(v, 100) });
      await post(v, 'unfreeze', { transaction_id: unfrozen });
      const before = await state(v, id);
      svc.rt.clock.advance(ttlSeconds * 1000 + 1);
      expect(await state(v, id)).toEqual(before);
      expect(before.balance).toMatchObject({ used: 100, frozen: 0, available: 900 });
    });

    it('accepts the largest TTL', async () => {
      const { id } = await customerWith(v, { credits: 10 });
      const res = await post(v, 'freeze', { customer_id: id, transaction_id: newTx(), ...credits(v, 1), consume_after_seconds: 2_592_000 });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    });

    it.each([
      ['both TTL fields', { release_after_seconds: 60, consume_after_seconds: 60 }, undefined],
      ['release_after_seconds 0', { release_after_seconds: 0 }, 'release_after_seconds'],
      ['release_after_seconds negative', { release_after_seconds: -5 }, 'release_after_seconds'],
      ['release_after_seconds over 30 days', { release_after_seconds: 2_592_001 }, 'release_after_seconds'],
      ['consume_after_seconds fractional', { consume_after_seconds: 1.5 }, 'consume_after_seconds'],
      ['consume_after_seconds a string', { consume_after_seconds: '60' }, 'consume_after_seconds'],
    ])('rejects %s with invalid_request', async (_case, ttl, param) => {
      const { id } = await customerWith(v, { credits: 100 });
      const before = await state(v, id);
      expectError(await post(v, 'freeze', { customer_id: id, transaction_id: newTx(), ...credits(v, 10), ...ttl }), 400, 'invalid_request', { param });
      expect(await state(v, id)).toEqual(before);
    });
  });

  describe('concurrency', () => {
    it('applies 20 concurrent identical deducts exactly once', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const body = { customer_id: id, transaction_id: newTx(), ...credits(v, 70) };
      const results = await Promise.all(Array.from({ length: 20 }, () => post(v, 'deduct', body)));
      expect(results.map((r) => r.status)).toEqual(Array(20).fill(200));
      expect(results.filter((r) => !r.body.is_idempotent_replay)).toHaveLength(1);
      const { is_idempotent_replay: _flag, ...first } = results[0].body;
      for (const r of results) expect(r.body).toMatchObject(first);
      expect(await balance(v, id)).toMatchObject({ used: 70, available: 930 });
      expect(await ledger(v, id, '&type=DEDUCT')).toHaveLength(1);
    });

    it('never overdraws a wallet under 50 concurrent deducts', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const results = await Promise.all(
        Array.from({ length: 50 }, () => post(v, 'deduct', { customer_id: id, transaction_id: newTx(), ...credits(v, 30) })),
      );
      const applied = results.filter((r) => r.status === 200);
      const refused = results.filter((r) => r.status !== 200);
      for (const r of refused) expectError(r, 400, 'insufficient_balance');
      expect(applied).toHaveLength(Math.floor(1000 / 30));
      const b = await balance(v, id);
      expect(b).toMatchObject({ total: 1000, used: applied.length * 30, frozen: 0, available: 1000 - applied.length * 30 });
      expect(b.available).toBeGreaterThanOrEqual(0);
      expect(await ledger(v, id, '&type=DEDUCT')).toHaveLength(applied.length);
    });

    it('settles a freeze once when consumes and unfreezes race', async () => {
      const { id } = await customerWith(v, { credits: 1000 });
      const txid = newTx();
      await post(v, 'freeze', { customer_id: id, transaction_id: txid, ...credits(v, 300) });
      const results = await Promise.all(
        Array.from({ length: 16 }, (_, i) => (i % 2 ? post(v, 'consume', { transaction_id: txid, ...actual(v, 300) }) : post(v, 'unfreeze', { transaction_id: txid }))),
      );
      const consumes = results.filter((_, i) => i % 2);
      const unfreezes = results.filter((_, i) => !(i % 2));
      const consumed = consumes.some((r) => r.status === 200);
      const winners = consumed ? consumes : unfreezes;
      const losers = consumed ? unfreezes : consumes;
      expect(winners.map((r) => r.status)).toEqual(Array(8).fill(200));
      expect(winners.filter((r) => !r.body.is_idempotent_replay)).toHaveLength(1);
      for (const r of losers) expectError(r, 400, consumed ? 'no_unfreezable_records' : 'no_consumable_freeze_records');
      expect(await balance(v, id)).toMatchObject({ used: consumed ? 300 : 0, frozen: 0, available: consumed ? 700 : 1000 });
    });
  });
});
