/**
 * Operator events: what happens to an organization that the operator who runs the hosted
 * service must hear of to collect (`plan.changed`, `invoice.created`), delivered to the
 * operator's one endpoint (config OPERATOR_WEBHOOK_URL and OPERATOR_WEBHOOK_SECRET), not
 * to a project's endpoints.
 *
 * - Written in the transaction that makes the change (PlanService.setPlan, the invoice's
 *   close in src/billing/invoices.ts), by an id derived from its cause: committed with the
 *   change or not at all, and never twice. Nothing is written while no endpoint is
 *   configured.
 * - Delivered as project webhooks are, on the `webhooks` queue: after the commit the writer
 *   queues an `operator-deliver` job (job id from the event id, so a second add adds
 *   nothing); one attempt signs the event with standardwebhooks (WebhookSender) and sends
 *   it; a failure is logged in the event's `attempts` and retried by the same job after
 *   WEBHOOK_RETRY_SCHEDULE_MS (RetryLater), and after the last one the event is `failed`.
 * - The dispatcher's poll queues again the pending events whose attempt is overdue by the
 *   stale grace (a writer killed between its commit and its queueing, a job lost).
 */
import type { Queue } from 'bullmq';
import type { Logger } from 'pino';
import { sql, type CommonQueryMethods, type DatabasePool } from 'slonik';
import { z } from 'zod';
import type { Config } from '../config/index.js';
import { recordAttempt } from './deliveries.js';
import { queueOperatorEvents, RetryLater, type OperatorDeliverJob, type WebhookJobData } from './queue.js';
import { nextScheduledAttempt, succeeded, type AttemptRecord, type WebhookSender } from './sender.js';

const operator_event_types = ['plan.changed', 'invoice.created'] as const;
type OperatorEventType = (typeof operator_event_types)[number];

/** The body of a delivery (docs/API.md, "Operator events"); `id` is also its `webhook-id`. */
interface OperatorEvent {
  /** `evt_<plan change id>` or `evt_<invoice id>`. */
  id: string;
  type: OperatorEventType;
  /** ISO 8601 in UTC with milliseconds. */
  created_at: string;
  organization_id: string;
  data: Record<string, unknown>;
}

/** The operator's endpoint. */
export interface OperatorTarget {
  url: string;
  /** `whsec_...`, as Standard Webhooks has it. */
  secret: string;
}

/** The endpoint the config names, or null when none; a URL without its secret is refused. */
export function operatorTargetOf(config: Pick<Config, 'OPERATOR_WEBHOOK_URL' | 'OPERATOR_WEBHOOK_SECRET'>): OperatorTarget | null {
  const url = config.OPERATOR_WEBHOOK_URL;
  if (url === undefined) return null;
  if (config.OPERATOR_WEBHOOK_SECRET === undefined) throw new Error('OPERATOR_WEBHOOK_URL needs OPERATOR_WEBHOOK_SECRET (whsec_...)');
  return { url, secret: config.OPERATOR_WEBHOOK_SECRET };
}

const eventRow = z.object({
  id: z.string(),
  type: z.enum(operator_event_types),
  created_at: z.number(),
  organization_id: z.string(),
  data: z.record(z.unknown()),
  status: z.enum(['pending', 'succeeded', 'failed']),
  attempts: z.array(z.custom<AttemptRecord>()),
});

/** Where plan changes and closes record their operator events (the runtime's, one per process). */
export class OperatorEvents {
  constructor(
    private readonly queue: Queue<WebhookJobData>,
    private readonly target: OperatorTarget | null,
    private readonly logger: Logger,
  ) {}

  /**
   * Writes the event in the caller's transaction `tx`, once by id; nothing without an
   * operator endpoint. Answers the id to queue after the commit, or null.
   */
  async record(tx: CommonQueryMethods, e: { id: string; type: OperatorEventType; organizationId: string; atMs: number; data: Record<string, unknown> }): Promise<string | null> {
    if (this.target === null) return null;
    await tx.query(sql.unsafe`
      INSERT INTO operator_events (id, organization_id, type, data, created_at)
      VALUES (${e.id}, ${e.organizationId}, ${e.type}, ${sql.jsonb(e.data as never)}, ${sql.timestamp(new Date(e.atMs))})
      ON CONFLICT (id) DO NOTHING`);
    return e.id;
  }

  /** Queues the first attempt of these committed events; never throws (the poll queues what this missed). */
  async committed(ids: readonly (string | null)[]): Promise<void> {
    const recorded = ids.filter((id): id is string => id !== null);
    if (recorded.length === 0) return;
    await queueOperatorEvents(this.queue, recorded).catch((err: unknown) => {
      this.logger.error({ err, events: recorded }, 'operator events not queued; the dispatcher queues them once overdue');
    });
  }
}

/** What delivers operator events in a worker: the endpoint and a sender of its own. */
export interface OperatorDelivery {
  target: OperatorTarget;
  /** The operator's own URL may be on a private network: its sender allows it. */
  sender: WebhookSender;
}

/** One scheduled attempt of an operator event (the `operator-deliver` job). */
export async function deliverOperatorEvent(
  db: DatabasePool,
  delivery: OperatorDelivery | null,
  retryScheduleMs: readonly number[],
  job: OperatorDeliverJob,
): Promise<'gone' | 'finished' | 'unconfigured' | 'succeeded' | 'failed'> {
  const id = job.eventId;
  const row = await db.maybeOne(sql.type(eventRow)`
    SELECT id, type, created_at, organization_id, data, status, attempts FROM operator_events WHERE id = ${id}`);
  if (row === null) return 'gone';
  if (row.status !== 'pending') return 'finished';
  // A worker without the endpoint leaves the event pending for one that has it.
  if (delivery === null) return 'unconfigured';
  const event: OperatorEvent = { id: row.id, type: row.type, created_at: new Date(row.created_at).toISOString(), organization_id: row.organization_id, data: row.data };
  const attempt = await delivery.sender.send({ id: 'operator', url: delivery.target.url, enabled: true, secret: delivery.target.secret }, event, false);
  if (succeeded(attempt)) {
    await recordAttempt(db, id, attempt, { status: 'succeeded', nextAttemptAt: null }, 'operator_events');
    return 'succeeded';
  }
  const next = nextScheduledAttempt(row.attempts, retryScheduleMs);
  if (next.delayMs === undefined) {
    await recordAttempt(db, id, attempt, { status: 'failed', nextAttemptAt: null }, 'operator_events');
    return 'failed';
  }
  await recordAttempt(db, id, attempt, { status: null, nextAttemptAt: new Date(Date.now() + next.delayMs) }, 'operator_events');
  throw new RetryLater(next.delayMs, `operator event attempt ${next.scheduled} failed (${attempt.error ?? `HTTP ${attempt.status_code}`}); retried in ${next.delayMs} ms`);
}

/** Queues again the pending operator events whose attempt is overdue by `staleGraceMs` (the poll's part). */
export async function requeueStaleOperatorEvents(db: CommonQueryMethods, queue: Queue<WebhookJobData>, staleGraceMs: number, batch: number): Promise<void> {
  const stale = await db.anyFirst(sql.type(z.object({ id: z.string() }))`
    SELECT id FROM operator_events
    WHERE status = 'pending' AND next_attempt_at < now() - ${sql.interval({ seconds: staleGraceMs / 1000 })}
    ORDER BY next_attempt_at LIMIT ${batch}`);
  await queueOperatorEvents(queue, stale);
}
