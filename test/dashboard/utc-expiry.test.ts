/**
 * The keys form's expiry, and a deposit's window on the customer screen, are times in UTC
 * whatever the browser's time zone: a day, a day and a time (after a space or a T, seconds
 * optional), or ISO 8601 with its own zone; text that is none of these is refused with the
 * API's message, the form kept as typed.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { addMember } from '../admin/dashboard-support.js';
import { p, svc, useTestService } from '../support/service.js';
import { pageCall, pageSignIn, type PageSession } from './support.js';

useTestService({ workers: true });

describe('the time fields', () => {
  let s: PageSession;
  beforeAll(async () => {
    const owner = await addMember(svc, p, 'owner');
    s = await pageSignIn(svc, owner.email, owner.password);
  });

  it('reads the key expiry typed as UTC', async () => {
    const path = `/dashboard/projects/${p.projectId}/keys`;
    const keyOf = async (prefix: string): Promise<{ id: string; expires_at: string }> =>
      (await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey })).body.data.find((k: { prefix: string }) => k.prefix === prefix);
    const typed: [string, string][] = [
      ['2099-01-31', '2099-01-31T00:00:00.000Z'],
      ['2099-01-31 23:30', '2099-01-31T23:30:00.000Z'],
      ['2099-01-31T23:30', '2099-01-31T23:30:00.000Z'],
      ['2099-01-31 23:30:15', '2099-01-31T23:30:15.000Z'],
      ['2099-01-31T23:30:00+02:00', '2099-01-31T21:30:00.000Z'],
    ];
    for (const [text, iso] of typed) {
      const r = await pageCall(svc, s, 'POST', path, { _csrf: s.csrf, kind: 'project', expires_at: text });
      expect([text, r.status]).toEqual([text, 200]);
      const prefix = /Created project key ([^…<]+)…/.exec(r.text)![1];
      const key = await keyOf(prefix);
      expect([text, key.expires_at]).toEqual([text, iso]);
      expect(r.text).toContain(`${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`);
      // Revoked keys leave room under the plan's key limit.
      expect((await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys/${key.id}/revoke`, { key: p.adminKey })).status).toBe(200);
    }
    const refused = await pageCall(svc, s, 'POST', path, { _csrf: s.csrf, kind: 'project', expires_at: 'tomorrow' });
    expect(refused.status).toBe(400);
    expect(refused.text).toMatch(/data-testid="notice-error">[^<]*expires_at/);
    expect(refused.text).toContain('value="tomorrow"');
  });

  it("reads a deposit's window as UTC", async () => {
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'utc-c1', amount: 1 } })).status).toBe(200);
    await svc.drained();
    const page = await pageCall(svc, s, 'GET', `/dashboard/projects/${p.projectId}/customers/utc-c1`);
    // A text field labelled UTC, not the browser's local-time picker.
    expect(page.text).toMatch(/data-testid="deposit-expires"> UTC/);
    expect(page.text).not.toContain('datetime-local');
    const path = `/dashboard/projects/${p.projectId}/customers/utc-c1/deposits`;
    const r = await pageCall(svc, s, 'POST', path, { _csrf: s.csrf, amount: '5', unit: 'credits', source: 'windowed', starts_at: '2020-01-02 03:04', expires_at: '2099-01-31 23:30' });
    expect(r.status).toBeLessThan(400);
    const customer = (await svc.call('GET', '/v1/customers/utc-c1', { key: p.projectKey })).body;
    const windowed = JSON.stringify(customer);
    expect(windowed).toContain('2020-01-02T03:04:00.000Z');
    expect(windowed).toContain('2099-01-31T23:30:00.000Z');
    const refused = await pageCall(svc, s, 'POST', path, { _csrf: s.csrf, amount: '5', unit: 'credits', expires_at: 'next year' });
    expect(refused.status).toBe(400);
    expect(refused.text).toContain('value="next year"');
  });
});
