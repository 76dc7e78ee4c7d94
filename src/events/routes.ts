/**
 * GET /v1/events (project key): the project's events, newest first, so that a tenant can
 * catch up without webhooks. Filters by type and customer; pages by cursor.
 */
import type { Router } from 'express';
import type { DatabasePool } from 'slonik';
import { z } from 'zod';
import { page_size_default, page_size_max } from '../customers/routes.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { exactRouter } from '../http/router.js';
import { onlyQuery, parseWith } from '../http/validate.js';
import { describeRoute } from '../openapi/registry.js';
import { listOf } from '../schema/zod.js';
import { event_types, eventSchema, eventsListPage } from './store.js';

const eventsQuery = z.object({
  type: z.enum(event_types).optional(),
  customer_id: z.string().min(1).max(256).optional(),
  cursor: z.string().max(300).optional(),
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
});

describeRoute({
  method: 'GET',
  path: '/v1/events',
  tag: 'Events',
  callers: ['project'],
  summary: "The project's events",
  description: 'Newest first. An event is listed once the workers have copied it to PostgreSQL; test sends (`webhook.test`) are not listed.',
  query: eventsQuery,
  responses: { 200: { description: 'A page of events', schema: listOf(eventSchema) } },
});

export function eventRoutes(db: DatabasePool): Router {
  return exactRouter([
    {
      method: 'GET',
      path: '/v1/events',
      handlers: [
        requireKeyType('project'),
        async (req, res) => {
          onlyQuery(req, Object.keys(eventsQuery.shape));
          const q = parseWith(eventsQuery, req.query);
          res.json(await eventsListPage(db, authOf(res).scope.projectId, q));
        },
      ],
    },
  ]);
}
