/**
 * The keys form's expiry is a time in UTC whatever the browser's time zone: a day, a day
 * and a time (after a space or a T, seconds optional), or ISO 8601 with its own zone; text
 * that is none of these is refused with the API's message, the form kept as typed.
 */
import { describe, expect, it } from 'vitest';
import { addMember } from '../admin/dashboard-support.js';
import { p, svc, useTestService } from '../support/service.js';
import { pageCall, pageSignIn } from './support.js';

useTestService();

describe('the key expiry field', () => {
  it('reads what is typed as UTC', async () => {
    const owner = await addMember(svc, p, 'owner');
    const s = await pageSignIn(svc, owner.email, owner.password);
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
});
