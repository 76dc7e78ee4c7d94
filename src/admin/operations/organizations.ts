/**
 * The management operations on the caller's organization and its plan: read it, preview
 * a plan change, change the plan.
 */
import { z } from 'zod';
import { quoteEntry, quoteSchema } from '../../billing/proration.js';
import { onlyQuery, parseWith, strictBody } from '../../http/validate.js';
import { describeOperation } from '../../openapi/registry.js';
import { planIds } from '../../plans/catalogue.js';
import { organizationSchema } from '../../plans/service.js';
import { extended } from '../../schema/zod.js';
import { ok, operation, orgOf, type ManagementDeps, type Operation } from './shared.js';

const planSchema = z.object({ plan: z.enum(planIds) });
const planPreviewQuery = z.object({ plan: z.enum(planIds) });

describeOperation({ method: 'GET', path: '/organization', role: 'viewer', tag: 'Organization', summary: 'The organization and its plan', responses: ok('The organization', organizationSchema) });
describeOperation({
  method: 'GET',
  path: '/organization/plan/preview',
  role: 'viewer',
  tag: 'Organization',
  summary: 'What a plan change would do now',
  query: planPreviewQuery,
  responses: ok('The quote', quoteSchema),
});
describeOperation({
  method: 'PUT',
  path: '/organization/plan',
  role: 'owner',
  tag: 'Organization',
  summary: 'Change the plan',
  description: 'An upgrade applies at once (charged pro rata); a downgrade starts with the next period.',
  body: planSchema.strict(),
  responses: ok('The organization, with the change', extended(organizationSchema, { change: quoteSchema })),
});

export function organizationOperations(deps: Pick<ManagementDeps, 'plans'>): Operation[] {
  return [
    operation('GET', '/organization', 'viewer', async (req, res) => {
      onlyQuery(req);
      res.json(await deps.plans.organization(orgOf(res)));
    }),

    operation('GET', '/organization/plan/preview', 'viewer', async (req, res) => {
      onlyQuery(req, Object.keys(planPreviewQuery.shape));
      const { plan } = parseWith(planPreviewQuery, req.query);
      res.json(quoteEntry(await deps.plans.previewPlan(orgOf(res), plan)));
    }),

    operation('PUT', '/organization/plan', 'owner', async (req, res) => {
      const { plan } = strictBody(req, planSchema);
      const change = await deps.plans.setPlan(orgOf(res), plan);
      res.json({ ...(await deps.plans.organization(orgOf(res))), change: quoteEntry(change) });
    }),
  ];
}
