/**
 * PLANS=off, a single-tenant install: an organization goes past every Free limit (the
 * 50,000 operations, a second project, a third key, a second member), the plan and
 * invoice endpoints answer 404 saying plans are off, and the invoicing job closes nothing.
 */
import { Job } from 'bullmq';
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { close_periods_job } from '../../workers/index.js';
import { addMember } from '../admin/dashboard-support.js';
import { waitFor } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { setPlanCount } from '../support/plans.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ workers: true, variants: [], config: { PLANS: 'off' } });

const plans_off = /^plans are off on this install \(PLANS=off\)/;

describe('PLANS=off', () => {
  it('limits nothing: past 50,000 operations, a second project, a third key, a second member', async () => {
    const p = await svc.project();
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'c1', amount: 1_000 } })).status).toBe(200);
    await setPlanCount(svc, p.organizationId, 50_000);
    const deduct = await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'c1', transaction_id: 'past-free', amount: 1 } });
    expect(deduct.status, JSON.stringify(deduct.body)).toBe(200);
    // Still counted: the count is there if the plans are turned on.
    expect((await svc.rt.plans.organization(p.organizationId)).billable_ops).toBe(50_001);

    const project = await svc.call('POST', '/v1/admin/projects', { key: p.adminKey, body: { name: 'second' } });
    expect(project.status, JSON.stringify(project.body)).toBe(201);
    // The project has the fixture's project key; the admin key is the organization's.
    for (let i = 0; i < 2; i++) {
      const key = await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey, body: { type: 'project' } });
      expect(key.status, JSON.stringify(key.body)).toBe(201);
    }
    await addMember(svc, p, 'owner');
    await addMember(svc, p, 'viewer');
    expect(await svc.rt.plans.limitsOf(p.organizationId)).toEqual({ projectsMax: null, keysPerProjectMax: null, membersMax: null });
  });

  it('the plan and invoice endpoints answer 404 not_found saying plans are off; nothing changes', async () => {
    const p = await svc.project();
    const calls: [string, string, unknown?][] = [
      ['GET', '/v1/admin/organization'],
      ['GET', '/v1/admin/organization/plan/preview?plan=pro_500k'],
      ['PUT', '/v1/admin/organization/plan', { plan: 'pro_500k' }],
      ['GET', '/v1/admin/invoices'],
      ['GET', '/v1/admin/invoices/upcoming'],
      ['GET', '/v1/admin/invoices/inv_unknown'],
    ];
    for (const [method, path, body] of calls) {
      expectError(await svc.call(method, path, { key: p.adminKey, body }), 404, 'not_found', { message: plans_off, label: `${method} ${path}` });
    }
    expect((await svc.rt.plans.standing(p.organizationId)).plan).toBe('free');
  });

  it('the invoicing job closes no period', async () => {
    const p = await svc.project();
    // Started 70 days ago: two periods would be due.
    await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = now() - interval '70 days' WHERE id = ${p.organizationId}`);
    const job = await svc.rt.ledgerQueue.add(close_periods_job, {});
    await waitFor(async () => (await Job.fromId(svc.rt.ledgerQueue, job.id!))?.finishedOn, 10_000, 'the close-periods job');
    const done = (await Job.fromId(svc.rt.ledgerQueue, job.id!))!;
    expect([done.failedReason, done.returnvalue]).toEqual([undefined, { closed: 0, postponed: 0 }]);
    const invoices = await svc.rt.db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int AS n FROM invoices WHERE organization_id = ${p.organizationId}`);
    expect(invoices).toBe(0);
  });
});
