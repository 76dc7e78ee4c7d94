/**
 * Events: the project's recent events, newest first, as `GET /v1/events` lists them (test
 * sends left out), filtered by type and customer, in cursor pages. What every webhook
 * endpoint of the project is sent, and what a tenant without webhooks reads.
 */
import type { Request } from 'express';
import { event_types } from '../../events/store.js';
import { openProject, pager, type List, type PageContext } from '../context.js';
import { count, when } from '../format.js';
import { queryParam } from '../forms.js';
import { html, pagePath, type Html } from '../html.js';
import { shell } from '../layout.js';
import { sendPage, type PageRouter } from '../respond.js';

/**
 * An event's data, one field a line (its API name, then its value): numbers with thousands
 * separators, text as it is, anything nested as JSON. Readable where one line of JSON was
 * not, and as narrow as a phone's screen allows.
 */
function eventData(data: Record<string, unknown>): Html {
  const value = (v: unknown): string => (typeof v === 'number' ? count(v) : typeof v === 'string' ? v : JSON.stringify(v));
  return html`<dl class="fields" data-testid="event-data">${Object.entries(data).map(([k, v]) => html`<dt>${k}</dt><dd>${value(v)}</dd>`)}</dl>`;
}

interface EventEntry {
  id: string;
  type: string;
  created_at: string;
  project_id: string;
  data: Record<string, unknown>;
}

async function eventsScreen(ctx: PageContext, req: Request, projectId: string): Promise<Html> {
  const { project, choice } = await openProject(ctx, projectId);
  const filter = { type: queryParam(req, 'type'), customer_id: queryParam(req, 'customer_id') };
  const cursor = queryParam(req, 'cursor');
  const { body: events } = await ctx.api<List<EventEntry>>('GET', '/projects/:project_id/events', { params: { project_id: project.id }, query: { ...filter, cursor } });
  const path = pagePath('projects', project.id, 'events');
  const body = html`<form class="search" method="get" action="${path}">
<label>Type <select name="type" data-testid="event-type">
<option value="">every type</option>
${event_types.map((t) => html`<option value="${t}"${t === filter.type ? html` selected` : ''}>${t}</option>`)}
</select></label>
<label>Customer <input name="customer_id" maxlength="256" value="${filter.customer_id ?? ''}" data-testid="event-customer"></label>
<button type="submit" data-testid="event-filter">Filter</button>
</form>
<table class="list" data-testid="event-list">
<thead><tr><th>Time</th><th>Type</th><th>Customer</th><th>Data</th><th>Event id</th></tr></thead>
<tbody>
${events.data.map(
  (e) => html`<tr data-testid="event-row" data-event-type="${e.type}">
<td>${when(e.created_at)}</td>
<td>${e.type}</td>
<td>${typeof e.data.customer_id === 'string' ? e.data.customer_id : '—'}</td>
<td class="event-data">${eventData(e.data)}</td>
<td><code>${e.id}</code></td>
</tr>`,
)}
</tbody>
</table>
${events.data.length === 0 ? html`<p class="muted">No events${filter.type || filter.customer_id ? ' match this filter' : ' yet'}.</p>` : ''}
${pager(path, filter, events, cursor !== undefined)}
<p class="muted">Events appear here once the workers have copied them to PostgreSQL; test sends are not listed. <a href="${pagePath('projects', project.id, 'webhooks')}">Webhooks</a> delivers them.</p>`;
  return shell({ session: ctx.session, title: `Events · ${project.name}`, screen: 'events', body, project: choice });
}

export function eventRoutes(pages: PageRouter): void {
  pages.get('/dashboard/projects/:project_id/events', async (req, res, ctx) => {
    sendPage(res, await eventsScreen(ctx, req, String(req.params.project_id)));
  });
}
