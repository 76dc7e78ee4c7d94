/**
 * What the management operations of src/admin/operations/ share: the Operation each is,
 * the services they are built from (ManagementDeps, which each resource module narrows to
 * what it uses), list paging, the caller's organization and the project a path names,
 * the notice that a project's keys or models changed, and the OpenAPI answer helpers.
 */
import type { Request, RequestHandler, Response } from 'express';
import { z } from 'zod';
import type { Queue } from 'bullmq';
import type { Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import { ApiError } from '../../errors/catalogue.js';
import type { Method } from '../../http/router.js';
import { onlyQuery, parseWith } from '../../http/validate.js';
import { publishProjectChange } from '../../keys/store.js';
import type { Role } from '../../members/store.js';
import type { Config } from '../../config/index.js';
import type { RedisClient } from '../../redis/client.js';
import type { KeyCache } from '../../keys/store.js';
import type { KeyUsage } from '../../keys/usage.js';
import type { LedgerService } from '../../ledger/service.js';
import type { LedgerQueries } from '../../ledger/queries.js';
import type { ModelCache } from '../../gateway/models.js';
import type { PlanService } from '../../plans/service.js';
import type { ReconcileJobData } from '../../reconcile/jobs.js';
import type { ReconcileReport } from '../../reconcile/report.js';
import type { UpstreamClient } from '../../gateway/upstream.js';
import type { UsageQueries } from '../../usage/queries.js';
import type { EndpointQueries } from '../../webhooks/endpoints.js';
import type { WebhookJobData } from '../../webhooks/queue.js';
import { actorOf } from '../actor.js';
import { projectDeactivated } from '../keys.js';
import type { ModelQueries } from '../models.js';
import { decodeCursor, encodeCursor, page_size_default, page_size_max, type AdminQueries, type Page, type PageRequest, type ProjectRow } from '../queries.js';

/**
 * One management operation: its method, its path below the mount (`/projects/:project_id`),
 * the least role that may call it (an admin key acts as an owner), and its handler.
 */
export interface Operation {
  method: Method;
  path: string;
  role: Role;
  handler: RequestHandler;
}

/** One operation, as the resource modules list them. */
export const operation = (method: Method, path: string, role: Role, handler: RequestHandler): Operation => ({ method, path, role, handler });

/** The services the management operations use. */
export interface ManagementDeps {
  config: Config;
  logger: Logger;
  db: DatabasePool;
  redis: RedisClient;
  keyCache: KeyCache;
  keyUsage: KeyUsage;
  ledger: LedgerService;
  ledgerQueries: LedgerQueries;
  modelQueries: ModelQueries;
  models: ModelCache;
  plans: PlanService;
  queues: readonly Queue[];
  reconcileQueue: Queue<ReconcileJobData, ReconcileReport>;
  upstream: UpstreamClient;
  usageQueries: UsageQueries;
  webhookEndpoints: EndpointQueries;
  webhookQueue: Queue<WebhookJobData>;
}

/** The query of a list: a page size and the cursor a previous page answered. */
export const listQuery = z.object({
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(512).optional(),
});

export function pageRequest(req: Request): PageRequest {
  onlyQuery(req, Object.keys(listQuery.shape));
  return pageOf(parseWith(listQuery, req.query));
}

export function pageOf(q: { limit: number; cursor?: string }): PageRequest {
  return { limit: q.limit, after: q.cursor === undefined ? null : decodeCursor(q.cursor) };
}

export function sendList<T>(res: Response, page: Page<T>, entry: (row: T) => unknown): void {
  res.json({ object: 'list', data: page.rows.map(entry), has_more: page.next !== null, next_cursor: page.next && encodeCursor(page.next) });
}

/** The caller's organization, from its Actor: never from a key or a path. */
export const orgOf = (res: Response) => actorOf(res).organizationId;

/** A project's scope for the ledger and usage reads. */
export const scopeOf = (project: ProjectRow) => ({ projectId: project.id, organizationId: project.organization_id });

/** The project a path names, in the caller's organization: another organization's reads as 404 not_found. */
export interface ProjectLookup {
  /** The project of `id`, by default the path's `:project_id`. */
  projectOr404(req: Request, res: Response, id?: string): Promise<ProjectRow>;
  /** A project that may be changed: 409 project_deactivated for a deactivated one. */
  writableProject(req: Request, res: Response): Promise<ProjectRow>;
}

export function projectLookup(admin: Pick<AdminQueries, 'findProject'>): ProjectLookup {
  async function projectOr404(req: Request, res: Response, id = String(req.params.project_id)): Promise<ProjectRow> {
    const project = await admin.findProject(orgOf(res), id);
    if (!project) throw new ApiError('not_found', { message: 'project not found' });
    return project;
  }

  async function writableProject(req: Request, res: Response): Promise<ProjectRow> {
    const project = await projectOr404(req, res);
    if (project.deactivated_at !== null) throw projectDeactivated(project.id);
    return project;
  }

  return { projectOr404, writableProject };
}

/** Tells the API processes that a project's keys or models changed, so that they drop what they cached of it. */
export type ProjectChanged = (projectId: string) => Promise<void>;

export function projectChangeNotice(deps: Pick<ManagementDeps, 'config' | 'keyCache' | 'models' | 'redis'>): ProjectChanged {
  // This process forgets at once; the others when the message reaches them.
  return async (projectId: string) => {
    deps.keyCache.forgetProject(projectId);
    deps.models.forgetProject(projectId);
    await publishProjectChange(deps.redis, deps.config.REDIS_PREFIX, projectId);
  };
}

export const ok = (description: string, schema: z.ZodTypeAny) => ({ 200: { description, schema } });
export const created = (description: string, schema: z.ZodTypeAny) => ({ 201: { description, schema } });
export const projectParams = 'not_found' as const;
