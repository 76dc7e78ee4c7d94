/**
 * What may be done to a project's webhook endpoints, whoever asks: the project key's
 * `/v1/webhooks...` (./routes.ts) and the management operations that the dashboard uses
 * (`/v1/admin/projects/{id}/webhooks...`, src/admin/operations/webhooks.ts). One set of
 * request schemas and one set of actions, each scoped to the project it is given, so both
 * doors check a URL, refuse an unknown endpoint and queue a test or a replay the same way.
 */
import type { Queue } from 'bullmq';
import type { DatabasePool } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { decodeCursor, encodeCursor } from '../events/cursor.js';
import { event_types } from '../events/store.js';
import { extended } from '../schema/zod.js';
import { findDeliveriesPage, findDelivery, type Delivery } from './deliveries.js';
import { sendTestEvent } from './dispatch.js';
import { endpointSchema, type Endpoint, type EndpointQueries } from './endpoints.js';
import { queueReplay, type WebhookJobData } from './queue.js';
import { webhookUrlRefusal } from './sender.js';

const url_chars_max = 2048;
const description_chars_max = 500;

/** http(s) with a host and no credentials or fragment. */
const urlSchema = z
  .string()
  .max(url_chars_max)
  .url()
  .refine((v) => {
    const u = URL.canParse(v) ? new URL(v) : null;
    return u !== null && (u.protocol === 'http:' || u.protocol === 'https:') && !u.username && !u.password && !u.hash;
  }, 'url must be an http(s) URL without credentials or fragment');
const eventsSchema = z
  .array(z.enum(event_types))
  .min(1)
  .transform((v) => [...new Set(v)])
  .openapi({ description: 'The event types to deliver; omitted or null: every type, those added later included.' });

export const endpointCreateBody = z
  .object({
    url: urlSchema,
    events: eventsSchema.nullable().optional(),
    description: z.string().max(description_chars_max).nullable().optional(),
  })
  .strict();
export const endpointPatchBody = z
  .object({
    url: urlSchema.optional(),
    events: eventsSchema.nullable().optional(),
    description: z.string().max(description_chars_max).nullable().optional(),
    enabled: z.boolean().optional().openapi({ description: 'true enables an endpoint again, clearing `disabled_reason`.' }),
  })
  .strict();

/** The answer of a creation: the endpoint and its signing secret, shown only there. */
export const createdEndpointSchema = extended(endpointSchema, {
  secret: z.string().openapi({ description: '`whsec_...`: verify signatures with it. Shown only in this answer.' }),
}).openapi('WebhookEndpointCreated');

export interface WebhookServiceDeps {
  db: DatabasePool;
  endpoints: EndpointQueries;
  queue: Queue<WebhookJobData>;
  /** UPSTREAM_ALLOW_PRIVATE: endpoints on private addresses are accepted. */
  allowPrivate: boolean;
}

export interface DeliveryPage {
  object: 'list';
  data: Delivery[];
  has_more: boolean;
  next_cursor: string | null;
}

const endpointNotFound = () => new ApiError('not_found', { message: 'webhook endpoint not found' });

export function webhookService(deps: WebhookServiceDeps) {
  const { db, endpoints, queue } = deps;

  async function checkUrl(url: string | undefined): Promise<void> {
    const refused = url === undefined ? null : await webhookUrlRefusal(url, deps.allowPrivate);
    if (refused !== null) throw new ApiError('invalid_request', { param: 'url', message: refused });
  }

  async function endpointOr404(projectId: string, id: string): Promise<Endpoint> {
    const e = await endpoints.find(projectId, id);
    if (e === null) throw endpointNotFound();
    return e;
  }

  return {
    endpointOr404,

    /** The new endpoint with its secret: the only answer that carries it. */
    async create(projectId: string, body: z.infer<typeof endpointCreateBody>): Promise<Endpoint & { secret: string }> {
      await checkUrl(body.url);
      return endpoints.create(projectId, { url: body.url, events: body.events ?? null, description: body.description ?? null });
    },

    list: (projectId: string) => endpoints.list(projectId),

    async update(projectId: string, id: string, body: z.infer<typeof endpointPatchBody>): Promise<Endpoint> {
      await endpointOr404(projectId, id);
      await checkUrl(body.url);
      const changed = await endpoints.update(projectId, id, body);
      if (changed === null) throw endpointNotFound();
      return changed;
    },

    /** The endpoint as it was, with its delivery log gone. */
    async remove(projectId: string, id: string): Promise<Endpoint & { deleted: true }> {
      const e = await endpointOr404(projectId, id);
      if (!(await endpoints.remove(projectId, e.id))) throw endpointNotFound();
      return { ...e, deleted: true };
    },

    /** A `webhook.test` event to this endpoint only: its delivery, queued. */
    async sendTest(projectId: string, id: string): Promise<Delivery> {
      const e = await endpointOr404(projectId, id);
      const deliveryId = await sendTestEvent(db, queue, projectId, e.id);
      const delivery = await findDelivery(db, e.id, deliveryId);
      // Made in the transaction above; only a delete of the endpoint meanwhile removes it.
      if (delivery === null) throw endpointNotFound();
      return delivery;
    },

    async deliveries(projectId: string, id: string, q: { cursor?: string; limit: number }): Promise<DeliveryPage> {
      const e = await endpointOr404(projectId, id);
      const rows = await findDeliveriesPage(db, e.id, { before: q.cursor === undefined ? undefined : decodeCursor(q.cursor), limit: q.limit + 1 });
      const page = rows.slice(0, q.limit);
      const last = page[page.length - 1];
      const hasMore = rows.length > q.limit;
      return { object: 'list', data: page, has_more: hasMore, next_cursor: hasMore ? encodeCursor(last.created_at, last.id) : null };
    },

    /** One attempt more of the delivery, queued: the delivery as it was before it. */
    async replay(projectId: string, id: string, deliveryId: string): Promise<Delivery> {
      const e = await endpointOr404(projectId, id);
      const delivery = await findDelivery(db, e.id, deliveryId);
      if (delivery === null) throw new ApiError('not_found', { message: 'delivery not found' });
      await queueReplay(queue, delivery.id, delivery.attempts.length);
      return delivery;
    },
  };
}
