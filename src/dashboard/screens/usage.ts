/**
 * Usage: the project's gateway calls searched by trace id, customer, model and a range of
 * days; the gateway spend per day of the same search (a chart, split by model or by
 * customer when chosen: screens/usage-chart.ts); the CSV export of the search.
 */
import type { Request, Response } from 'express';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { count, credits, when } from '../format.js';
import { queryParam } from '../forms.js';
import { html, pagePath, withQuery, type Html } from '../html.js';
import { noticeOf, shell } from '../layout.js';
import { sendPage, type PageRouter } from '../respond.js';
import { addressQuery, apiQuery, searchOf, spendChart, splits, type UsageSearch } from './usage-chart.js';

export interface UsageRecord {
  id: string;
  transaction_id: string;
  trace_id: string | null;
  customer_id: string;
  wallet: string;
  model: string;
  endpoint: string;
  stream: boolean;
  status: string;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  usage_estimated: boolean;
  cost_credits: number;
  cost_usd: string;
  uncovered_credits: number;
  latency_ms: number;
  created_at: string;
}

export function usageTable(projectId: string, records: readonly UsageRecord[]): Html {
  return html`<table class="list" data-testid="usage-list">
<thead><tr><th>When</th><th>Customer</th><th>Model</th><th>Tokens in / out</th><th>Cost</th><th>Status</th><th>Trace</th></tr></thead>
<tbody>
${records.map(
  (u) => html`<tr data-testid="usage-row" data-transaction-id="${u.transaction_id}">
<td>${u.status === 'failed' ? when(u.created_at) : html`<a href="${pagePath('projects', projectId, 'receipts', u.transaction_id)}" data-testid="receipt-link">${when(u.created_at)}</a>`}</td>
<td><a href="${pagePath('projects', projectId, 'customers', u.customer_id)}">${u.customer_id}</a></td>
<td>${u.model}</td>
<td>${count(u.input_tokens)} / ${count(u.output_tokens)}${u.usage_estimated ? html` <span class="muted">(estimated)</span>` : ''}</td>
<td>${credits(u.cost_credits)}${u.uncovered_credits > 0 ? html` <span class="uncovered" data-testid="usage-uncovered" title="cost the wallet could not pay: not charged">+ ${count(u.uncovered_credits)} uncovered</span>` : ''}</td>
<td>${u.status}</td>
<td>${u.trace_id ? html`<code>${u.trace_id}</code>` : '—'}</td>
</tr>`,
)}
</tbody>
</table>`;
}

/** The file name of the CSV export (docs/DASHBOARD.md gives it). */
export function csvFileName(projectId: string): string {
  return `usage-${projectId}.csv`;
}

/**
 * The credits that the search's calls cost beyond what their wallets could pay: one
 * total of GET /usage.
 */
async function uncoveredTotal(ctx: PageContext, projectId: string, s: UsageSearch): Promise<number> {
  const { body } = await ctx.api<{ data: { uncovered_credits: number }[] }>('GET', '/usage', { query: { ...apiQuery(s), project_id: projectId, group_by: '' } });
  return body.data[0]?.uncovered_credits ?? 0;
}

async function usageScreen(ctx: PageContext, req: Request, projectId: string): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const s = searchOf(req);
  const cursor = queryParam(req, 'cursor');
  const [records, spend, uncovered] = await Promise.all([
    ctx.api<List<UsageRecord>>('GET', '/projects/:project_id/usage', { params: { project_id: project.id }, query: { ...apiQuery(s), cursor } }).then((a) => a.body),
    spendChart(ctx, project.id, s),
    uncoveredTotal(ctx, project.id, s),
  ]);
  const path = pagePath('projects', project.id, 'usage');
  const filtered = s.trace_id !== undefined || s.customer_id !== undefined || s.model !== undefined;
  const body = html`${noticeOf(s.problem === null ? null : { kind: 'error', message: s.problem })}
<form method="get" action="${path}" class="search" role="search" data-testid="usage-form">
<label>Trace id <input name="trace_id" value="${s.trace_id ?? ''}" maxlength="256" data-testid="usage-trace"></label>
<label>Customer id <input name="customer_id" value="${s.customer_id ?? ''}" maxlength="256" data-testid="usage-customer"></label>
<label>Model <input name="model" value="${s.model ?? ''}" maxlength="128" data-testid="usage-model"></label>
<label>From (UTC) <input type="date" name="from" value="${s.from}" data-testid="usage-from"></label>
<label>To (UTC, included) <input type="date" name="to" value="${s.to}" data-testid="usage-to"></label>
<label>Chart <select name="split" data-testid="usage-split">
${splits.map(([v, label]) => html`<option value="${v}"${v === s.split ? html` selected` : ''}>${label}</option>`)}
</select></label>
<button type="submit" data-testid="usage-search">Search</button>
<a class="button" href="${withQuery(`${path}.csv`, addressQuery(s))}" hx-boost="false" download="${csvFileName(project.id)}" data-testid="usage-csv">Export CSV</a>
</form>
<h2>Gateway spend</h2>
<p data-testid="usage-spend-total">${credits(spend.total)} for the gateway calls ${filtered ? 'of this search' : 'of this project'}, ${s.from} to ${s.to} (UTC).</p>
${spend.chart}
<p class="muted" data-testid="usage-spend-note">Gateway calls only: the deducts and consumes the API makes on customers' ledgers are not in this chart or the table (each customer's ledger lists them; the Overview's chart counts every credit spent).</p>
${uncovered > 0
  ? html`<p class="notice uncovered" data-testid="usage-uncovered-total">Uncovered: ${credits(uncovered)}${filtered ? ' for this search' : ' in this project'}: calls that cost more than their wallet could pay. The rest was not charged, and no later deposit pays it (marked on the calls below).</p>`
  : ''}
<h2>Gateway calls</h2>
${usageTable(project.id, records.data)}
${records.data.length === 0 ? html`<p class="muted">No gateway calls match.</p>` : ''}
${pager(path, addressQuery(s), records, cursor !== undefined)}`;
  return shell({ session: ctx.session, title: `Usage · ${project.name}`, screen: 'usage', body, project: choice });
}

/** The most rows one export holds (page after page of the API's largest page). */
const csv_rows_max = 50_000;

const csvColumns = [
  'created_at', 'transaction_id', 'trace_id', 'customer_id', 'wallet', 'model', 'endpoint', 'stream', 'status', 'input_tokens',
  'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'usage_estimated', 'cost_credits', 'cost_usd', 'uncovered_credits', 'latency_ms',
] as const;

/**
 * A CSV field: quoted when it holds a quote, comma or line break; a text starting with
 * = + - @ (a spreadsheet formula) gets a leading quote mark, since trace and customer ids
 * come from callers.
 */
export function csvField(v: unknown): string {
  let s = v === null || v === undefined ? '' : String(v);
  if (typeof v === 'string' && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

async function exportCsv(ctx: PageContext, req: Request, res: Response, projectId: string): Promise<void> {
  const { project } = await openProject(ctx, projectId);
  const q = apiQuery(searchOf(req));
  // The first page is read before anything is sent, so a refusal still answers as an error page.
  let page = (await ctx.api<List<UsageRecord>>('GET', '/projects/:project_id/usage', { params: { project_id: project.id }, query: { ...q, limit: '500' } })).body;
  res.status(200).type('text/csv; charset=utf-8');
  res.setHeader('Content-Disposition', `attachment; filename="${csvFileName(project.id)}"`);
  res.write(`${csvColumns.join(',')}\r\n`);
  let rows = 0;
  for (;;) {
    res.write(page.data.map((u) => `${csvColumns.map((c) => csvField(u[c])).join(',')}\r\n`).join(''));
    rows += page.data.length;
    if (page.next_cursor === null || rows >= csv_rows_max) break;
    page = (await ctx.api<List<UsageRecord>>('GET', '/projects/:project_id/usage', { params: { project_id: project.id }, query: { ...q, limit: '500', cursor: page.next_cursor } })).body;
  }
  res.end();
}

export function usageRoutes(pages: PageRouter): void {
  pages.get('/dashboard/projects/:project_id/usage', async (req, res, ctx) => {
    sendPage(res, await usageScreen(ctx, req, String(req.params.project_id)));
  });
  pages.get('/dashboard/projects/:project_id/usage.csv', async (req, res, ctx) => exportCsv(ctx, req, res, String(req.params.project_id)));
}
