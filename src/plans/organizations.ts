/**
 * The organization row that plan accounting reads from PostgreSQL (its plan, a downgrade
 * waiting for the next period, its anchor, the demo allowance), and the plan in force at
 * a time. Read by PlanService (src/plans/service.ts) and the invoices
 * (src/billing/invoices.ts).
 */
import { z } from 'zod';
import type { PlanId } from './catalogue.js';

export const orgRow = z.object({
  id: z.string(),
  name: z.string(),
  plan: z.enum(['free', 'pro_500k', 'pro_2m', 'pro_5m', 'pro_15m', 'pro_50m', 'enterprise']),
  pending_plan: z.enum(['free', 'pro_500k', 'pro_2m', 'pro_5m', 'pro_15m', 'pro_50m', 'enterprise']).nullable(),
  pending_from: z.number().nullable(),
  demo_allowance: z.boolean(),
  created_at: z.number(),
});
export type OrgRow = z.infer<typeof orgRow>;

/** The plan in force at `nowMs`: a pending downgrade applies from its period on. */
export function effectivePlan(org: Pick<OrgRow, 'plan' | 'pending_plan' | 'pending_from'>, nowMs: number): PlanId {
  return org.pending_plan !== null && org.pending_from !== null && org.pending_from <= nowMs ? org.pending_plan : org.plan;
}
