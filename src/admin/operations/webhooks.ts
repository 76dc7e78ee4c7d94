/**
 * The management operations on a project's webhook endpoints and events: what the project
 * key does at `/v1/webhooks...` and `GET /v1/events`, for a member (the dashboard) or an
 * admin key, on a project of the caller's organization. The actions are the project key's
 * own (src/webhooks/service.ts); reads need a viewer, changes, test sends and replays an
 * admin. A new endpoint needs an active project (409 `project_deactivated`).
 */
import type { Request } from 'express';
import { z } from 'zod';
import { event_types, eventSchema, eventsListPage } from '../../events/store.js';
import { onlyQuery, parseWith, strictBody } from '../../http/validate.js';
import { describeOperation } from '../../openapi/registry.js';
import { extended, listOf } from '../../schema/zod.js';
import { deliverySchema } from '../../webhooks/deliveries.js';
import { endpointSchema } from '../../webhooks/endpoints.js';
import { createdEndpointSchema, endpointCreateBody, endpointPatchBody, webhookService } from '../../webhooks/service.js';
import { created, listQuery, ok, operation, projectParams, type ManagementDeps, type Operation, type ProjectLookup } from './shared.js';

const eventsQuery = listQuery.extend({
  type: z.enum(event_types).optional(),
  customer_id: z.string().min(1).max(256).optional(),
});
const accepted = (description: string, schema: z.ZodTypeAny) => ({ 202: { description, schema } });
const noBody = { body: z.object({}).strict(), bodyOptional: true } as const;

const base = '/projects/:project_id/webhooks';
const one = `${base}/:webhook_id`;
const tag = 'Webhooks';

describeOperation({
  method: 'POST',
  path: base,
  role: 'admin',
  tag,
  summary: "Create a project's webhook endpoint",
  description: 'As `POST /v1/webhooks` for the project: the answer carries the signing secret, shown only here.',
  body: endpointCreateBody,
  responses: created('The endpoint, with its secret', createdEndpointSchema),
  errors: [projectParams, 'project_deactivated'],
});
describeOperation({
  method: 'GET',
  path: base,
  role: 'viewer',
  tag,
  summary: "A project's webhook endpoints",
  responses: ok('Every endpoint, newest first', z.object({ object: z.literal('list'), data: z.array(endpointSchema) }).strict()),
  errors: [projectParams],
});
describeOperation({ method: 'PATCH', path: one, role: 'admin', tag, summary: 'Change a webhook endpoint', body: endpointPatchBody, responses: ok('The endpoint', endpointSchema), errors: [projectParams] });
describeOperation({
  method: 'DELETE',
  path: one,
  role: 'admin',
  tag,
  summary: 'Delete a webhook endpoint',
  description: 'With its delivery log.',
  responses: ok('The endpoint as it was, with `deleted: true`', extended(endpointSchema, { deleted: z.literal(true) })),
  errors: [projectParams],
});
describeOperation({ method: 'POST', path: `${one}/test`, role: 'admin', tag, summary: 'Send a test event', ...noBody, responses: accepted('The delivery, queued', deliverySchema), errors: [projectParams] });
describeOperation({
  method: 'GET',
  path: `${one}/deliveries`,
  role: 'viewer',
  tag,
  summary: "An endpoint's delivery log",
  query: listQuery,
  responses: ok('A page of deliveries, newest first', listOf(deliverySchema)),
  errors: [projectParams],
});
describeOperation({
  method: 'POST',
  path: `${one}/deliveries/:delivery_id/replay`,
  role: 'admin',
  tag,
  summary: 'Replay a delivery',
  ...noBody,
  responses: accepted('The delivery; the attempt is queued', deliverySchema),
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/events',
  role: 'viewer',
  tag: 'Events',
  summary: "A project's events",
  description: 'As `GET /v1/events` for the project: newest first, test sends not listed.',
  query: eventsQuery,
  responses: ok('A page of events', listOf(eventSchema)),
  errors: [projectParams],
});

export function webhookOperations(deps: Pick<ManagementDeps, 'config' | 'db' | 'webhookEndpoints' | 'webhookQueue'> & { projects: ProjectLookup }): Operation[] {
  const hooks = webhookService({ db: deps.db, endpoints: deps.webhookEndpoints, queue: deps.webhookQueue, allowPrivate: deps.config.UPSTREAM_ALLOW_PRIVATE });
  const { projectOr404, writableProject } = deps.projects;
  const id = (req: Request) => String(req.params.webhook_id);

  return [
    operation('POST', base, 'admin', async (req, res) => {
      const body = strictBody(req, endpointCreateBody);
      const project = await writableProject(req, res);
      res.status(201).json(await hooks.create(project.id, body));
    }),

    operation('GET', base, 'viewer', async (req, res) => {
      onlyQuery(req);
      const project = await projectOr404(req, res);
      res.json({ object: 'list', data: await hooks.list(project.id) });
    }),

    operation('PATCH', one, 'admin', async (req, res) => {
      const body = strictBody(req, endpointPatchBody);
      const project = await projectOr404(req, res);
      res.json(await hooks.update(project.id, id(req), body));
    }),

    operation('DELETE', one, 'admin', async (req, res) => {
      onlyQuery(req);
      const project = await projectOr404(req, res);
      res.json(await hooks.remove(project.id, id(req)));
    }),

    operation('POST', `${one}/test`, 'admin', async (req, res) => {
      strictBody(req, z.object({}).strict(), { optional: true });
      const project = await projectOr404(req, res);
      res.status(202).json(await hooks.sendTest(project.id, id(req)));
    }),

    operation('GET', `${one}/deliveries`, 'viewer', async (req, res) => {
      onlyQuery(req, Object.keys(listQuery.shape));
      const q = parseWith(listQuery, req.query);
      const project = await projectOr404(req, res);
      res.json(await hooks.deliveries(project.id, id(req), q));
    }),

    operation('POST', `${one}/deliveries/:delivery_id/replay`, 'admin', async (req, res) => {
      strictBody(req, z.object({}).strict(), { optional: true });
      const project = await projectOr404(req, res);
      res.status(202).json(await hooks.replay(project.id, id(req), String(req.params.delivery_id)));
    }),

    operation('GET', '/projects/:project_id/events', 'viewer', async (req, res) => {
      onlyQuery(req, Object.keys(eventsQuery.shape));
      const q = parseWith(eventsQuery, req.query);
      const project = await projectOr404(req, res);
      res.json(await eventsListPage(deps.db, project.id, q));
    }),
  ];
}
