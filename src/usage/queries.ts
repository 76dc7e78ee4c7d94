/** Usage records and receipts of gateway calls in PostgreSQL. */
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { creditsToUsd } from '../ledger/amounts.js';
import { detailItemSchema } from '../ledger/schemas.js';
import { extended, timestamp } from '../schema/zod.js';

const usageRow = z.object({
  id: z.string(),
  transaction_id: z.string(),
  trace_id: z.string().nullable(),
  customer_id: z.string(),
  wallet: z.string(),
  model: z.string(),
  endpoint: z.string(),
  stream: z.boolean(),
  status: z.string(),
  input_tokens: z.number(),
  output_tokens: z.number(),
  cache_read_tokens: z.number(),
  cache_write_tokens: z.number(),
  usage_estimated: z.boolean(),
  cost_credits: z.number(),
  uncovered_credits: z.number(),
  latency_ms: z.number(),
  created_at: z.number(),
  prices: z.record(z.number()),
  reserved_credits: z.number(),
  returned_credits: z.number(),
  details: z.array(z.object({ account_id: z.string(), credit_type: z.string(), amount: z.number() })),
  balance_after_credits: z.number().nullable(),
  upstream: z.string().nullable(),
  attempts: z.array(z.object({ upstream: z.string(), outcome: z.union([z.number(), z.string()]), ms: z.number() })).nullable(),
  hold_exhausted: z.boolean(),
});
type UsageRow = z.infer<typeof usageRow>;

export interface UsageFilter {
  customerId?: string;
  traceId?: string;
  model?: string;
  fromMs?: number;
  toMs?: number;
  /** Only the calls that have a receipt: every one but the failed. */
  receiptsOnly?: boolean;
  /** Keyset position: rows strictly older than (createdAtMs, id). */
  before?: { createdAtMs: number; id: string };
  limit: number;
}

function usageRecord(r: UsageRow) {
  return {
    id: r.id,
    transaction_id: r.transaction_id,
    trace_id: r.trace_id,
    customer_id: r.customer_id,
    wallet: r.wallet,
    model: r.model,
    endpoint: r.endpoint,
    stream: r.stream,
    status: r.status,
    input_tokens: r.input_tokens,
    output_tokens: r.output_tokens,
    cache_read_tokens: r.cache_read_tokens,
    cache_write_tokens: r.cache_write_tokens,
    usage_estimated: r.usage_estimated,
    cost_credits: r.cost_credits,
    cost_usd: creditsToUsd(r.cost_credits),
    uncovered_credits: r.uncovered_credits,
    latency_ms: r.latency_ms,
    created_at: new Date(r.created_at).toISOString(),
    upstream: r.upstream,
    attempts: r.attempts ?? [],
    hold_exhausted: r.hold_exhausted,
  };
}

export function receipt(r: UsageRow) {
  return {
    ...usageRecord(r),
    prices: r.prices,
    reserved_credits: r.reserved_credits,
    returned_credits: r.returned_credits,
    details: r.details,
    balance_after_credits: r.balance_after_credits,
  };
}

const columns = sql.fragment`id, transaction_id, trace_id, customer_id, wallet, model, endpoint, stream, status, input_tokens,
  output_tokens, cache_read_tokens, cache_write_tokens, usage_estimated, cost_credits, uncovered_credits, latency_ms, created_at, prices,
  reserved_credits, returned_credits, details, balance_after_credits, upstream, attempts, hold_exhausted`;

export function createUsageQueries(pool: DatabasePool) {
  return {
    findPage(projectId: string, f: UsageFilter) {
      const conds = [sql.fragment`project_id = ${projectId}`];
      if (f.customerId !== undefined) conds.push(sql.fragment`customer_id = ${f.customerId}`);
      if (f.traceId !== undefined) conds.push(sql.fragment`trace_id = ${f.traceId}`);
      if (f.model !== undefined) conds.push(sql.fragment`model = ${f.model}`);
      if (f.receiptsOnly === true) conds.push(sql.fragment`status <> 'failed'`);
      if (f.fromMs !== undefined) conds.push(sql.fragment`created_at >= ${sql.timestamp(new Date(f.fromMs))}`);
      if (f.toMs !== undefined) conds.push(sql.fragment`created_at < ${sql.timestamp(new Date(f.toMs))}`);
      if (f.before) conds.push(sql.fragment`(created_at, id) < (${sql.timestamp(new Date(f.before.createdAtMs))}, ${f.before.id})`);
      return pool.any(sql.type(usageRow)`
        SELECT ${columns} FROM usage_records WHERE ${sql.join(conds, sql.fragment` AND `)}
        ORDER BY created_at DESC, id DESC LIMIT ${f.limit}`);
    },
    findReceipt(projectId: string, transactionId: string) {
      return pool.maybeOne(sql.type(usageRow)`
        SELECT ${columns} FROM usage_records
        WHERE project_id = ${projectId} AND transaction_id = ${transactionId} AND status <> 'failed'`);
    },
  };
}

export type UsageQueries = ReturnType<typeof createUsageQueries>;

/**
 * The 404 of a receipt that does not exist for the caller: receipts are made for gateway
 * calls only, so an unknown id is most often a ledger operation's.
 */
export const receipt_not_found_message =
  'no receipt for this transaction id: receipts exist for gateway calls (POST /v1/chat/completions, /v1/responses, /v1/messages and /v1/embeddings), named by the X-Service-Transaction-Id of their answer (gw_...); a ledger operation (deduct, freeze, consume) is read from GET /v1/customers/{id}/ledger?transaction_id=...';

// The documented answers (src/openapi/).
export const usageRecordResponseSchema = z
  .object({
    id: z.string(),
    transaction_id: z.string(),
    trace_id: z.string().nullable().openapi({ description: 'The `X-Service-Trace-Id` of the call.' }),
    customer_id: z.string(),
    wallet: z.string(),
    model: z.string(),
    endpoint: z.enum(['chat.completions', 'messages', 'embeddings', 'responses']),
    stream: z.boolean(),
    status: z.enum(['settled', 'failed', 'client_aborted']),
    input_tokens: z.number().int(),
    output_tokens: z.number().int(),
    cache_read_tokens: z.number().int(),
    cache_write_tokens: z.number().int(),
    usage_estimated: z.boolean(),
    cost_credits: z.number().int(),
    cost_usd: z.string().openapi({ description: 'Exact decimal string.' }),
    uncovered_credits: z.number().int().openapi({
      description:
        'What the call cost beyond its hold and its wallet\'s available credits together: not charged, now or later (docs: Uncovered credits). 0 for a call billed in full.',
    }),
    latency_ms: z.number().int(),
    created_at: timestamp,
    upstream: z.string().nullable().openapi({ description: "The id of the model's upstream that served the call (docs: Upstreams and failover): `primary` for a model without a list; null when none answered." }),
    attempts: z
      .array(
        z
          .object({
            upstream: z.string(),
            outcome: z.union([z.number().int(), z.string()]).openapi({ description: "The upstream's HTTP status, or why it gave none: `unreachable`, `timeout`, `aborted`, ...; skipped untried (listed first, 0 ms): `cooling_down` or `circuit_open`." }),
            ms: z.number().int().openapi({ description: 'How long the attempt took; 0 for an upstream skipped.' }),
          })
          .strict(),
      )
      .openapi({ description: 'Every upstream the call was sent to, in order; more than one when it failed over.' }),
    hold_exhausted: z.boolean().openapi({
      description: 'True when the wallet (or a budget) ended the call\'s stream (`X-Service-Hold: incremental`, docs: Incremental holds): the X-Service-Hold-Exhausted trailer, for clients that cannot read trailers.',
    }),
  })
  .strict()
  .openapi('UsageRecord');

export const receiptSchema = extended(usageRecordResponseSchema, {
    prices: z.record(z.number().int()).openapi({ description: 'The prices the call was billed at, credits per million tokens.' }),
    reserved_credits: z.number().int().openapi({ description: 'The hold made before relaying.' }),
    returned_credits: z.number().int(),
    details: z.array(detailItemSchema),
    balance_after_credits: z.number().int().nullable().openapi({ description: "The billed wallet's available credits after settlement." }),
  })
  .openapi('Receipt');
