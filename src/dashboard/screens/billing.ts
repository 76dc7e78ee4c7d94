/**
 * Plan and invoices: the plan, the overage so far, a plan change whose pro-rated charge is
 * shown before the owner confirms (Enterprise is not offered: the operator sets it), the
 * upcoming invoice (the open period as it stands, where an upgrade's charge shows at once)
 * and the invoices of closed periods. Not served under PLANS=off.
 */
import type { Request } from 'express';
import { planIds, plans, type PlanId } from '../../plans/catalogue.js';
import { operator_only_plans } from '../../plans/policy.js';
import { pager, type List, type PageContext } from '../context.js';
import { cents, count, day, dollars, usd, when } from '../format.js';
import { queryParam, text } from '../forms.js';
import { html, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';
import { allowance, type OrganizationEntry } from './overview.js';

interface Quote {
  current_plan: string;
  plan: string;
  change: 'upgrade' | 'downgrade' | 'none';
  effective_at: string;
  period_end: string;
  remaining_ms: number;
  period_ms: number;
  price_difference_cents: number;
  prorated_charge_cents: number;
  prorated_charge_usd: string;
  custom_price: boolean;
}

interface Invoice {
  /** null: the upcoming invoice, not closed yet. */
  id: string | null;
  period_start: string;
  period_end: string;
  plan: string;
  included_ops: number | null;
  operations_used: number;
  overage_ops: number;
  overage_rate_cents_per_10k: number;
  lines: InvoiceLine[];
  total_cents: number;
  total_usd: string;
  created_at: string;
}

/** A line of an invoice as the API gives it: its type's own fields beside the description. */
interface InvoiceLine {
  type: string;
  description: string;
  amount_cents: number;
  amount_usd: string;
  from_plan?: string;
  to_plan?: string;
  effective_at?: string;
  remaining_ms?: number;
  period_ms?: number;
  included_ops?: number | null;
  overage_ops?: number;
  rate_cents_per_10k?: number;
}

const minutes = (ms: number): string => count(Math.round(ms / 60_000));

/**
 * An invoice line in words, from its fields: the API's description writes milliseconds and
 * plan ids for programs (`upgrade free -> pro_500k, pro rata for 2591704503 of 2592000000
 * ms`); a line whose fields are missing keeps that description.
 */
function lineText(l: InvoiceLine): string {
  if (l.type === 'upgrade' && l.from_plan && l.to_plan && l.effective_at && l.remaining_ms !== undefined && l.period_ms !== undefined) {
    return `Upgrade from ${l.from_plan} to ${l.to_plan} on ${when(l.effective_at)}, pro rata: ${minutes(l.remaining_ms)} of ${minutes(l.period_ms)} minutes left`;
  }
  if (l.type === 'overage' && l.overage_ops !== undefined && l.rate_cents_per_10k !== undefined && typeof l.included_ops === 'number') {
    return `${count(l.overage_ops)} operations over the ${count(l.included_ops)} included, at ${cents(l.rate_cents_per_10k)} per 10,000`;
  }
  return l.description;
}

function planLabel(id: string): string {
  const p = plans[id as PlanId];
  if (!p) return id;
  const price = p.priceMicroUsd === null ? 'custom price' : `${usd(p.priceMicroUsd)}/month`;
  return `${id} (${p.includedOps === null ? 'custom allowance' : `${count(p.includedOps)} ops`}, ${price})`;
}

function quoteBox(ctx: PageContext, q: Quote): Html {
  if (q.change === 'none') return html`<p class="notice info" data-testid="plan-quote">${q.plan} is the plan already in force.</p>`;
  const what =
    q.change === 'upgrade'
      ? html`Upgrading to <strong>${q.plan}</strong> takes effect now, with its allowance.
${q.custom_price ? html`Enterprise has a custom price: nothing is charged here.` : html`The price difference for the rest of this period is charged now: <strong data-testid="plan-charge">${dollars(q.prorated_charge_usd)}</strong> (${cents(q.price_difference_cents)} × ${count(Math.round(q.remaining_ms / 60_000))} of ${count(Math.round(q.period_ms / 60_000))} minutes left), as a line of the upcoming invoice, billed when the period closes on ${when(q.period_end)}.`}`
      : html`Downgrading to <strong>${q.plan}</strong> takes effect at the end of this period, on ${when(q.effective_at)}. Nothing is charged now.`;
  return html`<div class="quote" data-testid="plan-quote">
<p>${what}</p>
<form method="post" action="/dashboard/billing/plan">
${csrfField(ctx.session)}
<input type="hidden" name="plan" value="${q.plan}">
<button type="submit" data-testid="plan-confirm">Confirm ${q.change} to ${q.plan}</button>
<a href="/dashboard/billing">Cancel</a>
</form>
</div>`;
}

function invoiceTable(invoices: readonly Invoice[]): Html {
  return html`<table class="list" data-testid="invoice-list">
<thead><tr><th>Period</th><th>Plan</th><th>Operations used / included</th><th>Overage</th><th>Lines</th><th>Total</th></tr></thead>
<tbody>
${invoices.map(
  (i) => html`<tr data-testid="invoice-row" data-invoice-id="${i.id}">
<td>${day(i.period_start)} to ${day(i.period_end)}</td>
<td>${i.plan}</td>
<td>${count(i.operations_used)} / ${i.included_ops === null ? 'custom' : count(i.included_ops)}</td>
<td>${count(i.overage_ops)} ops at ${cents(i.overage_rate_cents_per_10k)} per 10,000</td>
<td>${i.lines.map((l) => html`<div>${lineText(l)}: ${dollars(l.amount_usd)}</div>`)}</td>
<td><strong>${dollars(i.total_usd)}</strong></td>
</tr>`,
)}
</tbody>
</table>`;
}

/** The open period's invoice as it stands: its lines and total so far. */
function upcomingBox(i: Invoice): Html {
  return html`<article class="card" data-testid="upcoming-invoice">
<h2>Upcoming invoice</h2>
<p class="muted">This period, ${day(i.period_start)} to ${day(i.period_end)}, so far; billed when it closes.</p>
<table class="list">
<tbody>
${i.lines.map((l) => html`<tr data-testid="upcoming-line" data-line-type="${l.type}"><td>${lineText(l)}</td><td>${dollars(l.amount_usd)}</td></tr>`)}
<tr><td><strong>Total so far</strong></td><td><strong data-testid="upcoming-total">${dollars(i.total_usd)}</strong></td></tr>
</tbody>
</table>
</article>`;
}

async function billingScreen(ctx: PageContext, req: Request, notice: Notice = null): Promise<Html> {
  const target = req.method === 'GET' ? queryParam(req, 'plan') : undefined;
  const cursor = queryParam(req, 'cursor');
  const [org, upcoming, invoices, quote] = await Promise.all([
    ctx.api<OrganizationEntry>('GET', '/organization').then((a) => a.body),
    ctx.api<Invoice>('GET', '/invoices/upcoming').then((a) => a.body),
    ctx.api<List<Invoice>>('GET', '/invoices', { query: { cursor } }).then((a) => a.body),
    target === undefined ? null : ctx.api<Quote>('GET', '/organization/plan/preview', { query: { plan: target } }).then((a) => a.body),
  ]);
  const body = html`${noticeOf(notice)}
<section class="cards">
<article class="card">
<h2>Plan</h2>
<p class="big" data-testid="plan">${org.plan}</p>
<p class="muted">${planLabel(org.plan)}</p>
<p class="muted">Period ${day(org.period_start)} to ${day(org.period_end)}</p>
${org.pending_plan ? html`<p data-testid="pending-plan">Changes to ${org.pending_plan} on ${when(org.pending_plan_from)}</p>` : ''}
</article>
<article class="card">
<h2>This period</h2>
${allowance(org)}
<p>Overage so far: <strong data-testid="overage">${count(org.overage_ops)} operations, ${dollars(org.overage_cost_usd.toFixed(2))}</strong></p>
</article>
</section>
<h2>Change plan</h2>
<form method="get" action="/dashboard/billing" class="search">
<label>Plan <select name="plan" data-testid="plan-select">
${planIds.filter((id) => !operator_only_plans.includes(id) || id === org.plan).map((id) => html`<option value="${id}"${id === (target ?? org.plan) ? html` selected` : ''}>${planLabel(id)}</option>`)}
</select></label>
<button type="submit" data-testid="plan-preview">Preview the change</button>
</form>
${org.plan === 'enterprise' ? '' : html`<p class="muted" data-testid="enterprise-note">Enterprise (a custom contract, no allowance to count against) is set by the operator of this service: contact them.</p>`}
${quote ? quoteBox(ctx, quote) : ''}
${upcomingBox(upcoming)}
<h2>Invoices</h2>
${invoiceTable(invoices.data)}
${invoices.data.length === 0 ? html`<p class="muted">No closed period yet.</p>` : ''}
${pager('/dashboard/billing', {}, invoices, cursor !== undefined)}`;
  return shell({ session: ctx.session, title: 'Plan & invoices', screen: 'billing', body });
}

export function billingRoutes(pages: PageRouter): void {
  pages.get('/dashboard/billing', async (req, res, ctx) => sendPage(res, await billingScreen(ctx, req)));

  pages.post('/dashboard/billing/plan', async (req, res, ctx) => {
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<OrganizationEntry & { change: Quote }>('PUT', '/organization/plan', { body: { plan: text(req, 'plan') } });
        const c = body.change;
        const message =
          c.change === 'upgrade'
            ? `Upgraded to ${c.plan}; charged ${dollars(c.prorated_charge_usd)} for the rest of the period, on the upcoming invoice below (billed when the period closes on ${when(c.period_end)})`
            : c.change === 'downgrade'
              ? `${c.plan} starts on ${when(c.effective_at)}`
              : `${c.plan} is the plan already in force`;
        return { kind: 'ok', message };
      },
      (notice) => billingScreen(ctx, req, notice),
      '/dashboard/billing',
    );
  });
}
