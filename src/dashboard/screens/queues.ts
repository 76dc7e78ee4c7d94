/**
 * Queues: the service's BullMQ queues with their jobs counted by state (GET /queues, an
 * owner's operation). Counts only: the queues are shared by every organization, and a
 * job's data names another organization's customers.
 */
import { job_states } from '../../admin/operations/system.js';
import type { PageContext } from '../context.js';
import { count } from '../format.js';
import { html, type Html } from '../html.js';
import { shell } from '../layout.js';
import { sendPage, type PageRouter } from '../respond.js';

interface QueueEntry {
  name: string;
  counts: Record<string, number>;
}

async function queuesScreen(ctx: PageContext): Promise<Html> {
  const queues = (await ctx.api<{ data: QueueEntry[] }>('GET', '/queues')).body.data;
  const body = html`<p class="muted">The service's job queues, shared by every organization: how many jobs are in each state now.</p>
<table class="list" data-testid="queue-list">
<thead><tr><th>Queue</th>${job_states.map((s) => html`<th>${s}</th>`)}</tr></thead>
<tbody>
${queues.map(
  (q) => html`<tr data-testid="queue-row" data-queue="${q.name}">
<td><code>${q.name}</code></td>
${job_states.map((s) => html`<td data-state="${s}">${count(q.counts[s] ?? 0)}</td>`)}
</tr>`,
)}
</tbody>
</table>`;
  return shell({ session: ctx.session, title: 'Queues', screen: 'queues', body });
}

export function queueRoutes(pages: PageRouter): void {
  pages.get('/dashboard/queues', async (_req, res, ctx) => sendPage(res, await queuesScreen(ctx)));
}
