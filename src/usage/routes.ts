/**
 * GET /v1/usage, GET /v1/billing/receipts and GET /v1/billing/receipts/{transaction_id}
 * (the receipts are the usage records of calls that did not fail, with what billing them
 * took: prices, hold, detail items, balance after). A customer-scoped key sees
 * only its own customer's calls. A receipt is readable as soon as its call answered: until
 * the workers copy it to PostgreSQL it is read from the customer's outbox.
 */
import type { Router } from 'express';
import { exactRouter } from '../http/router.js';
import type { RedisClient } from '../redis/client.js';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { onlyQuery, parseWith } from '../http/validate.js';
import { creditsToUsd } from '../ledger/amounts.js';
import { toDetails } from '../ledger/entries.js';
import { readOutboxEntries } from '../ledger/outbox.js';
import { usageRecordSchema } from '../ledger/queries.js';
import type { LedgerService } from '../ledger/service.js';
import type { ProjectScope } from '../ledger/requests.js';
import { page_size_default, page_size_max } from '../customers/routes.js';
import { receipt, receipt_not_found_message, receiptSchema, usageRecordResponseSchema, type UsageQueries } from './queries.js';
import { describeRoute } from '../openapi/registry.js';
import { listOf } from '../schema/zod.js';
import { decodeCursor, encodeCursor } from '../events/cursor.js';
import { customerNotFound } from '../errors/not-found.js';

const isoTime = z.string().refine((v) => !Number.isNaN(Date.parse(v)), 'must be an ISO 8601 timestamp');

export const usageQuery = z.object({
  customer_id: z.string().min(1).max(256).optional(),
  trace_id: z.string().min(1).max(256).optional(),
  model: z.string().min(1).max(128).optional(),
  from: isoTime.optional(),
  to: isoTime.optional(),
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(300).optional(),
});

export const usagePageSchema = listOf(usageRecordResponseSchema);

const receiptsQuery = z.object({
  customer_id: z.string().min(1).max(256).optional(),
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(300).optional(),
});

describeRoute({
  method: 'GET',
  path: '/v1/usage',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: 'Usage records of gateway calls',
  description: 'Newest first; `to` is exclusive. A customer-scoped key sees only its own customer. Records appear once the workers persisted them.',
  query: usageQuery,
  responses: { 200: { description: 'A page of usage records', schema: usagePageSchema } },
  errors: ['customer_not_found'],
});
describeRoute({
  method: 'GET',
  path: '/v1/billing/receipts',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: 'Receipts of gateway calls',
  description:
    "Newest first, cursor-paged. A project key lists every receipt of the project, or of `customer_id` when given (one that never had a call: an empty list); a customer-scoped key lists its own customer's (another `customer_id` is 404 `customer_not_found`). Receipts appear here once the workers persisted them; `GET /v1/billing/receipts/{transaction_id}` reads one at once.",
  query: receiptsQuery,
  responses: { 200: { description: 'A page of receipts', schema: listOf(receiptSchema) } },
  errors: ['customer_not_found'],
});
describeRoute({
  method: 'GET',
  path: '/v1/billing/receipts/:transaction_id',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: "A gateway call's receipt",
  description: 'Readable as soon as the call answered (from the outbox until the workers copy it to PostgreSQL).',
  responses: { 200: { description: 'The receipt', schema: receiptSchema } },
  errors: ['not_found'],
});

/** A page of rows fetched one past `limit` (newest first), as a list answer with the next page's cursor. */
function listPage<Row, Item extends { created_at: string; id: string }>(rows: readonly Row[], limit: number, item: (row: Row) => Item) {
  const page = rows.slice(0, limit).map(item);
  const hasMore = rows.length > limit;
  const last = page[page.length - 1];
  return { object: 'list' as const, data: page, has_more: hasMore, next_cursor: hasMore ? encodeCursor(last.created_at, last.id) : null };
}

/** One page of a project's usage records, newest first: GET /v1/usage and the management API's usage search. */
export async function usagePage(usage: UsageQueries, projectId: string, q: z.infer<typeof usageQuery>) {
  const rows = await usage.findPage(projectId, {
    customerId: q.customer_id,
    traceId: q.trace_id,
    model: q.model,
    fromMs: q.from === undefined ? undefined : Date.parse(q.from),
    toMs: q.to === undefined ? undefined : Date.parse(q.to),
    before: q.cursor === undefined ? undefined : decodeCursor(q.cursor),
    limit: q.limit + 1,
  });
  return listPage(rows, q.limit, (row) => {
    const { prices: _p, reserved_credits: _r, returned_credits: _t, details: _d, balance_after_credits: _b, ...record } = receipt(row);
    return record;
  });
}

/** One page of a project's receipts (of one customer, when given), newest first: GET /v1/billing/receipts. */
async function receiptsPage(usage: UsageQueries, projectId: string, q: z.infer<typeof receiptsQuery>) {
  const rows = await usage.findPage(projectId, {
    customerId: q.customer_id,
    receiptsOnly: true,
    before: q.cursor === undefined ? undefined : decodeCursor(q.cursor),
    limit: q.limit + 1,
  });
  return listPage(rows, q.limit, receipt);
}

type ReceiptDeps = { usage: UsageQueries; ledger: LedgerService; redis: RedisClient };

/**
 * A gateway call's receipt, from PostgreSQL or, until the workers copied it, from its
 * customer's outbox; null when there is none. `onlyCustomer` (a customer-scoped key's
 * customer) makes another customer's receipt read as none.
 */
export async function findReceipt(deps: ReceiptDeps, scope: ProjectScope, transactionId: string, onlyCustomer: string | null = null) {
  // An archived call's binding is gone (src/ledger/bindings.ts): its receipt is in PostgreSQL.
  const owner = (await deps.ledger.bindings.command(scope.projectId, 't', transactionId, '', true)).owner;
  if (onlyCustomer !== null && owner !== null && owner !== onlyCustomer) return null;
  const read = () => deps.usage.findReceipt(scope.projectId, transactionId);
  let stored = await read();
  if (!stored && owner !== null) {
    const fromOutbox = await receiptFromOutbox(deps, scope, owner, transactionId);
    if (fromOutbox !== null) return fromOutbox;
    // A worker may have copied the entry between the two reads: it writes PostgreSQL first
    // and then takes the entry out of the outbox, so an entry missed by both reads is in
    // PostgreSQL by now (seen in CI: a receipt read right after its stream ended was a 404).
    stored = await read();
  }
  if (!stored) return null;
  return onlyCustomer !== null && stored.customer_id !== onlyCustomer ? null : receipt(stored);
}

export function usageRoutes(deps: { usage: UsageQueries; ledger: LedgerService; redis: RedisClient; prefix: string }): Router {
  const r = exactRouter();
  const readers = requireKeyType('project', 'customer');

  r.get('/v1/usage', readers, async (req, res) => {
    const { key, scope } = authOf(res);
    // An unknown filter (`customer` for customer_id) would widen the list to every
    // customer's records instead of narrowing it.
    onlyQuery(req, Object.keys(usageQuery.shape));
    const q = parseWith(usageQuery, req.query);
    if (key.type === 'customer') {
      if (q.customer_id !== undefined && q.customer_id !== key.customer_id) throw customerNotFound(q.customer_id);
      q.customer_id = key.customer_id!;
    }
    res.json(await usagePage(deps.usage, scope.projectId, q));
  });

  r.get('/v1/billing/receipts', readers, async (req, res) => {
    const { key, scope } = authOf(res);
    onlyQuery(req, Object.keys(receiptsQuery.shape));
    const q = parseWith(receiptsQuery, req.query);
    if (key.type === 'customer') {
      if (q.customer_id !== undefined && q.customer_id !== key.customer_id) throw new ApiError('customer_not_found');
      q.customer_id = key.customer_id!;
    }
    res.json(await receiptsPage(deps.usage, scope.projectId, q));
  });

  r.get('/v1/billing/receipts/:transaction_id', readers, async (req, res) => {
    onlyQuery(req);
    const { key, scope } = authOf(res);
    const found = await findReceipt(deps, scope, String(req.params.transaction_id), key.type === 'customer' ? key.customer_id! : null);
    if (!found) throw new ApiError('not_found', { message: receipt_not_found_message });
    res.json(found);
  });

  return r;
}

async function receiptFromOutbox(
  deps: { ledger: LedgerService; redis: RedisClient },
  scope: ProjectScope,
  customerId: string,
  transactionId: string,
) {
  const k = deps.ledger.keys(scope, customerId);
  for (const e of await readOutboxEntries(deps.redis, k.outbox)) {
    if (e.transaction_id !== transactionId || e.usage === undefined) continue;
    const u = usageRecordSchema.parse(JSON.parse(e.usage));
    if (u.status === 'failed') return null;
    const result = JSON.parse(e.result) as { reserved: string; returned: string; balance_after: string; shortfall?: string };
    const { prices, upstream_status: _s, ...record } = u;
    return {
      ...record,
      upstream: u.upstream ?? null,
      attempts: u.attempts ?? [],
      hold_exhausted: u.hold_exhausted ?? false,
      transaction_id: transactionId,
      cost_credits: Number(e.amount),
      cost_usd: creditsToUsd(Number(e.amount)),
      uncovered_credits: Number(result.shortfall ?? 0),
      created_at: new Date(Number(e.at)).toISOString(),
      prices,
      reserved_credits: Number(result.reserved),
      returned_credits: Number(result.returned),
      details: toDetails(e.details),
      balance_after_credits: Number(result.balance_after),
    };
  }
  return null;
}
