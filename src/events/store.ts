/**
 * The event store in PostgreSQL: what an event is, its types, insertEvents (the one way
 * events are written: idempotent by id, inside the caller's transaction) and the page
 * reads of GET /v1/events. Events are made by the money scripts and copied here by the
 * persist worker; the webhook dispatcher (src/webhooks/dispatch.ts) fans them out.
 */
import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { timestamp } from '../schema/zod.js';
import { decodeCursor, encodeCursor } from './cursor.js';

/** The event types of CONTRACT.md section 9. */
export const event_types = [
  'deposit.created',
  'balance.low',
  'balance.depleted',
  'balance.top_up_requested',
  'budget.exceeded',
  'source.expired',
  'freeze.released',
  'freeze.consumed',
  'charge.uncovered',
] as const;

/** The type of the event a test send delivers (POST /v1/webhooks/{id}/test); not listed by GET /v1/events. */
export const test_event_type = 'webhook.test';

type EventType = (typeof event_types)[number] | typeof test_event_type;

export const eventSchema = z
  .object({
    id: z.string().openapi({ description: '`evt_...`; also the `webhook-id` of its deliveries.' }),
    type: z.enum([...event_types, test_event_type]),
    created_at: timestamp,
    project_id: z.string(),
    data: z.record(z.unknown()).openapi({ description: 'What happened; `customer_id` whenever a customer is concerned.' }),
  })
  .strict()
  .openapi('Event');

export interface StoredEvent {
  id: string;
  type: EventType;
  /** ISO 8601 in UTC with milliseconds. */
  created_at: string;
  project_id: string;
  data: Record<string, unknown>;
}

const eventRow = z.object({
  id: z.string(),
  type: z.string(),
  created_at: z.number(),
  project_id: z.string(),
  data: z.record(z.unknown()),
});

export function eventOfRow(r: z.infer<typeof eventRow>): StoredEvent {
  return { id: r.id, type: r.type as EventType, created_at: new Date(r.created_at).toISOString(), project_id: r.project_id, data: r.data };
}

const eventColumns = sql.fragment`id, type, created_at, project_id, data`;

/**
 * Writes events, each once: an id already stored is left as it is (ON CONFLICT DO
 * NOTHING), so the persist worker may copy the same outbox entries again after a crash.
 * `db` is the caller's transaction, so events land with the ledger entries that imply them.
 */
export async function insertEvents(db: CommonQueryMethods, events: readonly StoredEvent[]): Promise<void> {
  if (events.length === 0) return;
  const customerOf = (e: StoredEvent) => (typeof e.data.customer_id === 'string' ? e.data.customer_id : null);
  await db.query(sql.unsafe`
    INSERT INTO events (id, project_id, type, customer_id, data, created_at)
    SELECT * FROM ${sql.unnest(
      events.map((e) => [e.id, e.project_id, e.type, customerOf(e), JSON.stringify(e.data), e.created_at]),
      ['text', 'text', 'text', 'text', 'jsonb', 'timestamptz'],
    )}
    ON CONFLICT (id) DO NOTHING`);
}

interface EventFilter {
  type?: string;
  customerId?: string;
  /** Keyset position: events strictly older than (createdAtMs, id). */
  before?: { createdAtMs: number; id: string };
  limit: number;
}

/** A project's events, newest first; test sends are not listed. */
async function findEventsPage(db: CommonQueryMethods, projectId: string, f: EventFilter): Promise<StoredEvent[]> {
  const conds = [sql.fragment`project_id = ${projectId}`, sql.fragment`type <> ${test_event_type}`];
  if (f.type !== undefined) conds.push(sql.fragment`type = ${f.type}`);
  if (f.customerId !== undefined) conds.push(sql.fragment`customer_id = ${f.customerId}`);
  if (f.before) conds.push(sql.fragment`(created_at, id) < (${sql.timestamp(new Date(f.before.createdAtMs))}, ${f.before.id})`);
  const rows = await db.any(sql.type(eventRow)`
    SELECT ${eventColumns} FROM events WHERE ${sql.join(conds, sql.fragment` AND `)}
    ORDER BY created_at DESC, id DESC LIMIT ${f.limit}`);
  return rows.map(eventOfRow);
}

/** The query of an event listing (`GET /v1/events` and the management operation). */
export interface EventsQuery {
  type?: string;
  customer_id?: string;
  cursor?: string;
  limit: number;
}

/** One page of a project's events as the listings answer it: newest first, with the cursor of the next page. */
export async function eventsListPage(db: CommonQueryMethods, projectId: string, q: EventsQuery) {
  const rows = await findEventsPage(db, projectId, {
    type: q.type,
    customerId: q.customer_id,
    before: q.cursor === undefined ? undefined : decodeCursor(q.cursor),
    limit: q.limit + 1,
  });
  const page = rows.slice(0, q.limit);
  const last = page[page.length - 1];
  const hasMore = rows.length > q.limit;
  return { object: 'list' as const, data: page, has_more: hasMore, next_cursor: hasMore ? encodeCursor(last.created_at, last.id) : null };
}
