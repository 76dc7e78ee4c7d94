/**
 * The plan usage gauge's read (PlanService.usageOfOrganizations): it looks at every
 * organization, page by page, and keeps the ones with the highest counts this period, so
 * that a busy organization is reported however many older, idle ones there are. A
 * database of the file's own, so that the organizations are exactly the ones made here.
 * (CI once missed the metrics test's organization: the read took the 1,000 oldest, which
 * the suite's other files had made and left without counts.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdminQueries } from '../../src/admin/queries.js';
import { startTestService, type TestService } from '../helpers.js';
import { ownDatabase } from '../support/own-database.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService({ config: { DATABASE_URL: await ownDatabase('usage_gauge') } });
}, 60_000);
afterAll(async () => {
  await svc?.close();
});

describe('the plan usage gauge', () => {
  it('reports the busiest organizations, the busiest first, past idle older ones and across pages', async () => {
    const admin = createAdminQueries(svc.rt.db);
    const orgs: string[] = [];
    for (let i = 0; i < 7; i++) orgs.push((await admin.createOrganization(`usage ${i}`)).id);
    // The oldest three never count anything; the others count 2, 9, 5 and 1 operations.
    const counts = new Map([[orgs[3]!, 2], [orgs[4]!, 9], [orgs[5]!, 5], [orgs[6]!, 1]]);
    for (const [org, n] of counts) {
      await svc.rt.plans.record(org, n);
      // The read folds recorded operations into the period's counter.
      expect((await svc.rt.plans.organization(org)).billable_ops).toBe(n);
    }

    // Pages of 2 organizations: the busiest three are found in three different pages.
    expect(await svc.rt.plans.usageOfOrganizations(3, 2)).toEqual([
      { organizationId: orgs[4], used: 9, included: 50_000 },
      { organizationId: orgs[5], used: 5, included: 50_000 },
      { organizationId: orgs[3], used: 2, included: 50_000 },
    ]);
    // One with no count this period is absent, not 0; a limit above their number gives them all.
    const all = await svc.rt.plans.usageOfOrganizations(100, 3);
    expect(all.map((u) => u.organizationId)).toEqual([orgs[4], orgs[5], orgs[3], orgs[6]]);
    // The kept list is trimmed while paging (past 2 * max) without losing the top.
    expect((await svc.rt.plans.usageOfOrganizations(1, 1)).map((u) => u.used)).toEqual([9]);
  });
});
