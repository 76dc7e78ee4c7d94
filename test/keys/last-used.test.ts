/**
 * A key's last use: noted by the API process when the key authenticates a request, and
 * written to PostgreSQL every KEY_LAST_USED_FLUSH_MS (20 ms here); the key list shows it.
 * A refused key (revoked) is not "used".
 */
import { describe, expect, it } from 'vitest';
import { waitFor } from '../helpers.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ config: { KEY_LAST_USED_FLUSH_MS: 20 } });

async function listed(id: string): Promise<{ last_used_at: string | null; revoked_at: string | null }> {
  const keys = (await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey })).body.data;
  return keys.find((k: { id: string }) => k.id === id);
}

describe('last_used_at', () => {
  it('is null until the key is used, then the time of its last accepted request', async () => {
    const made = await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys`, { key: p.adminKey, body: { type: 'project' } });
    expect((await listed(made.body.id)).last_used_at).toBeNull();
    const before = Date.now();
    expect((await svc.call('GET', '/v1/customers/nobody/balance', { key: made.body.key })).status).toBe(404);
    const first = await waitFor(async () => (await listed(made.body.id)).last_used_at, 5_000, 'the first use written');
    expect(Date.parse(first)).toBeGreaterThanOrEqual(before - 1);
    expect(Date.parse(first)).toBeLessThanOrEqual(Date.now());

    await svc.call('GET', '/v1/customers/nobody/balance', { key: made.body.key });
    const second = await waitFor(async () => {
      const at = (await listed(made.body.id)).last_used_at;
      return at !== first ? at : null;
    }, 5_000, 'the second use written');
    expect(Date.parse(second)).toBeGreaterThan(Date.parse(first));

    // Revoked: refused requests leave the last use as it was.
    await svc.call('POST', `/v1/admin/projects/${p.projectId}/keys/${made.body.id}/revoke`, { key: p.adminKey });
    expect((await svc.call('GET', '/v1/customers/nobody/balance', { key: made.body.key })).status).toBe(401);
    await svc.rt.keyCache.lookup(made.body.key);
    await svc.rt.keyUsage.flush();
    expect((await listed(made.body.id)).last_used_at).toBe(second);
  });
});
