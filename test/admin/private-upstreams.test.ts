/**
 * Upstreams on the service's own network (SSRF), with UPSTREAM_ALLOW_PRIVATE off: a model
 * whose `upstream_base_url` is a loopback, private, link-local, shared, unique-local,
 * multicast or unspecified address, in any form URL parsing normalises, or a localhost
 * name, is refused at creation and at update, and nothing is stored. A model that points
 * there anyway (stored before the check, or while the setting was on) is refused at call
 * time, before any connection, with its hold released. Names resolving to such addresses
 * are covered in test/gateway/upstream.test.ts, with an injected resolver.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

let mock: MockUpstream;

useTestService({ config: { SVC_MASTER_KEY: randomBytes(32).toString('base64'), UPSTREAM_ALLOW_PRIVATE: false } });
beforeAll(async () => {
  mock = await startMockUpstream();
});
afterAll(async () => {
  await mock?.close();
});

const model = (upstream_base_url: string) => ({
  provider: 'openai' as const,
  upstream_base_url,
  upstream_model: 'gpt-upstream',
  upstream_api_key: 'sk-upstream',
  context_window: 8_000,
  max_output_tokens: 1_000,
  supports_streaming: true,
  input_price_per_million_credits: 1_000_000,
  output_price_per_million_credits: 2_000_000,
});

const putModel = (id: string, url: string) => svc.call('PUT', `/v1/admin/projects/${p.projectId}/models/${id}`, { key: p.adminKey, body: model(url) });
const storedUrl = async (id: string): Promise<string | undefined> => {
  const list = await svc.call('GET', `/v1/admin/projects/${p.projectId}/models?limit=500`, { key: p.adminKey });
  return list.body.data.find((m: { id: string }) => m.id === id)?.upstream_base_url;
};

/** Every way to name a non-public address; each must be refused. */
const refused = [
  // loopback, IPv4 in the forms URL parsing turns into 127.0.0.1
  'http://127.0.0.1/v1',
  'http://127.1/v1',
  'http://127.255.255.254:8080/v1',
  'http://2130706433/v1',
  'http://0x7f000001/v1',
  'http://0x7f.0.0.1/v1',
  'http://0177.0.0.1/v1',
  'http://017700000001/v1',
  'http://127.0.0.1./v1',
  'http://%31%32%37.0.0.1/v1',
  'http://\u2460\u2461\u2466.0.0.1/v1',
  // loopback, IPv6 and IPv4-mapped IPv6
  'http://[::1]/v1',
  'http://[0:0:0:0:0:0:0:1]/v1',
  'http://[::ffff:127.0.0.1]/v1',
  'http://[::ffff:7f00:1]/v1',
  'http://[::ffff:0:127.0.0.1]/v1',
  // localhost names (RFC 6761), whatever DNS says
  'http://localhost/v1',
  'http://localhost./v1',
  'https://LOCALHOST:8443/v1',
  'http://api.localhost/v1',
  // unspecified
  'http://0.0.0.0/v1',
  'http://0/v1',
  'http://[::]/v1',
  // private
  'http://10.0.0.1/v1',
  'http://172.16.0.1/v1',
  'http://172.31.255.255/v1',
  'http://192.168.1.1/v1',
  'http://[::ffff:10.1.2.3]/v1',
  // link-local: the cloud metadata endpoint, directly and through IPv6 forms that carry it
  'http://169.254.169.254/latest/meta-data',
  'http://[::ffff:a9fe:a9fe]/v1',
  'http://[64:ff9b::a9fe:a9fe]/v1',
  'http://[2002:a9fe:a9fe::1]/v1',
  'http://[fe80::1]/v1',
  // shared address space (carrier-grade NAT; Alibaba's metadata endpoint is 100.100.100.200)
  'http://100.64.0.1/v1',
  'http://100.100.100.200/v1',
  // unique-local
  'http://[fc00::1]/v1',
  'http://[fd12:3456::1]/v1',
  // multicast, broadcast
  'http://224.0.0.1/v1',
  'http://[ff02::1]/v1',
  'http://255.255.255.255/v1',
];

/** Public neighbours of the refused ranges, and a name that does not resolve now: accepted. */
const accepted = ['http://172.32.0.1/v1', 'http://100.128.0.1/v1', 'http://192.169.0.1/v1', 'https://8.8.8.8/v1', 'http://[2606:4700::1111]/v1', 'https://api.example.invalid/v1'];

describe('creating or changing a model', () => {
  it('refuses every private target at creation and at update, and stores nothing', async () => {
    const existing = 'existing';
    expect((await putModel(existing, 'https://api.example.invalid/v1')).status).toBe(201);
    const failures: string[] = [];
    for (const [i, url] of refused.entries()) {
      const created = await putModel(`m${i}`, url);
      const updated = await putModel(existing, url);
      for (const [what, res] of [['create', created], ['update', updated]] as const) {
        const e = res.body?.error;
        const ok = res.status === 400 && e?.code === 'invalid_request' && e?.param === 'upstream_base_url' && /UPSTREAM_ALLOW_PRIVATE=1/.test(e?.message);
        if (!ok) failures.push(`${what} ${url}: ${res.status} ${JSON.stringify(res.body)}`);
      }
      if ((await storedUrl(`m${i}`)) !== undefined) failures.push(`create ${url}: stored`);
    }
    expect(failures).toEqual([]);
    expect(await storedUrl(existing)).toBe('https://api.example.invalid/v1');
  });

  it('says why, naming the address and the range', async () => {
    const res = await putModel('meta', 'http://169.254.169.254/latest');
    expect(res.body.error.message).toBe(
      'upstream_base_url points at 169.254.169.254, a link-local (cloud metadata) address; the gateway calls only public addresses (set UPSTREAM_ALLOW_PRIVATE=1 to allow private ones)',
    );
    const mapped = await putModel('mapped', 'http://[::ffff:127.0.0.1]/v1');
    expect(mapped.body.error.message).toMatch(/^upstream_base_url points at ::ffff:7f00:1, a loopback address/);
  });

  it('refuses schemes other than http and https', async () => {
    for (const url of ['ftp://example.com/v1', 'file:///etc/passwd', 'gopher://example.com/']) {
      const res = await putModel('scheme', url);
      expectError(res, 400, 'invalid_request', { param: 'upstream_base_url', label: url });
    }
    expect(await storedUrl('scheme')).toBeUndefined();
  });

  it('accepts public addresses and names', async () => {
    for (const [i, url] of accepted.entries()) {
      const res = await putModel(`ok${i}`, url);
      expect(res.status, `${url}: ${JSON.stringify(res.body)}`).toBe(201);
    }
  });
});

describe('calling a model that points at a private address anyway', () => {
  it('answers 502 upstream_error saying why, connects nowhere, and releases the hold', async () => {
    // Stored directly, as a model saved before the check or while the setting was on.
    await svc.rt.modelQueries.upsertModel(p.projectId, 'inward', { ...model(mock.url), display_name: null, description: null, active: true, cache_read_price_per_million_credits: 0, cache_write_price_per_million_credits: 0 });
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'ssrf', amount: 1_000_000 } })).status).toBe(200);
    const before = mock.requests.length;
    const res = await svc.call('POST', '/v1/chat/completions', {
      key: p.projectKey,
      headers: { 'x-service-customer': 'ssrf' },
      body: { model: 'inward', messages: [{ role: 'user', content: 'hello' }] },
    });
    expectError(res, 502, 'upstream_error');
    expect(res.body.error.message).toBe(
      `upstream_base_url points at 127.0.0.1, a loopback address; the gateway calls only public addresses (set UPSTREAM_ALLOW_PRIVATE=1 to allow private ones)`,
    );
    expect(mock.requests.length).toBe(before);
    const balance = await svc.call('GET', '/v1/customers/ssrf/balance', { key: p.projectKey });
    expect(balance.body).toMatchObject({ used: 0, frozen: 0, available: 1_000_000 });
  });
});
