/**
 * The plans of the spec's Limits section. Prices in micro-USD (1 USD = 10^6) so that
 * overage is exact integer arithmetic: every tier's overage is a whole number of micro-USD
 * per operation ($0.50 per 10k ops = 50 micro-USD per op).
 */

export const planIds = ['free', 'pro_500k', 'pro_2m', 'pro_5m', 'pro_15m', 'pro_50m', 'enterprise'] as const;
export type PlanId = (typeof planIds)[number];

export interface Plan {
  id: PlanId;
  /** Operations included per period; null for a custom (enterprise) contract. */
  includedOps: number | null;
  /** True when reaching includedOps refuses further billable operations (429). */
  hardLimit: boolean;
  priceMicroUsd: number | null;
  overageMicroUsdPerOp: number;
  /** null: unlimited. */
  projectsMax: number | null;
  keysPerProjectMax: number | null;
  /** Team members (owners included); null: unlimited. */
  membersMax: number | null;
  /** Used to tell an upgrade (applies now) from a downgrade (next period). */
  rank: number;
}

export const plans: Record<PlanId, Plan> = {
  free: { id: 'free', includedOps: 50_000, hardLimit: true, priceMicroUsd: 0, overageMicroUsdPerOp: 0, projectsMax: 1, keysPerProjectMax: 2, membersMax: 1, rank: 0 },
  pro_500k: { id: 'pro_500k', includedOps: 500_000, hardLimit: false, priceMicroUsd: 20_000_000, overageMicroUsdPerOp: 50, projectsMax: null, keysPerProjectMax: null, membersMax: 5, rank: 1 },
  pro_2m: { id: 'pro_2m', includedOps: 2_000_000, hardLimit: false, priceMicroUsd: 50_000_000, overageMicroUsdPerOp: 30, projectsMax: null, keysPerProjectMax: null, membersMax: 5, rank: 2 },
  pro_5m: { id: 'pro_5m', includedOps: 5_000_000, hardLimit: false, priceMicroUsd: 100_000_000, overageMicroUsdPerOp: 25, projectsMax: null, keysPerProjectMax: null, membersMax: 5, rank: 3 },
  pro_15m: { id: 'pro_15m', includedOps: 15_000_000, hardLimit: false, priceMicroUsd: 200_000_000, overageMicroUsdPerOp: 18, projectsMax: null, keysPerProjectMax: null, membersMax: 5, rank: 4 },
  pro_50m: { id: 'pro_50m', includedOps: 50_000_000, hardLimit: false, priceMicroUsd: 500_000_000, overageMicroUsdPerOp: 12, projectsMax: null, keysPerProjectMax: null, membersMax: 5, rank: 5 },
  enterprise: { id: 'enterprise', includedOps: null, hardLimit: false, priceMicroUsd: null, overageMicroUsdPerOp: 0, projectsMax: null, keysPerProjectMax: null, membersMax: null, rank: 6 },
};

/**
 * The demo organisation's allowance (`npm start`'s demo, marked `demo_allowance` in
 * PostgreSQL): on top of its plan, so that every feature can be tried at once on Free
 * (several projects, project and customer keys beside the demo's two, a team). Still
 * bounded, as every limit is; a plan that allows more keeps its own.
 */
export const demo_allowance = { projectsMax: 10, keysPerProjectMax: 25, membersMax: 5 } as const;

export interface Limits {
  projectsMax: number | null;
  keysPerProjectMax: number | null;
  membersMax: number | null;
}

/** No limit on anything (PLANS=off). */
export const unlimited: Limits = { projectsMax: null, keysPerProjectMax: null, membersMax: null };

/** The larger of two limits; null is unlimited. */
const larger = (a: number | null, b: number | null): number | null => (a === null || b === null ? null : Math.max(a, b));

/** Projects, keys per project and members an organisation on `plan` may have. */
export function limitsOf(plan: PlanId, demoAllowance: boolean): Limits {
  const p = plans[plan];
  const own: Limits = { projectsMax: p.projectsMax, keysPerProjectMax: p.keysPerProjectMax, membersMax: p.membersMax };
  if (!demoAllowance) return own;
  return {
    projectsMax: larger(own.projectsMax, demo_allowance.projectsMax),
    keysPerProjectMax: larger(own.keysPerProjectMax, demo_allowance.keysPerProjectMax),
    membersMax: larger(own.membersMax, demo_allowance.membersMax),
  };
}

/** The hard limit the reserve script enforces: 0 for none. */
export function hardLimitOf(plan: PlanId): number {
  const p = plans[plan];
  return p.hardLimit && p.includedOps !== null ? p.includedOps : 0;
}

/**
 * The billing period containing `nowMs`: calendar months from the subscription's anchor
 * (the organization's creation), the anchor day clamped to short months (an anchor on
 * the 31st renews on Feb 28).
 */
export function periodAt(anchorMs: number, nowMs: number): { startMs: number; endMs: number } {
  const anchor = new Date(anchorMs);
  const at = (monthsFromAnchor: number): number => {
    const y = anchor.getUTCFullYear();
    const m = anchor.getUTCMonth() + monthsFromAnchor;
    const daysInMonth = new Date(Date.UTC(y, m + 1, 0)).getUTCDate();
    const day = Math.min(anchor.getUTCDate(), daysInMonth);
    return Date.UTC(y, m, day, anchor.getUTCHours(), anchor.getUTCMinutes(), anchor.getUTCSeconds(), anchor.getUTCMilliseconds());
  };
  const now = new Date(nowMs);
  let k = (now.getUTCFullYear() - anchor.getUTCFullYear()) * 12 + (now.getUTCMonth() - anchor.getUTCMonth());
  while (k > 0 && at(k) > nowMs) k--;
  while (at(k + 1) <= nowMs) k++;
  if (nowMs < anchorMs) k = 0;
  return { startMs: at(k), endMs: at(k + 1) };
}
