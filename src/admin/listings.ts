/**
 * The dashboard's lists that read the ledger of record: a project's customers (search by
 * id, name or email) and usage per day. Both read PostgreSQL, so they show what the
 * workers have persisted (normally within milliseconds of the operation); a customer's
 * balance is read from Redis, the live state, when the customer is listed.
 */
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { keysetOrder, toPage, type Page, type PageRequest } from './queries.js';

export const customerListRow = z.object({
  id: z.string(),
  name: z.string().nullable(),
  email: z.string().nullable(),
  created_at: z.number(),
});
export type CustomerListRow = z.infer<typeof customerListRow>;

/** `search` as a LIKE pattern matching itself: `%`, `_` and `\` lose their meaning. */
function likeLiteral(search: string): string {
  return search.replace(/[\\%_]/g, (c) => `\\${c}`);
}

export const dailyUsageRow = z.object({ day: z.string(), operations: z.number(), credits: z.number() });
export const modelUsageRow = z.object({
  day: z.string(),
  model: z.string(),
  calls: z.number(),
  input_tokens: z.number(),
  output_tokens: z.number(),
  cost_credits: z.number(),
});
export type DailyUsageRow = z.infer<typeof dailyUsageRow>;
export type ModelUsageRow = z.infer<typeof modelUsageRow>;

const day_ms = 86_400_000;
const dayPattern = /^\d{4}-\d{2}-\d{2}$/;

/** A day cursor: the date (UTC) of the last day of the previous page. */
export function encodeDayCursor(day: string): string {
  return Buffer.from(JSON.stringify({ d: day })).toString('base64url');
}

export function decodeDayCursor(text: string): string {
  try {
    const v = JSON.parse(Buffer.from(text, 'base64url').toString()) as { d?: unknown };
    if (typeof v.d === 'string' && dayPattern.test(v.d) && !Number.isNaN(Date.parse(`${v.d}T00:00:00Z`))) return v.d;
  } catch {
    // fall through to the error below
  }
  throw new ApiError('invalid_request', { param: 'cursor', message: 'cursor is not one this API returned' });
}

export interface DailyUsageFilter {
  organizationId: string;
  projectId: string | null;
  fromMs: number | null;
  toMs: number | null;
  /** Days before this one (a cursor), newest first. */
  beforeDay: string | null;
  limit: number;
}

export function createListingQueries(pool: DatabasePool) {
  return {
    /**
     * A project's customers, newest first. `search` matches a customer whose id starts
     * with it, or whose name or email contains it, in any case.
     */
    async customers(projectId: string, search: string | null, page: PageRequest): Promise<Page<CustomerListRow>> {
      const k = keysetOrder(page);
      const like = search === null ? null : likeLiteral(search);
      const matches =
        like === null
          ? sql.fragment`TRUE`
          : sql.fragment`(id ILIKE ${`${like}%`} OR name ILIKE ${`%${like}%`} OR email ILIKE ${`%${like}%`})`;
      const rows = await pool.any(sql.type(customerListRow)`
        SELECT id, name, email, created_at FROM customers
        WHERE project_id = ${projectId} AND ${matches} AND ${k.where} ${k.orderLimit}`);
      return toPage(rows, page.limit);
    },

    customer(projectId: string, customerId: string): Promise<CustomerListRow | null> {
      return pool.maybeOne(sql.type(customerListRow)`
        SELECT id, name, email, created_at FROM customers WHERE project_id = ${projectId} AND id = ${customerId}`);
    },

    /**
     * Billable operations (deducts, consumes, settled gateway calls) per UTC day, newest
     * first: how many, and the credits they charged; then, for the same days, the gateway
     * calls per model. One more day than asked is read, to tell whether another page follows.
     */
    async dailyUsage(f: DailyUsageFilter): Promise<{ days: readonly DailyUsageRow[]; models: readonly ModelUsageRow[] }> {
      const scope = (alias: string) =>
        f.projectId === null
          ? sql.fragment`${sql.identifier([alias, 'project_id'])} IN (SELECT id FROM projects WHERE organization_id = ${f.organizationId})`
          : sql.fragment`${sql.identifier([alias, 'project_id'])} = ${f.projectId}`;
      const upper = [f.toMs, f.beforeDay === null ? null : Date.parse(`${f.beforeDay}T00:00:00Z`)].filter((v): v is number => v !== null);
      const bounds = (alias: string) => {
        const at = sql.identifier([alias, 'created_at']);
        const conds = [];
        if (f.fromMs !== null) conds.push(sql.fragment`${at} >= ${sql.timestamp(new Date(f.fromMs))}`);
        if (upper.length > 0) conds.push(sql.fragment`${at} < ${sql.timestamp(new Date(Math.min(...upper)))}`);
        return conds.length === 0 ? sql.fragment`TRUE` : sql.join(conds, sql.fragment` AND `);
      };
      const dayOf = (alias: string) => sql.fragment`to_char(${sql.identifier([alias, 'created_at'])} AT TIME ZONE 'UTC', 'YYYY-MM-DD')`;
      const days = await pool.any(sql.type(dailyUsageRow)`
        SELECT ${dayOf('e')} AS day, count(*)::int8 AS operations, sum(e.amount)::int8 AS credits
        FROM ledger_entries e
        WHERE ${scope('e')} AND e.type IN ('DEDUCT', 'CONSUME', 'GATEWAY') AND ${bounds('e')}
        GROUP BY 1 ORDER BY 1 DESC LIMIT ${f.limit + 1}`);
      if (days.length === 0) return { days: [], models: [] };
      const shown = days.slice(0, f.limit);
      const firstMs = Date.parse(`${shown[shown.length - 1].day}T00:00:00Z`);
      const endMs = Date.parse(`${shown[0].day}T00:00:00Z`) + day_ms;
      const models = await pool.any(sql.type(modelUsageRow)`
        SELECT ${dayOf('u')} AS day, u.model, count(*)::int8 AS calls, sum(u.input_tokens)::int8 AS input_tokens,
               sum(u.output_tokens)::int8 AS output_tokens, sum(u.cost_credits)::int8 AS cost_credits
        FROM usage_records u
        WHERE ${scope('u')} AND u.status <> 'failed' AND ${bounds('u')}
          AND u.created_at >= ${sql.timestamp(new Date(firstMs))} AND u.created_at < ${sql.timestamp(new Date(endMs))}
        GROUP BY 1, 2 ORDER BY 1 DESC, 2`);
      return { days, models };
    },
  };
}

export type ListingQueries = ReturnType<typeof createListingQueries>;
