/**
 * Spending budgets and balance alerts on the customer and key screens (docs/API.md,
 * "Budgets" and "Balance alerts and top-ups"): how a budget with its counters is shown,
 * the forms that set, change or clear a customer's budget, its alert settings and a
 * customer-scoped key's budget, and how those forms become the management API's PATCH
 * bodies. The API validates: a bad field is refused with its message and changes nothing.
 */
import type { Request } from 'express';
import { count, credits, when } from '../format.js';
import { number, optional, text } from '../forms.js';
import { html, type Html } from '../html.js';

/** A budget as the API reads it: limit, period and this period's counters. */
export interface BudgetView {
  limit: number;
  period: 'day' | 'week' | 'month' | 'total';
  spent: number;
  held: number;
  remaining: number;
  resets_at: string | null;
}

/** The balance alert settings as the API reads them. */
export interface AlertsView {
  low_balance_threshold: number | null;
  auto_top_up: { below: number; amount: number; monthly_limit: number | null } | null;
}

const periods = ['day', 'week', 'month', 'total'] as const;

const perPeriod = (b: BudgetView) => (b.period === 'total' ? 'in total' : `per ${b.period}`);

/** One line: spent and held of the limit, what is left and when it resets (keys' rows). */
export function budgetSummary(b: BudgetView | null): Html {
  if (b === null) return html`<span class="muted">none</span>`;
  return html`<span data-testid="key-budget" data-limit="${b.limit}" data-spent="${b.spent}" data-remaining="${b.remaining}">${count(b.limit)} ${perPeriod(b)}<br><span class="muted">spent ${count(b.spent)}, held ${count(b.held)}, left ${count(b.remaining)}${b.resets_at ? `; resets ${when(b.resets_at)}` : ''}</span></span>`;
}

/** The limit and period fields of a budget form, filled with what was typed after a refusal, else the budget set. */
function budgetFields(req: Request, typed: boolean, b: BudgetView | null): Html {
  const limit = typed ? text(req, 'limit') : b === null ? '' : String(b.limit);
  const period = typed ? text(req, 'period') : (b?.period ?? 'month');
  return html`<label>Limit (credits; 1,000,000 = $1) <input name="limit" inputmode="numeric" required value="${limit}" data-testid="budget-limit"></label>
<label>Period (UTC calendar) <select name="period" data-testid="budget-period">
${periods.map((p) => html`<option value="${p}"${p === period ? html` selected` : ''}>${p}</option>`)}
</select></label>`;
}

/**
 * The customer's budget with its counters, and the form that sets or changes it; a second
 * form clears it. `typed`: the last POST was this form's and was refused.
 */
export function customerBudgetPanel(req: Request, action: string, csrf: Html, b: BudgetView | null, typed: boolean): Html {
  const shown =
    b === null
      ? html`<p class="muted" data-testid="customer-budget" data-limit="">No budget: spending is limited by the balance only.</p>`
      : html`<dl class="receipt" data-testid="customer-budget" data-limit="${b.limit}" data-spent="${b.spent}" data-held="${b.held}" data-remaining="${b.remaining}">
<dt>Limit</dt><dd>${credits(b.limit)} ${perPeriod(b)}</dd>
<dt>Spent</dt><dd>${credits(b.spent)}</dd>
<dt>Held</dt><dd>${credits(b.held)} <span class="muted">(open freezes and gateway calls)</span></dd>
<dt>Remaining</dt><dd data-testid="budget-remaining">${credits(b.remaining)}</dd>
<dt>Resets</dt><dd>${b.resets_at ? when(b.resets_at) : 'never (total)'}</dd>
</dl>`;
  return html`<h2>Budget</h2>
${shown}
<form method="post" action="${action}" class="form" data-testid="budget-form">
${csrf}
${budgetFields(req, typed, b)}
<button type="submit" data-testid="budget-submit">${b === null ? 'Set budget' : 'Change budget'}</button>
</form>
${b === null ? '' : html`<form method="post" action="${action}" class="inline">${csrf}<input type="hidden" name="clear" value="1"><button type="submit" class="danger" data-testid="budget-clear">Clear budget</button></form>`}`;
}

/** The alert settings and their form: an empty field clears its setting. */
export function alertsPanel(req: Request, action: string, csrf: Html, a: AlertsView, typed: boolean): Html {
  const v = (name: string, stored: number | null | undefined) => (typed ? text(req, name) : stored == null ? '' : String(stored));
  const t = a.auto_top_up;
  return html`<h2>Balance alerts</h2>
<p class="muted" data-testid="customer-alerts">Low balance: ${a.low_balance_threshold === null ? 'off' : `below ${count(a.low_balance_threshold)} credits`}.
Auto top-up: ${t === null ? 'off' : `ask for ${count(t.amount)} credits below ${count(t.below)}${t.monthly_limit === null ? '' : `, at most ${count(t.monthly_limit)} a month`}`}.</p>
<form method="post" action="${action}" class="form" data-testid="alerts-form">
${csrf}
<label>Low balance threshold (credits; empty: off) <input name="low_balance_threshold" inputmode="numeric" value="${v('low_balance_threshold', a.low_balance_threshold)}" data-testid="alerts-threshold"></label>
<fieldset><legend>Auto top-up (every field empty: off)</legend>
<label>Below (credits) <input name="top_up_below" inputmode="numeric" value="${v('top_up_below', t?.below)}" data-testid="alerts-top-up-below"></label>
<label>Amount (credits) <input name="top_up_amount" inputmode="numeric" value="${v('top_up_amount', t?.amount)}" data-testid="alerts-top-up-amount"></label>
<label>Monthly limit (credits, optional) <input name="top_up_monthly_limit" inputmode="numeric" value="${v('top_up_monthly_limit', t?.monthly_limit)}" data-testid="alerts-top-up-monthly"></label>
</fieldset>
<button type="submit" data-testid="alerts-submit">Save alerts</button>
</form>`;
}

/** A key's budget form, in its row, opened by the row's Budget link. */
export function keyBudgetForm(req: Request, action: string, cancel: string, csrf: Html, b: BudgetView | null, typed: boolean): Html {
  return html`<form method="post" action="${action}" class="form" data-testid="key-budget-form">
${csrf}
${budgetFields(req, typed, b)}
<button type="submit" data-testid="budget-submit">Set budget</button>
${b === null ? '' : html`<button type="submit" name="clear" value="1" class="danger" data-testid="budget-clear">Clear budget</button>`}
<a href="${cancel}">Cancel</a>
</form>`;
}

/** The PATCH body of a budget form: `{budget: {limit, period}}`, or `{budget: null}` for its Clear button. */
export function budgetPatch(req: Request): Record<string, unknown> {
  if (text(req, 'clear') === '1') return { budget: null };
  return { budget: { limit: number(req, 'limit'), period: optional(req, 'period') } };
}

/** The PATCH body of the alerts form: an empty threshold clears it; every top-up field empty clears the top-up. */
export function alertsPatch(req: Request): Record<string, unknown> {
  const below = number(req, 'top_up_below');
  const amount = number(req, 'top_up_amount');
  const monthly = number(req, 'top_up_monthly_limit');
  const none = below === undefined && amount === undefined && monthly === undefined;
  return {
    low_balance_threshold: number(req, 'low_balance_threshold') ?? null,
    auto_top_up: none ? null : { below, amount, monthly_limit: monthly ?? null },
  };
}

/** What a budget form did, for its notice. */
export function budgetNotice(b: BudgetView | null, of: string): string {
  return b === null ? `Cleared the budget of ${of}` : `Set the budget of ${of} to ${count(b.limit)} credits ${perPeriod(b)}`;
}
