/** Ledger queries on PostgreSQL, the system of record. */
import { sql, type CommonQueryMethods, type DatabasePool } from 'slonik';
import { createQuarantineQueries, type QuarantineQueries } from './quarantine.js';
import { z } from 'zod';
import { isLedgerEntry, outboxEntryToPublic, toDetails, type LedgerEntry } from './entries.js';
import { eventOfEntry, type OutboxEntry, type SourceState } from '../redis/codec.js';
import { insertEvents, type StoredEvent } from '../events/store.js';

/**
 * A row of `ledger_entries`, every column a query reads; each query picks its own (the
 * archived-id lookups, reconcile's fold and the ledger pages).
 */
export const ledgerEntryRow = z.object({
  id: z.string(),
  seq: z.number(),
  customer_id: z.string(),
  type: z.enum(['DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY', 'EXPIRE']),
  transaction_id: z.string(),
  amount: z.number(),
  returned_amount: z.number().nullable(),
  wallet: z.string().nullable(),
  details: z.unknown(),
  reason: z.enum(['ttl_release', 'ttl_consume']).nullable(),
  business_type: z.string().nullable(),
  description: z.string().nullable(),
  result: z.unknown(),
  extra: z.record(z.unknown()).nullable(),
  created_at: z.number(),
});

const entryRow = ledgerEntryRow.omit({ result: true, extra: true });

const archivedSourceRow = z.object({
  id: z.string(),
  wallet: z.string(),
  label: z.string(),
  amount: z.number(),
  seq: z.number(),
  starts_at: z.number().nullable(),
  expires_at: z.number().nullable(),
  used: z.number(),
});

export interface EntryFilter {
  beforeSeq: number | null;
  type: string | null;
  transactionId: string | null;
  limit: number;
}

/**
 * The order in which a batch of entries is written: by project, customer and seq. Each
 * customer's entries in their order (the deposit that creates a customer comes before
 * anything referring to it), and one lock order for every worker, so that concurrent
 * passes over overlapping entries wait for each other instead of deadlocking.
 */
export function compareForInsert(a: OutboxEntry, b: OutboxEntry): number {
  if (a.project_id !== b.project_id) return a.project_id < b.project_id ? -1 : 1;
  if (a.customer_id !== b.customer_id) return a.customer_id < b.customer_id ? -1 : 1;
  return Number(a.seq) - Number(b.seq);
}

export function createLedgerQueries(pool: DatabasePool) {
  return {
    /** The parked entries of the service whose Redis prefix this is (src/ledger/quarantine.ts). */
    quarantine(prefix: string): QuarantineQueries {
      return createQuarantineQueries(pool, prefix);
    },
    async findEntriesPage(projectId: string, customerId: string, f: EntryFilter): Promise<LedgerEntry[]> {
      const rows = await pool.any(sql.type(entryRow)`
        SELECT id, seq, customer_id, type, transaction_id, amount, returned_amount, wallet, details, reason,
               business_type, description, created_at
        FROM ledger_entries
        WHERE project_id = ${projectId} AND customer_id = ${customerId}
          ${f.beforeSeq !== null ? sql.fragment`AND seq < ${f.beforeSeq}` : sql.fragment``}
          ${f.type !== null ? sql.fragment`AND type = ${f.type}` : sql.fragment``}
          ${f.transactionId !== null ? sql.fragment`AND transaction_id = ${f.transactionId}` : sql.fragment``}
        ORDER BY seq DESC
        LIMIT ${f.limit}`);
      return rows.map((r) => ({ ...r, details: toDetails(r.details), created_at: new Date(r.created_at).toISOString() }));
    },

    /**
     * The sources of a customer that Redis no longer holds (archived: dead, so nothing is
     * frozen and nothing changes them any more), with `used` summed from the entries that
     * drew from them. `excluded` are the sources Redis answered with, `srcSeqMax` the
     * newest source it knew of (a source created after its answer is not archived).
     */
    async archivedSources(projectId: string, customerId: string, excluded: string[], srcSeqMax: number): Promise<SourceState[]> {
      const rows = await pool.any(sql.type(archivedSourceRow)`
        WITH used AS (
          SELECT d->>'account_id' AS id, sum((d->>'amount')::bigint) AS used
          FROM ledger_entries e
          CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(e.details) = 'array' THEN e.details ELSE '[]'::jsonb END) d
          WHERE e.project_id = ${projectId} AND e.customer_id = ${customerId} AND e.type IN ('DEDUCT', 'CONSUME', 'GATEWAY')
          GROUP BY 1)
        SELECT s.id, s.wallet, s.label, s.amount, s.seq, s.starts_at, s.expires_at, COALESCE(u.used, 0)::bigint AS used
        FROM sources s LEFT JOIN used u ON u.id = s.id
        WHERE s.project_id = ${projectId} AND s.customer_id = ${customerId} AND s.seq <= ${srcSeqMax}
          AND NOT (s.id = ANY(${sql.array(excluded, 'text')}))
        ORDER BY s.seq`);
      return rows.map((r) => ({
        id: r.id, wallet: r.wallet, label: r.label, seq: r.seq, total: r.amount, used: r.used, frozen: 0,
        startsAtMs: r.starts_at, expiresAtMs: r.expires_at,
      }));
    },

    /**
     * Inserts outbox entries (of any customers) in one transaction with one multi-row
     * insert, creating the customer, source, usage and event rows they carry. Entries already
     * present are skipped: a worker that died after inserting and before trimming the
     * outbox repeats the batch.
     */
    async insertEntries(entries: OutboxEntry[]): Promise<number> {
      if (entries.length === 0) return 0;
      const sorted = [...entries].sort(compareForInsert);
      return pool.transaction(async (tx) => {
        // Customers and sources first: ledger entries reference them.
        for (const e of sorted) await insertCustomerAndSource(tx, e);
        await insertUsageRecords(tx, sorted.filter((e) => e.usage !== undefined));
        // Events with the entries of the changes that caused them (lua/includes/events.lua).
        await insertEvents(tx, sorted.filter((e) => e.type === 'EVENT').map((e) => eventOfEntry(e) as StoredEvent));
        const rows = sorted.filter(isLedgerEntry).map((e) => {
          const pub = outboxEntryToPublic(e);
          return [
            e.id, e.project_id, e.customer_id, pub.seq, e.type, e.transaction_id, pub.amount, pub.returned_amount, pub.wallet,
            JSON.stringify(pub.details), pub.reason, pub.business_type, pub.description, e.state ?? null, e.result,
            e.x ? JSON.stringify(e.x) : null, new Date(Number(e.at)).toISOString(),
          ];
        });
        if (rows.length === 0) return 0;
        const res = await tx.query(sql.unsafe`
          INSERT INTO ledger_entries (id, project_id, customer_id, seq, type, transaction_id, amount, returned_amount,
            wallet, details, reason, business_type, description, state, result, extra, created_at)
          SELECT * FROM ${sql.unnest(rows, [
            'text', 'text', 'text', 'int8', 'text', 'text', 'int8', 'int8', 'text', 'jsonb', 'text', 'text', 'text', 'text',
            'jsonb', 'jsonb', 'timestamptz',
          ])}
          ON CONFLICT (id) DO NOTHING`);
        return res.rowCount;
      });
    },
  };
}

/** A gateway call's usage record as the gateway service writes it (ARGV of the scripts). */
export const usageRecordSchema = z.object({
  id: z.string(),
  customer_id: z.string(),
  trace_id: z.string().nullable(),
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
  latency_ms: z.number().int(),
  prices: z.record(z.number()),
  upstream_status: z.number().int().nullable(),
  /** Absent in the records of a service before resilient routing (migration 025). */
  upstream: z.string().nullable().optional(),
  attempts: z.array(z.object({ upstream: z.string(), outcome: z.union([z.number(), z.string()]), ms: z.number() })).optional(),
  /** The wallet ended an incremental stream (migration 026); absent in older records. */
  hold_exhausted: z.boolean().optional(),
});
export type UsageRecordInput = z.infer<typeof usageRecordSchema>;

/** The usage records that gateway entries carry, in one multi-row insert. */
async function insertUsageRecords(tx: CommonQueryMethods, entries: OutboxEntry[]): Promise<void> {
  if (entries.length === 0) return;
  const rows = entries.map((e) => {
    // Written by the gateway service itself (usageRecordSchema): parsed, not validated.
    const u = JSON.parse(e.usage!) as UsageRecordInput;
    const r = JSON.parse(e.result) as { reserved?: string; balance_after?: string; shortfall?: string };
    const reserved = Number(r.reserved ?? e.returned_amount ?? 0);
    return [
      u.id, e.project_id, e.customer_id, e.transaction_id, u.trace_id, u.wallet, u.model, u.endpoint, u.stream, u.status,
      u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.usage_estimated, Number(e.amount), u.latency_ms,
      JSON.stringify(u.prices), reserved, Number(e.returned_amount ?? reserved), JSON.stringify(toDetails(e.details)),
      r.balance_after === undefined ? null : Number(r.balance_after), u.upstream_status, new Date(Number(e.at)).toISOString(),
      // What the settlement could not charge (lua/gateway_settle-10.lua); a release has none.
      Number(r.shortfall ?? 0),
      u.upstream ?? null, u.attempts === undefined ? null : JSON.stringify(u.attempts), u.hold_exhausted ?? false,
    ];
  });
  await tx.query(sql.unsafe`
    INSERT INTO usage_records (id, project_id, customer_id, transaction_id, trace_id, wallet, model, endpoint, stream, status,
      input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, usage_estimated, cost_credits, latency_ms, prices,
      reserved_credits, returned_credits, details, balance_after_credits, upstream_status, created_at, uncovered_credits, upstream, attempts, hold_exhausted)
    SELECT * FROM ${sql.unnest(rows, [
      'text', 'text', 'text', 'text', 'text', 'text', 'text', 'text', 'bool', 'text', 'int8', 'int8', 'int8', 'int8', 'bool', 'int8',
      'int4', 'jsonb', 'int8', 'int8', 'jsonb', 'int8', 'int4', 'timestamptz', 'int8', 'text', 'jsonb', 'bool',
    ])}
    ON CONFLICT (project_id, transaction_id) DO NOTHING`);
}

async function insertCustomerAndSource(tx: CommonQueryMethods, e: OutboxEntry): Promise<void> {
  if (e.type !== 'DEPOSIT' || !e.x) return;
  const customer = e.x.customer as { created_at: string; name: string | null; email: string | null; metadata: string | null } | null;
  if (customer) {
    await tx.query(sql.unsafe`
      INSERT INTO customers (project_id, id, name, email, metadata, created_at)
      VALUES (${e.project_id}, ${e.customer_id}, ${customer.name}, ${customer.email},
              ${customer.metadata === null ? null : sql.jsonb(JSON.parse(customer.metadata))},
              ${sql.timestamp(new Date(Number(customer.created_at)))})
      ON CONFLICT (project_id, id) DO NOTHING`);
  }
  const s = JSON.parse(e.x.source as string) as Record<string, string>;
  await tx.query(sql.unsafe`
    INSERT INTO sources (project_id, customer_id, id, wallet, label, amount, seq, starts_at, expires_at, created_at)
    VALUES (${e.project_id}, ${e.customer_id}, ${s.id}, ${s.w}, ${s.l}, ${Number(s.t)}, ${Number(s.q)},
            ${s.s === '' ? null : sql.timestamp(new Date(Number(s.s)))}, ${s.e === '' ? null : sql.timestamp(new Date(Number(s.e)))},
            ${sql.timestamp(new Date(Number(e.at)))})
    ON CONFLICT (project_id, id) DO NOTHING`);
}

export type LedgerQueries = ReturnType<typeof createLedgerQueries>;

/** Profile fields a PATCH may change; undefined leaves a field as it is. */
export interface ProfilePatch {
  name?: string | null;
  email?: string | null;
  metadata?: Record<string, unknown> | null;
  /** Alert settings to merge into `alert_settings` by top-level key (src/customers/alerts.ts). */
  alerts?: Record<string, unknown>;
  /** The customer budget (src/ledger/budgets.ts); null clears it. */
  budget?: { limit: number; period: string } | null;
  /** Project key budgets to merge into `key_budgets` (set) and to remove from it, by key id; at most `max` after it. */
  keyBudgets?: { set: Record<string, { limit: number; period: string }>; remove: string[]; max: number };
}

const customerProfileRow = z.object({
  name: z.string().nullable(),
  email: z.string().nullable(),
  metadata: z.record(z.unknown()).nullable(),
  created_at: z.number(),
});

export function createCustomerQueries(pool: DatabasePool) {
  return {
    /**
     * Inserts a customer row (POST /v1/customers) unless the project has one: the row as
     * stored, and whether this call made it.
     */
    async createCustomer(projectId: string, customerId: string, p: { name: string | null; email: string | null; metadata: Record<string, unknown> | null }) {
      const made = await pool.maybeOne(sql.type(customerProfileRow)`
        INSERT INTO customers (project_id, id, name, email, metadata, created_at)
        VALUES (${projectId}, ${customerId}, ${p.name}, ${p.email}, ${p.metadata === null ? null : sql.jsonb(p.metadata as never)}, now())
        ON CONFLICT (project_id, id) DO NOTHING
        RETURNING name, email, metadata, created_at`);
      if (made) return { row: made, created: true };
      const row = await pool.one(sql.type(customerProfileRow)`
        SELECT name, email, metadata, created_at FROM customers WHERE project_id = ${projectId} AND id = ${customerId}`);
      return { row, created: false };
    },
    /**
     * Applies a PATCH in one statement; the alert settings as stored after it (null for
     * none), false when the customer row does not exist (yet), or the number of key
     * budgets the patch would have left when that is above `keyBudgets.max` (nothing
     * changed). The cap is checked in the statement, on the row it locks: concurrent
     * PATCHes cannot pass it together.
     */
    async updateProfile(projectId: string, customerId: string, p: ProfilePatch): Promise<{ alert_settings: unknown } | false | { keyBudgetsOver: number }> {
      const sets = [sql.fragment`id = id`];
      if (p.name !== undefined) sets.push(sql.fragment`name = ${p.name}`);
      if (p.email !== undefined) sets.push(sql.fragment`email = ${p.email}`);
      if (p.metadata !== undefined) sets.push(sql.fragment`metadata = ${p.metadata === null ? null : sql.jsonb(p.metadata as never)}`);
      // Merged by key in the statement: two PATCHes of different settings both stay.
      if (p.alerts !== undefined) sets.push(sql.fragment`alert_settings = COALESCE(alert_settings, '{}'::jsonb) || ${sql.jsonb(p.alerts as never)}`);
      if (p.budget !== undefined) {
        sets.push(sql.fragment`budget_limit = ${p.budget?.limit ?? null}, budget_period = ${p.budget?.period ?? null}`);
      }
      const kb = p.keyBudgets;
      // Merged by key id in the statement, as the alert settings; removals after it.
      const merged = kb && sql.fragment`(COALESCE(key_budgets, '{}'::jsonb) || ${sql.jsonb(kb.set as never)}) - ${sql.array(kb.remove, 'text')}`;
      if (merged) sets.push(sql.fragment`key_budgets = ${merged}`);
      const capped = merged ? sql.fragment` AND (SELECT count(*) FROM jsonb_object_keys(${merged})) <= ${kb.max}` : sql.fragment``;
      const row = await pool.maybeOne(sql.type(z.object({ alert_settings: z.unknown() }))`
        UPDATE customers SET ${sql.join(sets, sql.fragment`, `)} WHERE project_id = ${projectId} AND id = ${customerId}${capped}
        RETURNING alert_settings`);
      if (row) return { alert_settings: row.alert_settings ?? null };
      if (!merged) return false;
      const n = await pool.maybeOneFirst(sql.type(z.object({ n: z.number() }))`
        SELECT (SELECT count(*) FROM jsonb_object_keys(${merged}))::int8 AS n FROM customers WHERE project_id = ${projectId} AND id = ${customerId}`);
      return n === null ? false : { keyBudgetsOver: n };
    },
  };
}
