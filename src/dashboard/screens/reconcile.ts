/**
 * Reconcile: checks the project's customers in Redis against their PostgreSQL ledger
 * (POST /projects/:project_id/reconcile, an admin's operation) and shows the drift; the
 * repair, which rewrites Redis from the ledger, takes a second, confirming click.
 */
import type { Request } from 'express';
import type { ReconcileReport } from '../../reconcile/reconcile.js';
import { openProject, type PageContext } from '../context.js';
import { count } from '../format.js';
import { html, pagePath, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';

export interface ReconcileView {
  notice?: Notice;
  /** The last check's or repair's report. */
  report?: ReconcileReport | null;
  /** The repair waits for the second click. */
  confirmRepair?: boolean;
}

/** A value of the report (a field, a source, a list of entries) as compact JSON. */
function shown(v: unknown): string {
  return v === undefined ? '—' : JSON.stringify(v);
}

function driftTable(report: ReconcileReport): Html {
  if (report.drift.length === 0) return html`<p class="muted" data-testid="drift-none">No drift: Redis agrees with the ledger for every customer checked.</p>`;
  return html`<table class="list" data-testid="drift-list">
<thead><tr><th>Customer</th><th>Source</th><th>What differs</th><th>Entry</th><th>In Redis</th><th>From the ledger</th></tr></thead>
<tbody>
${report.drift.map(
  (d) => html`<tr data-testid="drift-row" data-customer-id="${d.customer_id}" data-field="${d.field}">
<td>${d.customer_id}</td>
<td>${d.source ?? '—'}</td>
<td><code>${d.field}</code></td>
<td>${d.transaction_id ?? d.idempotency_key ?? '—'}</td>
<td><code>${shown(d.redis)}</code></td>
<td><code>${shown(d.expected)}</code></td>
</tr>`,
)}
</tbody>
</table>`;
}

function problems(report: ReconcileReport): Html {
  return html`${report.errors.length === 0 ? '' : html`<h2>Not checked</h2>
<table class="list" data-testid="reconcile-errors">
<thead><tr><th>Customer</th><th>Why</th><th>Trying again</th></tr></thead>
<tbody>${report.errors.map((e) => html`<tr data-testid="reconcile-error-row"><td>${e.customer_id}</td><td>${e.message}</td><td>${e.permanent ? 'changes nothing' : 'may succeed'}</td></tr>`)}</tbody>
</table>`}
${report.anomalies.length === 0 ? '' : html`<h2>Anomalies</h2>
<p class="muted">What folding the ledger found and kept rather than fail on.</p>
<table class="list" data-testid="anomaly-list">
<thead><tr><th>Customer</th><th>Found</th></tr></thead>
<tbody>${report.anomalies.map((a) => html`<tr data-testid="anomaly-row"><td>${a.customer_id}</td><td>${a.message}</td></tr>`)}</tbody>
</table>`}`;
}

function reportOf(report: ReconcileReport): Html {
  return html`<p data-testid="reconcile-summary">Customers checked <strong data-testid="customers-checked">${count(report.customers_checked)}</strong>;
with drift <strong data-testid="customers-with-drift">${count(report.customers_with_drift)}</strong>;
repaired <strong data-testid="customers-repaired">${count(report.customers_repaired)}</strong>.</p>
${driftTable(report)}
${problems(report)}`;
}

export async function reconcileScreen(ctx: PageContext, projectId: string, v: ReconcileView = {}): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const path = pagePath('projects', project.id, 'reconcile');
  const csrf = csrfField(ctx.session);
  // Only an admin or owner may repair: a viewer is not offered the button (the operation refuses it anyway).
  const mayRepair = ctx.session.member.role !== 'viewer';
  const repair = !mayRepair
    ? ''
    : v.confirmRepair
      ? html`<form method="post" action="${path}/repair" class="inline">${csrf}<button type="submit" class="danger" data-testid="reconcile-repair-confirm">Confirm: rewrite Redis from the ledger</button> <a href="${path}">Cancel</a></form>`
      : html`<a href="${path}/repair" class="button" data-testid="reconcile-repair">Repair</a>`;
  const body = html`${noticeOf(v.notice ?? null)}
<p class="muted">Compares every customer of this project in Redis with its PostgreSQL ledger. A repair rewrites the customers with drift in Redis from the ledger.</p>
<form method="post" action="${path}" class="inline">${csrf}<button type="submit" data-testid="reconcile-run">Check now</button></form>
${repair}
${v.report ? reportOf(v.report) : ''}`;
  return shell({ session: ctx.session, title: `Reconcile · ${project.name}`, screen: 'reconcile', body, project: choice });
}

/** Runs the operation as the member: a check, or a repair. */
async function run(ctx: PageContext, projectId: string, repair: boolean): Promise<ReconcileReport> {
  return (await ctx.api<ReconcileReport>('POST', '/projects/:project_id/reconcile', { params: { project_id: projectId }, body: { repair } })).body;
}

export function reconcileRoutes(pages: PageRouter): void {
  const screenPath = (req: Request) => pagePath('projects', String(req.params.project_id), 'reconcile');

  pages.get('/dashboard/projects/:project_id/reconcile', async (req, res, ctx) => {
    sendPage(res, await reconcileScreen(ctx, String(req.params.project_id)));
  });

  pages.post('/dashboard/projects/:project_id/reconcile', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    let report: ReconcileReport | null = null;
    await answerAction(
      res,
      async () => {
        report = await run(ctx, projectId, false);
        return { kind: 'ok', message: `Checked ${count(report.customers_checked)} customers: ${count(report.customers_with_drift)} with drift` };
      },
      (notice) => reconcileScreen(ctx, projectId, { notice, report }),
      screenPath(req),
    );
  });

  // The first click on Repair: the same screen, asking for the second click.
  pages.get('/dashboard/projects/:project_id/reconcile/repair', async (req, res, ctx) => {
    res.setHeader('HX-Push-Url', screenPath(req));
    sendPage(res, await reconcileScreen(ctx, String(req.params.project_id), { confirmRepair: true }));
  });

  pages.post('/dashboard/projects/:project_id/reconcile/repair', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    let report: ReconcileReport | null = null;
    await answerAction(
      res,
      async () => {
        report = await run(ctx, projectId, true);
        return { kind: 'ok', message: `Repaired ${count(report.customers_repaired)} of ${count(report.customers_with_drift)} customers with drift` };
      },
      (notice) => reconcileScreen(ctx, projectId, { notice, report }),
      screenPath(req),
    );
  });
}
