/** What every screen gets: the signed-in session with its organization's standing, the operations as its member, the runtime. */
import type { Session } from '../members/sessions.js';
import type { HealthDeps } from '../health.js';
import { html, withQuery, type Html } from './html.js';
import type { ProjectChoice, Standing } from './layout.js';
import type { Operations } from './operations.js';

export interface PageContext {
  /** What the overview's health summary reads. */
  rt: HealthDeps;
  session: Session & { standing: Standing };
  api: Operations;
}

export interface ProjectEntry {
  id: string;
  name: string;
  contract: 'A' | 'B';
  rate_limit_per_minute: number | null;
  active: boolean;
  deactivated_at: string | null;
  created_at: string;
}

export interface List<T> {
  data: T[];
  has_more: boolean;
  next_cursor: string | null;
}

/** The organization's projects for the picker; the API's largest page (500) covers any real organization. */
export async function projectsOf(ctx: PageContext): Promise<ProjectEntry[]> {
  return (await ctx.api<List<ProjectEntry>>('GET', '/projects', { query: { limit: '500' } })).body.data;
}

/** A project of the member's organization (404 not_found for any other), with the picker's choices. */
export async function openProject(ctx: PageContext, projectId: string): Promise<{ project: ProjectEntry; choice: ProjectChoice }> {
  const project = (await ctx.api<ProjectEntry>('GET', '/projects/:project_id', { params: { project_id: projectId } })).body;
  return { project, choice: { current: project, all: await projectsOf(ctx) } };
}

/** Links to the first page and the next one of a cursor-paged list. */
export function pager(path: string, query: Record<string, string | undefined>, list: { next_cursor: string | null }, onLaterPage: boolean): Html {
  if (!onLaterPage && list.next_cursor === null) return html``;
  return html`<nav class="pager">
${onLaterPage ? html`<a href="${withQuery(path, { ...query, cursor: undefined })}" data-testid="page-first">First page</a>` : ''}
${list.next_cursor !== null ? html`<a href="${withQuery(path, { ...query, cursor: list.next_cursor })}" data-testid="page-next">Next page</a>` : ''}
</nav>`;
}
