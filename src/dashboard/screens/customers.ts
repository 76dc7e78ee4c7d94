/**
 * Customers: search and list with balances, and a new customer's form; a customer's page
 * with its balance, profile (and its form), wallets, sources and their windows, the
 * budget and balance alerts with their forms (screens/budgets.ts), a deposit form
 * (screens/customer-forms.ts), the ledger (type filter, cursor pages, the sources each
 * entry drew on or added to, by name) and receipts; a receipt's page with the prices billed.
 */
import type { Request } from 'express';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { count, credits, perToken, usd, when } from '../format.js';
import { queryParam } from '../forms.js';
import { html, pagePath, withQuery, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';
import { usageTable, type UsageRecord } from './usage.js';
import { createCustomerBody, createCustomerForm, depositBody, depositForm, profileForm, profilePatch, type ProfileView } from './customer-forms.js';
import { model_prices, price } from './models.js';
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

/** The customer's page reads its metadata, budget and alert settings too. */
interface CustomerDetail extends CustomerEntry, AlertsView, ProfileView {
  budget: BudgetView | null;
}

/** Which form of the customer's page a POST was: a refused one is shown again with what was typed. */
type CustomerForm = 'deposit' | 'profile' | 'budget' | 'alerts';

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

async function customersScreen(ctx: PageContext, req: Request, projectId: string, notice: Notice = null): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const search = queryParam(req, 'search');
  const cursor = queryParam(req, 'cursor');
  const { body: customers } = await ctx.api<List<CustomerEntry>>('GET', '/projects/:project_id/customers', { params: { project_id: project.id }, query: { search, cursor } });
  const path = pagePath('projects', project.id, 'customers');
  const body = html`${noticeOf(notice)}
${createCustomerForm(req, path, csrfField(ctx.session), notice?.kind === 'error' && req.method === 'POST')}
<form method="get" action="${path}" class="search" role="search">
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
${customers.data.length === 0 ? html`<p class="muted">${search ? 'No customer matches.' : 'No customers yet: create one, or a deposit creates one.'}</p>` : ''}
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

/**
 * The sources of a ledger entry by name: each detail item's source label (its deposit's
 * `source`), with the source id beside it; the id alone for a source the customer's
 * page does not list (Redis does not hold the customer).
 */
function entrySources(e: LedgerEntry, labels: ReadonlyMap<string, string>): Html {
  return html`${e.details.map((d) => {
    const label = labels.get(d.account_id);
    return html`<div data-testid="ledger-source">${label ?? html`<code>${d.account_id}</code>`}: ${count(d.amount)}${label === undefined ? '' : html` <code class="muted">${d.account_id}</code>`}</div>`;
  })}`;
}

function ledgerTable(entries: readonly LedgerEntry[], sources: readonly SourceEntry[]): Html {
  const labels = new Map(sources.map((s) => [s.account_id, s.source]));
  return html`<table class="list" data-testid="ledger-list">
<thead><tr><th>When</th><th>Type</th><th>Amount</th><th>Transaction</th><th>Sources</th><th>Note</th></tr></thead>
<tbody>
${entries.map(
  (e) => html`<tr data-testid="ledger-row" data-entry-type="${e.type}">
<td>${when(e.created_at)}</td>
<td>${e.type}${e.reason ? html`<br><span class="muted">${e.reason}</span>` : ''}</td>
<td>${credits(e.amount)}${e.returned_amount ? html`<br><span class="muted">returned ${count(e.returned_amount)}</span>` : ''}</td>
<td><code>${e.transaction_id}</code></td>
<td>${entrySources(e, labels)}</td>
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
  const csrf = csrfField(ctx.session);
  const balance = customer.balance ?? { total: 0, used: 0, frozen: 0, available: 0 };
  const body = html`${noticeOf(notice)}
<p><a href="${pagePath('projects', project.id, 'customers')}">← All customers</a></p>
<section class="cards">
<article class="card">
<h2>Available</h2>
<p class="big"><span data-testid="customer-available" data-credits="${balance.available}">${count(balance.available)}</span> credits</p>
<p class="muted">${usd(balance.available)}; total ${count(balance.total)}, used ${count(balance.used)}, frozen ${count(balance.frozen)}</p>
</article>
<article class="card">
<h2>Profile</h2>
<p>${customer.name ?? html`<span class="muted">no name</span>`}<br>${customer.email ?? html`<span class="muted">no email</span>`}</p>
<p class="muted">Customer since ${when(customer.created_at)}</p>
${profileForm(req, pagePath('projects', project.id, 'customers', customerId, 'profile'), csrf, customer, failed && form === 'profile')}
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
${depositForm(req, pagePath('projects', project.id, 'customers', customerId, 'deposits'), csrf, project.contract === 'A' ? 'default' : 'credits', failed && form === 'deposit')}
<h2>Ledger</h2>
<form method="get" action="${path}" class="search">
<label>Type <select name="type" data-autosubmit data-testid="ledger-type">
<option value="">all</option>
${ledger_types.map((t) => html`<option value="${t}"${t === type ? html` selected` : ''}>${t}</option>`)}
</select></label>
<noscript><button type="submit">Filter</button></noscript>
</form>
${ledgerTable(ledger.data, customer.sources ?? [])}
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

/** The four prices a call was billed at: credits per token, and per million tokens with their USD value. */
function pricesBilled(prices: Readonly<Record<string, number>>): Html {
  return html`<dl class="prices" data-testid="receipt-prices">${model_prices.map(([f, label]) =>
    prices[f] === undefined ? '' : html`<dt>${label}</dt><dd data-price="${f}">${perToken(prices[f])} credits per token <span class="muted">(${price(prices[f])} per million tokens)</span></dd>`,
  )}</dl>`;
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
    ['Prices (as billed)', pricesBilled(r.prices)],
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

export function customerRoutes(pages: PageRouter): void {
  pages.get('/dashboard/projects/:project_id/customers', async (req, res, ctx) => {
    sendPage(res, await customersScreen(ctx, req, String(req.params.project_id)));
  });

  pages.post('/dashboard/projects/:project_id/customers', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    let made: string | null = null;
    await answerAction(
      res,
      async () => {
        const { status, body } = await ctx.api<{ id: string }>('POST', '/projects/:project_id/customers', { params: { project_id: projectId }, body: createCustomerBody(req) });
        made = body.id;
        return { kind: 'ok', message: status === 201 ? `Created customer ${body.id}` : `Customer ${body.id} exists already, with these fields` };
      },
      (notice, failed) => (failed || made === null ? customersScreen(ctx, req, projectId, notice) : customerScreen(ctx, req, projectId, made, notice)),
      () => (made === null ? pagePath('projects', projectId, 'customers') : pagePath('projects', projectId, 'customers', made)),
    );
  });

  pages.get('/dashboard/projects/:project_id/customers/:customer_id', async (req, res, ctx) => {
    sendPage(res, await customerScreen(ctx, req, String(req.params.project_id), String(req.params.customer_id)));
  });

  pages.post('/dashboard/projects/:project_id/customers/:customer_id/deposits', async (req, res, ctx) => {
    const params = { project_id: String(req.params.project_id), customer_id: String(req.params.customer_id) };
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<{ added_amount: number }>('POST', '/projects/:project_id/customers/:customer_id/deposits', { params, body: depositBody(req) });
        return { kind: 'ok', message: `Deposited ${count(body.added_amount)} credits (${usd(body.added_amount)})` };
      },
      (notice) => customerScreen(ctx, req, params.project_id, params.customer_id, notice),
      pagePath('projects', params.project_id, 'customers', params.customer_id),
    );
  });

  // The profile form, the budget form (its Clear button too) and the alerts form: PATCH of the customer.
  const settings: [CustomerForm, (req: Request) => Record<string, unknown>, (c: CustomerDetail) => string][] = [
    ['profile', profilePatch, () => 'Saved the profile'],
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
