/**
 * The fold of a ledger that holds entries written on a Redis that had forgotten earlier
 * ones (renumbered by reconcile's repair, marked `extra.renumbered_from`). Every kind of
 * contradiction such an entry can make is kept, folded as far as it moved money, and
 * reported, never a failure and never a lost entry: a settlement of a freeze already
 * settled (consume and release), a transaction id and a deposit key applied again, and
 * the shortfall of a source drawn beyond its total. The same ledger without the marks is
 * refused, as before: a contradiction elsewhere is corruption, not a known loss.
 */
import { describe, expect, it } from 'vitest';
import { FoldError, foldCustomer, type EntryRow } from '../../src/reconcile/fold.js';

const customer = { name: null, email: null, metadata: null, created_at: 1 };
const hold = (amount: number) => [{ account_id: 's1', credit_type: 'credits', amount }];

function entry(seq: number, type: EntryRow['type'], transaction_id: string, amount: number, more: Partial<EntryRow> = {}): EntryRow {
  return { seq, type, transaction_id, amount, wallet: 'credits', details: [], reason: null, business_type: null, result: { n: seq }, extra: { h: 'h' }, ...more };
}

const source = JSON.stringify({ id: 's1', w: 'credits', l: 'x', q: '1', t: '100', u: '0', f: '0', s: '', e: '' });
const source2 = JSON.stringify({ id: 's2', w: 'credits', l: 'x', q: '2', t: '10', u: '0', f: '0', s: '', e: '' });

function ledger(marked: boolean): EntryRow[] {
  const stale = (e: EntryRow, from: number): EntryRow => (marked ? { ...e, extra: { ...e.extra, renumbered_from: String(from) } } : e);
  return [
    entry(1, 'DEPOSIT', 'dep1', 100, { extra: { h: 'h', ik: 'k1', source } }),
    entry(2, 'FREEZE', 'f', 40, { details: hold(40) }),
    entry(3, 'FREEZE', 'g', 10, { details: hold(10) }),
    // Forgotten by Redis (persisted): f consumed, g released, a deduct.
    entry(4, 'CONSUME', 'f', 40, { details: hold(40) }),
    entry(5, 'UNFREEZE', 'g', 10, { details: hold(10) }),
    entry(6, 'DEDUCT', 'd', 30, { details: hold(30) }),
    // Written on the stale state, renumbered after the ledger.
    stale(entry(7, 'UNFREEZE', 'f', 40, { details: hold(40) }), 4),
    stale(entry(8, 'CONSUME', 'g', 10, { details: hold(10) }), 5),
    stale(entry(9, 'DEDUCT', 'd', 30, { details: hold(30) }), 6),
    stale(entry(10, 'FREEZE', 'd', 5, { details: hold(5) }), 7),
    stale(entry(11, 'DEPOSIT', 'dep2', 10, { extra: { h: 'h', ik: 'k1', source: source2 } }), 8),
  ];
}

describe('fold of renumbered entries', () => {
  it('keeps every contradiction a stale entry makes, folds the money it moved, and reports it', () => {
    const anomalies: string[] = [];
    const folded = foldCustomer(customer, ledger(true), { anomalies });
    const s1 = JSON.parse(folded.src.s1);
    // Used: f's 40, d's 30 twice, g's stale consume 10; nothing left frozen (the stale
    // release moves nothing, the repeated freeze keeps no hold).
    expect([s1.t, s1.u, s1.f]).toEqual(['100', '110', '0']);
    expect(JSON.parse(folded.src.s2).t).toBe('10');
    // The first results answer replays.
    expect(JSON.parse(folded.tx.d)).toMatchObject({ k: 'deduct', r: JSON.stringify({ n: 6 }) });
    expect(JSON.parse(folded.tx.f)).toMatchObject({ st: 'consumed' });
    expect(JSON.parse(folded.dep.k1).r).toBe(JSON.stringify({ n: 1 }));
    expect(folded.meta.seq).toBe('11');
    expect(anomalies).toEqual([
      'UNFREEZE entry seq 7 settles f, which an earlier entry had already settled (written on a Redis that had forgotten it)',
      'CONSUME entry seq 8 settles g, which an earlier entry had already settled (written on a Redis that had forgotten it)',
      'DEDUCT entry seq 9 applied transaction d again (written on a Redis that had forgotten the first; the first result is kept for replays)',
      'FREEZE entry seq 10 applied transaction d again (written on a Redis that had forgotten the first; the first result is kept for replays)',
      'DEPOSIT entry seq 11 credited idempotency key k1 again (written on a Redis that had forgotten the first; the first result is kept for replays)',
      'source s1 is drawn 10 credits beyond its total (a shortfall)',
    ]);
  });

  it('refuses the same ledger without the marks', () => {
    expect(() => foldCustomer(customer, ledger(false))).toThrow(FoldError);
  });
});
