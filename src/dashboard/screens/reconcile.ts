/**
 * Reconcile: checks the project's customers in Redis against their PostgreSQL ledger
 * and shows the drift; the repair, which rewrites Redis from the ledger, takes a second,
 * confirming click. Both start a background job (POST /projects/:project_id/reconcile,
 * an admin's operation); the screen then shows the job at its own address
 * (`.../reconcile/jobs/:job_id`), whose panel htmx asks for again every
 * job_poll_seconds until the job has finished, and which then shows the report.
 */
import type { Request } from 'express';
import type { ReconcileJobEntry } from '../../reconcile/jobs.js';
import type { ReconcileReport } from '../../reconcile/report.js';
import { openProject, type PageContext } from '../context.js';
import { count, when } from '../format.js';
import { html, pagePath, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageHandler, type PageRouter } from '../respond.js';

interface ReconcileView {
  notice?: Notice;
  /** The job shown: queued or running (its progress), or finished (its report). */
  job?: ReconcileJobEntry | null;
  /** The repair waits for the second click. */
  confirmRepair?: boolean;
}

/** How often the panel of an unfinished job is asked for again. */
const job_poll_seconds = 1;

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

/** Entries PostgreSQL refused for good: holes in the ledger until an operator releases them. */
function quarantinedTable(report: ReconcileReport): Html {
  // A report of a job finished before quarantine existed has no such list.
  const listed = report.quarantined ?? [];
  if (listed.length === 0) return html``;
  const unlisted = report.quarantined_total - listed.length;
  return html`<h2>Quarantined ledger entries</h2>
<p class="muted" data-testid="quarantined-summary"><strong>${count(report.quarantined_total)}</strong> ledger entries PostgreSQL refused for good are parked in quarantine: each seq is a hole in the ledger of record, and a repair leaves these customers' Redis alone until they are released (<code>npm run quarantine -- list</code>, docs/OPERATIONS.md).</p>
<table class="list" data-testid="quarantined-list">
<thead><tr><th>Customer</th><th>Seq</th><th>Entry</th><th>Quarantine id</th><th>Refused because</th></tr></thead>
<tbody>${listed.map(
  (q) => html`<tr data-testid="quarantined-row" data-customer-id="${q.customer_id}" data-seq="${q.seq === null ? '' : String(q.seq)}">
<td>${q.customer_id}</td><td>${q.seq === null ? '—' : String(q.seq)}</td><td>${q.entry_id ?? '—'}</td><td>${String(q.quarantine_id)}</td><td>${q.error}</td></tr>`,
)}</tbody>
</table>
${unlisted > 0 ? html`<p class="muted">${count(unlisted)} more not listed.</p>` : ''}`;
}

function problems(report: ReconcileReport): Html {
  return html`${quarantinedTable(report)}
${report.errors.length === 0 ? '' : html`<h2>Not checked</h2>
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
  const unlisted = report.drift_total - report.drift.length;
  return html`<p data-testid="reconcile-summary">Customers checked <strong data-testid="customers-checked">${count(report.customers_checked)}</strong>;
with drift <strong data-testid="customers-with-drift">${count(report.customers_with_drift)}</strong>;
repaired <strong data-testid="customers-repaired">${count(report.customers_repaired)}</strong>.</p>
${driftTable(report)}
${unlisted > 0 ? html`<p class="muted" data-testid="drift-unlisted">${count(unlisted)} more differences not listed (the first ${count(report.items_max)} are); the CLI lists more: <code>npm run reconcile -- --project ${report.drift[0]?.project_id ?? ''} --list-max N</code>.</p>` : ''}
${problems(report)}`;
}

const jobPath = (projectId: string, jobId: string) => `${pagePath('projects', projectId, 'reconcile')}/jobs/${encodeURIComponent(jobId)}`;

/** What a finished job found, in a sentence. */
function outcomeOf(job: ReconcileJobEntry): string {
  const r = job.result!;
  return job.repair
    ? `Repaired ${count(r.customers_repaired)} of ${count(r.customers_with_drift)} customers with drift`
    : `Checked ${count(r.customers_checked)} customers: ${count(r.customers_with_drift)} with drift`;
}

/**
 * A job's panel: its progress while it is queued or running (asked for again by htmx
 * every job_poll_seconds, replacing itself), its report once completed.
 */
export function jobPanel(projectId: string, job: ReconcileJobEntry): Html {
  const kind = job.repair ? 'Repair' : 'Check';
  const attrs = html`id="reconcile-job" data-testid="reconcile-job" data-job-id="${job.id}" data-status="${job.status}"`;
  if (job.status === 'completed' && job.result) {
    return html`<section ${attrs}>
<p data-testid="reconcile-outcome"><strong>${outcomeOf(job)}</strong> <span class="muted">(${kind.toLowerCase()} ${job.id}, finished ${when(job.finished_at)})</span></p>
${reportOf(job.result)}
</section>`;
  }
  if (job.status === 'failed') {
    return html`<section ${attrs}><p class="notice error" data-testid="reconcile-failed">${kind} ${job.id} failed: ${job.error?.message ?? 'unknown error'}</p></section>`;
  }
  const p = job.progress;
  const total = p.customers_total;
  return html`<section ${attrs} hx-get="${jobPath(projectId, job.id)}" hx-trigger="every ${job_poll_seconds}s" hx-swap="outerHTML">
<p data-testid="reconcile-progress">${kind} <strong data-testid="job-status">${job.status}</strong>:
<span data-testid="customers-done">${count(p.customers_done)}</span>${total === null ? '' : html` of ${count(total)}`} customers,
${count(p.customers_with_drift)} with drift${p.customers_per_second === null ? '' : html`, ${count(p.customers_per_second)}/s`}.
<a href="${jobPath(projectId, job.id)}">Refresh</a></p>
${total === null || total === 0 ? html`<progress></progress>` : html`<progress max="${String(total)}" value="${String(Math.min(p.customers_done, total))}"></progress>`}
</section>`;
}

async function reconcileScreen(ctx: PageContext, projectId: string, v: ReconcileView = {}): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const path = pagePath('projects', project.id, 'reconcile');
  const csrf = csrfField(ctx.session);
  // Only an admin or owner may repair: a viewer is not offered the button (the operation refuses it anyway).
  const mayRepair = ctx.session.member.role !== 'viewer';
  const repair = !mayRepair
    ? ''
    : v.confirmRepair
      ? html`<form method="post" action="${path}/repair" class="inline">${csrf}<button type="submit" class="danger" data-testid="reconcile-repair-confirm">Confirm: rewrite Redis from the ledger</button> <a href="${path}">Cancel</a></form>`
      : html`<a href="${path}/repair" class="button danger" data-testid="reconcile-repair">Repair…</a>`;
  const quarantined = await ctx.rt.ledgerQueries.quarantine(ctx.rt.config.REDIS_PREFIX).openCount(project.id);
  const body = html`${noticeOf(v.notice ?? null)}
${quarantined === 0 ? '' : html`<p class="notice error" data-testid="quarantined-now"><strong>${count(quarantined)}</strong> ledger entries of this project were refused by PostgreSQL and sit in quarantine: each is a hole in the ledger until an operator repairs and releases it (<code>npm run quarantine -- list</code>, docs/OPERATIONS.md). A check lists them; a repair leaves their customers alone.</p>`}
<p class="muted">Compares every customer of this project in Redis with its PostgreSQL ledger, in the background: this page follows the job. A repair rewrites the customers with drift in Redis from the ledger.</p>
<form method="post" action="${path}" class="inline">${csrf}<button type="submit" data-testid="reconcile-run">Check now</button></form>
${repair}
${v.job ? jobPanel(project.id, v.job) : ''}`;
  return shell({ session: ctx.session, title: `Reconcile · ${project.name}`, screen: 'reconcile', body, project: choice });
}

/** The job, as the member reads it. */
async function readJob(ctx: PageContext, projectId: string, jobId: string): Promise<ReconcileJobEntry> {
  return (await ctx.api<ReconcileJobEntry>('GET', '/projects/:project_id/reconcile/:job_id', { params: { project_id: projectId, job_id: jobId } })).body;
}

/**
 * Starts the operation as the member (a check, or a repair) and reads the job it answered:
 * a new one, or the one of the same kind already queued or running (`queuedBefore`),
 * which was created before this call. A new job may already be running, or finished.
 */
async function start(ctx: PageContext, projectId: string, repair: boolean): Promise<{ job: ReconcileJobEntry; queuedBefore: boolean }> {
  const calledAt = Date.now();
  const started = (await ctx.api<{ id: string }>('POST', '/projects/:project_id/reconcile', { params: { project_id: projectId }, body: { repair } })).body;
  const job = await readJob(ctx, projectId, started.id);
  return { job, queuedBefore: job.created_at !== null && Date.parse(job.created_at) < calledAt };
}

export function reconcileRoutes(pages: PageRouter): void {
  const screenPath = (req: Request) => pagePath('projects', String(req.params.project_id), 'reconcile');

  pages.get('/dashboard/projects/:project_id/reconcile', async (req, res, ctx) => {
    sendPage(res, await reconcileScreen(ctx, String(req.params.project_id)));
  });

  // A job: the whole screen, or only its panel for htmx's polling (not for a boosted navigation).
  pages.get('/dashboard/projects/:project_id/reconcile/jobs/:job_id', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    const job = await readJob(ctx, projectId, String(req.params.job_id));
    const polled = req.headers['hx-request'] === 'true' && req.headers['hx-boosted'] !== 'true';
    sendPage(res, polled ? jobPanel(projectId, job) : await reconcileScreen(ctx, projectId, { job }));
  });

  const action = (repair: boolean): PageHandler => async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    let job: ReconcileJobEntry | null = null;
    await answerAction(
      res,
      async () => {
        const started = await start(ctx, projectId, repair);
        job = started.job;
        // A job of the same kind already under way is answered instead of a new one. The
        // notice says which; the job's panel says where it is (queued, running, finished).
        const kind = repair ? 'repair' : 'check';
        return { kind: 'ok', message: started.queuedBefore ? `A ${kind} of this project was already under way; this page follows it` : `${repair ? 'Repair' : 'Check'} started; this page follows it` };
      },
      (notice) => reconcileScreen(ctx, projectId, { notice, job }),
      // The job's own address, so that a reload follows it.
      () => (job === null ? screenPath(req) : jobPath(projectId, (job as ReconcileJobEntry).id)),
    );
  };

  pages.post('/dashboard/projects/:project_id/reconcile', action(false));

  // The first click on Repair: the same screen, asking for the second click.
  pages.get('/dashboard/projects/:project_id/reconcile/repair', async (req, res, ctx) => {
    res.setHeader('HX-Push-Url', screenPath(req));
    sendPage(res, await reconcileScreen(ctx, String(req.params.project_id), { confirmRepair: true }));
  });

  pages.post('/dashboard/projects/:project_id/reconcile/repair', action(true));
}
