/**
 * Spending budgets (docs/API.md, "Budgets"): what a budget is, its calendar periods, how it
 * is shown, and the words of a refusal. The scripts enforce them (lua/includes/budget.lua,
 * which keeps the counters in the customer's meta hash); this module only reads and words.
 */
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { timestamp } from '../schema/zod.js';

const budgetPeriods = ['day', 'week', 'month', 'total'] as const;
export type BudgetPeriod = (typeof budgetPeriods)[number];

/** A budget as set: `{limit, period}` (contract section 9). */
export const budgetSchema = z
  .object({
    limit: z.number().int().positive().max(1e15),
    period: z.enum(budgetPeriods),
  })
  .strict();
export type Budget = z.infer<typeof budgetSchema>;

/** A budget as read: the limit and period with this period's counters. */
export const budgetStateSchema = z
  .object({
    limit: z.number().int(),
    period: z.enum(budgetPeriods),
    spent: z.number().int(),
    held: z.number().int(),
    remaining: z.number().int(),
    resets_at: timestamp.nullable(),
  })
  .strict()
  .openapi('BudgetState', {
    description: 'A budget with its counters in the current period: `remaining` = limit - spent - held (at least 0); `resets_at` null for `total`.',
  });
export type BudgetState = z.infer<typeof budgetStateSchema>;

const day_ms = 86_400_000;

/** The start (ms) of the UTC calendar period holding `nowMs`, and its end (null for total), as Budget.period in Lua. */
export function periodOf(period: BudgetPeriod, nowMs: number): { start: number; end: number | null } {
  if (period === 'total') return { start: 0, end: null };
  const days = Math.floor(nowMs / day_ms);
  if (period === 'day') return { start: days * day_ms, end: (days + 1) * day_ms };
  if (period === 'week') {
    const monday = days - ((days + 3) % 7);
    return { start: monday * day_ms, end: (monday + 7) * day_ms };
  }
  const d = new Date(nowMs);
  return { start: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1), end: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) };
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

function stateOf(limit: number, period: BudgetPeriod, spent: number, held: number, resetsAtMs: number | null): BudgetState {
  return { limit, period, spent, held, remaining: Math.max(0, limit - spent - held), resets_at: iso(resetsAtMs) };
}

/** The customer budget of the view script's answer (Budget.view in Lua), null when none is set. */
export function customerBudgetOf(raw: string | undefined): BudgetState | null {
  if (!raw) return null;
  const b = JSON.parse(raw) as { limit: string; period: BudgetPeriod; spent: string; held: string; resets_at: string };
  return stateOf(Number(b.limit), b.period, Number(b.spent), Number(b.held), b.resets_at === '' ? null : Number(b.resets_at));
}

/** The project keys' budgets of the view script's answer (Budget.key_views in Lua), by key id. */
export function projectKeyBudgetsOf(raw: string | undefined): Record<string, BudgetState> {
  const out: Record<string, BudgetState> = {};
  if (!raw) return out;
  const all = JSON.parse(raw) as Record<string, { limit: string; period: BudgetPeriod; spent: string; held: string; resets_at: string }>;
  for (const id of Object.keys(all).sort()) {
    const b = all[id];
    out[id] = stateOf(Number(b.limit), b.period, Number(b.spent), Number(b.held), b.resets_at === '' ? null : Number(b.resets_at));
  }
  return out;
}

/** The meta field holding a project key's budget for the customer, 'limit|period' (lua/includes/budget.lua). */
export const projectKeyBudgetField = (keyId: string) => `bud_pk:${keyId}`;

/** The meta field value of a project key's budget for the customer. */
export const projectKeyBudgetValue = (b: Budget) => `${b.limit}|${b.period}`;

/** The meta field holding a key's counters (lua/includes/budget.lua). */
export const keyCountersField = (keyId: string) => `bud_k:${keyId}`;

/**
 * A key's budget as its listing shows it, from its counters field ('period|start|spent|held|limit',
 * null when the key never spent under it) at `nowMs`: spent counts in the current period
 * only, held carries over.
 */
export function keyBudgetOf(budget: Budget, counters: string | null, nowMs: number): BudgetState {
  const { start, end } = periodOf(budget.period, nowMs);
  let spent = 0;
  let held = 0;
  const m = counters === null ? null : /^([^|]*)\|(\d+)\|(\d+)\|(\d+)/.exec(counters);
  if (m) {
    held = Number(m[4]);
    if (m[1] === budget.period && Number(m[2]) === start) spent = Number(m[3]);
  }
  return stateOf(budget.limit, budget.period, spent, held, end);
}

/** What of the calling key the budget ARGV needs (a KeyRecord, src/keys/store.ts). */
interface CallingKey {
  id: string;
  type: string;
  budget_limit: number | null;
  budget_period: BudgetPeriod | null;
}

/**
 * The ARGV `key_budget` of the scripts that hold or charge (deduct, freeze, gateway hold;
 * lua/includes/budget.lua Budget.load): a customer-scoped key's own budget
 * ('id|limit|period', '' for none); a project key's id, whose budget for the customer, if
 * the customer's settings set one (`key_budgets`), the script reads from the customer's
 * meta hash in the same HMGET.
 */
export function keyBudgetArg(key: CallingKey): string {
  if (key.type === 'project') return key.id;
  if (key.type !== 'customer' || key.budget_limit === null || key.budget_period === null) return '';
  return `${key.id}|${key.budget_limit}|${key.budget_period}`;
}

/**
 * The budget_exceeded error of a refusal (Budget.refusal in Lua): 400 on the ledger, 402
 * on the gateway, type bad_request either way. Nothing was applied.
 */
export function budgetRefusal(raw: string, status: 400 | 402): ApiError {
  const r = JSON.parse(raw) as { scope: 'customer' | 'key'; limit: string; period: BudgetPeriod; spent: string; held: string; requested: string; resets_at: string; key_id?: string };
  const resetsAt = iso(r.resets_at === '' ? null : Number(r.resets_at));
  const limit = Number(r.limit);
  const spent = Number(r.spent);
  const held = Number(r.held);
  const requested = Number(r.requested);
  const whose = r.scope === 'customer' ? "the customer's" : "this key's";
  const when = resetsAt === null ? 'it never resets (period total)' : `it resets at ${resetsAt}`;
  const per = r.period === 'total' ? 'in total' : `this ${r.period}`;
  return new ApiError('budget_exceeded', {
    status,
    message:
      `budget exceeded: ${requested} credits would take ${whose} budget of ${limit} credits ${per} past its limit: ` +
      `${spent} spent and ${held} held so far, ${Math.max(0, limit - spent - held)} left; ${when}. Nothing was applied.`,
    extra: {
      details: {
        scope: r.scope, ...(r.key_id === undefined ? {} : { key_id: r.key_id }),
        budget_credits: limit, spent_credits: spent, held_credits: held, requested_credits: requested, resets_at: resetsAt,
      },
    },
  });
}
