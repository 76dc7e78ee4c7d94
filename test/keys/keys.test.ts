/**
 * Key states across API processes (revocation seen by every process within a second,
 * through pub/sub),
 * secrets never stored or logged, and per-key rate limits.
 */
import { describe, expect, it } from 'vitest';
import { sql } from 'slonik';
import { z } from 'zod';
import { hashSecret } from '../../src/keys/secrets.js';
import { publishKeyChange, publishProjectChange } from '../../src/keys/store.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';
import { createRuntime } from '../../src/runtime.js';
import { listen } from '../../src/server.js';
import { expectError } from '../support/errors.js';
import type { ErrorCode } from '../../src/errors/catalogue.js';
import { svc, useTestService } from '../support/service.js';

useTestService({ variants: [] });

const get = (url: string, key: string) => fetch(url, { headers: { authorization: `Bearer ${key}` } });

describe('key states', () => {
  it('answers each state with its error', async () => {
    const p = await svc.project();
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'k1', amount: 5 } });
    const expired = await p.customerKey('k1', { expiresAtMs: Date.now() - 1 });
    const cases: [Record<string, string>, number, ErrorCode][] = [
      [{}, 401, 'missing_api_key'],
      [{ authorization: 'Bearer nope' }, 401, 'invalid_api_key'],
      [{ authorization: `Bearer svc_live_${'x'.repeat(43)}` }, 401, 'invalid_api_key'],
      [{ authorization: `Bearer ${expired}` }, 401, 'api_key_expired'],
      [{ authorization: `Bearer ${p.adminKey}` }, 403, 'permission_denied'],
    ];
    for (const [headers, status, code] of cases) {
      const r = await svc.call('GET', '/v1/customers/k1', { headers });
      expectError(r, status, code);
    }
    const viaXApiKey = await svc.call('GET', '/v1/customers/k1', { headers: { 'x-api-key': p.projectKey } });
    expect(viaXApiKey.status).toBe(200);
  });

  it('stores only a hash of each secret', async () => {
    const p = await svc.project();
    const rows = await svc.rt.db.any(sql.type(z.object({ secret_hash: z.instanceof(Buffer), prefix: z.string() }))`
      SELECT secret_hash, prefix FROM api_keys WHERE organization_id = ${p.organizationId}`);
    const hashes = rows.map((r) => r.secret_hash.toString('hex'));
    expect(hashes).toContain(hashSecret(p.projectKey).toString('hex'));
    for (const r of rows) expect(p.projectKey.startsWith(r.prefix) || p.adminKey.startsWith(r.prefix)).toBe(true);
    const dump = JSON.stringify(await svc.rt.db.any(sql.unsafe`SELECT * FROM api_keys WHERE organization_id = ${p.organizationId}`));
    expect(dump).not.toContain(p.projectKey.slice(12));
  });

  it('a revocation reaches every API process within a second, by pub/sub', async () => {
    const p = await svc.project();
    await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'rv', amount: 5 } });
    // A key cache kept a minute: within the second, only the published change can reach
    // the processes (with the default 1 s TTL, the cache ageing out alone met the bound).
    const env = {
      REDIS_PREFIX: svc.rt.config.REDIS_PREFIX, QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX, DATABASE_URL: process.env.TEST_DATABASE_URL!, KEY_CACHE_TTL_MS: '60000',
    };
    const apis: ServiceProcess[] = await Promise.all([spawnService('src/web.ts', env), spawnService('src/web.ts', env)]);
    try {
      // Both processes have the key cached as active.
      for (const a of apis) expect((await get(`${a.url}/v1/customers/rv`, p.projectKey)).status).toBe(200);
      await svc.rt.db.query(sql.unsafe`UPDATE api_keys SET revoked_at = now() WHERE secret_hash = ${sql.binary(hashSecret(p.projectKey))}`);
      const revokedAt = Date.now();
      await publishKeyChange(svc.rt.redis, svc.rt.config.REDIS_PREFIX, hashSecret(p.projectKey));
      for (const a of apis) {
        let status = 0;
        while (Date.now() - revokedAt < 1_000) {
          const r = await get(`${a.url}/v1/customers/rv`, p.projectKey);
          status = r.status;
          if (status === 401) {
            expectError({ status, text: await r.text(), headers: r.headers }, 401, 'api_key_revoked');
            break;
          }
          await new Promise((res) => setTimeout(res, 25));
        }
        expect(status).toBe(401);
      }
      // The key never appears in a process's logs.
      for (const a of apis) expect(a.output()).not.toContain(p.projectKey);
    } finally {
      await Promise.all(apis.map((a) => a.kill()));
    }
  });
});

describe('rate limits', () => {
  it('refuses a key over its project limit with 429 and Retry-After, other keys unaffected', async () => {
    const p = await svc.project();
    const other = await svc.project();
    // No request has used the key yet, so no process caches its project: the limit holds from the first request.
    await svc.rt.db.query(sql.unsafe`UPDATE projects SET rate_limit_per_minute = 5 WHERE id = ${p.projectId}`);
    await publishProjectChange(svc.rt.redis, svc.rt.config.REDIS_PREFIX, p.projectId);
    const statuses: number[] = [];
    let last;
    for (let i = 0; i < 7; i++) {
      last = await svc.call('GET', '/v1/customers/none', { key: p.projectKey });
      statuses.push(last.status);
    }
    expect(statuses).toEqual([404, 404, 404, 404, 404, 429, 429]);
    expectError(last!, 429, 'rate_limited');
    const retryAfter = Number(last!.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect((await svc.call('GET', '/v1/customers/none', { key: other.projectKey })).status).toBe(404);
  });

  it('two API processes share one budget: together they never admit more than the limit', async () => {
    // 300 a minute: each process takes 3 tokens at a time from Redis.
    const p = await svc.project();
    // As above: nothing caches the new project yet, so no wait for the publication is needed.
    await svc.rt.db.query(sql.unsafe`UPDATE projects SET rate_limit_per_minute = 300 WHERE id = ${p.projectId}`);
    await publishProjectChange(svc.rt.redis, svc.rt.config.REDIS_PREFIX, p.projectId);
    const other = await createRuntime(svc.rt.config);
    const server = await listen(other, 0, '127.0.0.1');
    try {
      const urls = [svc.url, server.url];
      let admitted = 0;
      let refusedInARow = 0;
      // Both processes alike, four requests in flight, until both refuse.
      for (let round = 0; round < 200 && refusedInARow < 8; round++) {
        const statuses = await Promise.all([0, 1, 2, 3].map((i) => get(`${urls[i % 2]}/v1/customers/none`, p.projectKey).then((r) => r.status)));
        for (const status of statuses) {
          expect([404, 429]).toContain(status);
          if (status === 404) {
            admitted++;
            refusedInARow = 0;
          } else {
            refusedInARow++;
          }
        }
      }
      expect(admitted).toBeLessThanOrEqual(300);
      // Tokens a process took and had not used when the other ran out: fewer than a chunk each.
      expect(admitted).toBeGreaterThanOrEqual(300 - 2 * 2);
    } finally {
      await server.close();
      await other.close();
    }
  });
});
