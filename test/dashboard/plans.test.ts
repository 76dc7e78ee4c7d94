/**
 * The dashboard's plan text: the demo banner and the team's member limit say the plan in
 * force now (after a change, on the next page), with the demo allowance where it applies;
 * Enterprise is never offered as a change; under PLANS=off there is no Billing link or
 * screen, and no plan text on the overview, the team or the banner.
 */
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMember } from '../admin/dashboard-support.js';
import { startTestService, type TestProject, type TestService } from '../helpers.js';
import { operatorSetsPlan } from '../support/plans.js';
import { svc, useTestService } from '../support/service.js';
import { pageCall, pageSignIn, type PageSession } from './support.js';

useTestService({ variants: [] });

/** An organization with an owner signed in to the page; the demo's allowance when asked. */
async function signedIn(s: TestService, demo: boolean): Promise<{ p: TestProject; owner: PageSession }> {
  const p = await s.project();
  if (demo) await s.rt.db.query(sql.unsafe`UPDATE organizations SET demo_allowance = true WHERE id = ${p.organizationId}`);
  const m = await addMember(s, p, 'owner');
  return { p, owner: await pageSignIn(s, m.email, m.password) };
}

const page = async (s: TestService, owner: PageSession, path: string) => {
  const r = await pageCall(s, owner, 'GET', path);
  expect(r.status, r.text.slice(0, 500)).toBe(200);
  return r.text;
};
/** The text of the paragraph marked `id`, tags left out. */
const testid = (text: string, id: string) => new RegExp(`data-testid="${id}"[^>]*>([\\s\\S]*?)</p>`).exec(text)?.[1].replace(/<[^>]+>/g, '').replace(/\s+/g, ' ');

describe('with plans (PLANS=on)', () => {
  it('the demo banner and the member limit say the plan in force now', async () => {
    const { p, owner } = await signedIn(svc, true);
    const overview = await page(svc, owner, '/dashboard/overview');
    expect(testid(overview, 'demo-banner')).toBe('Demo organization, on the free plan with the demo allowance: 10 projects, 25 keys per project, 5 members.');
    expect(testid(await page(svc, owner, '/dashboard/team'), 'member-limit')).toBe('The free plan with the demo allowance allows 5 members (owners included).');

    const put = await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
    expect(put.status).toBe(200);
    expect(testid(await page(svc, owner, `/dashboard/projects/${p.projectId}/keys`), 'demo-banner')).toBe(
      'Demo organization, on the pro_500k plan with the demo allowance: any number of projects, any number of keys per project, 5 members.',
    );

    await operatorSetsPlan(svc, p.organizationId, 'enterprise');
    expect(testid(await page(svc, owner, '/dashboard/overview'), 'demo-banner')).toBe(
      'Demo organization, on the enterprise plan with the demo allowance: any number of projects, any number of keys per project, any number of members.',
    );
    expect(testid(await page(svc, owner, '/dashboard/team'), 'member-limit')).toBe('The enterprise plan with the demo allowance allows any number of members (owners included).');
  });

  it('an organization without the demo allowance has no banner, and its own plan limit', async () => {
    const { owner } = await signedIn(svc, false);
    const team = await page(svc, owner, '/dashboard/team');
    expect(team).not.toContain('data-testid="demo-banner"');
    expect(testid(team, 'member-limit')).toBe('The free plan allows 1 member (owners included).');
  });

  it('offers every plan but Enterprise, which it says the operator sets', async () => {
    const { owner } = await signedIn(svc, false);
    const billing = await page(svc, owner, '/dashboard/billing');
    const options = [...billing.matchAll(/<option value="([^"]+)"/g)].map((m) => m[1]);
    expect(options).toEqual(['free', 'pro_500k', 'pro_2m', 'pro_5m', 'pro_15m', 'pro_50m']);
    expect(testid(billing, 'enterprise-note')).toMatch(/set by the operator of this service: contact them/);
    // Asked for anyway (a hand-made link), the preview shows the API's refusal.
    const preview = await pageCall(svc, owner, 'GET', '/dashboard/billing?plan=enterprise');
    expect(preview.status).toBe(403);
    expect(preview.text).toContain('the enterprise plan is set by the operator of this service');
  });
});

describe('without plans (PLANS=off)', () => {
  let off: TestService;
  beforeAll(async () => {
    off = await startTestService({ config: { PLANS: 'off' } });
  });
  afterAll(async () => {
    await off?.close();
  });

  it('has no Billing link or screen, and no plan text on the overview, the team or the demo banner', async () => {
    const { owner } = await signedIn(off, true);
    const overview = await page(off, owner, '/dashboard/overview');
    expect(overview).toContain('data-testid="nav-team"');
    expect(overview).not.toContain('data-testid="nav-billing"');
    expect(overview).not.toContain('data-testid="plan"');
    expect(overview).toContain('data-testid="health-status"');
    expect(testid(overview, 'demo-banner')).toBe('Demo organization: try anything here.');
    const team = await page(off, owner, '/dashboard/team');
    expect(team).not.toContain('data-testid="member-limit"');
    expect(team).not.toMatch(/\bplan\b/i);
    expect((await pageCall(off, owner, 'GET', '/dashboard/billing')).status).toBe(404);
  });
});
