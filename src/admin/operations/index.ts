/**
 * The management operations (docs/API.md, "Management API"): one set of handlers, each
 * with the least role that may call it, mounted twice by src/admin/routes.ts: under
 * /v1/admin for an organization admin key, and under /dashboard/api for a member's
 * session. A handler reads the caller's organization from its Actor (src/admin/actor.ts),
 * never from a key, so both authentications reach exactly the same operations. Every
 * operation is scoped to that organization: another organization's project, key, model,
 * customer, member or invoice reads as 404 not_found, exactly like an unknown one.
 *
 * One module per resource; this one builds their collaborators and lists their operations
 * in route order. Each module describes its operations (src/openapi/) when it is loaded,
 * so the imports below are in that order too: it is the order of the OpenAPI document.
 * The customer and usage routes, whose reads the customer and usage operations answer
 * with, are loaded (and so described) first, as when the operations were one module.
 */
import '../../customers/routes.js';
import '../../usage/routes.js';
import { Invoicing } from '../../billing/invoices.js';
import { createMemberQueries } from '../../members/store.js';
import { KeyAdmin } from '../keys.js';
import { createListingQueries } from '../listings.js';
import { createAdminQueries } from '../queries.js';
import { organizationOperations } from './organizations.js';
import { projectOperations } from './projects.js';
import { keyOperations } from './keys.js';
import { modelOperations } from './models.js';
import { customerOperations } from './customers.js';
import { usageOperations } from './usage.js';
import { webhookOperations } from './webhooks.js';
import { memberOperations } from './members.js';
import { invoiceOperations } from './invoices.js';
import { systemOperations } from './system.js';
import { projectChangeNotice, projectLookup, type ManagementDeps, type Operation } from './shared.js';

export function managementOperations(deps: ManagementDeps): Operation[] {
  const admin = createAdminQueries(deps.db);
  const listings = createListingQueries(deps.db);
  const projects = projectLookup(admin);
  const projectChanged = projectChangeNotice(deps);
  const keys = new KeyAdmin(deps.db, deps.redis, deps.config.REDIS_PREFIX, deps.plans, deps.keyCache, deps.keyUsage);
  const members = createMemberQueries(deps.db);
  const invoices = new Invoicing(deps.db, deps.redis, deps.config.REDIS_PREFIX, deps.config.INVOICE_GRACE_SECONDS * 1000, deps.logger, null, deps.config.PLANS);

  return [
    ...organizationOperations(deps),
    ...projectOperations({ ...deps, admin, projects, projectChanged }),
    ...keyOperations({ keys, projects }),
    ...modelOperations({ ...deps, projects, projectChanged }),
    ...customerOperations({ ...deps, listings, projects }),
    ...usageOperations({ ...deps, listings, projects }),
    ...webhookOperations({ ...deps, projects }),
    ...memberOperations({ ...deps, members }),
    ...invoiceOperations({ invoices, nowMs: () => deps.plans.nowMs(), plans: deps.config.PLANS }),
    ...systemOperations(deps),
  ];
}
