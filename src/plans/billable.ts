/**
 * Which ledger entries are billable operations, for the counts read from PostgreSQL (the
 * plan counter's seed, src/plans/service.ts; the period's invoice, src/billing/invoices.ts;
 * the usage per day, src/admin/listings.ts): one rule, so they agree with each other and
 * with what the API counted.
 */
import { sql, type CommonQueryMethods, type FragmentSqlToken } from 'slonik';
import { z } from 'zod';

/**
 * Billable operations of an organization's entries in [startMs, endMs): DEDUCT, CONSUME
 * and GATEWAY entries (the ledger_entries_billable index), except the CONSUME of a freeze
 * that the plan counted when it was accepted (`extra.pc`), plus those freezes (a consume
 * TTL: lua/freeze-10.lua; the ledger_entries_plan_counted index).
 */
export function countBillableEntries(db: CommonQueryMethods, organizationId: string, period: { startMs: number; endMs: number }): Promise<number> {
  const from = sql.timestamp(new Date(period.startMs));
  const to = sql.timestamp(new Date(period.endMs));
  return db.oneFirst(sql.type(z.object({ n: z.number() }))`
    SELECT (
      SELECT count(*) FROM ledger_entries e JOIN projects p ON p.id = e.project_id
      WHERE p.organization_id = ${organizationId} AND e.type IN ('DEDUCT', 'CONSUME', 'GATEWAY')
        AND e.created_at >= ${from} AND e.created_at < ${to} AND e.extra->>'pc' IS DISTINCT FROM '1'
    ) + (
      SELECT count(*) FROM ledger_entries e JOIN projects p ON p.id = e.project_id
      WHERE p.organization_id = ${organizationId} AND e.type = 'FREEZE' AND e.extra->>'pc' = '1'
        AND e.created_at >= ${from} AND e.created_at < ${to}
    ) AS n`);
}

/**
 * Entry `alias` is a billable operation (as countBillableEntries counts): a DEDUCT or
 * GATEWAY, a CONSUME not marked `pc`, a FREEZE marked `pc`.
 */
export function isBillableEntry(alias: string): FragmentSqlToken {
  const type = sql.identifier([alias, 'type']);
  const extra = sql.identifier([alias, 'extra']);
  return sql.fragment`(${type} IN ('DEDUCT', 'GATEWAY') OR (${type} = 'CONSUME' AND ${extra}->>'pc' IS DISTINCT FROM '1')
    OR (${type} = 'FREEZE' AND ${extra}->>'pc' = '1'))`;
}

/**
 * Entry `alias` is billable or charged a customer (a CONSUME marked `pc` charges, its
 * FREEZE counts): what the usage per day reads, each branch on a partial index
 * (ledger_entries_billable, ledger_entries_plan_counted).
 */
export function isBillableOrCharge(alias: string): FragmentSqlToken {
  const type = sql.identifier([alias, 'type']);
  const extra = sql.identifier([alias, 'extra']);
  return sql.fragment`(${type} IN ('DEDUCT', 'CONSUME', 'GATEWAY') OR (${type} = 'FREEZE' AND ${extra}->>'pc' = '1'))`;
}
