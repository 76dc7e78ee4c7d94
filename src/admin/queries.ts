/** Organizations and projects in PostgreSQL. */
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { newId } from '../ledger/service.js';

export const projectRow = z.object({
  id: z.string(),
  organization_id: z.string(),
  name: z.string(),
  contract: z.enum(['A', 'B']),
  created_at: z.number(),
});
export type ProjectRow = z.infer<typeof projectRow>;

export const organizationRow = z.object({ id: z.string(), name: z.string(), plan: z.string(), created_at: z.number() });

export function createAdminQueries(pool: DatabasePool) {
  return {
    createOrganization(name: string) {
      return pool.one(sql.type(organizationRow)`
        INSERT INTO organizations (id, name) VALUES (${newId('org')}, ${name}) RETURNING id, name, plan, created_at`);
    },
    createProject(organizationId: string, name: string, contract: 'A' | 'B' = 'B') {
      return pool.one(sql.type(projectRow)`
        INSERT INTO projects (id, organization_id, name, contract) VALUES (${newId('proj')}, ${organizationId}, ${name}, ${contract})
        RETURNING id, organization_id, name, contract, created_at`);
    },
    countOrganizations() {
      return pool.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int8 AS n FROM organizations`);
    },
  };
}
