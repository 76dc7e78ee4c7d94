/**
 * Webhook deliveries in PostgreSQL: one row per event and endpoint, its id derived from
 * both (so making it again makes nothing new), its status (pending, succeeded, failed)
 * and its log of attempts. The dispatcher makes them, the delivery job records its
 * attempts, GET /v1/webhooks/{id}/deliveries reads them.
 */
import { createHash } from 'node:crypto';
import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { eventOfRow, type StoredEvent } from '../events/store.js';
import { timestamp } from '../schema/zod.js';
import type { AttemptRecord } from './sender.js';

const delivery_statuses = ['pending', 'succeeded', 'failed'] as const;
export type DeliveryStatus = (typeof delivery_statuses)[number];

const attemptSchema = z
  .object({
    at: timestamp,
    manual: z.boolean().openapi({ description: 'true for a replay asked for by the owner.' }),
    status_code: z.number().int().nullable().openapi({ description: "The endpoint's HTTP status; null when it gave none." }),
    latency_ms: z.number().int(),
    response_excerpt: z.string().nullable().openapi({ description: "The first 1 KiB of the endpoint's answer." }),
    error: z.string().nullable().openapi({ description: 'Why there was no answer (timeout, connection, refused address).' }),
  })
  .strict()
  .openapi('WebhookAttempt');

export const deliverySchema = z
  .object({
    id: z.string().openapi({ description: '`dlv_...`, the same for an event and an endpoint however often it is fanned out.' }),
    endpoint_id: z.string(),
    event_id: z.string().openapi({ description: 'The `webhook-id` header of every attempt.' }),
    event_type: z.string(),
    status: z.enum(delivery_statuses),
    attempts: z.array(attemptSchema).openapi({ description: 'Oldest first.' }),
    next_attempt_at: timestamp.nullable().openapi({ description: 'When the next scheduled attempt is due; null once the delivery succeeded or failed.' }),
    created_at: timestamp,
    finished_at: timestamp.nullable(),
  })
  .strict()
  .openapi('WebhookDelivery');

export type Delivery = z.infer<typeof deliverySchema>;

/** The delivery of an event to an endpoint: `dlv_` and 16 bytes of SHA-256 of both ids. */
export function deliveryIdOf(eventId: string, endpointId: string): string {
  return `dlv_${createHash('sha256').update(`${eventId}\n${endpointId}`).digest('base64url').slice(0, 22)}`;
}

const deliveryRow = z.object({
  id: z.string(),
  endpoint_id: z.string(),
  event_id: z.string(),
  event_type: z.string(),
  status: z.enum(delivery_statuses),
  attempts: z.array(z.custom<AttemptRecord>()),
  next_attempt_at: z.number().nullable(),
  created_at: z.number(),
  finished_at: z.number().nullable(),
});

const columns = sql.fragment`d.id, d.endpoint_id, d.event_id, e.type AS event_type, d.status, d.attempts, d.next_attempt_at, d.created_at, d.finished_at`;

function deliveryOf(r: z.infer<typeof deliveryRow>): Delivery {
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  // In the schema's field order: jsonb keeps an object's keys in an order of its own.
  const attempts = r.attempts.map((a) => ({
    at: a.at,
    manual: a.manual,
    status_code: a.status_code,
    latency_ms: a.latency_ms,
    response_excerpt: a.response_excerpt,
    error: a.error,
  }));
  return { ...r, attempts, next_attempt_at: iso(r.next_attempt_at), created_at: new Date(r.created_at).toISOString(), finished_at: iso(r.finished_at) };
}

/** Makes the deliveries of these pairs that do not exist yet; existing ones are left as they are. */
export async function insertDeliveries(db: CommonQueryMethods, pairs: readonly { eventId: string; endpointId: string }[]): Promise<void> {
  if (pairs.length === 0) return;
  await db.query(sql.unsafe`
    INSERT INTO webhook_deliveries (id, endpoint_id, event_id, next_attempt_at)
    SELECT id, endpoint_id, event_id, now() FROM ${sql.unnest(
      pairs.map((p) => [deliveryIdOf(p.eventId, p.endpointId), p.endpointId, p.eventId]),
      ['text', 'text', 'text'],
    )} AS t(id, endpoint_id, event_id)
    ON CONFLICT DO NOTHING`);
}

/** An endpoint's deliveries, newest first, strictly older than `before` when given. */
export async function findDeliveriesPage(
  db: CommonQueryMethods,
  endpointId: string,
  f: { before?: { createdAtMs: number; id: string }; limit: number },
): Promise<Delivery[]> {
  const conds = [sql.fragment`d.endpoint_id = ${endpointId}`];
  if (f.before) conds.push(sql.fragment`(d.created_at, d.id) < (${sql.timestamp(new Date(f.before.createdAtMs))}, ${f.before.id})`);
  const rows = await db.any(sql.type(deliveryRow)`
    SELECT ${columns} FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
    WHERE ${sql.join(conds, sql.fragment` AND `)}
    ORDER BY d.created_at DESC, d.id DESC LIMIT ${f.limit}`);
  return rows.map(deliveryOf);
}

export async function findDelivery(db: CommonQueryMethods, endpointId: string, id: string): Promise<Delivery | null> {
  const row = await db.maybeOne(sql.type(deliveryRow)`
    SELECT ${columns} FROM webhook_deliveries d JOIN events e ON e.id = d.event_id WHERE d.endpoint_id = ${endpointId} AND d.id = ${id}`);
  return row === null ? null : deliveryOf(row);
}

const jobRow = z.object({
  endpoint_id: z.string(),
  status: z.enum(delivery_statuses),
  attempts: z.array(z.custom<AttemptRecord>()),
  id: z.string(),
  type: z.string(),
  created_at: z.number(),
  project_id: z.string(),
  data: z.record(z.unknown()),
});

/** What a delivery job reads: the delivery's state and its event; null when the delivery is gone (its endpoint deleted). */
export async function findDeliveryWork(
  db: CommonQueryMethods,
  id: string,
): Promise<{ endpointId: string; status: DeliveryStatus; attempts: AttemptRecord[]; event: StoredEvent } | null> {
  const row = await db.maybeOne(sql.type(jobRow)`
    SELECT d.endpoint_id, d.status, d.attempts, e.id, e.type, e.created_at, e.project_id, e.data
    FROM webhook_deliveries d JOIN events e ON e.id = d.event_id WHERE d.id = ${id}`);
  if (row === null) return null;
  return { endpointId: row.endpoint_id, status: row.status, attempts: row.attempts, event: eventOfRow(row) };
}

/**
 * Appends an attempt to the log and sets what follows from it: `status` (null: unchanged),
 * and when the next scheduled attempt is due (null: none; omitted: unchanged). `table`:
 * where the delivery is, a project's webhook delivery or an operator event (which carries
 * its one delivery, src/webhooks/operator.ts).
 */
export async function recordAttempt(
  db: CommonQueryMethods,
  id: string,
  attempt: AttemptRecord,
  next: { status: DeliveryStatus | null; nextAttemptAt?: Date | null },
  table: 'webhook_deliveries' | 'operator_events' = 'webhook_deliveries',
): Promise<void> {
  const finished = next.status === 'succeeded' || next.status === 'failed';
  const nextAttemptAt =
    next.nextAttemptAt === undefined ? sql.fragment`next_attempt_at` : next.nextAttemptAt === null ? null : sql.timestamp(next.nextAttemptAt);
  await db.query(sql.unsafe`
    UPDATE ${sql.identifier([table])} SET
      attempts = attempts || ${sql.jsonb([attempt] as never)},
      status = COALESCE(${next.status}, status),
      next_attempt_at = ${nextAttemptAt},
      finished_at = ${finished ? sql.fragment`now()` : sql.fragment`finished_at`}
    WHERE id = ${id}`);
}

/** Marks a pending delivery failed without an attempt (its endpoint was disabled meanwhile). */
export async function failUnattempted(db: CommonQueryMethods, id: string): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, finished_at = now() WHERE id = ${id} AND status = 'pending'`);
}
