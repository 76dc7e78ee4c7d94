/**
 * The management operations on the caller's organization and its plan: read it, preview
 * a plan change, change the plan. An owner may not move to Enterprise (403: the operator
 * sets it, `npm run plan`); under PLANS=off every one answers 404 (src/plans/policy.ts).
 */
import { z } from 'zod';
import { quoteEntry, quoteSchema } from '../../billing/proration.js';
import { onlyQuery, parseWith, strictBody } from '../../http/validate.js';
import { describeOperation } from '../../openapi/registry.js';
import { planIds } from '../../plans/catalogue.js';
import { plansOff } from '../../plans/policy.js';
import { organizationSchema } from '../../plans/organizations.js';
import { extended } from '../../schema/zod.js';
import { ok, operation, orgOf, type ManagementDeps, type Operation } from './shared.js';

const planSchema = z.object({ plan: z.enum(planIds) });
const planPreviewQuery = z.object({ plan: z.enum(planIds) });

const plansOffNote = 'Under PLANS=off (a single-tenant install) 404 `not_found`: it has no plans.';

describeOperation({
  method: 'GET',
  path: '/organization',
  role: 'viewer',
  tag: 'Organization',
  summary: 'The organization and its plan',
  description: plansOffNote,
  responses: ok('The organization', organizationSchema),
  errors: ['not_found'],
});
describeOperation({
  method: 'GET',
  path: '/organization/plan/preview',
  role: 'viewer',
  tag: 'Organization',
  summary: 'What a plan change would do now',
  description: `\`enterprise\` is 403 \`permission_denied\` unless it is the plan in force: the operator sets it. ${plansOffNote}`,
  query: planPreviewQuery,
  responses: ok('The quote', quoteSchema),
  errors: ['permission_denied', 'not_found'],
});
describeOperation({
  method: 'PUT',
  path: '/organization/plan',
  role: 'owner',
  tag: 'Organization',
  summary: 'Change the plan',
  description: `An upgrade applies at once (charged pro rata); a downgrade starts with the next period. \`enterprise\` is 403 \`permission_denied\` (nothing changes) unless it is the plan in force: the operator sets it (\`npm run plan\`). ${plansOffNote}`,
  body: planSchema.strict(),
  responses: ok('The organization, with the change', extended(organizationSchema, { change: quoteSchema })),
  errors: ['permission_denied', 'not_found'],
});

export function organizationOperations(deps: Pick<ManagementDeps, 'plans'>): Operation[] {
  const refuseWhenOff = () => {
    if (deps.plans.mode === 'off') throw plansOff();
  };
  return [
    operation('GET', '/organization', 'viewer', async (req, res) => {
      refuseWhenOff();
      onlyQuery(req);
      res.json(await deps.plans.organization(orgOf(res)));
    }),

    operation('GET', '/organization/plan/preview', 'viewer', async (req, res) => {
      refuseWhenOff();
      onlyQuery(req, Object.keys(planPreviewQuery.shape));
      const { plan } = parseWith(planPreviewQuery, req.query);
      res.json(quoteEntry(await deps.plans.previewPlan(orgOf(res), plan)));
    }),

    operation('PUT', '/organization/plan', 'owner', async (req, res) => {
      refuseWhenOff();
      const { plan } = strictBody(req, planSchema);
      const change = await deps.plans.setPlan(orgOf(res), plan);
      res.json({ ...(await deps.plans.organization(orgOf(res))), change: quoteEntry(change) });
    }),
  ];
}
