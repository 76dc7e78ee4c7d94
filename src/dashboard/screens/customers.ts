/**
 * Customers: search and list with balances; a customer's page with wallets, sources and
 * their windows, the budget and balance alerts with their forms (screens/budgets.ts), the
 * ledger (type filter, cursor pages), receipts and a deposit form; a receipt's page.
 */
import type { Request } from 'express';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { count, credits, usd, when } from '../format.js';
import { number, optional, queryParam, text, utcTime } from '../forms.js';
import { html, pagePath, withQuery, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';
import { usageTable, type UsageRecord } from './usage.js';
import { alertsPanel, alertsPatch, budgetNotice, budgetPatch, customerBudgetPanel, type AlertsView, type BudgetView } from './budgets.js';

interface Amounts {
  total: number;
  used: number;
  frozen: number;
  available: number;
}

interface CustomerEntry {
  id: string;
  name: string | null;
  email: string | null;
  created_at: string;
  balance: Amounts | null;
  wallets: Record<string, Amounts> | null;
  sources?: SourceEntry[] | null;
}

/** The customer's page reads its budget and alert settings too. */
interface CustomerDetail extends CustomerEntry, AlertsView {
  budget: BudgetView | null;
}

/** Which form of the customer's page a POST was: a refused one is shown again with what was typed. */
type CustomerForm = 'deposit' | 'budget' | 'alerts';

interface SourceEntry extends Amounts {
  account_id: string;
  source: string;
  credit_type: string;
  active: boolean;
  starts_at: string | null;
  expires_at: string | null;
}

interface LedgerEntry {
  id: string;
  type: string;
  transaction_id: string;
  amount: number;
  returned_amount: number | null;
  wallet: string | null;
  details: { account_id: string; credit_type: string; amount: number }[];
  reason: string | null;
  description: string | null;
  created_at: string;
}

const ledger_types = ['DEPOSIT', 'FREEZE', 'CONSUME', 'DEDUCT', 'UNFREEZE', 'GATEWAY', 'EXPIRE'] as const;
const ledger_page_size = '25';
const receipts_page_size = '10';

async function customersScreen(ctx: PageContext, req: Request, projectId: string): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const search = queryParam(req, 'search');
  const cursor = queryParam(req, 'cursor');
  const { body: customers } = await ctx.api<List<CustomerEntry>>('GET', '/projects/:project_id/customers', { params: { project_id: project.id }, query: { search, cursor } });
  const path = pagePath('projects', project.id, 'customers');
  const body = html`<form method="get" action="${path}" class="search" role="search">
<label>Search by id, name or email <input type="search" name="search" value="${search ?? ''}" maxlength="256" data-testid="customer-search"></label>
<button type="submit">Search</button>
</form>
<table class="list" data-testid="customer-list">
<thead><tr><th>Customer</th><th>Email</th><th>Available</th><th>Total / used / frozen</th><th>Since</th></tr></thead>
<tbody>
${customers.data.map((c) => {
  const href = pagePath('projects', project.id, 'customers', c.id);
  return html`<tr data-testid="customer-row" data-customer-id="${c.id}" data-href="${href}" class="clickable">
<td><a href="${href}">${c.id}</a>${c.name ? html`<br><span class="muted">${c.name}</span>` : ''}</td>
<td>${c.email ?? '—'}</td>
<td>${c.balance === null ? html`<span class="muted">not loaded</span>` : credits(c.balance.available)}</td>
<td>${c.balance === null ? '—' : `${count(c.balance.total)} / ${count(c.balance.used)} / ${count(c.balance.frozen)}`}</td>
<td>${when(c.created_at)}</td>
</tr>`;
})}
</tbody>
</table>
${customers.data.length === 0 ? html`<p class="muted">${search ? 'No customer matches.' : 'No customers yet: a deposit creates one.'}</p>` : ''}
${pager(path, { search }, customers, cursor !== undefined)}`;
  return shell({ session: ctx.session, title: `Customers · ${project.name}`, screen: 'customers', body, project: choice });
}

function sourcesTable(sources: readonly SourceEntry[]): Html {
  return html`<table class="list" data-testid="source-list">
<thead><tr><th>Source</th><th>Wallet</th><th>Available</th><th>Total / used / frozen</th><th>Window</th><th>Status</th></tr></thead>
<tbody>
${sources.map(
  (s) => html`<tr data-testid="source-row">
<td>${s.source}<br><code class="muted">${s.account_id}</code></td>
<td>${s.credit_type}</td>
<td>${credits(s.available)}</td>
<td>${count(s.total)} / ${count(s.used)} / ${count(s.frozen)}</td>
<td>${s.starts_at ? when(s.starts_at) : 'from the start'} → ${s.expires_at ? when(s.expires_at) : 'never expires'}</td>
<td><span class="status ${s.active ? 'active' : 'inactive'}">${s.active ? 'active' : 'inactive'}</span></td>
</tr>`,
)}
</tbody>
</table>`;
}

function ledgerTable(entries: readonly LedgerEntry[]): Html {
  return html`<table class="list" data-testid="ledger-list">
<thead><tr><th>When</th><th>Type</th><th>Amount</th><th>Transaction</th><th>Sources</th><th>Note</th></tr></thead>
<tbody>
${entries.map(
  (e) => html`<tr data-testid="ledger-row" data-entry-type="${e.type}">
<td>${when(e.created_at)}</td>
<td>${e.type}${e.reason ? html`<br><span class="muted">${e.reason}</span>` : ''}</td>
<td>${credits(e.amount)}${e.returned_amount ? html`<br><span class="muted">returned ${count(e.returned_amount)}</span>` : ''}</td>
<td><code>${e.transaction_id}</code></td>
<td>${e.details.map((d) => html`<div>${d.credit_type}: ${count(d.amount)}</div>`)}</td>
<td>${e.description ?? ''}</td>
</tr>`,
)}
</tbody>
</table>`;
}

async function customerScreen(ctx: PageContext, req: Request, projectId: string, customerId: string, notice: Notice = null, form: CustomerForm = 'deposit'): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const params = { project_id: project.id, customer_id: customerId };
  const type = queryParam(req, 'type');
  const cursor = queryParam(req, 'cursor');
  const receiptsCursor = queryParam(req, 'receipts_cursor');
  const [customer, ledger, receipts] = await Promise.all([
    ctx.api<CustomerDetail>('GET', '/projects/:project_id/customers/:customer_id', { params }).then((a) => a.body),
    ctx.api<List<LedgerEntry>>('GET', '/projects/:project_id/customers/:customer_id/ledger', { params, query: { type, cursor, limit: ledger_page_size } }).then((a) => a.body),
    ctx.api<List<UsageRecord>>('GET', '/projects/:project_id/usage', {
      params: { project_id: project.id },
      query: { customer_id: customerId, cursor: receiptsCursor, limit: receipts_page_size },
    }).then((a) => a.body),
  ]);
  const path = pagePath('projects', project.id, 'customers', customerId);
  const failed = notice?.kind === 'error' && req.method === 'POST';
  const failedDeposit = failed && form === 'deposit';
  const csrf = csrfField(ctx.session);
  const balance = customer.balance ?? { total: 0, used: 0, frozen: 0, available: 0 };
  const body = html`${noticeOf(notice)}
<p><a href="${pagePath('projects', project.id, 'customers')}">← All customers</a></p>
<section class="cards">
<article class="card">
<h2>Available</h2>
<p class="big"><span data-testid="customer-available">${balance.available}</span> credits</p>
<p class="muted">${usd(balance.available)}; total ${count(balance.total)}, used ${count(balance.used)}, frozen ${count(balance.frozen)}</p>
</article>
<article class="card">
<h2>Profile</h2>
<p>${customer.name ?? html`<span class="muted">no name</span>`}<br>${customer.email ?? html`<span class="muted">no email</span>`}</p>
<p class="muted">Customer since ${when(customer.created_at)}</p>
</article>
</section>
<h2>Wallets</h2>
<table class="list" data-testid="wallet-list">
<thead><tr><th>Wallet</th><th>Available</th><th>Total</th><th>Used</th><th>Frozen</th></tr></thead>
<tbody>
${Object.entries(customer.wallets ?? {}).map(
  ([name, w]) => html`<tr data-testid="wallet-row" data-wallet="${name}"><td>${name}</td><td>${credits(w.available)}</td><td>${count(w.total)}</td><td>${count(w.used)}</td><td>${count(w.frozen)}</td></tr>`,
)}
</tbody>
</table>
<h2>Sources</h2>
${customer.sources && customer.sources.length > 0 ? sourcesTable(customer.sources) : html`<p class="muted">No sources.</p>`}
${customerBudgetPanel(req, pagePath('projects', project.id, 'customers', customerId, 'budget'), csrf, customer.budget, failed && form === 'budget')}
${alertsPanel(req, pagePath('projects', project.id, 'customers', customerId, 'alerts'), csrf, customer, failed && form === 'alerts')}
<h2>Deposit</h2>
<form method="post" action="${pagePath('projects', project.id, 'customers', customerId, 'deposits')}" class="form" data-testid="deposit-form">
${csrf}
<label>Amount (credits; 1,000,000 = $1) <input name="amount" inputmode="numeric" required value="${failedDeposit ? text(req, 'amount') : ''}" data-testid="deposit-amount"></label>
<label>Wallet (optional) <input name="wallet" maxlength="64" value="${failedDeposit ? text(req, 'wallet') : ''}" placeholder="${project.contract === 'A' ? 'default' : 'credits'}"></label>
<label>Source label (optional) <input name="source" maxlength="128" value="${failedDeposit ? text(req, 'source') : ''}"></label>
<label>Starts (UTC, optional) <input type="datetime-local" name="starts_at"></label>
<label>Expires (UTC, optional) <input type="datetime-local" name="expires_at"></label>
<button type="submit" data-testid="deposit-submit">Deposit</button>
</form>
<h2>Ledger</h2>
<form method="get" action="${path}" class="search">
<label>Type <select name="type" data-autosubmit data-testid="ledger-type">
<option value="">all</option>
${ledger_types.map((t) => html`<option value="${t}"${t === type ? html` selected` : ''}>${t}</option>`)}
</select></label>
<noscript><button type="submit">Filter</button></noscript>
</form>
${ledgerTable(ledger.data)}
${ledger.data.length === 0 ? html`<p class="muted">No entries${type ? ` of type ${type}` : ''}.</p>` : ''}
${pager(path, { type }, ledger, cursor !== undefined)}
<h2>Receipts</h2>
${usageTable(project.id, receipts.data)}
${receipts.data.length === 0 ? html`<p class="muted">No gateway calls.</p>` : ''}
${receipts.next_cursor || receiptsCursor ? html`<nav class="pager">${receiptsCursor ? html`<a href="${path}">First receipts</a>` : ''}${receipts.next_cursor ? html`<a href="${withQuery(path, { receipts_cursor: receipts.next_cursor })}">More receipts</a>` : ''}</nav>` : ''}`;
  return shell({ session: ctx.session, title: `Customer ${customerId}`, screen: 'customers', body, project: choice });
}

interface Receipt extends UsageRecord {
  prices: Record<string, number>;
  reserved_credits: number;
  returned_credits: number;
  details: { account_id: string; credit_type: string; amount: number }[];
  balance_after_credits: number | null;
}

async function receiptScreen(ctx: PageContext, projectId: string, transactionId: string): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const { body: r } = await ctx.api<Receipt>('GET', '/projects/:project_id/receipts/:transaction_id', { params: { project_id: project.id, transaction_id: transactionId } });
  const rows: [string, Html | string][] = [
    ['Transaction', r.transaction_id],
    ['Trace', r.trace_id ?? '—'],
    ['Customer', html`<a href="${pagePath('projects', project.id, 'customers', r.customer_id)}">${r.customer_id}</a>`],
    ['Model', `${r.model} (${r.endpoint}${r.stream ? ', streamed' : ''})`],
    ['Status', r.status],
    ['Tokens', `${count(r.input_tokens)} in, ${count(r.output_tokens)} out, ${count(r.cache_read_tokens)} cache read, ${count(r.cache_write_tokens)} cache write${r.usage_estimated ? ' (estimated)' : ''}`],
    ['Cost', credits(r.cost_credits)],
    ['Uncovered', r.uncovered_credits > 0 ? html`<span class="uncovered" data-testid="receipt-uncovered">${credits(r.uncovered_credits)}: cost the wallet could not pay, not charged</span>` : credits(0)],
    ['Reserved / returned', `${count(r.reserved_credits)} / ${count(r.returned_credits)} credits`],
    ['Drawn from', html`${r.details.map((d) => html`<div>${d.credit_type} <code>${d.account_id}</code>: ${count(d.amount)}</div>`)}`],
    ['Balance after', r.balance_after_credits === null ? '—' : credits(r.balance_after_credits)],
    ['Latency', `${count(r.latency_ms)} ms`],
    ['At', when(r.created_at)],
  ];
  const body = html`<dl class="receipt" data-testid="receipt">${rows.map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`;
  return shell({ session: ctx.session, title: `Receipt ${transactionId}`, screen: 'usage', body, project: choice });
}

function depositBody(req: Request): Record<string, unknown> {
  const body: Record<string, unknown> = { amount: number(req, 'amount') };
  for (const f of ['wallet', 'source'] as const) {
    const v = optional(req, f);
    if (v !== undefined) body[f] = v;
  }
  for (const f of ['starts_at', 'expires_at'] as const) {
    const v = utcTime(req, f);
    if (v !== undefined) body[f] = v;
  }
  return body;
}

export function customerRoutes(pages: PageRouter): void {
  pages.get('/dashboard/projects/:project_id/customers', async (req, res, ctx) => {
    sendPage(res, await customersScreen(ctx, req, String(req.params.project_id)));
  });

  pages.get('/dashboard/projects/:project_id/customers/:customer_id', async (req, res, ctx) => {
    sendPage(res, await customerScreen(ctx, req, String(req.params.project_id), String(req.params.customer_id)));
  });

  pages.post('/dashboard/projects/:project_id/customers/:customer_id/deposits', async (req, res, ctx) => {
    const params = { project_id: String(req.params.project_id), customer_id: String(req.params.customer_id) };
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<{ amount?: number }>('POST', '/projects/:project_id/customers/:customer_id/deposits', { params, body: depositBody(req) });
        return { kind: 'ok', message: `Deposited ${count(Number(body.amount ?? number(req, 'amount')))} credits` };
      },
      (notice) => customerScreen(ctx, req, params.project_id, params.customer_id, notice),
      pagePath('projects', params.project_id, 'customers', params.customer_id),
    );
  });

  // The budget form (its Clear button too) and the alerts form: PATCH of the customer.
  const settings: [CustomerForm, (req: Request) => Record<string, unknown>, (c: CustomerDetail) => string][] = [
    ['budget', budgetPatch, (c) => budgetNotice(c.budget, 'the customer')],
    ['alerts', alertsPatch, () => 'Saved the balance alerts'],
  ];
  for (const [form, patch, said] of settings) {
    pages.post(`/dashboard/projects/:project_id/customers/:customer_id/${form}`, async (req, res, ctx) => {
      const params = { project_id: String(req.params.project_id), customer_id: String(req.params.customer_id) };
      await answerAction(
        res,
        async () => {
          const { body } = await ctx.api<CustomerDetail>('PATCH', '/projects/:project_id/customers/:customer_id', { params, body: patch(req) });
          return { kind: 'ok', message: said(body) };
        },
        (notice) => customerScreen(ctx, req, params.project_id, params.customer_id, notice, form),
        pagePath('projects', params.project_id, 'customers', params.customer_id),
      );
    });
  }

  pages.get('/dashboard/projects/:project_id/receipts/:transaction_id', async (req, res, ctx) => {
    sendPage(res, await receiptScreen(ctx, String(req.params.project_id), String(req.params.transaction_id)));
  });
}
