/**
 * The organization row that plan accounting reads from PostgreSQL (its plan, a downgrade
 * waiting for the next period, its anchor, the demo allowance), and the plan in force at
 * a time. Read by PlanService (src/plans/service.ts) and the invoices
 * (src/billing/invoices.ts). Also the documented answer of PlanService.organization().
 */
import { z } from 'zod';
import { timestamp } from '../schema/zod.js';
import { planIds, type PlanId } from './catalogue.js';

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

// The documented answer of organization() (src/openapi/).
const limitValue = z.number().int().nullable().openapi({ description: 'Null: unlimited.' });
export const organizationSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    plan: z.enum(planIds).openapi({ description: 'The plan in force now.' }),
    pending_plan: z.enum(planIds).nullable().openapi({ description: 'A downgrade that starts at `pending_plan_from`.' }),
    pending_plan_from: timestamp.nullable(),
    period_start: timestamp,
    period_end: timestamp,
    billable_ops: z.number().int(),
    included_ops: z.number().int().nullable().openapi({ description: 'Null for `enterprise`.' }),
    overage_ops: z.number().int(),
    overage_cost_usd: z.number(),
    hard_limit: z.boolean(),
    demo_allowance: z.boolean().openapi({ description: "Whether the organization is the `npm start` demo's: its limits are raised to the demo allowance (a plan that allows more keeps its own)." }),
    limits: z
      .object({
        projects_max: limitValue,
        keys_per_project_max: limitValue.openapi({ description: 'Keys (project and customer-scoped, revoked ones excepted) per project; null: unlimited.' }),
        members_max: limitValue,
      })
      .strict()
      .openapi({ description: 'What the organization may have now: its plan\'s limits, raised by the demo allowance; beyond them a creation answers 403 `plan_limit_reached`.' }),
  })
  .strict()
  .openapi('Organization');
