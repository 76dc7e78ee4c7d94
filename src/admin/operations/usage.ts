/**
 * The management operations on gateway usage: a project's usage records and receipts,
 * and the organization's billable operations per UTC day and usage and cost totals.
 */
import { z } from 'zod';
import { ApiError } from '../../errors/catalogue.js';
import { onlyQuery, parseWith } from '../../http/validate.js';
import { creditsToUsd } from '../../ledger/amounts.js';
import { identifierSchema } from '../../ledger/schemas.js';
import { describeOperation } from '../../openapi/registry.js';
import { listOf } from '../../schema/zod.js';
import { receipt_not_found_message, receiptSchema } from '../../usage/queries.js';
import { findReceipt, usagePage, usagePageSchema, usageQuery } from '../../usage/routes.js';
import { decodeDayCursor, decodeUsageCursor, encodeDayCursor, encodeUsageCursor, usage_dimensions, type ListingQueries, type UsageDimension } from '../listings.js';
import { modelIdSchema } from '../models.js';
import { page_size_default, page_size_max } from '../queries.js';
import { ok, operation, orgOf, projectParams, scopeOf, type ManagementDeps, type Operation, type ProjectLookup } from './shared.js';

const isoTime = z.string().refine((v) => !Number.isNaN(Date.parse(v)), 'must be an ISO 8601 timestamp');
export const usage_days_default = 30;
export const usage_days_max = 366;
const dailyUsageQuery = z.object({
  project_id: z.string().min(1).max(256).optional(),
  from: isoTime.optional(),
  to: isoTime.optional(),
  limit: z.coerce.number().int().min(1).max(usage_days_max).default(usage_days_default),
  cursor: z.string().max(200).optional(),
});

/**
 * GET /usage: gateway usage and cost totals. `group_by` is a comma-separated list of
 * day, project, customer and model (all four when omitted; empty for one total).
 */
const usageTotalsQuery = z.object({
  project_id: z.string().min(1).max(256).optional(),
  customer_id: identifierSchema.optional(),
  model: modelIdSchema.optional(),
  trace_id: z.string().min(1).max(256).optional(),
  from: isoTime.optional(),
  to: isoTime.optional(),
  group_by: z
    .string()
    .max(64)
    .transform((v, ctx) => {
      const parts = v === '' ? [] : v.split(',').map((x) => x.trim());
      for (const part of parts) {
        if (!(usage_dimensions as readonly string[]).includes(part)) {
          ctx.addIssue({ code: z.ZodIssueCode.custom, message: `unknown dimension ${JSON.stringify(part)}; use a comma-separated list of ${usage_dimensions.join(', ')}` });
          return z.NEVER;
        }
      }
      // In the order the groups are sorted by, whatever order was sent.
      return usage_dimensions.filter((d) => parts.includes(d)) as UsageDimension[];
    })
    .default(usage_dimensions.join(',')),
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(2048).optional(),
});

const usageTotalsSchema = z
  .object({
    object: z.literal('list'),
    group_by: z.array(z.enum(usage_dimensions)).openapi({ description: 'The dimensions of the groups, in the order they are sorted by.' }),
    data: z.array(
      z
        .object({
          date: z.string().date().nullable().openapi({ description: 'The UTC day; null unless grouped by `day`.' }),
          project_id: z.string().nullable().openapi({ description: 'Null unless grouped by `project`.' }),
          customer_id: z.string().nullable().openapi({ description: 'Null unless grouped by `customer`.' }),
          model: z.string().nullable().openapi({ description: 'Null unless grouped by `model`.' }),
          calls: z.number().int(),
          billed_calls: z.number().int().openapi({ description: 'Calls that were not failed.' }),
          input_tokens: z.number().int(),
          output_tokens: z.number().int(),
          cache_read_tokens: z.number().int(),
          cache_write_tokens: z.number().int(),
          cost_credits: z.number().int(),
          cost_usd: z.string().openapi({ description: 'Exact decimal string.' }),
          uncovered_credits: z.number().int().openapi({ description: 'The sum of the calls\' `uncovered_credits`: cost their wallets could not pay, not charged.' }),
        })
        .strict(),
    ),
    has_more: z.boolean(),
    next_cursor: z.string().nullable().openapi({ description: 'Pass as `cursor`, with the same `group_by`, for the next page; null on the last one.' }),
  })
  .strict()
  .openapi('UsageTotals');
const usd = z.string().openapi({ description: 'Exact decimal string.' });
const dailyUsageSchema = z
  .object({
    date: z.string().date(),
    operations: z.number().int().openapi({ description: 'Deducts, consumes and settled gateway calls.' }),
    credits: z.number().int(),
    cost_usd: usd,
    by_model: z.array(
      z
        .object({
          model: z.string(),
          calls: z.number().int(),
          input_tokens: z.number().int(),
          output_tokens: z.number().int(),
          cost_credits: z.number().int(),
          cost_usd: usd,
        })
        .strict(),
    ),
  })
  .strict()
  .openapi('DailyUsage');

describeOperation({
  method: 'GET',
  path: '/projects/:project_id/usage',
  role: 'viewer',
  tag: 'Gateway',
  summary: "The project's gateway calls",
  query: usageQuery,
  responses: ok('A page of usage records', usagePageSchema),
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/receipts/:transaction_id',
  role: 'viewer',
  tag: 'Gateway',
  summary: "A gateway call's receipt",
  responses: ok('The receipt', receiptSchema),
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/usage/daily',
  role: 'viewer',
  tag: 'Organization',
  summary: 'Billable operations per UTC day',
  query: dailyUsageQuery,
  responses: ok('A page of days, newest first', listOf(dailyUsageSchema)),
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/usage',
  role: 'viewer',
  tag: 'Gateway',
  summary: 'Gateway usage and cost totals, grouped',
  description:
    "The organization's gateway calls summed per group of `group_by`: a comma-separated list of `day`, `project`, `customer` and `model` (all four when omitted; empty for one total). Groups are sorted by day (newest first), then project, customer and model. `from` (inclusive) and `to` (exclusive) bound the calls' times; `project_id`, `customer_id`, `model` and `trace_id` filter. 404 `not_found` for a project of another organization.",
  query: usageTotalsQuery.extend({
    group_by: z.string().max(64).optional().openapi({ description: 'Comma-separated: `day`, `project`, `customer`, `model`. Default: all four; empty: one total.' }),
  }),
  responses: ok('A page of groups', usageTotalsSchema),
  errors: [projectParams],
});

interface UsageDeps extends Pick<ManagementDeps, 'ledger' | 'redis' | 'usageQueries'> {
  listings: Pick<ListingQueries, 'dailyUsage' | 'usageTotals'>;
  projects: ProjectLookup;
}

export function usageOperations(deps: UsageDeps): Operation[] {
  const { listings } = deps;
  const { projectOr404 } = deps.projects;

  return [
    // Gateway calls: usage records and receipts
    operation('GET', '/projects/:project_id/usage', 'viewer', async (req, res) => {
      const project = await projectOr404(req, res);
      onlyQuery(req, Object.keys(usageQuery.shape));
      res.json(await usagePage(deps.usageQueries, project.id, parseWith(usageQuery, req.query)));
    }),

    operation('GET', '/projects/:project_id/receipts/:transaction_id', 'viewer', async (req, res) => {
      onlyQuery(req);
      const project = await projectOr404(req, res);
      const receiptReads = { usage: deps.usageQueries, ledger: deps.ledger, redis: deps.redis };
      const found = await findReceipt(receiptReads, scopeOf(project), String(req.params.transaction_id));
      if (!found) throw new ApiError('not_found', { message: receipt_not_found_message });
      res.json(found);
    }),

    // The organization's usage
    operation('GET', '/usage/daily', 'viewer', async (req, res) => {
      onlyQuery(req, Object.keys(dailyUsageQuery.shape));
      const q = parseWith(dailyUsageQuery, req.query);
      const project = q.project_id === undefined ? null : await projectOr404(req, res, q.project_id);
      const { days, models: byModel } = await listings.dailyUsage({
        organizationId: orgOf(res),
        projectId: project?.id ?? null,
        fromMs: q.from === undefined ? null : Date.parse(q.from),
        toMs: q.to === undefined ? null : Date.parse(q.to),
        beforeDay: q.cursor === undefined ? null : decodeDayCursor(q.cursor),
        limit: q.limit,
      });
      const shown = days.slice(0, q.limit);
      const data = shown.map((d) => ({
        date: d.day,
        operations: d.operations,
        credits: d.credits,
        cost_usd: creditsToUsd(d.credits),
        by_model: byModel
          .filter((m) => m.day === d.day)
          .map((m) => ({
            model: m.model,
            calls: m.calls,
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
            cost_credits: m.cost_credits,
            cost_usd: creditsToUsd(m.cost_credits),
          })),
      }));
      const hasMore = days.length > q.limit;
      res.json({ object: 'list', data, has_more: hasMore, next_cursor: hasMore ? encodeDayCursor(shown[shown.length - 1].day) : null });
    }),

    operation('GET', '/usage', 'viewer', async (req, res) => {
      onlyQuery(req, Object.keys(usageTotalsQuery.shape));
      const q = parseWith(usageTotalsQuery, req.query);
      const project = q.project_id === undefined ? null : await projectOr404(req, res, q.project_id);
      const fromMs = q.from === undefined ? null : Date.parse(q.from);
      const toMs = q.to === undefined ? null : Date.parse(q.to);
      if (fromMs !== null && toMs !== null && toMs <= fromMs) throw new ApiError('invalid_request', { param: 'to', message: 'to must be later than from' });
      const rows = await listings.usageTotals({
        organizationId: orgOf(res),
        projectId: project?.id ?? null,
        customerId: q.customer_id ?? null,
        model: q.model ?? null,
        traceId: q.trace_id ?? null,
        fromMs,
        toMs,
        groupBy: q.group_by,
        after: q.cursor === undefined ? null : decodeUsageCursor(q.group_by, q.cursor),
        limit: q.limit,
      });
      const shown = rows.slice(0, q.limit);
      const hasMore = rows.length > q.limit;
      const last = shown[shown.length - 1];
      res.json({
        object: 'list',
        group_by: q.group_by,
        data: shown.map(({ day, ...r }) => ({ date: day, ...r, cost_usd: creditsToUsd(r.cost_credits) })),
        has_more: hasMore,
        next_cursor: hasMore ? encodeUsageCursor(q.group_by, last) : null,
      });
    }),
  ];
}
