/**
 * An endpoint's deliveries: the log, newest first (event, status, attempts, the last
 * attempt's status code, latency and response excerpt, when the next scheduled attempt is
 * due, and every attempt on opening its row), a Replay button per delivery, and a test
 * send. While a pending delivery's attempt is due within two minutes, or one just sent or
 * replayed has not had its new attempt yet, htmx asks for the log again every few seconds
 * (the page works without it: reload).
 */
import type { Request } from 'express';
import { ApiError } from '../../errors/catalogue.js';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { count, when } from '../format.js';
import { queryParam } from '../forms.js';
import { html, withQuery, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';
import { endpointsOf, endpointState, webhooksPath, webhooksScreen } from './webhooks.js';
import type { AttemptRecord } from '../../webhooks/sender.js';

type Attempt = AttemptRecord;

interface Delivery {
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  status: 'pending' | 'succeeded' | 'failed';
  attempts: Attempt[];
  next_attempt_at: string | null;
  created_at: string;
  finished_at: string | null;
}

/** A delivery the log keeps asking about until it has more than `after` attempts (a test send or a replay just queued). */
interface Follow {
  id: string;
  after: number;
}

const poll_seconds = 2;
/** A pending delivery is followed when its first attempt, or its next one, is due within this: not for a retry hours away. */
const poll_horizon_ms = 120_000;
/** How much of the last answer the row shows; the attempt log shows all the API keeps (1 KiB). */
const excerpt_chars = 60;

function attemptOutcome(a: Attempt): string {
  return a.status_code !== null ? `HTTP ${a.status_code}` : (a.error ?? 'no answer');
}

function attemptLog(d: Delivery): Html {
  if (d.attempts.length === 0) return html`none yet`;
  return html`<details data-testid="delivery-attempts"><summary>${count(d.attempts.length)} ${d.attempts.length === 1 ? 'attempt' : 'attempts'}</summary>
<ol class="attempts">
${d.attempts.map(
  (a) => html`<li data-testid="delivery-attempt" data-status-code="${a.status_code === null ? '' : String(a.status_code)}">${when(a.at)} · ${a.manual ? 'replay' : 'scheduled'} · ${attemptOutcome(a)} · ${count(a.latency_ms)} ms
${a.error !== null && a.status_code !== null ? html`<br><span class="muted">${a.error}</span>` : ''}
${a.response_excerpt !== null ? html`<pre class="excerpt">${a.response_excerpt}</pre>` : ''}</li>`,
)}
</ol></details>`;
}

function deliveryRow(projectId: string, d: Delivery, csrf: Html): Html {
  const last = d.attempts[d.attempts.length - 1];
  const excerpt = last?.response_excerpt ?? last?.error ?? null;
  const replay = webhooksPath(projectId, d.endpoint_id, 'deliveries', d.id, 'replay');
  return html`<tr data-testid="delivery-row" data-delivery-id="${d.id}" data-status="${d.status}" data-event-id="${d.event_id}">
<td><code>${d.event_id}</code><br><span class="muted">${d.event_type}</span></td>
<td><span class="status ${d.status === 'succeeded' ? 'ok' : d.status === 'failed' ? 'down' : 'degraded'}" data-testid="delivery-status">${d.status}</span></td>
<td>${attemptLog(d)}</td>
<td data-testid="delivery-last-code">${last === undefined ? '—' : attemptOutcome(last)}</td>
<td>${last === undefined ? '—' : `${count(last.latency_ms)} ms`}</td>
<td>${when(d.next_attempt_at)}</td>
<td>${excerpt === null ? '—' : html`<code class="excerpt">${excerpt.length > excerpt_chars ? `${excerpt.slice(0, excerpt_chars)}…` : excerpt}</code>`}</td>
<td>${when(d.created_at)}</td>
<td><form method="post" action="${replay}" class="inline">${csrf}<button type="submit" data-testid="delivery-replay">Replay</button></form></td>
</tr>`;
}

interface DeliveriesView {
  notice?: Notice;
  follow?: Follow | null;
}

/** The follow of a test send or replay, carried by the polling request's query. */
function followOf(req: Request): Follow | null {
  const id = queryParam(req, 'follow');
  const after = Number(queryParam(req, 'after'));
  return id === undefined || !Number.isSafeInteger(after) ? null : { id, after };
}

async function deliveriesScreen(ctx: PageContext, req: Request, projectId: string, webhookId: string, v: DeliveriesView = {}): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const endpoint = (await endpointsOf(ctx, project.id)).find((e) => e.id === webhookId);
  if (endpoint === undefined) throw new ApiError('not_found', { message: 'webhook endpoint not found' });
  // A POST's answer shows the first page; a GET, the page its cursor names.
  const cursor = req.method === 'GET' ? queryParam(req, 'cursor') : undefined;
  const params = { project_id: project.id, webhook_id: endpoint.id };
  const { body: log } = await ctx.api<List<Delivery>>('GET', '/projects/:project_id/webhooks/:webhook_id/deliveries', { params, query: { cursor, limit: '25' } });
  const csrf = csrfField(ctx.session);
  const path = webhooksPath(project.id, endpoint.id, 'deliveries');
  const follow = v.follow ?? followOf(req);
  const followed = follow === null ? undefined : log.data.find((d) => d.id === follow.id);
  const dueSoon = (d: Delivery) =>
    d.status === 'pending' && (d.attempts.length === 0 || d.next_attempt_at === null || Date.parse(d.next_attempt_at) - Date.now() <= poll_horizon_ms);
  const waiting = log.data.some(dueSoon) || (followed !== undefined && follow !== null && followed.attempts.length <= follow.after);
  // An empty element polls, so that the log's forms (boosted) inherit none of its hx- attributes.
  const polling = waiting
    ? html`<span hidden data-testid="delivery-poll" hx-get="${withQuery(path, { cursor, follow: follow?.id, after: follow === null ? undefined : String(follow.after) })}" hx-trigger="every ${poll_seconds}s" hx-target="#delivery-log" hx-select="#delivery-log" hx-swap="outerHTML"></span>`
    : html``;
  const body = html`${noticeOf(v.notice ?? null)}
<p><a href="${webhooksPath(project.id)}">← All endpoints</a></p>
<p><code data-testid="endpoint-url">${endpoint.url}</code> ${endpointState(endpoint)}${endpoint.description ? html` <span class="muted">${endpoint.description}</span>` : ''}</p>
<form method="post" action="${webhooksPath(project.id, endpoint.id, 'test')}" class="inline">${csrf}<button type="submit" data-testid="webhook-test">Send test event</button></form>
<section id="delivery-log" data-testid="delivery-log" data-polling="${String(waiting)}">
${polling}
<table class="list">
<thead><tr><th>Event</th><th>Status</th><th>Attempts</th><th>Last answer</th><th>Latency</th><th>Next attempt</th><th>Last response</th><th>Created</th><th></th></tr></thead>
<tbody>
${log.data.map((d) => deliveryRow(project.id, d, csrf))}
</tbody>
</table>
${log.data.length === 0 ? html`<p class="muted">No deliveries yet: an endpoint gets the events made after it was added. Send a test event to try it.</p>` : ''}
${pager(path, {}, log, cursor !== undefined)}
</section>
<p class="muted">A replay makes one attempt more, now, with the same event and <code>webhook-id</code>; a success marks the delivery succeeded. Deliveries are at least once: a receiver may see an event twice and should skip a <code>webhook-id</code> it already handled.</p>`;
  return shell({ session: ctx.session, title: `Deliveries · ${project.name}`, screen: 'webhooks', body, project: choice });
}

export function deliveryRoutes(pages: PageRouter): void {
  const ids = (req: Request) => ({ project_id: String(req.params.project_id), webhook_id: String(req.params.webhook_id) });
  const logPath = (p: { project_id: string; webhook_id: string }) => webhooksPath(p.project_id, p.webhook_id, 'deliveries');

  pages.get('/dashboard/projects/:project_id/webhooks/:webhook_id/deliveries', async (req, res, ctx) => {
    const p = ids(req);
    sendPage(res, await deliveriesScreen(ctx, req, p.project_id, p.webhook_id));
  });

  pages.post('/dashboard/projects/:project_id/webhooks/:webhook_id/deliveries/:delivery_id/replay', async (req, res, ctx) => {
    const p = ids(req);
    let follow: Follow | null = null;
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<Delivery>('POST', '/projects/:project_id/webhooks/:webhook_id/deliveries/:delivery_id/replay', {
          params: { ...p, delivery_id: String(req.params.delivery_id) },
        });
        follow = { id: body.id, after: body.attempts.length };
        return { kind: 'ok', message: `Replaying the delivery of ${body.event_id}: one attempt more, queued` };
      },
      (notice) => deliveriesScreen(ctx, req, p.project_id, p.webhook_id, { notice, follow }),
      logPath(p),
    );
  });

  // A test send answers with the log, which follows the new delivery; a refusal stays on the endpoint list.
  pages.post('/dashboard/projects/:project_id/webhooks/:webhook_id/test', async (req, res, ctx) => {
    const p = ids(req);
    let sent: Delivery | null = null;
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<Delivery>('POST', '/projects/:project_id/webhooks/:webhook_id/test', { params: p });
        sent = body;
        return { kind: 'ok', message: `Sent a test event (${body.event_id}): its delivery is queued` };
      },
      (notice) => (sent === null ? webhooksScreen(ctx, req, p.project_id, { notice }) : deliveriesScreen(ctx, req, p.project_id, p.webhook_id, { notice, follow: { id: sent.id, after: 0 } })),
      () => (sent === null ? webhooksPath(p.project_id) : logPath(p)),
    );
  });
}
