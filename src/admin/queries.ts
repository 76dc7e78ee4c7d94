/** Organizations and projects in PostgreSQL, and the keyset pages of the management lists. */
import { sql, type DatabasePool, type FragmentSqlToken } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { newId } from '../ids.js';

const projectRow = z.object({
  id: z.string(),
  organization_id: z.string(),
  name: z.string(),
  contract: z.enum(['A', 'B']),
  rate_limit_per_minute: z.number().nullable(),
  created_at: z.number(),
  /** Epoch ms; null while the project is active. */
  deactivated_at: z.number().nullable(),
});
export type ProjectRow = z.infer<typeof projectRow>;

const organizationRow = z.object({ id: z.string(), name: z.string(), plan: z.string(), created_at: z.number() });

export const page_size_default = 50;
export const page_size_max = 500;

/** Where a page starts: after the row with this creation time and id (newest first). */
export interface PageCursor {
  createdAtMs: number;
  id: string;
}

export interface PageRequest {
  limit: number;
  after: PageCursor | null;
}

export interface Page<T> {
  rows: T[];
  next: PageCursor | null;
}

export function encodeCursor(c: PageCursor): string {
  return Buffer.from(JSON.stringify({ t: c.createdAtMs, i: c.id })).toString('base64url');
}

export function decodeCursor(text: string): PageCursor {
  try {
    const v = JSON.parse(Buffer.from(text, 'base64url').toString()) as { t?: unknown; i?: unknown };
    if (typeof v.t === 'number' && Number.isSafeInteger(v.t) && typeof v.i === 'string') return { createdAtMs: v.t, id: v.i };
  } catch {
    // fall through to the error below
  }
  throw new ApiError('invalid_request', { param: 'cursor', message: 'cursor is not one this API returned' });
}

/**
 * Newest first by (creation time, id), or by another time column. Times are compared at
 * millisecond precision because that is what a cursor carries (timestamptz reads as epoch
 * ms); comparing the stored microseconds against a truncated cursor would skip or repeat
 * rows.
 */
export function keysetOrder(page: PageRequest, column = 'created_at'): { where: FragmentSqlToken; orderLimit: FragmentSqlToken } {
  const at = sql.fragment`date_trunc('milliseconds', ${sql.identifier([column])})`;
  return {
    where:
      page.after === null
        ? sql.fragment`TRUE`
        : sql.fragment`(${at}, id) < (${sql.timestamp(new Date(page.after.createdAtMs))}, ${page.after.id})`,
    orderLimit: sql.fragment`ORDER BY ${at} DESC, id DESC LIMIT ${page.limit + 1}`,
  };
}

/** Cuts the one extra row a keyset query reads into the next cursor (`timeOf`: the row's ordering time). */
export function toPage<T extends { id: string }>(
  rows: readonly T[],
  limit: number,
  timeOf: (row: T) => number = (row) => (row as T & { created_at: number }).created_at,
): Page<T> {
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return { rows: page, next: rows.length > limit ? { createdAtMs: timeOf(last), id: last.id } : null };
}

export interface ProjectPatch {
  name?: string;
  contract?: 'A' | 'B';
  rate_limit_per_minute?: number | null;
}

const projectColumns = sql.fragment`id, organization_id, name, contract, rate_limit_per_minute, created_at, deactivated_at`;

export function createAdminQueries(pool: DatabasePool) {
  /** A project of this organization; another organization's project reads as absent. */
  const findProject = (organizationId: string, projectId: string): Promise<ProjectRow | null> =>
    pool.maybeOne(sql.type(projectRow)`
      SELECT ${projectColumns} FROM projects WHERE id = ${projectId} AND organization_id = ${organizationId}`);

  return {
    /** `demoAllowance`: the demo's (src/plans/catalogue.ts), set only by `npm start`'s demo. */
    createOrganization(name: string, opts: { demoAllowance?: boolean } = {}) {
      return pool.one(sql.type(organizationRow)`
        INSERT INTO organizations (id, name, demo_allowance) VALUES (${newId('org')}, ${name}, ${opts.demoAllowance ?? false})
        RETURNING id, name, plan, created_at`);
    },
    createProject(organizationId: string, name: string, contract: 'A' | 'B' = 'B') {
      return pool.one(sql.type(projectRow)`
        INSERT INTO projects (id, organization_id, name, contract) VALUES (${newId('proj')}, ${organizationId}, ${name}, ${contract})
        RETURNING ${projectColumns}`);
    },
    countOrganizations() {
      return pool.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int8 AS n FROM organizations`);
    },

    /**
     * Creates a project unless the organization already has `projectsMax` (null: no
     * limit); null when the limit is reached. The organization row is locked for the
     * count and the insert, so concurrent creations cannot both take the last slot.
     */
    createProjectWithinLimit(
      organizationId: string,
      p: { name: string; contract: 'A' | 'B'; rate_limit_per_minute: number | null },
      projectsMax: number | null,
    ): Promise<ProjectRow | null> {
      return pool.transaction(async (tx) => {
        await tx.query(sql.unsafe`SELECT id FROM organizations WHERE id = ${organizationId} FOR UPDATE`);
        if (projectsMax !== null) {
          const n = await tx.oneFirst(sql.type(z.object({ n: z.number() }))`
            SELECT count(*)::int8 AS n FROM projects WHERE organization_id = ${organizationId} AND deactivated_at IS NULL`);
          if (n >= projectsMax) return null;
        }
        return tx.one(sql.type(projectRow)`
          INSERT INTO projects (id, organization_id, name, contract, rate_limit_per_minute)
          VALUES (${newId('proj')}, ${organizationId}, ${p.name}, ${p.contract}, ${p.rate_limit_per_minute})
          RETURNING ${projectColumns}`);
      });
    },

    findProject,

    async listProjects(organizationId: string, page: PageRequest): Promise<Page<ProjectRow>> {
      const k = keysetOrder(page);
      const rows = await pool.any(sql.type(projectRow)`
        SELECT ${projectColumns} FROM projects WHERE organization_id = ${organizationId} AND ${k.where} ${k.orderLimit}`);
      return toPage(rows, page.limit);
    },

    /** Null when the project is not this organization's. */
    updateProject(organizationId: string, projectId: string, patch: ProjectPatch): Promise<ProjectRow | null> {
      const sets: FragmentSqlToken[] = [];
      if (patch.name !== undefined) sets.push(sql.fragment`name = ${patch.name}`);
      if (patch.contract !== undefined) sets.push(sql.fragment`contract = ${patch.contract}`);
      if (patch.rate_limit_per_minute !== undefined) sets.push(sql.fragment`rate_limit_per_minute = ${patch.rate_limit_per_minute}`);
      if (sets.length === 0) return findProject(organizationId, projectId);
      return pool.maybeOne(sql.type(projectRow)`
        UPDATE projects SET ${sql.join(sets, sql.fragment`, `)}
        WHERE id = ${projectId} AND organization_id = ${organizationId}
        RETURNING ${projectColumns}`);
    },

    /**
     * Deactivates a project and revokes its keys, in one transaction: a key created
     * concurrently (which locks the project row) is either revoked here or refused for
     * the deactivated project. Deactivating again keeps the first time and revokes
     * nothing new. Null when the project is not this organization's; `keysRevoked`
     * counts the keys this call revoked.
     */
    deactivateProject(organizationId: string, projectId: string): Promise<{ project: ProjectRow; keysRevoked: number } | null> {
      return pool.transaction(async (tx) => {
        const project = await tx.maybeOne(sql.type(projectRow)`
          UPDATE projects SET deactivated_at = COALESCE(deactivated_at, now())
          WHERE id = ${projectId} AND organization_id = ${organizationId}
          RETURNING ${projectColumns}`);
        if (!project) return null;
        const revoked = await tx.query(sql.unsafe`
          UPDATE api_keys SET revoked_at = now() WHERE project_id = ${projectId} AND revoked_at IS NULL`);
        return { project, keysRevoked: revoked.rowCount };
      });
    },
  };
}

export type AdminQueries = ReturnType<typeof createAdminQueries>;
