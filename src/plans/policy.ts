/**
 * Who may do what with the plans: under PLANS=off (a single-tenant install) the plan and
 * invoice endpoints answer 404; Enterprise is set by the operator (`npm run plan`), never
 * by an owner (403).
 */
import { ApiError } from '../errors/catalogue.js';
import type { PlanId } from './catalogue.js';

/**
 * The answer of the plan and invoice endpoints under PLANS=off: a single-tenant install
 * has no plans (docs/API.md, "Organization and plan").
 */
export function plansOff(): ApiError {
  return new ApiError('not_found', { message: 'plans are off on this install (PLANS=off): it has no plans, plan changes or invoices' });
}

/** Who changes a plan: an owner (the API, the dashboard) or the operator (`npm run plan`). */
export type PlanChanger = 'owner' | 'operator';

/**
 * The plans an owner may not move to: Enterprise is a contract the operator agrees and
 * sets (`npm run plan`), never a button.
 */
export const operator_only_plans: readonly PlanId[] = ['enterprise'];

/** 403 for an owner's change to an operator-only plan; staying on it (cancelling a pending downgrade) is allowed. */
export function refuseOwnerChange(by: PlanChanger, current: PlanId, plan: PlanId): void {
  if (by === 'owner' && operator_only_plans.includes(plan) && current !== plan) {
    throw new ApiError('permission_denied', { message: `the ${plan} plan is set by the operator of this service: contact them to move to it` });
  }
}
