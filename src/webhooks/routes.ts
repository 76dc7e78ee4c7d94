/**
 * The webhook endpoints of a project (project key): create (the only answer with the
 * signing secret), list, change, delete, send a test event, read the delivery log and
 * replay a delivery. An endpoint URL passes the SSRF guard of the upstreams when it is
 * set; deliveries check it again (src/webhooks/sender.ts).
 */
import type { Response, Router } from 'express';
import type { Queue } from 'bullmq';
import type { DatabasePool } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { decodeCursor, encodeCursor } from '../events/cursor.js';
import { event_types } from '../events/store.js';
import { page_size_default, page_size_max } from '../customers/routes.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { exactRouter } from '../http/router.js';
import { onlyQuery, parseWith, strictBody } from '../http/validate.js';
import { describeRoute } from '../openapi/registry.js';
import { extended, listOf } from '../schema/zod.js';
import { deliverySchema, findDeliveriesPage, findDelivery } from './deliveries.js';
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

const createBody = z
  .object({
    url: urlSchema,
    events: eventsSchema.nullable().optional(),
    description: z.string().max(description_chars_max).nullable().optional(),
  })
  .strict();
const patchBody = z
  .object({
    url: urlSchema.optional(),
    events: eventsSchema.nullable().optional(),
    description: z.string().max(description_chars_max).nullable().optional(),
    enabled: z.boolean().optional().openapi({ description: 'true enables an endpoint again, clearing `disabled_reason`.' }),
  })
  .strict();
const deliveriesQuery = z.object({
  cursor: z.string().max(300).optional(),
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
});

const createdSchema = extended(endpointSchema, {
  secret: z.string().openapi({ description: '`whsec_...`: verify signatures with it. Shown only in this answer.' }),
}).openapi('WebhookEndpointCreated');

const owner = ['project'] as const;
describeRoute({
  method: 'POST',
  path: '/v1/webhooks',
  tag: 'Webhooks',
  callers: owner,
  summary: 'Create a webhook endpoint',
  description: 'The answer carries the signing secret, shown only here. A URL on a private address is refused (`UPSTREAM_ALLOW_PRIVATE=1` lets one in).',
  body: createBody,
  responses: { 201: { description: 'The endpoint, with its secret', schema: createdSchema } },
});
describeRoute({
  method: 'GET',
  path: '/v1/webhooks',
  tag: 'Webhooks',
  callers: owner,
  summary: "The project's webhook endpoints",
  description: 'Newest first. An endpoint the service disabled has `enabled: false` and says why.',
  responses: { 200: { description: 'Every endpoint', schema: z.object({ object: z.literal('list'), data: z.array(endpointSchema) }).strict() } },
});
describeRoute({
  method: 'PATCH',
  path: '/v1/webhooks/:webhook_id',
  tag: 'Webhooks',
  callers: owner,
  summary: 'Change a webhook endpoint',
  body: patchBody,
  responses: { 200: { description: 'The endpoint', schema: endpointSchema } },
  errors: ['not_found'],
});
describeRoute({
  method: 'DELETE',
  path: '/v1/webhooks/:webhook_id',
  tag: 'Webhooks',
  callers: owner,
  summary: 'Delete a webhook endpoint',
  description: 'With its delivery log; attempts not yet made are not made.',
  responses: { 200: { description: 'The endpoint as it was, with `deleted: true`', schema: extended(endpointSchema, { deleted: z.literal(true) }) } },
  errors: ['not_found'],
});
describeRoute({
  method: 'POST',
  path: '/v1/webhooks/:webhook_id/test',
  tag: 'Webhooks',
  callers: owner,
  summary: 'Send a test event',
  description: 'Delivers a `webhook.test` event to this endpoint (even a disabled one), signed and retried as any other.',
  bodyOptional: true,
  responses: { 202: { description: 'The delivery, queued', schema: deliverySchema } },
  errors: ['not_found'],
});
describeRoute({
  method: 'GET',
  path: '/v1/webhooks/:webhook_id/deliveries',
  tag: 'Webhooks',
  callers: owner,
  summary: "An endpoint's delivery log",
  description: 'Newest first, each delivery with its attempts.',
  query: deliveriesQuery,
  responses: { 200: { description: 'A page of deliveries', schema: listOf(deliverySchema) } },
  errors: ['not_found'],
});
describeRoute({
  method: 'POST',
  path: '/v1/webhooks/:webhook_id/deliveries/:delivery_id/replay',
  tag: 'Webhooks',
  callers: owner,
  summary: 'Replay a delivery',
  description: 'One attempt more, now, of the same event (the same `webhook-id`), whatever the delivery\'s status; a success marks it succeeded.',
  bodyOptional: true,
  responses: { 202: { description: 'The delivery; the attempt is queued', schema: deliverySchema } },
  errors: ['not_found'],
});

export interface WebhookRouteDeps {
  db: DatabasePool;
  endpoints: EndpointQueries;
  queue: Queue<WebhookJobData>;
  /** UPSTREAM_ALLOW_PRIVATE: endpoints on private addresses are accepted. */
  allowPrivate: boolean;
}

export function webhookRoutes(deps: WebhookRouteDeps): Router {
  const { db, endpoints, queue } = deps;
  const projectOf = (res: Response) => authOf(res).scope.projectId;

  async function checkUrl(url: string | undefined): Promise<void> {
    const refused = url === undefined ? null : await webhookUrlRefusal(url, deps.allowPrivate);
    if (refused !== null) throw new ApiError('invalid_request', { param: 'url', message: refused });
  }

  async function endpointOr404(res: Response, id: string): Promise<Endpoint> {
    const e = await endpoints.find(projectOf(res), id);
    if (e === null) throw new ApiError('not_found', { message: 'webhook endpoint not found' });
    return e;
  }

  const project = requireKeyType('project');
  return exactRouter([
    {
      method: 'POST',
      path: '/v1/webhooks',
      handlers: [
        project,
        async (req, res) => {
          const body = strictBody(req, createBody);
          await checkUrl(body.url);
          const created = await endpoints.create(projectOf(res), { url: body.url, events: body.events ?? null, description: body.description ?? null });
          res.status(201).json(created);
        },
      ],
    },
    {
      method: 'GET',
      path: '/v1/webhooks',
      handlers: [
        project,
        async (req, res) => {
          onlyQuery(req);
          res.json({ object: 'list', data: await endpoints.list(projectOf(res)) });
        },
      ],
    },
    {
      method: 'PATCH',
      path: '/v1/webhooks/:webhook_id',
      handlers: [
        project,
        async (req, res) => {
          const body = strictBody(req, patchBody);
          await endpointOr404(res, String(req.params.webhook_id));
          await checkUrl(body.url);
          const changed = await endpoints.update(projectOf(res), String(req.params.webhook_id), body);
          if (changed === null) throw new ApiError('not_found', { message: 'webhook endpoint not found' });
          res.json(changed);
        },
      ],
    },
    {
      method: 'DELETE',
      path: '/v1/webhooks/:webhook_id',
      handlers: [
        project,
        async (req, res) => {
          onlyQuery(req);
          const e = await endpointOr404(res, String(req.params.webhook_id));
          if (!(await endpoints.remove(projectOf(res), e.id))) throw new ApiError('not_found', { message: 'webhook endpoint not found' });
          res.json({ ...e, deleted: true });
        },
      ],
    },
    {
      method: 'POST',
      path: '/v1/webhooks/:webhook_id/test',
      handlers: [
        project,
        async (req, res) => {
          strictBody(req, z.object({}).strict(), { optional: true });
          const e = await endpointOr404(res, String(req.params.webhook_id));
          const deliveryId = await sendTestEvent(db, queue, projectOf(res), e.id);
          res.status(202).json(await findDelivery(db, e.id, deliveryId));
        },
      ],
    },
    {
      method: 'GET',
      path: '/v1/webhooks/:webhook_id/deliveries',
      handlers: [
        project,
        async (req, res) => {
          onlyQuery(req, Object.keys(deliveriesQuery.shape));
          const q = parseWith(deliveriesQuery, req.query);
          const e = await endpointOr404(res, String(req.params.webhook_id));
          const rows = await findDeliveriesPage(db, e.id, { before: q.cursor === undefined ? undefined : decodeCursor(q.cursor), limit: q.limit + 1 });
          const page = rows.slice(0, q.limit);
          const last = page[page.length - 1];
          const hasMore = rows.length > q.limit;
          res.json({ object: 'list', data: page, has_more: hasMore, next_cursor: hasMore ? encodeCursor(last.created_at, last.id) : null });
        },
      ],
    },
    {
      method: 'POST',
      path: '/v1/webhooks/:webhook_id/deliveries/:delivery_id/replay',
      handlers: [
        project,
        async (req, res) => {
          strictBody(req, z.object({}).strict(), { optional: true });
          const e = await endpointOr404(res, String(req.params.webhook_id));
          const delivery = await findDelivery(db, e.id, String(req.params.delivery_id));
          if (delivery === null) throw new ApiError('not_found', { message: 'delivery not found' });
          await queueReplay(queue, delivery.id, delivery.attempts.length);
          res.status(202).json(delivery);
        },
      ],
    },
  ]);
}
