/**
 * Closing billing periods into invoices. A repeatable worker job (workers/index.ts) asks
 * for the organizations whose next period end, plus a grace, has passed; each due period
 * is closed in order into one invoice: the price of the plan the period started on, one
 * line per pro-rated upgrade made in it, and the operations used against the allowance of
 * the plan it ended on, with the overage at that tier's rate per 10k operations.
 *
 * Idempotent: an invoice is unique per organization and period start, written with ON
 * CONFLICT DO NOTHING, in the same transaction that moves the organization's
 * next_invoice_at on, under the organization's row lock. Two runs, or two workers, of the
 * same period write one invoice.
 *
 * Operations are counted from PostgreSQL's ledger, the record. A period is closed only
 * once the ledger has all of it: after the grace, and when no outbox the dirty marks
 * point at holds an entry of the organization's projects from before the period's end.
 *
 * The closing transaction also records the `invoice.created` operator event
 * (src/webhooks/operator.ts), so that the operator's payment system hears of each invoice
 * exactly once. The upcoming invoice (`upcoming`) is the open period composed the same
 * way, as it stands: nothing is written.
 * Under PLANS=off (a single-tenant install) nothing is closed: there are no invoices.
 */
import type { Logger } from 'pino';
import { sql, type CommonQueryMethods, type DatabasePool, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { extended, timestamp } from '../schema/zod.js';
import { keysetOrder, toPage, type Page, type PageRequest } from '../admin/queries.js';
import { newId } from '../ids.js';
import { parseOutboxEntry } from '../redis/codec.js';
import type { RedisClient } from '../redis/client.js';
import { customerKeysFromBase, dirty_shards, dirtyKey, parseCustomerBase } from '../redis/keys.js';
import { countBillableEntries } from '../plans/billable.js';
import { periodAt, planIds, plans, type PlanId } from '../plans/catalogue.js';
import { effectivePlan } from '../plans/organizations.js';
import type { OperatorEvents } from '../webhooks/operator.js';
import { centsToUsd, overageCents, overageOps, overageRateCentsPer10k, priceCents } from './proration.js';

const planId = z.enum(planIds);

const orgRow = z.object({
  id: z.string(),
  plan: planId,
  pending_plan: planId.nullable(),
  pending_from: z.number().nullable(),
  created_at: z.number(),
  next_invoice_at: z.number().nullable(),
});
type OrgRow = z.infer<typeof orgRow>;

const changeRow = z.object({
  kind: z.enum(['upgrade', 'downgrade']),
  from_plan: planId,
  to_plan: planId,
  effective_at: z.number(),
  remaining_ms: z.number(),
  charge_cents: z.number(),
});
type ChangeRow = z.infer<typeof changeRow>;

const invoiceLine = z.object({ type: z.enum(['plan', 'upgrade', 'overage']), description: z.string(), amount_cents: z.number() }).passthrough();
type InvoiceLine = z.infer<typeof invoiceLine>;

const invoiceRow = z.object({
  id: z.string(),
  organization_id: z.string(),
  period_start: z.number(),
  period_end: z.number(),
  plan: planId,
  included_ops: z.number().nullable(),
  operations_used: z.number(),
  overage_ops: z.number(),
  overage_rate_cents_per_10k: z.number(),
  lines: z.array(invoiceLine),
  total_cents: z.number(),
  created_at: z.number(),
});
export type InvoiceRow = z.infer<typeof invoiceRow>;

const invoiceColumns = sql.fragment`id, organization_id, period_start, period_end, plan, included_ops, operations_used, overage_ops,
  overage_rate_cents_per_10k, lines, total_cents, created_at`;

const iso = (ms: number) => new Date(ms).toISOString();

/** An invoice not closed yet (the upcoming one): no id; `created_at` the time it was composed. */
type UpcomingInvoiceRow = Omit<InvoiceRow, 'id'> & { id: null };

export function invoiceEntry(r: InvoiceRow | UpcomingInvoiceRow) {
  return {
    id: r.id,
    organization_id: r.organization_id,
    period_start: iso(r.period_start),
    period_end: iso(r.period_end),
    plan: r.plan,
    included_ops: r.included_ops,
    operations_used: r.operations_used,
    overage_ops: r.overage_ops,
    overage_rate_cents_per_10k: r.overage_rate_cents_per_10k,
    lines: r.lines.map((l) => ({ ...l, amount_usd: centsToUsd(l.amount_cents) })),
    total_cents: r.total_cents,
    total_usd: centsToUsd(r.total_cents),
    created_at: iso(r.created_at),
  };
}

/**
 * The plan in force at `atMs`: the last change in effect by then, else the plan before
 * the first change, else (no change recorded) what the organization row says.
 */
function planAt(changes: readonly ChangeRow[], org: OrgRow, atMs: number): PlanId {
  let plan: PlanId | null = null;
  for (const c of changes) {
    if (c.effective_at > atMs) return plan ?? c.from_plan;
    plan = c.to_plan;
  }
  return plan ?? effectivePlan(org, atMs);
}

/** The lines and totals of an organization's period. */
export function composeInvoice(org: OrgRow, changes: readonly ChangeRow[], period: { startMs: number; endMs: number }, operations: number) {
  const startPlan = planAt(changes, org, period.startMs);
  const endPlan = planAt(changes, org, period.endMs - 1);
  const startPrice = priceCents(startPlan);
  const lines: InvoiceLine[] = [
    {
      type: 'plan',
      description: startPrice === null ? `${startPlan} plan (custom contract, billed separately)` : `${startPlan} plan`,
      plan: startPlan,
      amount_cents: startPrice ?? 0,
    },
  ];
  for (const c of changes) {
    if (c.kind !== 'upgrade' || c.effective_at < period.startMs || c.effective_at >= period.endMs) continue;
    lines.push({
      type: 'upgrade',
      description: `upgrade ${c.from_plan} -> ${c.to_plan}, pro rata for ${c.remaining_ms} of ${period.endMs - period.startMs} ms`,
      from_plan: c.from_plan,
      to_plan: c.to_plan,
      effective_at: iso(c.effective_at),
      remaining_ms: c.remaining_ms,
      period_ms: period.endMs - period.startMs,
      amount_cents: c.charge_cents,
    });
  }
  const overage = overageOps(endPlan, operations);
  const rate = overageRateCentsPer10k(endPlan);
  lines.push({
    type: 'overage',
    description: `${overage} operations over the ${endPlan} allowance at ${centsToUsd(rate)} USD per 10k`,
    plan: endPlan,
    included_ops: plans[endPlan].includedOps,
    operations_used: operations,
    overage_ops: overage,
    rate_cents_per_10k: rate,
    amount_cents: overageCents(endPlan, overage),
  });
  return {
    plan: endPlan,
    includedOps: plans[endPlan].includedOps,
    overage,
    rate,
    lines,
    totalCents: lines.reduce((sum, l) => sum + l.amount_cents, 0),
  };
}

/** Organizations the job closes per query; it asks again until none is due. */
const close_batch_size = 100;

export interface CloseResult {
  closed: number;
  /** Periods due whose entries are not all in PostgreSQL yet: the next run closes them. */
  postponed: number;
}

export class Invoicing {
  /**
   * `events`: where the close records `invoice.created` (the workers' runtime passes its
   * own); none: no event is recorded (a reader of invoices that closes nothing).
   */
  constructor(
    private readonly db: DatabasePool,
    private readonly redis: RedisClient,
    private readonly prefix: string,
    private readonly graceMs: number,
    private readonly logger: Logger,
    private readonly events: OperatorEvents | null = null,
    /** PLANS: `off` closes nothing. */
    private readonly plans: 'on' | 'off' = 'on',
  ) {}

  /** Closes every due period of every organization (the worker job). */
  async closeDue(nowMs: number): Promise<CloseResult> {
    const result: CloseResult = { closed: 0, postponed: 0 };
    if (this.plans === 'off') return result;
    const seen = new Set<string>();
    // Read once per run: an entry written after the run started is later than any end
    // due now, so it cannot hold a due period back.
    const pending = await this.unpersisted();
    for (;;) {
      const due = await this.db.anyFirst(sql.type(z.object({ id: z.string() }))`
        SELECT id FROM organizations
        WHERE (next_invoice_at IS NULL OR next_invoice_at <= ${sql.timestamp(new Date(nowMs - this.graceMs))})
          AND NOT (id = ANY (${sql.array([...seen], 'text')}))
        ORDER BY next_invoice_at NULLS FIRST, id LIMIT ${close_batch_size}`);
      if (due.length === 0) return result;
      for (const id of due) {
        seen.add(id);
        const r = await this.closeOrganization(id, nowMs, pending);
        result.closed += r.closed;
        result.postponed += r.postponed;
      }
    }
  }

  /**
   * Closes the organization's due periods, oldest first. `pending`: the oldest entry time
   * still in Redis per project (read now when not given).
   */
  async closeOrganization(organizationId: string, nowMs: number, pending?: Map<string, number>): Promise<CloseResult> {
    const result: CloseResult = { closed: 0, postponed: 0 };
    if (this.plans === 'off') return result;
    for (;;) {
      const org = await this.db.one(sql.type(orgRow)`
        SELECT id, plan, pending_plan, pending_from, created_at, next_invoice_at FROM organizations WHERE id = ${organizationId}`);
      const endMs = org.next_invoice_at ?? periodAt(org.created_at, org.created_at).endMs;
      if (endMs + this.graceMs > nowMs) {
        if (org.next_invoice_at === null) {
          await this.db.query(sql.unsafe`
            UPDATE organizations SET next_invoice_at = ${sql.timestamp(new Date(endMs))} WHERE id = ${organizationId} AND next_invoice_at IS NULL`);
        }
        return result;
      }
      pending ??= await this.unpersisted();
      if (await this.heldBack(organizationId, endMs, pending)) {
        this.logger.info({ organizationId, periodEnd: iso(endMs) }, 'period not closed yet: some of its ledger entries are still in Redis');
        result.postponed++;
        return result;
      }
      const period = { startMs: periodAt(org.created_at, endMs - 1).startMs, endMs };
      const closed = await this.db.transaction((tx) => this.close(tx, organizationId, period));
      if (!closed.written) continue;
      result.closed++;
      await this.events?.committed([closed.eventId]);
    }
  }

  /**
   * Writes the period's invoice and its `invoice.created` event and moves next_invoice_at
   * past it, unless another run did so first (then nothing is written). `written`: this
   * run wrote the invoice; `eventId`: the event to queue once committed (null: none).
   */
  private async close(
    tx: DatabaseTransactionConnection,
    organizationId: string,
    period: { startMs: number; endMs: number },
  ): Promise<{ written: boolean; eventId: string | null }> {
    const org = await tx.one(sql.type(orgRow)`
      SELECT id, plan, pending_plan, pending_from, created_at, next_invoice_at FROM organizations WHERE id = ${organizationId} FOR UPDATE`);
    if (org.next_invoice_at !== null && org.next_invoice_at !== period.endMs) return { written: false, eventId: null };
    const { inv, operations } = await this.compose(tx, org, period);
    const written = await tx.maybeOne(sql.type(invoiceRow)`
      INSERT INTO invoices (id, organization_id, period_start, period_end, plan, included_ops, operations_used, overage_ops,
                            overage_rate_cents_per_10k, lines, total_cents)
      VALUES (${newId('inv')}, ${organizationId}, ${sql.timestamp(new Date(period.startMs))}, ${sql.timestamp(new Date(period.endMs))},
              ${inv.plan}, ${inv.includedOps}, ${operations}, ${inv.overage}, ${inv.rate}, ${sql.jsonb(inv.lines as never)}, ${inv.totalCents})
      ON CONFLICT (organization_id, period_start) DO NOTHING
      RETURNING ${invoiceColumns}`);
    await tx.query(sql.unsafe`
      UPDATE organizations SET next_invoice_at = ${sql.timestamp(new Date(periodAt(org.created_at, period.endMs).endMs))}
      WHERE id = ${organizationId}`);
    // Only the run that wrote the invoice records its event: a second close writes neither.
    if (written === null) return { written: false, eventId: null };
    const event = { id: `evt_${written.id}`, type: 'invoice.created' as const, organizationId, atMs: written.created_at, data: invoiceEntry(written) };
    return { written: true, eventId: (await this.events?.record(tx, event)) ?? null };
  }

  /** The period's invoice, composed from its plan changes and its billable operations in the ledger. */
  private async compose(db: CommonQueryMethods, org: OrgRow, period: { startMs: number; endMs: number }) {
    const changes = await db.any(sql.type(changeRow)`
      SELECT kind, from_plan, to_plan, effective_at, remaining_ms, charge_cents FROM plan_changes
      WHERE organization_id = ${org.id} AND cancelled_at IS NULL ORDER BY effective_at, requested_at`);
    const operations = await countBillableEntries(db, org.id, period);
    return { inv: composeInvoice(org, changes, period, operations), operations };
  }

  /**
   * The invoice of the period open at `nowMs`, as it stands (GET /v1/admin/invoices/upcoming):
   * the lines its close would write now (the plan, this period's pro-rated upgrades, the
   * overage of the operations the ledger holds so far), without an id. Nothing is written.
   */
  async upcoming(organizationId: string, nowMs: number): Promise<UpcomingInvoiceRow> {
    const org = await this.db.one(sql.type(orgRow)`
      SELECT id, plan, pending_plan, pending_from, created_at, next_invoice_at FROM organizations WHERE id = ${organizationId}`);
    const period = periodAt(org.created_at, nowMs);
    const { inv, operations } = await this.compose(this.db, org, period);
    return {
      id: null,
      organization_id: organizationId,
      period_start: period.startMs,
      period_end: period.endMs,
      plan: inv.plan,
      included_ops: inv.includedOps,
      operations_used: operations,
      overage_ops: inv.overage,
      overage_rate_cents_per_10k: inv.rate,
      lines: inv.lines,
      total_cents: inv.totalCents,
      created_at: nowMs,
    };
  }

  /**
   * The oldest entry time of each project's outboxes that still hold entries, among the
   * outboxes the dirty marks point at (every outbox with entries has one, or gets one
   * from the sweeper). The persist loop keeps the marks few: it drains them within
   * milliseconds.
   */
  private async unpersisted(): Promise<Map<string, number>> {
    const oldest = new Map<string, number>();
    for (let shard = 0; shard < dirty_shards; shard++) {
      for (const base of await this.redis.smembers(dirtyKey(this.prefix, shard))) {
        const ids = parseCustomerBase(this.prefix, base);
        if (ids === null) continue;
        const first = await this.redis.xrange(customerKeysFromBase(base).outbox, '-', '+', 'COUNT', 1);
        if (first.length === 0) continue;
        const at = Number(parseOutboxEntry(first[0][1]).at);
        oldest.set(ids.projectId, Math.min(at, oldest.get(ids.projectId) ?? at));
      }
    }
    return oldest;
  }

  /** Whether a project of the organization has an entry from before `endMs` still in Redis. */
  private async heldBack(organizationId: string, endMs: number, pending: Map<string, number>): Promise<boolean> {
    if (pending.size === 0) return false;
    const projects = await this.db.anyFirst(sql.type(z.object({ id: z.string() }))`SELECT id FROM projects WHERE organization_id = ${organizationId}`);
    return projects.some((id) => (pending.get(id) ?? Infinity) < endMs);
  }

  async list(organizationId: string, page: PageRequest): Promise<Page<InvoiceRow>> {
    const k = keysetOrder(page, 'period_start');
    const rows = await this.db.any(sql.type(invoiceRow)`
      SELECT ${invoiceColumns} FROM invoices WHERE organization_id = ${organizationId} AND ${k.where} ${k.orderLimit}`);
    return toPage(rows, page.limit, (r) => r.period_start);
  }

  find(organizationId: string, invoiceId: string): Promise<InvoiceRow | null> {
    return this.db.maybeOne(sql.type(invoiceRow)`
      SELECT ${invoiceColumns} FROM invoices WHERE id = ${invoiceId} AND organization_id = ${organizationId}`);
  }
}

// The documented answer of invoiceEntry (src/openapi/).
const lineCommon = { description: z.string(), amount_cents: z.number().int(), amount_usd: z.string() };
export const invoiceSchema = z
  .object({
    id: z.string(),
    organization_id: z.string(),
    period_start: timestamp,
    period_end: timestamp,
    plan: z.enum(planIds),
    included_ops: z.number().int().nullable(),
    operations_used: z.number().int(),
    overage_ops: z.number().int(),
    overage_rate_cents_per_10k: z.number().int(),
    lines: z.array(
      z.discriminatedUnion('type', [
        z.object({ type: z.literal('plan'), plan: z.enum(planIds), ...lineCommon }).strict(),
        z
          .object({
            type: z.literal('upgrade'),
            from_plan: z.enum(planIds),
            to_plan: z.enum(planIds),
            effective_at: timestamp,
            remaining_ms: z.number().int(),
            period_ms: z.number().int(),
            ...lineCommon,
          })
          .strict(),
        z
          .object({
            type: z.literal('overage'),
            plan: z.enum(planIds),
            included_ops: z.number().int().nullable(),
            operations_used: z.number().int(),
            overage_ops: z.number().int(),
            rate_cents_per_10k: z.number().int(),
            ...lineCommon,
          })
          .strict(),
      ]),
    ),
    total_cents: z.number().int(),
    total_usd: z.string(),
    created_at: timestamp,
  })
  .strict()
  .openapi('Invoice');

// The documented answer of GET /invoices/upcoming: an invoice not closed yet.
export const upcomingInvoiceSchema = extended(invoiceSchema, {
  id: z.null().openapi({ description: 'null: the period is still open; its invoice gets an id when it closes.' }),
  created_at: timestamp.openapi({ description: 'When this answer was composed.' }),
}).openapi('UpcomingInvoice');
