/**
 * The management operation on the service itself rather than one organization: the job
 * queues, counted by state (owners only; counts only, never a job's data).
 */
import { z } from 'zod';
import { onlyQuery } from '../../http/validate.js';
import { describeOperation } from '../../openapi/registry.js';
import { ok, operation, type ManagementDeps, type Operation } from './shared.js';

/** The job states GET /queues counts, in the order a job passes through them. */
export const job_states = ['waiting', 'prioritized', 'delayed', 'waiting-children', 'active', 'completed', 'failed', 'paused'] as const;

const queuesSchema = z
  .object({ data: z.array(z.object({ name: z.string(), counts: z.object(Object.fromEntries(job_states.map((s) => [s, z.number().int()]))).strict() }).strict()) })
  .strict();

describeOperation({
  method: 'GET',
  path: '/queues',
  role: 'owner',
  tag: 'Organization',
  summary: "The service's job queues, counted by state",
  description: "The service's own BullMQ queues, shared by every organization: counts only.",
  responses: ok('The queues', queuesSchema),
});

export function systemOperations(deps: Pick<ManagementDeps, 'queues'>): Operation[] {
  return [
    // Queues: the service's own BullMQ queues, shared by every organization, so counts only
    // (never a job's data, which names other organizations' customers) and owners only.
    operation('GET', '/queues', 'owner', async (req, res) => {
      onlyQuery(req);
      const data = await Promise.all(deps.queues.map(async (q) => ({ name: q.name, counts: await q.getJobCounts(...job_states) })));
      res.json({ data });
    }),
  ];
}
