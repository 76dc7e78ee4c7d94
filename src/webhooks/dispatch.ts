/**
 * Fan-out: events are fanned out by the persist worker that has just committed them (the
 * push, fanOutEvents through src/webhooks/push.ts), and by the dispatcher's poll
 * (dispatchEvents) for those the push missed: a worker killed between its commit and its
 * push, a push that failed. The poll only takes events older than a grace
 * (WEBHOOK_DISPATCH_GRACE_MS), so that it leaves fresh events to the worker that wrote
 * them, and to that worker's queue and config (several deployments, or test services,
 * sharing one database).
 *
 * Fanning out events makes one delivery per endpoint of the project that wants the event
 * (enabled, the type among its `events`, created no later than the event), queues each
 * delivery's job, and only then marks the events fanned out. Every step may run again: the
 * delivery ids derive from the event and endpoint ids (a second insert makes nothing), a
 * job id is its delivery's id (a second add adds nothing) and a delivery already finished
 * is not queued. A crash between steps leaves the events unmarked, and the poll finishes
 * them.
 *
 * Each poll also queues again the pending deliveries whose attempt is overdue by the
 * stale grace (twice WEBHOOK_STALLED_MS): by then a job of a killed worker ran again or,
 * stalled twice, was dropped by BullMQ; or the job was lost with Redis. Queueing one whose
 * job still exists adds nothing. A Redis that came back empty does not wait for this: its
 * recovery queues every pending delivery at once (requeuePending).
 */
import type { Queue } from 'bullmq';
import { sql, type CommonQueryMethods, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { newId } from '../ids.js';
import { insertEvents, test_event_type } from '../events/store.js';
import { deliveryIdOf, insertDeliveries } from './deliveries.js';
import { queueDeliveries, queueDeliveriesAt, type WebhookJobData } from './queue.js';

/** Events one pass takes, oldest first. */
const dispatch_batch = 200;
/** Pending deliveries the recovery reads per page. */
const requeue_page_size = 500;

const matchRow = z.object({ event_id: z.string(), endpoint_id: z.string() });
const idRow = z.object({ id: z.string() });
const dueRow = z.object({ id: z.string(), delay_ms: z.number() });

/** Makes the deliveries of these events to every endpoint that wants them (the first step of a pass). */
export async function fanOut(db: CommonQueryMethods, eventIds: readonly string[]): Promise<void> {
  const pairs = await db.any(sql.type(matchRow)`
    SELECT e.id AS event_id, w.id AS endpoint_id
    FROM events e JOIN webhook_endpoints w ON w.project_id = e.project_id
    WHERE e.id = ANY(${sql.array([...eventIds], 'text')}) AND e.type <> ${test_event_type}
      AND w.enabled AND w.created_at <= e.created_at AND (w.events IS NULL OR e.type = ANY(w.events))`);
  await insertDeliveries(db, pairs.map((p) => ({ eventId: p.event_id, endpointId: p.endpoint_id })));
}

/**
 * Fans out these events: their deliveries, their jobs on `queue`, then the mark. The
 * persist worker's push, for the events it has just committed; the poll's pass too.
 */
export async function fanOutEvents(db: DatabasePool, queue: Queue<WebhookJobData>, eventIds: readonly string[]): Promise<void> {
  if (eventIds.length === 0) return;
  const ids = sql.array([...eventIds], 'text');
  await fanOut(db, eventIds);
  const pending = await db.any(sql.type(idRow)`SELECT id FROM webhook_deliveries WHERE event_id = ANY(${ids}) AND status = 'pending'`);
  await queueDeliveries(queue, pending.map((d) => d.id));
  await db.query(sql.unsafe`UPDATE events SET fanned_out_at = now() WHERE id = ANY(${ids}) AND fanned_out_at IS NULL`);
}

export interface DispatchTimes {
  /** How old an event not fanned out must be before the poll takes it (left to the push until then). */
  graceMs: number;
  /** How long past its due time a pending delivery waits before its job counts as lost. */
  staleGraceMs: number;
}

/** One pass of the dispatcher's poll, the push's safety net; answers how many events it fanned out. */
export async function dispatchEvents(db: DatabasePool, queue: Queue<WebhookJobData>, times: DispatchTimes): Promise<number> {
  const events = await db.any(sql.type(idRow)`
    SELECT id FROM events
    WHERE fanned_out_at IS NULL AND created_at < now() - ${sql.interval({ seconds: times.graceMs / 1000 })}
    ORDER BY created_at LIMIT ${dispatch_batch}`);
  const ids = events.map((e) => e.id);
  await fanOutEvents(db, queue, ids);
  const stale = await db.any(sql.type(idRow)`
    SELECT id FROM webhook_deliveries
    WHERE status = 'pending' AND next_attempt_at < now() - ${sql.interval({ seconds: times.staleGraceMs / 1000 })}
    ORDER BY next_attempt_at LIMIT ${dispatch_batch}`);
  await queueDeliveries(queue, stale.map((d) => d.id));
  return ids.length;
}

/**
 * Queues again every pending delivery of the projects this Redis prefix serves, each due
 * when its log says (a retry keeps its remaining wait): what the recovery of a Redis that
 * came back empty does, since every job went with it. A delivery whose job exists gets
 * no second one. Answers how many it queued.
 */
export async function requeuePending(db: DatabasePool, queue: Queue<WebhookJobData>, prefix: string): Promise<number> {
  let after = '';
  let queued = 0;
  for (;;) {
    const page = await db.any(sql.type(dueRow)`
      SELECT d.id, GREATEST(0, floor(extract(epoch FROM coalesce(d.next_attempt_at, now()) - now()) * 1000))::float8 AS delay_ms
      FROM webhook_deliveries d
      JOIN webhook_endpoints w ON w.id = d.endpoint_id
      JOIN redis_prefix_projects p ON p.project_id = w.project_id AND p.prefix = ${prefix}
      WHERE d.status = 'pending' AND d.id > ${after}
      ORDER BY d.id LIMIT ${requeue_page_size}`);
    await queueDeliveriesAt(queue, page.map((d) => ({ id: d.id, delayMs: d.delay_ms })));
    queued += page.length;
    if (page.length < requeue_page_size) return queued;
    after = page[page.length - 1].id;
  }
}

/**
 * A `webhook.test` event for one endpoint (POST /v1/webhooks/{id}/test): stored already
 * fanned out (the dispatcher gives it to no other endpoint), its delivery made and
 * queued. Answers the delivery id.
 */
export async function sendTestEvent(db: DatabasePool, queue: Queue<WebhookJobData>, projectId: string, endpointId: string): Promise<string> {
  const eventId = newId('evt');
  await db.transaction(async (tx) => {
    await insertEvents(tx, [{ id: eventId, type: test_event_type, created_at: new Date().toISOString(), project_id: projectId, data: { endpoint_id: endpointId } }]);
    await tx.query(sql.unsafe`UPDATE events SET fanned_out_at = now() WHERE id = ${eventId}`);
    await insertDeliveries(tx, [{ eventId, endpointId }]);
  });
  const deliveryId = deliveryIdOf(eventId, endpointId);
  await queueDeliveries(queue, [deliveryId]);
  return deliveryId;
}
