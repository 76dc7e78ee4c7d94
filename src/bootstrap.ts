/**
 * Creating an organization with its first admin key (`npm run bootstrap`), and the demo
 * that the first `npm start` on an empty database sets up.
 */
import { createAdminQueries } from './admin/queries.js';
import type { Runtime } from './runtime.js';

export async function bootstrapOrganization(rt: Runtime, name: string) {
  const admin = createAdminQueries(rt.db);
  const org = await admin.createOrganization(name);
  const { secret } = await rt.keyQueries.insertKey({ organizationId: org.id, projectId: null, type: 'admin', name: 'bootstrap' });
  return { organization_id: org.id, admin_key: secret };
}

export interface Demo {
  organization_id: string;
  admin_key: string;
  project_id: string;
  project_key: string;
  customer_key: string;
  customer_id: string;
}

export const demo_customer_id = 'demo-customer';
export const demo_deposit_credits = 10_000_000; // $10

export async function bootstrapDemo(rt: Runtime): Promise<Demo> {
  const { organization_id, admin_key } = await bootstrapOrganization(rt, 'Demo organization');
  const project = await createAdminQueries(rt.db).createProject(organization_id, 'Demo project', 'B');
  const projectKey = await rt.keyQueries.insertKey({ organizationId: organization_id, projectId: project.id, type: 'project', name: 'demo project key' });
  const customerKey = await rt.keyQueries.insertKey({
    organizationId: organization_id,
    projectId: project.id,
    type: 'customer',
    name: 'demo customer key',
    customerId: demo_customer_id,
  });
  await rt.ledger.deposit(
    { projectId: project.id, organizationId: organization_id },
    {
      customerId: demo_customer_id,
      amount: demo_deposit_credits,
      wallet: 'credits',
      label: 'welcome credit',
      startsAtMs: null,
      expiresAtMs: null,
      idempotencyKey: 'demo-welcome',
      name: 'Demo Customer',
      email: 'demo@example.com',
      description: 'demo funding',
    },
  );
  return {
    organization_id,
    admin_key,
    project_id: project.id,
    project_key: projectKey.secret,
    customer_key: customerKey.secret,
    customer_id: demo_customer_id,
  };
}
