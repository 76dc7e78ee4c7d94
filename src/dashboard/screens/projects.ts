/** Projects: the organization's projects, one to pick, and a form for a new one. */
import type { Request } from 'express';
import { pager, type List, type PageContext, type ProjectEntry } from '../context.js';
import { count, when } from '../format.js';
import { number, optional, queryParam, text } from '../forms.js';
import { html, pagePath, type Html } from '../html.js';
import { csrfField, noticeOf, shell, type Notice } from '../layout.js';
import { answerAction, sendPage, type PageRouter } from '../respond.js';

async function projectsScreen(ctx: PageContext, req: Request, notice: Notice = null): Promise<Html> {
  const cursor = queryParam(req, 'cursor');
  const { body: projects } = await ctx.api<List<ProjectEntry>>('GET', '/projects', { query: { cursor } });
  const body = html`${noticeOf(notice)}
<table class="list" data-testid="project-list">
<thead><tr><th>Project</th><th>Contract</th><th>Rate limit</th><th>Created</th><th>Status</th><th></th><th></th></tr></thead>
<tbody>
${projects.data.map(
  (p) => html`<tr data-testid="project-row" data-project-id="${p.id}" data-href="${pagePath('projects', p.id, 'keys')}">
<td><a href="${pagePath('projects', p.id, 'keys')}">${p.name}</a><br><code class="muted">${p.id}</code></td>
<td>${p.contract}</td>
<td>${p.rate_limit_per_minute === null ? 'none' : `${count(p.rate_limit_per_minute)}/min`}</td>
<td>${when(p.created_at)}</td>
<td><span class="status ${p.active ? 'active' : 'inactive'}">${p.active ? 'active' : html`deactivated ${when(p.deactivated_at!)}`}</span></td>
<td><a href="${pagePath('projects', p.id, 'keys')}" data-testid="project-open">Open</a></td>
<td>${p.active
    ? html`<form method="post" action="${pagePath('projects', p.id, 'deactivate')}" class="inline">${csrfField(ctx.session)}<button type="submit" class="danger" data-testid="project-deactivate">Deactivate</button></form>`
    : ''}</td>
</tr>`,
)}
</tbody>
</table>
${projects.data.length === 0 ? html`<p class="muted">No project yet: create the first one.</p>` : ''}
${pager('/dashboard/projects', {}, projects, cursor !== undefined)}
<h2>New project</h2>
<form method="post" action="/dashboard/projects" class="form">
${csrfField(ctx.session)}
<label>Name <input name="name" required maxlength="128" data-testid="project-name"></label>
<label>Contract <select name="contract"><option value="B" selected>B (credits, wallets)</option><option value="A">A (cents, credit types)</option></select></label>
<label>Rate limit per minute (optional) <input name="rate_limit_per_minute" inputmode="numeric"></label>
<button type="submit" data-testid="project-submit">Create project</button>
</form>`;
  return shell({ session: ctx.session, title: 'Projects', screen: 'projects', body });
}

export function projectRoutes(pages: PageRouter): void {
  pages.get('/dashboard/projects', async (req, res, ctx) => sendPage(res, await projectsScreen(ctx, req)));

  pages.post('/dashboard/projects', async (req, res, ctx) => {
    await answerAction(
      res,
      async () => {
        const rate = number(req, 'rate_limit_per_minute');
        const { body } = await ctx.api<ProjectEntry>('POST', '/projects', {
          body: { name: text(req, 'name'), contract: optional(req, 'contract') ?? 'B', ...(rate === undefined ? {} : { rate_limit_per_minute: rate }) },
        });
        return { kind: 'ok', message: `Created project ${body.name} (${body.id})` };
      },
      (notice) => projectsScreen(ctx, req, notice),
      '/dashboard/projects',
    );
  });

  // Deactivation revokes the project's keys and keeps its records (docs/API.md, "Projects").
  pages.post('/dashboard/projects/:project_id/deactivate', async (req, res, ctx) => {
    await answerAction(
      res,
      async () => {
        const { body } = await ctx.api<ProjectEntry & { keys_revoked: number }>('DELETE', '/projects/:project_id', { params: { project_id: String(req.params.project_id) } });
        return { kind: 'ok', message: `Deactivated project ${body.name}: ${body.keys_revoked} key(s) revoked; its records stay readable` };
      },
      (notice) => projectsScreen(ctx, req, notice),
      '/dashboard/projects',
    );
  });

  pages.get('/dashboard/projects/:project_id', async (req, res) => {
    res.redirect(303, pagePath('projects', String(req.params.project_id), 'keys'));
  });
}
