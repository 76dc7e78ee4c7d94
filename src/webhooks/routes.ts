/**
 * The webhook endpoints of a project (project key): create (the only answer with the
 * signing secret), list, change, delete, send a test event, read the delivery log and
 * replay a delivery. An endpoint URL passes the SSRF guard of the upstreams when it is
 * set; deliveries check it again (src/webhooks/sender.ts).
 */
import type { Request, Response, Router } from 'express';
import { z } from 'zod';
import { page_size_default, page_size_max } from '../customers/routes.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { exactRouter } from '../http/router.js';
import { onlyQuery, parseWith, strictBody } from '../http/validate.js';
import { describeRoute } from '../openapi/registry.js';
import { extended, listOf } from '../schema/zod.js';
import { deliverySchema } from './deliveries.js';
import { endpointSchema } from './endpoints.js';
import { createdEndpointSchema, endpointCreateBody, endpointPatchBody, webhookService, type WebhookServiceDeps } from './service.js';

const deliveriesQuery = z.object({
  cursor: z.string().max(300).optional(),
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
});

const owner = ['project'] as const;
describeRoute({
  method: 'POST',
  path: '/v1/webhooks',
  tag: 'Webhooks',
  callers: owner,
  summary: 'Create a webhook endpoint',
  description: 'The answer carries the signing secret, shown only here. A URL on a private address is refused (`UPSTREAM_ALLOW_PRIVATE=1` lets one in).',
  body: endpointCreateBody,
  responses: { 201: { description: 'The endpoint, with its secret', schema: createdEndpointSchema } },
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
  body: endpointPatchBody,
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

export function webhookRoutes(deps: WebhookServiceDeps): Router {
  const hooks = webhookService(deps);
  const projectOf = (res: Response) => authOf(res).scope.projectId;
  const id = (req: Request) => String(req.params.webhook_id);

  const project = requireKeyType('project');
  return exactRouter([
    {
      method: 'POST',
      path: '/v1/webhooks',
      handlers: [project, async (req, res) => void res.status(201).json(await hooks.create(projectOf(res), strictBody(req, endpointCreateBody)))],
    },
    {
      method: 'GET',
      path: '/v1/webhooks',
      handlers: [
        project,
        async (req, res) => {
          onlyQuery(req);
          res.json({ object: 'list', data: await hooks.list(projectOf(res)) });
        },
      ],
    },
    {
      method: 'PATCH',
      path: '/v1/webhooks/:webhook_id',
      handlers: [project, async (req, res) => void res.json(await hooks.update(projectOf(res), id(req), strictBody(req, endpointPatchBody)))],
    },
    {
      method: 'DELETE',
      path: '/v1/webhooks/:webhook_id',
      handlers: [
        project,
        async (req, res) => {
          onlyQuery(req);
          res.json(await hooks.remove(projectOf(res), id(req)));
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
          res.status(202).json(await hooks.sendTest(projectOf(res), id(req)));
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
          res.json(await hooks.deliveries(projectOf(res), id(req), parseWith(deliveriesQuery, req.query)));
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
          res.status(202).json(await hooks.replay(projectOf(res), id(req), String(req.params.delivery_id)));
        },
      ],
    },
  ]);
}
