/** The money rules of plan changes and invoices, exactly as docs/API.md states them. */
import { describe, expect, it } from 'vitest';
import { composeInvoice } from '../../src/billing/invoices.js';
import { centsToUsd, divRoundHalfUp, overageCents, quotePlanChange } from '../../src/billing/proration.js';

const day = 86_400_000;
const period = { startMs: Date.UTC(2025, 0, 1), endMs: Date.UTC(2025, 0, 31) }; // 30 days

describe('rounding', () => {
  it('divides rounding half up, exactly, beyond 2^53', () => {
    expect(divRoundHalfUp(5n, 2n)).toBe(3n);
    expect(divRoundHalfUp(4n, 2n)).toBe(2n);
    expect(divRoundHalfUp(1n, 3n)).toBe(0n);
    expect(divRoundHalfUp(2n, 3n)).toBe(1n);
    expect(divRoundHalfUp(0n, 7n)).toBe(0n);
    expect(divRoundHalfUp(2n ** 60n + 1n, 2n)).toBe(2n ** 59n + 1n);
    expect(() => divRoundHalfUp(1n, 0n)).toThrow(RangeError);
  });

  it('prints cents as USD', () => {
    expect([centsToUsd(0), centsToUsd(5), centsToUsd(2000), centsToUsd(123456)]).toEqual(['0.00', '0.05', '20.00', '1234.56']);
  });
});

describe('pro-rated upgrades', () => {
  it('charges the price difference times remaining / period milliseconds, rounded half up to a cent', () => {
    // Free -> Pro 500k ($20) with 10 of 30 days left: 2000 x 1/3 = 666.67 -> 667 cents.
    const q = quotePlanChange('free', 'pro_500k', period, period.endMs - 10 * day);
    expect(q).toMatchObject({ change: 'upgrade', price_difference_cents: 2000, remaining_ms: 10 * day, period_ms: 30 * day, prorated_charge_cents: 667 });
    expect(q.effective_at_ms).toBe(period.endMs - 10 * day);
    // Pro 500k ($20) -> Pro 2m ($50), half the period left: 3000 x 1/2 = 1500.
    expect(quotePlanChange('pro_500k', 'pro_2m', period, period.startMs + 15 * day).prorated_charge_cents).toBe(1500);
    // Exactly half a cent rounds up: 3000 x r / p = 0.5 when r = p / 6000; a millisecond less is 0.
    const r = (30 * day) / 6000;
    expect(quotePlanChange('pro_500k', 'pro_2m', period, period.endMs - r).prorated_charge_cents).toBe(1);
    expect(quotePlanChange('pro_500k', 'pro_2m', period, period.endMs - r + 1).prorated_charge_cents).toBe(0);
    // At the very start the whole difference; the whole period left is never exceeded.
    expect(quotePlanChange('free', 'pro_50m', period, period.startMs).prorated_charge_cents).toBe(50_000);
  });

  it('a downgrade takes effect at the period end and charges nothing; the same plan changes nothing', () => {
    const down = quotePlanChange('pro_2m', 'free', period, period.startMs + day);
    expect(down).toMatchObject({ change: 'downgrade', effective_at_ms: period.endMs, prorated_charge_cents: 0, price_difference_cents: 0 });
    expect(quotePlanChange('pro_2m', 'pro_2m', period, period.startMs + day)).toMatchObject({ change: 'none', prorated_charge_cents: 0 });
  });

  it('an upgrade to Enterprise has no list price: no pro-rated charge, marked custom', () => {
    expect(quotePlanChange('pro_2m', 'enterprise', period, period.startMs + day)).toMatchObject({ change: 'upgrade', prorated_charge_cents: 0, custom_price: true });
  });
});

describe('invoice lines', () => {
  const org = { id: 'org_x', plan: 'pro_500k' as const, pending_plan: null, pending_from: null, created_at: period.startMs, next_invoice_at: null };

  it('bills overage at the tier rate per 10k operations, rounded half up to a cent', () => {
    expect(overageCents('pro_500k', 100)).toBe(1); // 100 x 50 / 10,000 = 0.5
    expect(overageCents('pro_500k', 99)).toBe(0);
    expect(overageCents('pro_500k', 10_000)).toBe(50);
    const inv = composeInvoice(org, [], period, 512_345);
    expect(inv).toMatchObject({ plan: 'pro_500k', includedOps: 500_000, overage: 12_345, rate: 50, totalCents: 2000 + 62 });
    expect(inv.lines.map((l) => [l.type, l.amount_cents])).toEqual([['plan', 2000], ['overage', 62]]);
  });

  it('bills the plan the period started on, each upgrade in it, and usage against the plan it ended on', () => {
    const changes = [
      { kind: 'upgrade' as const, from_plan: 'free' as const, to_plan: 'pro_500k' as const, effective_at: period.startMs - day, remaining_ms: 1, charge_cents: 99 },
      { kind: 'upgrade' as const, from_plan: 'pro_500k' as const, to_plan: 'pro_5m' as const, effective_at: period.startMs + 20 * day, remaining_ms: 10 * day, charge_cents: 2667 },
      { kind: 'downgrade' as const, from_plan: 'pro_5m' as const, to_plan: 'free' as const, effective_at: period.endMs, remaining_ms: 0, charge_cents: 0 },
    ];
    // 100,000 over at 25 cents per 10k = 250 cents.
    const inv = composeInvoice({ ...org, plan: 'free' }, changes, period, 5_100_000);
    expect(inv.lines.map((l) => [l.type, l.amount_cents])).toEqual([['plan', 2000], ['upgrade', 2667], ['overage', 250]]);
    expect(inv).toMatchObject({ plan: 'pro_5m', includedOps: 5_000_000, overage: 100_000, totalCents: 2000 + 2667 + 250 });
    // The next period starts on the downgraded plan.
    const next = composeInvoice({ ...org, plan: 'free' }, changes, { startMs: period.endMs, endMs: period.endMs + 28 * day }, 50_000);
    expect(next).toMatchObject({ plan: 'free', totalCents: 0, overage: 0 });
  });
});
