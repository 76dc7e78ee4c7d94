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
import { isBillableEntry, isBillableOrCharge } from '../plans/billable.js';

const customerListRow = z.object({
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

const dailyUsageRow = z.object({ day: z.string(), operations: z.number(), credits: z.number() });
const modelUsageRow = z.object({
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

/** What GET /v1/admin/usage may group gateway usage by, in the order its rows are sorted. */
export const usage_dimensions = ['day', 'project', 'customer', 'model'] as const;
export type UsageDimension = (typeof usage_dimensions)[number];

const usageTotalsRow = z.object({
  day: z.string().nullable(),
  project_id: z.string().nullable(),
  customer_id: z.string().nullable(),
  model: z.string().nullable(),
  calls: z.number(),
  billed_calls: z.number(),
  input_tokens: z.number(),
  output_tokens: z.number(),
  cache_read_tokens: z.number(),
  cache_write_tokens: z.number(),
  cost_credits: z.number(),
  uncovered_credits: z.number(),
});
export type UsageTotalsRow = z.infer<typeof usageTotalsRow>;

/** Where a page of usage totals starts: after the group with these values. */
export interface UsageCursor {
  day: string | null;
  project_id: string | null;
  customer_id: string | null;
  model: string | null;
}

export interface UsageTotalsFilter {
  organizationId: string;
  projectId: string | null;
  customerId: string | null;
  model: string | null;
  traceId: string | null;
  fromMs: number | null;
  toMs: number | null;
  groupBy: readonly UsageDimension[];
  after: UsageCursor | null;
  limit: number;
}

/** A usage cursor carries its grouping: used with another one, it would skip or repeat groups. */
export function encodeUsageCursor(groupBy: readonly UsageDimension[], c: UsageCursor): string {
  return Buffer.from(JSON.stringify({ g: groupBy.join(','), d: c.day, p: c.project_id, c: c.customer_id, m: c.model })).toString('base64url');
}

export function decodeUsageCursor(groupBy: readonly UsageDimension[], text: string): UsageCursor {
  try {
    const v = JSON.parse(Buffer.from(text, 'base64url').toString()) as Record<string, unknown>;
    const field = (x: unknown) => (x === null || typeof x === 'string' ? x : undefined);
    const [d, p, c, m] = [field(v.d), field(v.p), field(v.c), field(v.m)];
    if (v.g === groupBy.join(',') && d !== undefined && p !== undefined && c !== undefined && m !== undefined) {
      return { day: d, project_id: p, customer_id: c, model: m };
    }
  } catch {
    // fall through to the error below
  }
  throw new ApiError('invalid_request', { param: 'cursor', message: 'cursor is not one this API returned for this group_by' });
}

export function createListingQueries(pool: DatabasePool) {
  return {
    /**
     * Gateway usage and cost summed per group of `groupBy` (none: one total), from the
     * usage records in PostgreSQL of the organization's projects. Groups are sorted by day
     * (newest first), then project, customer and model; one more than asked is read, to
     * tell whether another page follows.
     */
    async usageTotals(f: UsageTotalsFilter): Promise<readonly UsageTotalsRow[]> {
      const exprs: Record<UsageDimension, ReturnType<typeof sql.fragment>> = {
        day: sql.fragment`to_char(u.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
        project: sql.fragment`u.project_id`,
        customer: sql.fragment`u.customer_id`,
        model: sql.fragment`u.model`,
      };
      const alias: Record<UsageDimension, string> = { day: 'day', project: 'project_id', customer: 'customer_id', model: 'model' };
      const grouped = usage_dimensions.filter((d) => f.groupBy.includes(d));
      const conds = [sql.fragment`p.organization_id = ${f.organizationId}`];
      if (f.projectId !== null) conds.push(sql.fragment`u.project_id = ${f.projectId}`);
      if (f.customerId !== null) conds.push(sql.fragment`u.customer_id = ${f.customerId}`);
      if (f.model !== null) conds.push(sql.fragment`u.model = ${f.model}`);
      if (f.traceId !== null) conds.push(sql.fragment`u.trace_id = ${f.traceId}`);
      if (f.fromMs !== null) conds.push(sql.fragment`u.created_at >= ${sql.timestamp(new Date(f.fromMs))}`);
      if (f.toMs !== null) conds.push(sql.fragment`u.created_at < ${sql.timestamp(new Date(f.toMs))}`);
      const columns = usage_dimensions.map((d) =>
        grouped.includes(d) ? sql.fragment`${exprs[d]} AS ${sql.identifier([alias[d]])}` : sql.fragment`NULL::text AS ${sql.identifier([alias[d]])}`,
      );
      const groupBy = grouped.length === 0 ? sql.fragment`` : sql.fragment`GROUP BY ${sql.join(grouped.map((d) => exprs[d]), sql.fragment`, `)}`;
      // Byte order (COLLATE "C"), the same for the sort and the keyset whatever the
      // database's collation: ids in mixed case would otherwise sort by locale rules.
      const col = (d: UsageDimension) => sql.fragment`${sql.identifier(['g', alias[d]])} COLLATE "C"`;
      // The keyset: day descending, the others ascending, after the cursor's group.
      const rest = grouped.filter((d) => d !== 'day');
      const after = f.after;
      let keyset = sql.fragment`TRUE`;
      if (after !== null && grouped.length > 0) {
        const valueOf = (d: UsageDimension) => after[alias[d] as keyof UsageCursor];
        const restAfter =
          rest.length === 0
            ? null
            : sql.fragment`(${sql.join(rest.map(col), sql.fragment`, `)}) > (${sql.join(rest.map((d) => sql.fragment`${valueOf(d)}::text COLLATE "C"`), sql.fragment`, `)})`;
        if (grouped.includes('day')) {
          const day = sql.fragment`${col('day')} < ${valueOf('day')}::text`;
          keyset = restAfter === null ? day : sql.fragment`(${day} OR (${col('day')} = ${valueOf('day')}::text AND ${restAfter}))`;
        } else {
          keyset = restAfter!;
        }
      }
      const order = grouped.map((d) => (d === 'day' ? sql.fragment`${col(d)} DESC` : sql.fragment`${col(d)}`));
      return pool.any(sql.type(usageTotalsRow)`
        SELECT * FROM (
          SELECT ${sql.join(columns, sql.fragment`, `)},
                 count(*)::int8 AS calls,
                 count(*) FILTER (WHERE u.status <> 'failed')::int8 AS billed_calls,
                 COALESCE(sum(u.input_tokens), 0)::int8 AS input_tokens,
                 COALESCE(sum(u.output_tokens), 0)::int8 AS output_tokens,
                 COALESCE(sum(u.cache_read_tokens), 0)::int8 AS cache_read_tokens,
                 COALESCE(sum(u.cache_write_tokens), 0)::int8 AS cache_write_tokens,
                 COALESCE(sum(u.cost_credits), 0)::int8 AS cost_credits,
                 COALESCE(sum(u.uncovered_credits), 0)::int8 AS uncovered_credits
          FROM usage_records u JOIN projects p ON p.id = u.project_id
          WHERE ${sql.join(conds, sql.fragment` AND `)}
          ${groupBy}
        ) g
        WHERE ${keyset}
        ${order.length === 0 ? sql.fragment`` : sql.fragment`ORDER BY ${sql.join(order, sql.fragment`, `)}`}
        LIMIT ${f.limit + 1}`);
    },

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
     * Billable operations (src/plans/billable.ts) per UTC day, newest first: how many, and
     * the credits charged that day (deducts, consumes, settled gateway calls); then, for the same days, the gateway
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
        SELECT ${dayOf('e')} AS day, count(*) FILTER (WHERE ${isBillableEntry('e')})::int8 AS operations,
               COALESCE(sum(e.amount) FILTER (WHERE e.type <> 'FREEZE'), 0)::int8 AS credits
        FROM ledger_entries e
        WHERE ${scope('e')} AND ${isBillableOrCharge('e')} AND ${bounds('e')}
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
