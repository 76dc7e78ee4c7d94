/** Usage: the project's gateway calls searched by trace id, customer or model; credits per day; CSV export. */
import type { Request, Response } from 'express';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { count, credits, when } from '../format.js';
import { queryParam } from '../forms.js';
import { html, pagePath, withQuery, type Html } from '../html.js';
import { shell } from '../layout.js';
import { sendPage, type PageRouter } from '../respond.js';
import { creditsChart } from './overview.js';

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

type Filter = 'trace_id' | 'customer_id' | 'model';

function filtersOf(req: Request): Record<Filter, string | undefined> {
  return { trace_id: queryParam(req, 'trace_id'), customer_id: queryParam(req, 'customer_id'), model: queryParam(req, 'model') };
}

/**
 * The credits that the project's calls (of the customer and model searched, when given)
 * cost beyond what their wallets could pay: one total of GET /usage.
 */
async function uncoveredTotal(ctx: PageContext, projectId: string, q: Record<Filter, string | undefined>): Promise<number> {
  const query: Record<string, string> = { project_id: projectId, group_by: '' };
  if (q.customer_id !== undefined) query.customer_id = q.customer_id;
  if (q.model !== undefined) query.model = q.model;
  const { body } = await ctx.api<{ data: { uncovered_credits: number }[] }>('GET', '/usage', { query });
  return body.data[0]?.uncovered_credits ?? 0;
}

async function usageScreen(ctx: PageContext, req: Request, projectId: string): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const q = filtersOf(req);
  const cursor = queryParam(req, 'cursor');
  const [records, usage, uncovered] = await Promise.all([
    ctx.api<List<UsageRecord>>('GET', '/projects/:project_id/usage', { params: { project_id: project.id }, query: { ...q, cursor } }).then((a) => a.body),
    creditsChart(ctx, 'usage-daily-chart', project.id),
    uncoveredTotal(ctx, project.id, q),
  ]);
  const path = pagePath('projects', project.id, 'usage');
  const body = html`<form method="get" action="${path}" class="search" role="search">
<label>Trace id <input name="trace_id" value="${q.trace_id ?? ''}" maxlength="256" data-testid="usage-trace"></label>
<label>Customer id <input name="customer_id" value="${q.customer_id ?? ''}" maxlength="256" data-testid="usage-customer"></label>
<label>Model <input name="model" value="${q.model ?? ''}" maxlength="128" data-testid="usage-model"></label>
<button type="submit" data-testid="usage-search">Search</button>
<a class="button" href="${withQuery(`${path}.csv`, q)}" hx-boost="false" download data-testid="usage-csv">Export CSV</a>
</form>
${usage.chart}
${uncovered > 0
  ? html`<p class="notice uncovered" data-testid="usage-uncovered-total">Uncovered: ${credits(uncovered)}${q.customer_id || q.model ? ' for this customer or model' : ' in this project'}: calls that cost more than their wallet could pay. The rest was not charged, and no later deposit pays it (marked on the calls below).</p>`
  : ''}
${usageTable(project.id, records.data)}
${records.data.length === 0 ? html`<p class="muted">No gateway calls match.</p>` : ''}
${pager(path, q, records, cursor !== undefined)}`;
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
  const q = filtersOf(req);
  // The first page is read before anything is sent, so a refusal still answers as an error page.
  let page = (await ctx.api<List<UsageRecord>>('GET', '/projects/:project_id/usage', { params: { project_id: project.id }, query: { ...q, limit: '500' } })).body;
  res.status(200).type('text/csv; charset=utf-8');
  res.setHeader('Content-Disposition', `attachment; filename="usage-${project.id}.csv"`);
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
