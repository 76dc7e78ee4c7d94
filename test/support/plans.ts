/**
 * Plan helpers for tests: the current period's count set directly (the cheap way to reach
 * the Free limit of 50,000 operations), and a plan set the operator's way (`npm run plan`,
 * the only way to Enterprise).
 */
import { periodAt, type PlanId } from '../../src/plans/catalogue.js';
import type { TestService } from '../helpers.js';

/**
 * Sets the organization's count of billable operations in the current period, as if that
 * many had happened. Leased operations go back first: no lease could be held past a count
 * the limit allows.
 */
export async function setPlanCount(svc: TestService, organizationId: string, n: number): Promise<void> {
  await svc.rt.plans.giveBackLeases(organizationId);
  await svc.rt.plans.organization(organizationId); // seeds the counter
  const period = periodAt(await svc.rt.plans.organizationAnchor(organizationId), Date.now() + svc.rt.clock.offsetMs());
  await svc.rt.redis.set(`${svc.rt.config.REDIS_PREFIX}o:{${organizationId}}:ops:${period.startMs}`, n);
}

/** Sets the plan as the operator does (Enterprise included), as `npm run plan -- set` does. */
export async function operatorSetsPlan(svc: TestService, organizationId: string, plan: PlanId): Promise<void> {
  await svc.rt.plans.setPlan(organizationId, plan, 'operator');
}
