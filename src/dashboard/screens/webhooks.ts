/**
 * Webhooks: the project's endpoints (URL, event types, enabled or disabled with why and
 * since when), a form for a new one whose signing secret is shown once, enable / disable,
 * a test send (./deliveries.ts: it answers with the endpoint's delivery log) and deletion
 * confirmed by a second click. Everything goes through the management operations of
 * src/admin/operations/webhooks.ts, so a viewer reads and is refused every change.
 */
import type { Request } from 'express';
import { event_types } from '../../events/store.js';
import { openProject, type PageContext } from '../context.js';
import { when } from '../format.js';
import { list, optional, text } from '../forms.js';
import { html, pagePath, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';

export interface EndpointEntry {
  id: string;
  url: string;
  events: string[] | null;
  description: string | null;
  enabled: boolean;
  disabled_reason: string | null;
  disabled_at: string | null;
  created_at: string;
}

interface WebhooksView {
  notice?: Notice;
  /** An endpoint just created: its signing secret, shown this once. */
  created?: { id: string; url: string; secret: string } | null;
  /** The endpoint whose deletion waits for the second click. */
  confirmDelete?: string | null;
  /** The creation form stays open with what was typed, after a refusal. */
  formOpen?: boolean;
}

/** The project's endpoints, newest first (the API answers them all: a project has a handful). */
export async function endpointsOf(ctx: PageContext, projectId: string): Promise<EndpointEntry[]> {
  return (await ctx.api<{ data: EndpointEntry[] }>('GET', '/projects/:project_id/webhooks', { params: { project_id: projectId } })).body.data;
}

export const webhooksPath = (projectId: string, ...rest: string[]) => pagePath('projects', projectId, 'webhooks', ...rest);

/** Enabled, or disabled: by the service (it kept failing: its reason and since when) or by a member. */
export function endpointState(e: EndpointEntry): Html {
  if (e.enabled) return html`<span class="status active" data-testid="webhook-status">enabled</span>`;
  const why = e.disabled_reason === null ? 'turned off by a member' : `${e.disabled_reason}, since ${when(e.disabled_at)}`;
  return html`<span class="status inactive" data-testid="webhook-status">disabled</span><br><span class="muted" data-testid="webhook-disabled-reason">${why}</span>`;
}

function endpointRow(projectId: string, e: EndpointEntry, confirming: boolean, csrf: Html): Html {
  const action = (name: string, label: string, testid: string, cls = '') =>
    html`<form method="post" action="${webhooksPath(projectId, e.id, name)}" class="inline">${csrf}<button type="submit"${cls ? html` class="${cls}"` : ''} data-testid="${testid}">${label}</button></form>`;
  const remove = confirming
    ? html`<form method="post" action="${webhooksPath(projectId, e.id, 'delete')}" class="inline">${csrf}<button type="submit" class="danger" data-testid="webhook-delete-confirm">Confirm: delete with its delivery log</button> <a href="${webhooksPath(projectId)}">Cancel</a></form>`
    : html`<a href="${webhooksPath(projectId, e.id, 'delete')}" class="button" data-testid="webhook-delete">Delete</a>`;
  return html`<tr data-testid="webhook-row" data-webhook-id="${e.id}" data-enabled="${String(e.enabled)}">
<td><a href="${webhooksPath(projectId, e.id, 'deliveries')}" data-testid="webhook-deliveries"><code>${e.url}</code></a>${e.description ? html`<br><span class="muted">${e.description}</span>` : ''}</td>
<td>${e.events === null ? html`<span class="muted">every type</span>` : e.events.join(', ')}</td>
<td>${endpointState(e)}</td>
<td>${when(e.created_at)}</td>
<td>${action('test', 'Send test event', 'webhook-test')}
${e.enabled ? action('disable', 'Disable', 'webhook-disable') : action('enable', 'Enable', 'webhook-enable')}
${remove}</td>
</tr>`;
}

export async function webhooksScreen(ctx: PageContext, req: Request, projectId: string, v: WebhooksView = {}): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const endpoints = await endpointsOf(ctx, project.id);
  const csrf = csrfField(ctx.session);
  const typed = v.formOpen === true && req.method === 'POST';
  const chosen = new Set(typed ? list(req, 'events') : []);
  const body = html`${noticeOf(v.notice ?? null)}
${v.created ? html`<section class="secret" data-testid="webhook-created">
<p>New endpoint <code>${v.created.url}</code>. Copy its signing secret now: it is shown this once. Verify each delivery's <code>webhook-signature</code> with it (Standard Webhooks).</p>
<p><code id="new-webhook-secret" data-testid="webhook-secret">${v.created.secret}</code> <button type="button" data-copy="new-webhook-secret" data-testid="webhook-copy">Copy</button></p>
</section>` : ''}
<details class="form"${v.formOpen ? html` open` : ''}>
<summary class="button" data-testid="webhook-create">Add an endpoint</summary>
<form method="post" action="${webhooksPath(project.id)}">
${csrf}
<label>URL <input type="url" name="url" required maxlength="2048" placeholder="https://example.com/webhooks" value="${typed ? text(req, 'url') : ''}" data-testid="webhook-url"></label>
<label>Description (optional) <input name="description" maxlength="500" value="${typed ? text(req, 'description') : ''}" data-testid="webhook-description"></label>
<fieldset><legend>Event types (none checked: every type, those added later included)</legend>
${event_types.map((t) => html`<label class="check"><input type="checkbox" name="events" value="${t}"${chosen.has(t) ? html` checked` : ''} data-testid="webhook-event"> ${t}</label>`)}
</fieldset>
<button type="submit" data-testid="webhook-submit">Add endpoint</button>
</form>
</details>
<table class="list" data-testid="webhook-list">
<thead><tr><th>URL</th><th>Events</th><th>State</th><th>Created</th><th></th></tr></thead>
<tbody>
${endpoints.map((e) => endpointRow(project.id, e, v.confirmDelete === e.id, csrf))}
</tbody>
</table>
${endpoints.length === 0 ? html`<p class="muted">No endpoints yet. Each event of this project is delivered, signed, to every enabled endpoint that wants its type; <a href="${pagePath('projects', project.id, 'events')}">Events</a> lists them.</p>` : ''}
<p class="muted">A delivery that fails is retried on a schedule; an endpoint whose deliveries keep failing for days is disabled by the service and says why. Enable it again once it answers.</p>`;
  return shell({ session: ctx.session, title: `Webhooks · ${project.name}`, screen: 'webhooks', body, project: choice });
}

/** The API body of the creation form: no event type checked is every type (null). */
function endpointCreation(req: Request): Record<string, unknown> {
  const events = list(req, 'events');
  const description = optional(req, 'description');
  return { url: text(req, 'url'), events: events.length === 0 ? null : events, ...(description === undefined ? {} : { description }) };
}

export function webhookRoutes(pages: PageRouter): void {
  const ids = (req: Request) => ({ project_id: String(req.params.project_id), webhook_id: String(req.params.webhook_id) });

  pages.get('/dashboard/projects/:project_id/webhooks', async (req, res, ctx) => {
    sendPage(res, await webhooksScreen(ctx, req, String(req.params.project_id)));
  });

  pages.post('/dashboard/projects/:project_id/webhooks', async (req, res, ctx) => {
    const projectId = String(req.params.project_id);
    let created: WebhooksView['created'] = null;
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<EndpointEntry & { secret: string }>('POST', '/projects/:project_id/webhooks', { params: { project_id: projectId }, body: endpointCreation(req) });
        created = { id: body.id, url: body.url, secret: body.secret };
        return { kind: 'ok', message: `Added endpoint ${body.url}` };
      },
      (notice, failed) => webhooksScreen(ctx, req, projectId, { notice, created, formOpen: failed }),
      webhooksPath(projectId),
    );
  });

  for (const [name, enabled] of [['enable', true], ['disable', false]] as const) {
    pages.post(`/dashboard/projects/:project_id/webhooks/:webhook_id/${name}`, async (req, res, ctx) => {
      const params = ids(req);
      await answerAction(
        res,
        async () => {
          const { body } = await ctx.api<EndpointEntry>('PATCH', '/projects/:project_id/webhooks/:webhook_id', { params, body: { enabled } });
          return { kind: 'ok', message: enabled ? `Enabled ${body.url}: new events are delivered to it again` : `Disabled ${body.url}: no events are delivered to it` };
        },
        (notice) => webhooksScreen(ctx, req, params.project_id, { notice }),
        webhooksPath(params.project_id),
      );
    });
  }

  // The first click on Delete: the same screen, with that row asking for the second click.
  pages.get('/dashboard/projects/:project_id/webhooks/:webhook_id/delete', async (req, res, ctx) => {
    const params = ids(req);
    res.setHeader('HX-Push-Url', webhooksPath(params.project_id));
    sendPage(res, await webhooksScreen(ctx, req, params.project_id, { confirmDelete: params.webhook_id }));
  });

  pages.post('/dashboard/projects/:project_id/webhooks/:webhook_id/delete', async (req, res, ctx) => {
    const params = ids(req);
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<EndpointEntry>('DELETE', '/projects/:project_id/webhooks/:webhook_id', { params });
        return { kind: 'ok', message: `Deleted endpoint ${body.url} and its delivery log` };
      },
      (notice) => webhooksScreen(ctx, req, params.project_id, { notice }),
      webhooksPath(params.project_id),
    );
  });
}
