/**
 * Keys: the project's keys by prefix, a form for a project or customer key whose secret is
 * shown once (the customer fields show for a customer key only; the expiry is typed in
 * UTC), revocation confirmed by a second click, and a customer-scoped key's budget with
 * its spend, set or cleared in its row (screens/budgets.ts).
 */
import type { Request } from 'express';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { when } from '../format.js';
import { list, number, optional, queryParam, text, utc_time_pattern, utcTime } from '../forms.js';
import { html, pagePath, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';
import { budgetNotice, budgetPatch, budgetSummary, keyBudgetForm, type BudgetView } from './budgets.js';

interface KeyEntry {
  id: string;
  type: 'project' | 'customer';
  prefix: string;
  name: string | null;
  customer_id: string | null;
  allowed_models: string[] | null;
  expires_at: string | null;
  revoked_at: string | null;
  last_used_at: string | null;
  created_at: string;
  budget: BudgetView | null;
}

/** How many characters of a key its row names it by (data-key-prefix): the stored prefix has at least these. */
const key_prefix_chars = 16;

function status(k: KeyEntry): 'active' | 'revoked' | 'expired' {
  if (k.revoked_at !== null) return 'revoked';
  if (k.expires_at !== null && Date.parse(k.expires_at) <= Date.now()) return 'expired';
  return 'active';
}

interface KeysView {
  notice?: Notice;
  /** A key just created: its secret, shown this once. */
  created?: { prefix: string; secret: string } | null;
  /** The key whose revocation waits for the second click. */
  confirmRevoke?: string | null;
  /** The creation form stays open with what was typed, after a refusal. */
  formOpen?: boolean;
  /** The key whose budget form is open (its row's Budget link, or a refused POST of it). */
  editBudget?: string | null;
  /** The budget form was posted and refused: it shows what was typed. */
  budgetTyped?: boolean;
}

/** The row under a key's that holds its budget form. */
function budgetRow(req: Request, projectId: string, k: KeyEntry, csrf: Html, typed: boolean): Html {
  const keysPath = pagePath('projects', projectId, 'keys');
  return html`<tr data-testid="key-budget-row"><td colspan="9">
<p>Budget of <code class="nowrap">${k.prefix}…</code> (customer ${k.customer_id ?? ''}): its gateway calls stop at it; the customer's own budget applies too.</p>
${keyBudgetForm(req, pagePath('projects', projectId, 'keys', k.id, 'budget'), keysPath, csrf, k.budget, typed)}
</td></tr>`;
}

function keyRow(projectId: string, k: KeyEntry, confirming: boolean, csrf: Html): Html {
  const s = status(k);
  const revokePath = pagePath('projects', projectId, 'keys', k.id, 'revoke');
  const action =
    s === 'revoked'
      ? html`<span class="muted">revoked ${when(k.revoked_at)}</span>`
      : confirming
        ? html`<form method="post" action="${revokePath}" class="inline">${csrf}<button type="submit" class="danger" data-testid="key-revoke-confirm">Confirm: revoke ${k.prefix}</button> <a href="${pagePath('projects', projectId, 'keys')}">Cancel</a></form>`
        : html`${k.type === 'customer' ? html`<a href="${pagePath('projects', projectId, 'keys', k.id, 'budget')}" class="button" data-testid="key-budget-edit">Budget</a> ` : ''}<a href="${revokePath}" class="button" data-testid="key-revoke">Revoke</a>`;
  return html`<tr data-testid="key-row" data-key-prefix="${k.prefix.slice(0, key_prefix_chars)}" data-key-status="${s}">
<td><code class="nowrap">${k.prefix}…</code>${k.name ? html`<br><span class="muted">${k.name}</span>` : ''}</td>
<td>${k.type}</td>
<td>${k.customer_id ?? '—'}</td>
<td>${k.allowed_models === null ? html`<span class="muted">all</span>` : k.allowed_models.join(', ')}</td>
<td>${when(k.expires_at)}</td>
<td data-testid="key-last-used" data-at="${k.last_used_at ?? ''}">${when(k.last_used_at)}</td>
<td>${k.type === 'customer' ? budgetSummary(k.budget) : '—'}</td>
<td><span class="status ${s}" data-testid="key-status">${s}</span></td>
<td>${action}</td>
</tr>`;
}

async function keysScreen(ctx: PageContext, req: Request, projectId: string, v: KeysView = {}): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const cursor = queryParam(req, 'cursor');
  const params = { project_id: project.id };
  const [keys, models] = await Promise.all([
    ctx.api<List<KeyEntry>>('GET', '/projects/:project_id/keys', { params, query: { cursor } }),
    ctx.api<List<{ id: string; active: boolean }>>('GET', '/projects/:project_id/models', { params, query: { limit: '500' } }),
  ]);
  const csrf = csrfField(ctx.session);
  const path = pagePath('projects', project.id, 'keys');
  const typed = v.formOpen && req.method === 'POST';
  const kind = typed ? text(req, 'kind') : 'project';
  const chosen = new Set(typed ? list(req, 'allowed_models') : []);
  const body = html`${noticeOf(v.notice ?? null)}
${v.created ? html`<section class="secret" data-testid="key-created">
<p>New key <code class="nowrap">${v.created.prefix}…</code>. Copy its secret now: it is shown this once and never stored.</p>
<p><code id="new-key-secret" data-testid="key-secret">${v.created.secret}</code> <button type="button" data-copy="new-key-secret" data-testid="key-copy">Copy</button></p>
</section>` : ''}
<details class="form"${v.formOpen ? html` open` : ''}>
<summary class="button" data-testid="key-create">Create a key</summary>
<form method="post" action="${path}">
${csrf}
<label>Kind <select name="kind" data-testid="key-kind">
<option value="project"${kind === 'project' ? html` selected` : ''}>project</option>
<option value="customer"${kind === 'customer' ? html` selected` : ''}>customer</option>
</select></label>
<label>Name <input name="name" maxlength="128" value="${typed ? text(req, 'name') : ''}" data-testid="key-name"></label>
<label>Expires (optional; a time in UTC, not your local time)
<span class="utc-field"><input name="expires_at" placeholder="YYYY-MM-DD HH:MM" pattern="${utc_time_pattern}" title="a day and a time in UTC: YYYY-MM-DD HH:MM" value="${typed ? text(req, 'expires_at') : ''}" data-testid="key-expires"> UTC</span>
<span class="muted">Now: ${when(new Date().toISOString())}</span></label>
<fieldset class="customer-only" data-testid="key-customer-fields"><legend>Customer keys only</legend>
<label>Customer id <input name="customer_id" maxlength="256" value="${typed ? text(req, 'customer_id') : ''}" data-testid="key-customer"></label>
<p class="muted">Allowed models (none checked: every model)</p>
${models.body.data.length === 0 ? html`<p class="muted">This project has no models yet.</p>` : ''}
${models.body.data.map((m) => html`<label class="check"><input type="checkbox" name="allowed_models" value="${m.id}"${chosen.has(m.id) ? html` checked` : ''} data-testid="key-model"> ${m.id}</label>`)}
<label>Budget (credits, optional) <input name="budget_limit" inputmode="numeric" value="${typed ? text(req, 'budget_limit') : ''}" data-testid="key-budget-limit"></label>
<label>Budget period <select name="budget_period" data-testid="key-budget-period">
${(['day', 'week', 'month', 'total'] as const).map((p) => html`<option value="${p}"${p === (typed ? text(req, 'budget_period') : 'month') ? html` selected` : ''}>${p}</option>`)}
</select></label>
</fieldset>
<button type="submit" data-testid="key-submit">Create key</button>
</form>
</details>
<table class="list" data-testid="key-list">
<thead><tr><th>Prefix</th><th>Kind</th><th>Customer</th><th>Allowed models</th><th>Expires</th><th>Last used</th><th>Budget</th><th>Status</th><th></th></tr></thead>
<tbody>
${keys.body.data.map((k) => html`${keyRow(project.id, k, v.confirmRevoke === k.id, csrf)}${v.editBudget === k.id && k.type === 'customer' ? budgetRow(req, project.id, k, csrf, v.budgetTyped === true) : ''}`)}
</tbody>
</table>
${keys.body.data.length === 0 ? html`<p class="muted">No keys yet.</p>` : ''}
${pager(path, {}, keys.body, cursor !== undefined)}`;
  return shell({ session: ctx.session, title: `Keys · ${project.name}`, screen: 'keys', body, project: choice });
}

/** The API body of the creation form: the customer fields count for a customer key only. */
function keyCreation(req: Request): Record<string, unknown> {
  const kind = text(req, 'kind');
  const body: Record<string, unknown> = { type: kind };
  const name = optional(req, 'name');
  if (name !== undefined) body.name = name;
  const expires = utcTime(req, 'expires_at');
  if (expires !== undefined) body.expires_at = expires;
  if (kind === 'customer') {
    const customer = optional(req, 'customer_id');
    if (customer !== undefined) body.customer_id = customer;
    const models = list(req, 'allowed_models');
    if (models.length > 0) body.allowed_models = models;
    const limit = number(req, 'budget_limit');
    if (limit !== undefined) body.budget = { limit, period: optional(req, 'budget_period') };
  }
  return body;
}

export function keyRoutes(pages: PageRouter): void {
  const keysPath = (req: Request) => pagePath('projects', String(req.params.project_id), 'keys');

  pages.get('/dashboard/projects/:project_id/keys', async (req, res, ctx) => {
    sendPage(res, await keysScreen(ctx, req, String(req.params.project_id)));
  });

  pages.post('/dashboard/projects/:project_id/keys', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    let created: KeysView['created'] = null;
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<KeyEntry & { key: string }>('POST', '/projects/:project_id/keys', { params: { project_id: projectId }, body: keyCreation(req) });
        created = { prefix: body.prefix, secret: body.key };
        return { kind: 'ok', message: `Created ${body.type} key ${body.prefix}…` };
      },
      (notice, failed) => keysScreen(ctx, req, projectId, { notice, created, formOpen: failed }),
      keysPath(req),
    );
  });

  // A customer-scoped key's budget: the row's Budget link opens its form; the form sets it, its Clear button clears it.
  pages.get('/dashboard/projects/:project_id/keys/:key_id/budget', async (req, res, ctx) => {
    res.setHeader('HX-Push-Url', keysPath(req));
    sendPage(res, await keysScreen(ctx, req, String(req.params.project_id), { editBudget: String(req.params.key_id) }));
  });

  pages.post('/dashboard/projects/:project_id/keys/:key_id/budget', async (req, res, ctx) => {
    const params = { project_id: String(req.params.project_id), key_id: String(req.params.key_id) };
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<KeyEntry>('PATCH', '/projects/:project_id/keys/:key_id', { params, body: budgetPatch(req) });
        return { kind: 'ok', message: budgetNotice(body.budget, `key ${body.prefix}…`) };
      },
      (notice, failed) => keysScreen(ctx, req, params.project_id, { notice, editBudget: failed ? params.key_id : null, budgetTyped: failed }),
      keysPath(req),
    );
  });

  // The first click on Revoke: the same screen, with that row asking for the second click.
  pages.get('/dashboard/projects/:project_id/keys/:key_id/revoke', async (req, res, ctx) => {
    res.setHeader('HX-Push-Url', keysPath(req));
    sendPage(res, await keysScreen(ctx, req, String(req.params.project_id), { confirmRevoke: String(req.params.key_id) }));
  });

  pages.post('/dashboard/projects/:project_id/keys/:key_id/revoke', async (req, res, ctx) => {
    const params = { project_id: String(req.params.project_id), key_id: String(req.params.key_id) };
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<KeyEntry>('POST', '/projects/:project_id/keys/:key_id/revoke', { params });
        return { kind: 'ok', message: `Revoked key ${body.prefix}…: the API refuses it from now on` };
      },
      (notice) => keysScreen(ctx, req, params.project_id, { notice }),
      keysPath(req),
    );
  });
}
