/**
 * Overview: the plan, this period's operations against the allowance (neither under
 * PLANS=off), credits per day, the service's health.
 */
import { health } from '../../health.js';
import { barChart, lastDays } from '../chart.js';
import type { PageContext } from '../context.js';
import { count, credits, day, dollars, usd, when } from '../format.js';
import { html, type Html } from '../html.js';
import { shell } from '../layout.js';

export interface OrganizationEntry {
  id: string;
  name: string;
  plan: string;
  pending_plan: string | null;
  pending_plan_from: string | null;
  period_start: string;
  period_end: string;
  billable_ops: number;
  included_ops: number | null;
  overage_ops: number;
  overage_cost_usd: number;
  hard_limit: boolean;
}

interface DailyUsage {
  date: string;
  operations: number;
  credits: number;
  by_model: { model: string; calls: number; cost_credits: number }[];
}

const chart_days = 30;

/** Credits charged per day over the last `chart_days` days, as a chart (`usage-chart` on the overview). */
async function creditsChart(ctx: PageContext, testid: string, projectId?: string): Promise<{ chart: Html; days: DailyUsage[] }> {
  const from = new Date(Date.now() - (chart_days - 1) * 86_400_000).toISOString().slice(0, 10);
  const { body } = await ctx.api<{ data: DailyUsage[] }>('GET', '/usage/daily', {
    query: { project_id: projectId, from: `${from}T00:00:00Z`, limit: String(chart_days) },
  });
  const values = new Map(body.data.map((d) => [d.date, d.credits]));
  return { chart: barChart({ testid, title: 'Credits spent per day', bars: lastDays(values, chart_days), format: (v) => `${count(v)} credits` }), days: body.data };
}

export function allowance(org: OrganizationEntry): Html {
  if (org.included_ops === null) return html`<p><strong data-testid="ops-used">${count(org.billable_ops)}</strong> operations this period (custom contract: no allowance)</p>`;
  const share = Math.min(100, Math.round((org.billable_ops / Math.max(1, org.included_ops)) * 100));
  return html`<p><strong data-testid="ops-used">${count(org.billable_ops)}</strong> of <span data-testid="ops-included">${count(org.included_ops)}</span> included operations used (${share}%)</p>
<progress max="${org.included_ops}" value="${Math.min(org.billable_ops, org.included_ops)}" data-testid="ops-progress">${share}%</progress>
${org.hard_limit ? html`<p class="muted">At the allowance, further billable operations are refused until the period ends (upgrade to go on).</p>` : ''}
${org.overage_ops > 0 ? html`<p>Overage so far: ${count(org.overage_ops)} operations, ${dollars(org.overage_cost_usd.toFixed(2))}</p>` : ''}`;
}

/** The plan and the period's operations, two cards (the plan endpoint answers 404 under PLANS=off: none). */
function planCards(org: OrganizationEntry | null): Html {
  if (org === null) return html``;
  return html`<article class="card">
<h2>Plan</h2>
<p class="big" data-testid="plan">${org.plan}</p>
<p class="muted">Period ${day(org.period_start)} to ${day(org.period_end)}</p>
${org.pending_plan ? html`<p>Changes to ${org.pending_plan} on ${when(org.pending_plan_from)}</p>` : ''}
</article>
<article class="card">
<h2>Operations this period</h2>
${allowance(org)}
</article>`;
}

export async function overviewScreen(ctx: PageContext): Promise<Html> {
  const [org, usage, h] = await Promise.all([
    ctx.session.standing.plans === 'off' ? null : ctx.api<OrganizationEntry>('GET', '/organization').then((a) => a.body),
    creditsChart(ctx, 'usage-chart'),
    health(ctx.rt),
  ]);
  const queue = h.body.checks.queue as { status: string; outbox_lag_ms?: number; dirty_customers?: number; worker_heartbeat_age_ms?: number | null };
  const spent = usage.days.reduce((a, d) => a + d.credits, 0);
  const body = html`<section class="cards">
${planCards(org)}
<article class="card">
<h2>Health</h2>
<p class="big"><span class="status ${h.body.status}" data-testid="health-status">${h.body.status}</span></p>
<p>Outbox lag <strong data-testid="outbox-lag">${queue.outbox_lag_ms === undefined ? '—' : `${count(queue.outbox_lag_ms)} ms`}</strong>;
${queue.dirty_customers === undefined ? '' : `${count(queue.dirty_customers)} customers waiting to persist`}</p>
<p class="muted">Workers: ${queue.worker_heartbeat_age_ms == null ? 'no heartbeat' : `last heartbeat ${count(queue.worker_heartbeat_age_ms)} ms ago`}; PostgreSQL ${h.body.checks.postgres.status}; Redis ${h.body.checks.redis.status}</p>
${h.body.warnings.length > 0 ? html`<ul class="warnings">${h.body.warnings.map((w) => html`<li>${w}</li>`)}</ul>` : ''}
</article>
</section>
<section>
<h2>Credits spent per day</h2>
<p>${credits(spent)} in the last ${chart_days} days, all projects: ledger deducts and consumes, and gateway calls (the Usage screen shows gateway spend alone).</p>
${usage.chart}
</section>
<p class="muted">Amounts: 1 USD = 1,000,000 credits (${usd(1_000_000)}).</p>`;
  return shell({ session: ctx.session, title: 'Overview', screen: 'overview', body });
}
