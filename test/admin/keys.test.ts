/**
 * Key management: creation (secret shown once), listing without secrets, revocation and
 * expiry as every API process sees them, and the Free plan's key limit under concurrency.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'slonik';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { hashSecret } from '../../src/keys/secrets.js';
import { publishKeyChange } from '../../src/keys/store.js';
import { createRuntime, type Runtime } from '../../src/runtime.js';
import { listen, type RunningServer } from '../../src/server.js';
import { waitFor, type TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';
import type { ErrorCode } from '../../src/errors/catalogue.js';
import { p, svc, useTestService } from '../support/service.js';

useTestService({ config: { SVC_MASTER_KEY: randomBytes(32).toString('hex') } });
beforeAll(async () => {
  await svc.call('PUT', '/v1/admin/organization/plan', { key: p.adminKey, body: { plan: 'pro_500k' } });
});

const createKey = (q: TestProject, body: unknown) => svc.call('POST', `/v1/admin/projects/${q.projectId}/keys`, { key: q.adminKey, body });
const putModel = (q: TestProject, id: string) =>
  svc.call('PUT', `/v1/admin/projects/${q.projectId}/models/${encodeURIComponent(id)}`, {
    key: q.adminKey,
    body: {
      provider: 'openai', upstream_base_url: 'http://127.0.0.1:9/v1', upstream_model: id, context_window: 1000, max_output_tokens: 100,
      supports_streaming: true, input_price_per_million_credits: 1, output_price_per_million_credits: 1,
    },
  });
const revokeKey = (q: TestProject, id: string) => svc.call('POST', `/v1/admin/projects/${q.projectId}/keys/${id}/revoke`, { key: q.adminKey });
/** A read any project or customer key may make; 404 customer_not_found proves the key was accepted. */
const probe = (key: string, customerId = 'nobody') => svc.call('GET', `/v1/customers/${customerId}/balance`, { key });

describe('creating keys', () => {
  it('creates a project key whose secret is shown once and works at once', async () => {
    const res = await createKey(p, { type: 'project', name: 'backend' });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^key_/),
      type: 'project',
      // The first 16 characters: the type prefix and seven of the random ones.
      prefix: res.body.key.slice(0, 16),
      key: expect.stringMatching(/^svc_live_[A-Za-z0-9_-]{43}$/),
      name: 'backend',
      project_id: p.projectId,
      customer_id: null,
      allowed_models: null,
      expires_at: null,
      revoked_at: null,
      last_used_at: null,
      created_at: expect.any(String),
      budget: null,
    });
    const used = await probe(res.body.key);
    expectError(used, 404, 'customer_not_found');
    const dep = await svc.call('POST', '/v1/customers/deposit', { key: res.body.key, body: { customer_id: 'k1', amount: 5 } });
    expect(dep.status).toBe(200);
  });

  it('creates a customer key bound to its customer, with a model whitelist and an expiry', async () => {
    for (const id of ['openai/gpt-4o', 'm2']) expect((await putModel(p, id)).status).toBe(201);
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'bound', amount: 7 } });
    const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
    const res = await createKey(p, { type: 'customer', customer_id: 'bound', allowed_models: ['openai/gpt-4o', 'm2', 'm2'], expires_at: expiresAt });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ type: 'customer', customer_id: 'bound', allowed_models: ['openai/gpt-4o', 'm2'], expires_at: expiresAt, name: null });
    expect(res.body.key).toMatch(/^svc_customer_/);
    expect(res.body.prefix).toBe(res.body.key.slice(0, 'svc_customer_'.length + 6));
    const own = await probe(res.body.key, 'bound');
    expect([own.status, own.body.available]).toEqual([200, 7]);
    const other = await probe(res.body.key, 'k1');
    expectError(other, 404, 'customer_not_found');
    const deposit = await svc.call('POST', '/v1/customers/deposit', { key: res.body.key, body: { customer_id: 'bound', amount: 1 } });
    expectError(deposit, 403, 'permission_denied');
  });

  it('rejects bad key input with 400 and the param, creating nothing', async () => {
    expect((await putModel(p, 'ok')).status).toBe(201);
    const before = (await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys?limit=500`, { key: p.adminKey })).body.data.length;
    const cases: [unknown, ErrorCode, string | undefined][] = [
      [{}, 'invalid_request', 'type'],
      [{ type: 'admin' }, 'invalid_request', 'type'],
      [{ type: 'customer' }, 'invalid_request', 'customer_id'],
      [{ type: 'customer', customer_id: '' }, 'invalid_request', 'customer_id'],
      [{ type: 'customer', customer_id: 'x'.repeat(257) }, 'invalid_request', 'customer_id'],
      [{ type: 'project', customer_id: 'c' }, 'invalid_request', 'customer_id'],
      [{ type: 'project', allowed_models: ['m'] }, 'invalid_request', 'allowed_models'],
      [{ type: 'customer', customer_id: 'c', allowed_models: [] }, 'invalid_request', 'allowed_models'],
      [{ type: 'customer', customer_id: 'c', allowed_models: 'm' }, 'invalid_request', 'allowed_models'],
      [{ type: 'customer', customer_id: 'c', allowed_models: ['x'.repeat(129)] }, 'invalid_request', 'allowed_models.0'],
      [{ type: 'customer', customer_id: 'c', allowed_models: ['ok', ''] }, 'invalid_request', 'allowed_models.1'],
      [{ type: 'project', name: '' }, 'invalid_request', 'name'],
      [{ type: 'project', name: 'x'.repeat(129) }, 'invalid_request', 'name'],
      [{ type: 'project', customerId: 'c' }, 'invalid_request', 'customerId'],
      // allowed_models must name models of the project: `ok` is one, `missing` and `other` are not.
      [{ type: 'customer', customer_id: 'c', allowed_models: ['missing'] }, 'invalid_request', 'allowed_models.0'],
      [{ type: 'customer', customer_id: 'c', allowed_models: ['ok', 'other'] }, 'invalid_request', 'allowed_models.1'],
      [{ type: 'customer', customer_id: 'c', expires_at: 'tomorrow' }, 'invalid_expires_at', 'expires_at'],
      [{ type: 'customer', customer_id: 'c', expires_at: 1_900_000_000_000 }, 'invalid_expires_at', 'expires_at'],
      [{ type: 'customer', customer_id: 'c', expires_at: '2020-01-01T00:00:00Z' }, 'invalid_expires_at', 'expires_at'],
      [{ type: 'customer', customer_id: 'c', expires_at: new Date(Date.now() - 1000).toISOString() }, 'invalid_expires_at', 'expires_at'],
      ['"project"', 'invalid_json', undefined],
    ];
    for (const [body, code, param] of cases) {
      const res = await createKey(p, body);
      expectError(res, 400, code, { param, label: JSON.stringify(body) });
    }
    const after = (await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys?limit=500`, { key: p.adminKey })).body.data.length;
    expect(after).toBe(before);
    const unknown = await svc.call('POST', '/v1/admin/projects/proj_unknown/keys', { key: p.adminKey, body: { type: 'project' } });
    expectError(unknown, 404, 'not_found');
  });
});

describe('listing keys', () => {
  it('lists every key of the project newest first, never a secret or a hash', async () => {
    const q = await svc.project('B');
    await svc.call('PUT', '/v1/admin/organization/plan', { key: q.adminKey, body: { plan: 'pro_500k' } });
    const made = [];
    for (const name of ['one', 'two', 'three']) made.push((await createKey(q, { type: 'customer', customer_id: `c-${name}`, name })).body);
    const list = await svc.call('GET', `/v1/admin/projects/${q.projectId}/keys`, { key: q.adminKey });
    expect(list.status).toBe(200);
    expect(list.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(list.body.data.map((k: { name: string | null }) => k.name)).toEqual(['three', 'two', 'one', null]);
    expect(list.body.data.slice(0, 3)).toEqual(made.reverse().map(({ key: _secret, ...rest }) => rest));
    const text = JSON.stringify(list.body);
    for (const k of [...made.map((m) => m.key), q.projectKey]) {
      expect(text).not.toContain(k);
      expect(text).not.toContain(hashSecret(k).toString('hex'));
    }
    for (const entry of list.body.data) expect(Object.keys(entry).sort()).toEqual(['allowed_models', 'budget', 'created_at', 'customer_id', 'expires_at', 'id', 'last_used_at', 'name', 'prefix', 'project_id', 'revoked_at', 'type']);

    const page = await svc.call('GET', `/v1/admin/projects/${q.projectId}/keys?limit=3`, { key: q.adminKey });
    expect([page.body.data.length, page.body.has_more]).toEqual([3, true]);
    const rest = await svc.call('GET', `/v1/admin/projects/${q.projectId}/keys?limit=3&cursor=${page.body.next_cursor}`, { key: q.adminKey });
    expect(rest.body.data.map((k: { id: string }) => k.id)).toEqual([list.body.data[3].id]);
    expect(rest.body.has_more).toBe(false);
  });
});

describe('revoking keys', () => {
  it('revokes at once in this process, keeps the first revocation time, and 404s unknown keys', async () => {
    const made = await createKey(p, { type: 'project' });
    expect((await probe(made.body.key)).status).toBe(404); // now cached as active
    const revoked = await revokeKey(p, made.body.id);
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ id: made.body.id, type: 'project', revoked_at: expect.any(String) });
    expect(revoked.body.key).toBeUndefined();
    const refused = await probe(made.body.key);
    expectError(refused, 401, 'api_key_revoked');

    const again = await revokeKey(p, made.body.id);
    expect([again.status, again.body.revoked_at]).toEqual([200, revoked.body.revoked_at]);
    const listed = await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys?limit=500`, { key: p.adminKey });
    expect(listed.body.data.find((k: { id: string }) => k.id === made.body.id).revoked_at).toBe(revoked.body.revoked_at);

    const missing = await revokeKey(p, 'key_nope');
    expectError(missing, 404, 'not_found');
    const unknownProject = await svc.call('POST', `/v1/admin/projects/proj_nope/keys/${made.body.id}/revoke`, { key: p.adminKey });
    expectError(unknownProject, 404, 'not_found');
  });

  it('a key of another project of the same organization is not found under this project', async () => {
    const second = await svc.call('POST', '/v1/admin/projects', { key: p.adminKey, body: { name: 'second' } });
    const other = await svc.call('POST', `/v1/admin/projects/${second.body.id}/keys`, { key: p.adminKey, body: { type: 'project' } });
    const res = await revokeKey(p, other.body.id);
    expectError(res, 404, 'not_found');
    expect((await probe(other.body.key)).status).toBe(404);
  });

  it('another API process sharing the stores drops its cached copy on revocation, long before its cache TTL', async () => {
    let other: Runtime | null = null;
    let server: RunningServer | null = null;
    try {
      // A minute-long cache there, so only the revocation message can explain a prompt 401.
      other = await createRuntime({ ...svc.rt.config, KEY_CACHE_TTL_MS: 60_000 });
      server = await listen(other, 0, '127.0.0.1');
      const made = await createKey(p, { type: 'project' });
      const viaOther = () => fetch(`${server!.url}/v1/customers/nobody/balance`, { headers: { authorization: `Bearer ${made.body.key}` } });
      expect((await viaOther()).status).toBe(404); // cached there as active for KEY_CACHE_TTL_MS
      await revokeKey(p, made.body.id);
      await expect.poll(async () => (await viaOther()).status, { timeout: 2_000, interval: 20 }).toBe(401);
    } finally {
      await server?.close();
      await other?.close();
    }
  });
});

describe('key expiry', () => {
  it('a key created with expires_at stops working when that time passes', async () => {
    // Key expiry is checked against wall time, which the service's test clock does not move.
    const expiresAtMs = Date.now() + 1_200;
    const made = await createKey(p, { type: 'customer', customer_id: 'exp', expires_at: new Date(expiresAtMs).toISOString() });
    expect(made.status).toBe(201);
    expectError(await probe(made.body.key, 'exp'), 404, 'customer_not_found');
    // Polls rather than sleeping past the expiry: the answer changes at expiresAtMs, never before.
    const res = await waitFor(async () => {
      const r = await probe(made.body.key, 'exp');
      return r.status === 401 ? r : null;
    }, 10_000, 'the key to expire');
    expect(Date.now()).toBeGreaterThanOrEqual(expiresAtMs);
    expectError(res, 401, 'api_key_expired');
  });

  it('an expiry set in the database applies once the change is published', async () => {
    const made = await createKey(p, { type: 'customer', customer_id: 'exp2' });
    expect((await probe(made.body.key, 'exp2')).status).toBe(404);
    await svc.rt.db.query(sql.unsafe`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = ${made.body.id}`);
    await publishKeyChange(svc.rt.redis, svc.rt.config.REDIS_PREFIX, hashSecret(made.body.key));
    await expect.poll(async () => (await probe(made.body.key, 'exp2')).body.error.code, { timeout: 2_000, interval: 20 }).toBe('api_key_expired');
    const listed = await svc.call('GET', `/v1/admin/projects/${p.projectId}/keys?limit=500`, { key: p.adminKey });
    expect(Date.parse(listed.body.data.find((k: { id: string }) => k.id === made.body.id).expires_at)).toBeLessThan(Date.now());
  });
});

describe('Free plan key limit', () => {
  it('counts unrevoked keys of any type: a third key is 403, revoking one frees a slot', async () => {
    const q = await svc.project('B'); // Free, with one project key
    const second = await createKey(q, { type: 'customer', customer_id: 'c' });
    expect(second.status).toBe(201);
    const third = await createKey(q, { type: 'project' });
    expectError(third, 403, 'plan_limit_reached');
    expect((await revokeKey(q, second.body.id)).status).toBe(200);
    const again = await createKey(q, { type: 'project' });
    expect(again.status).toBe(201);
    expectError(await createKey(q, { type: 'customer', customer_id: 'c' }), 403, 'plan_limit_reached');
  });

  it('concurrent creations at the limit admit exactly the free slots', async () => {
    const q = await svc.project('B');
    const existing = (await svc.call('GET', `/v1/admin/projects/${q.projectId}/keys`, { key: q.adminKey })).body.data;
    await revokeKey(q, existing[0].id); // two free slots now
    const results = await Promise.all(Array.from({ length: 8 }, () => createKey(q, { type: 'project' })));
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 201, 403, 403, 403, 403, 403, 403]);
    const active = await svc.rt.db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int8 AS n FROM api_keys WHERE project_id = ${q.projectId} AND revoked_at IS NULL`);
    expect(active).toBe(2);
  });

  it('a paid plan has no key limit', async () => {
    const made = await Promise.all(Array.from({ length: 3 }, () => createKey(p, { type: 'project' })));
    expect(made.map((r) => r.status)).toEqual([201, 201, 201]);
  });
});
