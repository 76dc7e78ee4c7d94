/**
 * The management operations on projects: create (within the plan's limit), list, read,
 * change, deactivate, and the reconcile of a project's customers as a background job.
 */
import { z } from 'zod';
import { ApiError } from '../../errors/catalogue.js';
import { onlyQuery, strictBody } from '../../http/validate.js';
import { describeOperation } from '../../openapi/registry.js';
import { readReconcileJob, reconcileJobSchema, reconcileJobStartedSchema, startedEntry, startReconcileJob } from '../../reconcile/jobs.js';
import { extended, listOf, timestamp } from '../../schema/zod.js';
import type { AdminQueries, ProjectRow } from '../queries.js';
import {
  created,
  listQuery,
  ok,
  operation,
  orgOf,
  pageRequest,
  projectParams,
  sendList,
  type ManagementDeps,
  type Operation,
  type ProjectChanged,
  type ProjectLookup,
} from './shared.js';

export const project_name_chars_max = 128;
export const rate_limit_per_minute_max = 1_000_000_000;

const rateLimitSchema = z.number().int().positive().max(rate_limit_per_minute_max).nullable();
const projectNameSchema = z.string().trim().min(1).max(project_name_chars_max);

const projectCreateSchema = z.object({
  name: projectNameSchema,
  contract: z.enum(['A', 'B']).default('B'),
  rate_limit_per_minute: rateLimitSchema.default(null),
});

const projectPatchSchema = z.object({
  name: projectNameSchema.optional(),
  contract: z.enum(['A', 'B']).optional(),
  rate_limit_per_minute: rateLimitSchema.optional(),
});

const reconcileSchema = z.object({ repair: z.boolean().default(false) });

const projectSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    contract: z.enum(['A', 'B']),
    rate_limit_per_minute: z.number().int().nullable(),
    active: z.boolean().openapi({ description: 'False once the project is deactivated (`DELETE`): its records stay readable, nothing can be added or changed.' }),
    deactivated_at: timestamp.nullable(),
    created_at: timestamp,
  })
  .strict()
  .openapi('Project');

describeOperation({
  method: 'POST',
  path: '/projects',
  role: 'admin',
  tag: 'Projects',
  summary: 'Create a project',
  body: projectCreateSchema.strict(),
  responses: created('The project', projectSchema),
  errors: ['plan_limit_reached'],
});
describeOperation({ method: 'GET', path: '/projects', role: 'viewer', tag: 'Projects', summary: 'The projects', query: listQuery, responses: ok('A page of projects', listOf(projectSchema)) });
describeOperation({ method: 'GET', path: '/projects/:project_id', role: 'viewer', tag: 'Projects', summary: 'A project', responses: ok('The project', projectSchema), errors: [projectParams] });
describeOperation({
  method: 'PATCH',
  path: '/projects/:project_id',
  role: 'admin',
  tag: 'Projects',
  summary: "Change a project's name, contract variant or rate limit",
  body: projectPatchSchema.strict(),
  responses: ok('The project', projectSchema),
  errors: [projectParams, 'project_deactivated'],
});
describeOperation({
  method: 'DELETE',
  path: '/projects/:project_id',
  role: 'admin',
  tag: 'Projects',
  summary: 'Deactivate a project',
  description:
    "Deactivation, not deletion: the project's customers, ledger, usage records and receipts stay readable here, and its keys are revoked in the same transaction, so nothing can spend or deposit any more (calls in flight finish). Later changes to the project answer 409 `project_deactivated`. Deactivating again answers the project as it is, with `keys_revoked: 0`.",
  responses: ok('The project, deactivated', extended(projectSchema, { keys_revoked: z.number().int().openapi({ description: 'The keys this call revoked.' }) })),
  errors: [projectParams],
});
describeOperation({
  method: 'POST',
  path: '/projects/:project_id/reconcile',
  role: 'admin',
  tag: 'Projects',
  summary: "Start a reconcile of the project's customers (Redis against PostgreSQL) in the background",
  description:
    'Queues a job that the workers run; with `repair`, it rewrites Redis from PostgreSQL. The body may be omitted. ' +
    'While a job of the same kind is queued or running for the project, that one is answered. Follow it at `Location`.',
  body: reconcileSchema.strict(),
  bodyOptional: true,
  responses: {
    202: {
      description: 'The job, queued',
      schema: reconcileJobStartedSchema,
      headers: { Location: { description: "The job's address (GET it for its status and report)", schema: z.string(), required: true } },
    },
  },
  errors: [projectParams],
});
describeOperation({
  method: 'GET',
  path: '/projects/:project_id/reconcile/:job_id',
  role: 'admin',
  tag: 'Projects',
  summary: 'A reconcile job: its status, progress and, once completed, its report',
  description: "Another project's job, or one finished more than 24 hours ago, is not found.",
  responses: ok('The job', reconcileJobSchema),
  errors: [projectParams],
});

function projectEntry(p: ProjectRow) {
  return {
    id: p.id,
    name: p.name,
    contract: p.contract,
    rate_limit_per_minute: p.rate_limit_per_minute,
    active: p.deactivated_at === null,
    deactivated_at: p.deactivated_at === null ? null : new Date(p.deactivated_at).toISOString(),
    created_at: new Date(p.created_at).toISOString(),
  };
}

interface ProjectDeps extends Pick<ManagementDeps, 'plans' | 'reconcileQueue'> {
  admin: AdminQueries;
  projects: ProjectLookup;
  projectChanged: ProjectChanged;
}

export function projectOperations(deps: ProjectDeps): Operation[] {
  const { admin, projectChanged } = deps;
  const { projectOr404, writableProject } = deps.projects;

  return [
    operation('POST', '/projects', 'admin', async (req, res) => {
      const input = strictBody(req, projectCreateSchema);
      const org = orgOf(res);
      const { projectsMax } = await deps.plans.limitsOf(org);
      const project = await admin.createProjectWithinLimit(org, input, projectsMax);
      if (!project) {
        throw new ApiError('plan_limit_reached', {
          message: `the plan allows ${projectsMax} project(s); upgrade the plan to create more`,
          extra: { limit: projectsMax },
        });
      }
      res.status(201).json(projectEntry(project));
    }),

    operation('GET', '/projects', 'viewer', async (req, res) => {
      sendList(res, await admin.listProjects(orgOf(res), pageRequest(req)), projectEntry);
    }),

    operation('GET', '/projects/:project_id', 'viewer', async (req, res) => {
      onlyQuery(req);
      res.json(projectEntry(await projectOr404(req, res)));
    }),

    operation('PATCH', '/projects/:project_id', 'admin', async (req, res) => {
      const patch = strictBody(req, projectPatchSchema);
      await writableProject(req, res);
      const project = await admin.updateProject(orgOf(res), String(req.params.project_id), patch);
      if (!project) throw new ApiError('not_found', { message: 'project not found' });
      // API processes cache key records with their project's contract and rate limit.
      await projectChanged(project.id);
      res.json(projectEntry(project));
    }),

    // Deactivation, not deletion: the project's customers, ledger, usage records and
    // receipts are money records, and stay readable here. Its keys are revoked in the same
    // transaction, so nothing can spend or deposit any more; what was in flight finishes.
    operation('DELETE', '/projects/:project_id', 'admin', async (req, res) => {
      onlyQuery(req);
      const done = await admin.deactivateProject(orgOf(res), String(req.params.project_id));
      if (!done) throw new ApiError('not_found', { message: 'project not found' });
      // Every API process drops the project's cached key records and models.
      await projectChanged(done.project.id);
      res.json({ ...projectEntry(done.project), keys_revoked: done.keysRevoked });
    }),

    // Reconcile runs as a background job (src/reconcile/jobs.ts): 202 and where to ask.
    operation('POST', '/projects/:project_id/reconcile', 'admin', async (req, res) => {
      const project = await projectOr404(req, res);
      const { repair } = strictBody(req, reconcileSchema, { optional: true });
      const job = await startReconcileJob(deps.reconcileQueue, project.id, repair);
      // Over HTTP, the status's address under the mount the call came through.
      const path = req.originalUrl?.split('?')[0];
      if (path) res.setHeader('Location', `${path}/${encodeURIComponent(job.id)}`);
      res.status(202).json(startedEntry(job));
    }),

    // An admin started it; its report names customers and their balances, as the customer reads do.
    operation('GET', '/projects/:project_id/reconcile/:job_id', 'admin', async (req, res) => {
      onlyQuery(req);
      const project = await projectOr404(req, res);
      const job = await readReconcileJob(deps.reconcileQueue, project.id, String(req.params.job_id));
      if (!job) throw new ApiError('not_found', { message: 'reconcile job not found' });
      res.json(job);
    }),
  ];
}
