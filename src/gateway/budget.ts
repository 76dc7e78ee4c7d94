/**
 * What a gateway call carries of the spending budgets (docs/API.md, "Budgets"): the calling
 * key's budget as the hold script's ARGV, what the hold answered of the budgets, and the
 * header that reports what is left. The scripts enforce them (lua/includes/budget.lua).
 */
import type { KeyRecord } from '../keys/store.js';
import { keyBudgetArg } from '../ledger/budgets.js';

/** Whole answers: a header; streamed answers: a trailer (announced in `Trailer` when the hold had a budget). */
export const budget_remaining_header = 'X-Service-Budget-Remaining-Credits';

/** Set when the budget, not the wallet, lowered the output limit sent upstream (X-Service-Max-Tokens). */
export const max_tokens_limited_by_header = 'X-Service-Max-Tokens-Limited-By';

/** What the hold answered of the budgets a call answers to. */
export interface CallBudget {
  /** What the tightest budget had left after the hold. */
  remainingAfterHold: number;
  /** The budget lowered the output limit below what the wallet allowed. */
  lowered: boolean;
}

/** The hold script's ARGV for the calling key's budget: a customer-scoped key's own, a project key's for this customer. */
export function keyBudgetOf(key: KeyRecord): string {
  return keyBudgetArg(key);
}

/** The budgets of a hold's answer (lua/gateway_hold-10.lua), null when none applied. */
export function budgetOfHold(hold: { budget_remaining?: string; lowered_by_budget?: string }): CallBudget | null {
  if (hold.budget_remaining === undefined || hold.budget_remaining === '') return null;
  return { remainingAfterHold: Number(hold.budget_remaining), lowered: hold.lowered_by_budget === '1' };
}
