/**
 * The PostgreSQL reads of a reconcile run (src/reconcile/walk.ts): the customers of its
 * scope in pages, which of those Redis holds PostgreSQL has, one customer's row and
 * ledger, and a project's organization (its expiry jobs name it).
 */
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import '../schema/zod.js';
import { ledgerEntryRow } from '../ledger/queries.js';
import type { CustomerRow } from './fold.js';
import type { IdentifiedEntry } from './compare.js';

const customerRow = z.object({
  name: z.string().nullable(),
  email: z.string().nullable(),
  metadata: z.unknown(),
  created_at: z.number(),
  alert_settings: z.unknown(),
  budget_limit: z.number().nullable(),
  budget_period: z.string().nullable(),
  key_budgets: z.unknown(),
});

const entryRow = ledgerEntryRow.pick({ id: true, seq: true, type: true, transaction_id: true, amount: true, wallet: true, details: true, reason: true, business_type: true, result: true, extra: true, created_at: true });

export function createReconcileQueries(pool: DatabasePool) {
  return {
    /** The next page of customers after `after` (keyset order: project, id). */
    customerPage(projectId: string | null, after: { project_id: string; id: string } | null, limit: number) {
      const conditions = [
        ...(projectId === null ? [] : [sql.fragment`project_id = ${projectId}`]),
        ...(after === null ? [] : [sql.fragment`(project_id, id) > (${after.project_id}, ${after.id})`]),
      ];
      return pool.any(sql.type(z.object({ project_id: z.string(), id: z.string() }))`
        SELECT project_id, id FROM customers
        ${conditions.length === 0 ? sql.fragment`` : sql.fragment`WHERE ${sql.join(conditions, sql.fragment` AND `)}`}
        ORDER BY project_id, id LIMIT ${limit}`);
    },
    /** Which of these customers PostgreSQL has. */
    existing(ids: { projectId: string; customerId: string }[]) {
      return pool.any(sql.type(z.object({ project_id: z.string(), id: z.string() }))`
        SELECT c.project_id, c.id FROM customers c
        JOIN unnest(${sql.array(ids.map((i) => i.projectId), 'text')}::text[], ${sql.array(ids.map((i) => i.customerId), 'text')}::text[]) AS w(project_id, id)
          ON c.project_id = w.project_id AND c.id = w.id`);
    },
    async customer(projectId: string, customerId: string): Promise<CustomerRow | null> {
      const row = await pool.maybeOne(sql.type(customerRow)`
        SELECT name, email, metadata, created_at, alert_settings, budget_limit, budget_period, key_budgets FROM customers WHERE project_id = ${projectId} AND id = ${customerId}`);
      return row && { ...row, metadata: row.metadata };
    },
    async entries(projectId: string, customerId: string): Promise<IdentifiedEntry[]> {
      const rows = await pool.any(sql.type(entryRow)`
        SELECT id, seq, type, transaction_id, amount, wallet, details, reason, business_type, result, extra, created_at
        FROM ledger_entries WHERE project_id = ${projectId} AND customer_id = ${customerId}
        ORDER BY seq`);
      return rows.map((r) => ({ ...r, details: r.details, result: r.result }));
    },
    /** How many customers the scope holds (the progress's total). */
    countCustomers(projectId: string | null) {
      return pool.oneFirst(sql.type(z.object({ n: z.number() }))`
        SELECT count(*)::int8 AS n FROM customers ${projectId === null ? sql.fragment`` : sql.fragment`WHERE project_id = ${projectId}`}`);
    },
    organizationOf(projectId: string) {
      return pool.maybeOneFirst(sql.type(z.object({ organization_id: z.string() }))`
        SELECT organization_id FROM projects WHERE id = ${projectId}`);
    },
  };
}

export type ReconcileQueries = ReturnType<typeof createReconcileQueries>;
