/**
 * Money of plan changes and invoices, in integer US cents. Every plan price is a whole
 * number of cents, and a tier's overage rate in micro-USD per operation is the same
 * number as its rate in cents per 10,000 operations ($0.50 per 10k = 50 micro-USD per
 * operation = 50 cents per 10k). The only fractions are the pro-rata share of an upgrade
 * and the overage of a count that is not a multiple of 10,000: both are rounded once,
 * half up, with exact integer arithmetic (docs/API.md, "Upgrades, pro-rated").
 */
import { planIds, plans, type PlanId } from '../plans/catalogue.js';
import { z } from 'zod';
import { timestamp } from '../schema/zod.js';

/** numerator / denominator rounded half up, exact for any sizes (both non-negative). */
export function divRoundHalfUp(numerator: bigint, denominator: bigint): bigint {
  if (denominator <= 0n || numerator < 0n) throw new RangeError('divRoundHalfUp takes a non-negative numerator and a positive denominator');
  return (2n * numerator + denominator) / (2n * denominator);
}

/** The plan's price per period in cents; null for a custom (enterprise) contract. */
export function priceCents(plan: PlanId): number | null {
  const micro = plans[plan].priceMicroUsd;
  return micro === null ? null : micro / 10_000;
}

export function overageRateCentsPer10k(plan: PlanId): number {
  return plans[plan].overageMicroUsdPerOp;
}

/** Operations past the plan's allowance; none for a plan that refuses them or has no allowance. */
export function overageOps(plan: PlanId, operations: number): number {
  const p = plans[plan];
  return p.includedOps === null || p.hardLimit ? 0 : Math.max(0, operations - p.includedOps);
}

/** overage operations x the rate per 10k operations / 10,000, rounded half up to a cent. */
export function overageCents(plan: PlanId, overage: number): number {
  return Number(divRoundHalfUp(BigInt(overage) * BigInt(overageRateCentsPer10k(plan)), 10_000n));
}

type PlanChangeKind = 'upgrade' | 'downgrade' | 'none';

/** What changing to `target` does now: the preview endpoint's answer and what a change charges. */
export interface PlanQuote {
  current_plan: PlanId;
  plan: PlanId;
  change: PlanChangeKind;
  /** An upgrade (or no change) applies now; a downgrade at the end of the period. */
  effective_at_ms: number;
  period_start_ms: number;
  period_end_ms: number;
  remaining_ms: number;
  period_ms: number;
  /** New price minus current price per period, for an upgrade; 0 otherwise. */
  price_difference_cents: number;
  prorated_charge_cents: number;
  /** The target has no list price (enterprise): its price is agreed and billed outside the service. */
  custom_price: boolean;
}

/**
 * The pro-rata rule: an upgrade charges the price difference times the part of the period
 * still to run, in milliseconds, rounded half up to a cent:
 *   charge = round_half_up((new - current) x (period_end - now) / (period_end - period_start)).
 */
export function quotePlanChange(current: PlanId, target: PlanId, period: { startMs: number; endMs: number }, nowMs: number): PlanQuote {
  const change: PlanChangeKind = target === current ? 'none' : plans[target].rank > plans[current].rank ? 'upgrade' : 'downgrade';
  const periodMs = period.endMs - period.startMs;
  const remainingMs = Math.min(periodMs, Math.max(0, period.endMs - nowMs));
  const newPrice = priceCents(target);
  const difference = change === 'upgrade' && newPrice !== null ? Math.max(0, newPrice - (priceCents(current) ?? 0)) : 0;
  return {
    current_plan: current,
    plan: target,
    change,
    effective_at_ms: change === 'downgrade' ? period.endMs : nowMs,
    period_start_ms: period.startMs,
    period_end_ms: period.endMs,
    remaining_ms: remainingMs,
    period_ms: periodMs,
    price_difference_cents: difference,
    prorated_charge_cents: Number(divRoundHalfUp(BigInt(difference) * BigInt(remainingMs), BigInt(periodMs))),
    custom_price: change === 'upgrade' && newPrice === null,
  };
}

/** Cents as a decimal USD string ("12.34"), exact. */
export function centsToUsd(cents: number): string {
  const sign = cents < 0 ? '-' : '';
  const abs = Math.abs(cents);
  return `${sign}${Math.floor(abs / 100)}.${String(abs % 100).padStart(2, '0')}`;
}

/** The preview endpoint's and a change's answer. */
export function quoteEntry(q: PlanQuote) {
  const iso = (ms: number) => new Date(ms).toISOString();
  return {
    current_plan: q.current_plan,
    plan: q.plan,
    change: q.change,
    effective_at: iso(q.effective_at_ms),
    period_start: iso(q.period_start_ms),
    period_end: iso(q.period_end_ms),
    remaining_ms: q.remaining_ms,
    period_ms: q.period_ms,
    price_difference_cents: q.price_difference_cents,
    prorated_charge_cents: q.prorated_charge_cents,
    prorated_charge_usd: centsToUsd(q.prorated_charge_cents),
    custom_price: q.custom_price,
  };
}

// The documented answer (src/openapi/).
export const quoteSchema = z
  .object({
    current_plan: z.enum(planIds),
    plan: z.enum(planIds),
    change: z.enum(['upgrade', 'downgrade', 'none']),
    effective_at: timestamp.openapi({ description: 'Now for an upgrade, `period_end` for a downgrade.' }),
    period_start: timestamp,
    period_end: timestamp,
    remaining_ms: z.number().int(),
    period_ms: z.number().int(),
    price_difference_cents: z.number().int(),
    prorated_charge_cents: z.number().int().openapi({ description: 'What an upgrade charges now, 0 for anything else.' }),
    prorated_charge_usd: z.string(),
    custom_price: z.boolean().openapi({ description: 'An upgrade to `enterprise`, which has no list price.' }),
  })
  .strict()
  .openapi('PlanQuote');
