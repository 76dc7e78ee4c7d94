/**
 * Models of a project: create or replace through PUT (ids with `/` in both path forms),
 * the listed entry, validation, and the upstream key encrypted at rest.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createModelQueries } from '../../src/admin/models.js';
import { projectChannel } from '../../src/keys/store.js';
import { decryptSecret, encryptSecret, loadMasterKey, master_key_file, parseMasterKey } from '../../src/keys/crypto.js';
import type { TestProject } from '../helpers.js';
import { expectError } from '../support/errors.js';
import { p, svc, useTestService } from '../support/service.js';

const masterKey = randomBytes(32);

useTestService({ config: { SVC_MASTER_KEY: masterKey.toString('base64') } });

const upstreamKey = () => `sk-test-${randomBytes(16).toString('hex')}`;

const base = {
  provider: 'openai',
  upstream_base_url: 'http://127.0.0.1:4010/v1/',
  upstream_model: 'gpt-4o-2024-08-06',
  display_name: 'GPT-4o',
  description: 'a test model',
  context_window: 128_000,
  max_output_tokens: 16_384,
  supports_streaming: true,
  input_price_per_million_credits: 2_500_000,
  output_price_per_million_credits: 10_000_000,
  cache_read_price_per_million_credits: 1_250_000,
};

const putModel = (q: TestProject, pathId: string, body: unknown) =>
  svc.call('PUT', `/v1/admin/projects/${q.projectId}/models/${pathId}`, { key: q.adminKey, body });
const listModels = (q: TestProject) => svc.call('GET', `/v1/admin/projects/${q.projectId}/models`, { key: q.adminKey });
const ciphertextOf = (projectId: string, modelId: string) =>
  svc.rt.db.oneFirst(sql.type(z.object({ c: z.instanceof(Buffer).nullable() }))`
    SELECT upstream_key_ciphertext AS c FROM models WHERE project_id = ${projectId} AND id = ${modelId}`);

describe('PUT /v1/admin/projects/{id}/models/{model_id}', () => {
  it('creates with a URL-encoded id, replaces with the raw id, and returns the entry without the key', async () => {
    // A project of its own: the list at the end must hold this model only, whatever ran before.
    const q = await svc.project('B');
    const secret = upstreamKey();
    const created = await putModel(q, encodeURIComponent('openai/gpt-4o'), { ...base, upstream_api_key: secret });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: 'openai/gpt-4o',
      object: 'model',
      created: expect.any(Number),
      active: true,
      owned_by: 'openai',
      wire_format: 'chat_completions',
      display_name: 'GPT-4o',
      description: 'a test model',
      context_window: 128_000,
      max_output_tokens: 16_384,
      input_price_per_million_credits: 2_500_000,
      input_price_per_million_usd: 2.5,
      output_price_per_million_credits: 10_000_000,
      output_price_per_million_usd: 10,
      cache_read_price_per_million_credits: 1_250_000,
      cache_read_price_per_million_usd: 1.25,
      cache_write_price_per_million_credits: 0,
      cache_write_price_per_million_usd: 0,
      price_catalogue: null,
      price_sources: { input: 'override', output: 'override', cache_read: 'override', cache_write: 'override' },
      supports_streaming: true,
      image_token_bound: 4_784,
      file_token_bound: 778_400,
      provider: 'openai',
      upstream_base_url: 'http://127.0.0.1:4010/v1',
      upstream_model: 'gpt-4o-2024-08-06',
      has_upstream_key: true,
      upstreams: null,
      timeouts: {},
      updated_at: expect.any(String),
      warnings: [],
    });
    expect(Math.abs(created.body.created - Date.now() / 1000)).toBeLessThan(60);
    expect(JSON.stringify(created.body)).not.toContain(secret);

    const replaced = await putModel(q, 'openai/gpt-4o', { ...base, provider: 'anthropic', input_price_per_million_credits: 3, display_name: null, active: false });
    expect(replaced.status).toBe(200);
    expect(replaced.body).toMatchObject({
      id: 'openai/gpt-4o',
      created: created.body.created,
      owned_by: 'anthropic',
      // A provider change without a wire_format takes the new provider's.
      wire_format: 'messages',
      display_name: 'openai/gpt-4o',
      active: false,
      input_price_per_million_credits: 3,
      input_price_per_million_usd: 0.000003,
      has_upstream_key: true,
    });
    const list = await listModels(q);
    expect(list.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    // The write answers what the saved model will do: inactive, it is not served.
    const { warnings, ...entry } = replaced.body;
    expect(warnings.map((w: { code: string }) => w.code)).toEqual(['model_inactive']);
    expect(list.body.data).toEqual([entry]);
    expect(JSON.stringify(list.body)).not.toContain(secret);
  });

  it('GET one model answers its list entry (inactive included, either path form); an unknown one is 404 model_not_found naming it', async () => {
    const id = 'openai/get-one';
    expect((await putModel(p, encodeURIComponent(id), { ...base, active: false, upstream_api_key: upstreamKey() })).status).toBe(201);
    const entry = (await listModels(p)).body.data.find((m: { id: string }) => m.id === id);
    for (const pathId of [encodeURIComponent(id), id]) {
      const one = await svc.call('GET', `/v1/admin/projects/${p.projectId}/models/${pathId}`, { key: p.adminKey });
      expect(one.status, JSON.stringify(one.body)).toBe(200);
      expect(one.body).toEqual(entry);
    }
    const missing = await svc.call('GET', `/v1/admin/projects/${p.projectId}/models/no-such-model`, { key: p.adminKey });
    expectError(missing, 404, 'model_not_found', { param: 'model_id' });
    expect(missing.body.error.message).toContain('no-such-model');
  });

  it("publishes the project's change so gateway processes drop their cached models at once", async () => {
    const subscriber = svc.rt.extraConnection();
    const received: string[] = [];
    subscriber.on('message', (_channel: string, message: string) => received.push(message));
    await subscriber.subscribe(projectChannel(svc.rt.config.REDIS_PREFIX));
    expect((await putModel(p, 'published', base)).status).toBe(201);
    await expect.poll(() => received, { timeout: 2_000, interval: 10 }).toContain(p.projectId);
    await subscriber.quit();
  });

  it('accepts ids of 128 characters with several slashes in both path forms', async () => {
    const id = `a/b/${'x'.repeat(124)}`;
    expect((await putModel(p, id, base)).body.id).toBe(id);
    expect((await putModel(p, encodeURIComponent(id), base)).status).toBe(200);
    const tooLong = await putModel(p, `${id}y`, base);
    expectError(tooLong, 400, 'invalid_request', { param: 'model_id' });
    const control = await putModel(p, 'bad%01id', base);
    expect([control.status, control.body.error.param]).toEqual([400, 'model_id']);
  });

  it('rejects bad model input with 400 and the param', async () => {
    const { supports_streaming: _s, ...noStreaming } = base;
    const cases: [unknown, string][] = [
      [{ ...base, provider: 'google' }, 'provider'],
      [{ ...base, upstream_base_url: 'not a url' }, 'upstream_base_url'],
      [{ ...base, upstream_base_url: 'ftp://host/v1' }, 'upstream_base_url'],
      [{ ...base, upstream_base_url: 'http://user:pw@host/v1' }, 'upstream_base_url'],
      [{ ...base, upstream_base_url: 'http://host/v1?x=1' }, 'upstream_base_url'],
      [{ ...base, upstream_model: '' }, 'upstream_model'],
      [{ ...base, upstream_api_key: '' }, 'upstream_api_key'],
      [{ ...base, upstream_api_key: 5 }, 'upstream_api_key'],
      [{ ...base, context_window: 0 }, 'context_window'],
      [{ ...base, max_output_tokens: 1.5 }, 'max_output_tokens'],
      [{ ...base, max_output_tokens: 200_000 }, 'max_output_tokens'],
      [noStreaming, 'supports_streaming'],
      [{ ...base, active: 'yes' }, 'active'],
      [{ ...base, input_price_per_million_credits: -1 }, 'input_price_per_million_credits'],
      [{ ...base, output_price_per_million_credits: 0.5 }, 'output_price_per_million_credits'],
      [{ ...base, cache_write_price_per_million_credits: 1e12 }, 'cache_write_price_per_million_credits'],
      [{ ...base, upstreamApiKey: 'sk' }, 'upstreamApiKey'],
    ];
    for (const [body, param] of cases) {
      const res = await putModel(p, 'bad-model', body);
      expectError(res, 400, 'invalid_request', { param, label: param });
    }
    const notJson = await putModel(p, 'bad-model', '[]');
    expectError(notJson, 400, 'invalid_json');
    expect((await listModels(p)).body.data.map((m: { id: string }) => m.id)).not.toContain('bad-model');
    const unknown = await svc.call('PUT', '/v1/admin/projects/proj_none/models/m', { key: p.adminKey, body: base });
    expectError(unknown, 404, 'not_found');
  });
});

describe('upstream keys at rest', () => {
  it('stores the key only encrypted; findModel decrypts it; another master key cannot', async () => {
    const secret = upstreamKey();
    await putModel(p, 'enc', { ...base, upstream_api_key: secret });
    const stored = await ciphertextOf(p.projectId, 'enc');
    expect(stored).not.toBeNull();
    expect(stored!.includes(Buffer.from(secret))).toBe(false);
    expect(stored![0]).toBe(1);
    expect(stored!.length).toBe(1 + 12 + 16 + Buffer.byteLength(secret));

    const models = createModelQueries(svc.rt.db, masterKey);
    const found = await models.findModel(p.projectId, 'enc');
    expect(found).toMatchObject({ id: 'enc', upstream_api_key: secret, has_upstream_key: true, upstream_base_url: 'http://127.0.0.1:4010/v1' });
    await expect(createModelQueries(svc.rt.db, randomBytes(32)).findModel(p.projectId, 'enc')).rejects.toThrow(/cannot be decrypted/);
    expect(await models.findModel(p.projectId, 'absent')).toBeNull();
  });

  it('a ciphertext copied onto another model does not decrypt there', async () => {
    await putModel(p, 'donor', { ...base, upstream_api_key: upstreamKey() });
    await putModel(p, 'thief', base);
    await svc.rt.db.query(sql.unsafe`
      UPDATE models SET upstream_key_ciphertext = (SELECT upstream_key_ciphertext FROM models WHERE project_id = ${p.projectId} AND id = 'donor')
      WHERE project_id = ${p.projectId} AND id = 'thief'`);
    await expect(createModelQueries(svc.rt.db, masterKey).findModel(p.projectId, 'thief')).rejects.toThrow(/cannot be decrypted/);
  });

  it('a replace without upstream_api_key keeps the key, null removes it, a new one replaces it', async () => {
    const models = createModelQueries(svc.rt.db, masterKey);
    const first = upstreamKey();
    await putModel(p, 'rotating', { ...base, upstream_api_key: first });
    const kept = await putModel(p, 'rotating', { ...base, upstream_model: 'other' });
    expect(kept.body.has_upstream_key).toBe(true);
    expect((await models.findModel(p.projectId, 'rotating'))?.upstream_api_key).toBe(first);
    const second = upstreamKey();
    await putModel(p, 'rotating', { ...base, upstream_api_key: second });
    expect((await models.findModel(p.projectId, 'rotating'))?.upstream_api_key).toBe(second);
    const removed = await putModel(p, 'rotating', { ...base, upstream_api_key: null });
    expect(removed.body.has_upstream_key).toBe(false);
    expect(await ciphertextOf(p.projectId, 'rotating')).toBeNull();
    expect((await models.findModel(p.projectId, 'rotating'))?.upstream_api_key).toBeNull();
  });
});

describe('model lists', () => {
  it('listActiveModels gives the active models of one project only, by id', async () => {
    const q = await svc.project('B');
    const other = await svc.project('B');
    await putModel(q, 'zeta', base);
    await putModel(q, 'alpha', base);
    await putModel(q, 'off', { ...base, active: false });
    await putModel(other, 'foreign', base);
    const models = createModelQueries(svc.rt.db, masterKey);
    expect((await models.listActiveModels(q.projectId)).map((m) => m.id)).toEqual(['alpha', 'zeta']);
    expect(await models.findModel(q.projectId, 'foreign')).toBeNull();
    const adminList = await listModels(q);
    expect(adminList.body.data.map((m: { id: string; active: boolean }) => [m.id, m.active])).toEqual([['off', false], ['alpha', true], ['zeta', true]]);
    const page = await svc.call('GET', `/v1/admin/projects/${q.projectId}/models?limit=2`, { key: q.adminKey });
    const rest = await svc.call('GET', `/v1/admin/projects/${q.projectId}/models?limit=2&cursor=${page.body.next_cursor}`, { key: q.adminKey });
    expect([...page.body.data, ...rest.body.data]).toEqual(adminList.body.data);
  });
});

describe('master key', () => {
  it('reads 32 bytes as hex or base64 and refuses anything else', () => {
    const key = randomBytes(32);
    expect(parseMasterKey(key.toString('hex'))).toEqual(key);
    expect(parseMasterKey(key.toString('base64'))).toEqual(key);
    expect(parseMasterKey(`${key.toString('base64url')}\n`)).toEqual(key);
    for (const bad of [randomBytes(16).toString('hex'), randomBytes(31).toString('base64'), 'not a key!', '']) {
      expect(() => parseMasterKey(bad)).toThrow(/32 bytes/);
    }
  });

  it('is required in production and otherwise created once in .svc-master-key with mode 0600', () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-master-'));
    try {
      expect(() => loadMasterKey({ NODE_ENV: 'production', SVC_MASTER_KEY: undefined }, dir)).toThrow(/SVC_MASTER_KEY is required/);
      const first = loadMasterKey({ NODE_ENV: 'development', SVC_MASTER_KEY: undefined }, dir);
      const path = join(dir, master_key_file);
      expect(statSync(path).mode & 0o777).toBe(0o600);
      expect(parseMasterKey(readFileSync(path, 'utf8'))).toEqual(first);
      expect(loadMasterKey({ NODE_ENV: 'test', SVC_MASTER_KEY: '' }, dir)).toEqual(first);
      const given = randomBytes(32);
      expect(loadMasterKey({ NODE_ENV: 'production', SVC_MASTER_KEY: given.toString('hex') }, dir)).toEqual(given);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('encrypts with a fresh IV each time and detects any altered byte', () => {
    const key = randomBytes(32);
    const a = encryptSecret(key, 'sk-same', 'ad');
    const b = encryptSecret(key, 'sk-same', 'ad');
    expect(a.equals(b)).toBe(false);
    expect(decryptSecret(key, a, 'ad')).toBe('sk-same');
    expect(() => decryptSecret(key, a, 'other')).toThrow(/cannot be decrypted/);
    for (const i of [1, 13, 29, a.length - 1]) {
      const altered = Buffer.from(a);
      altered[i] ^= 1;
      expect(() => decryptSecret(key, altered, 'ad')).toThrow(/cannot be decrypted/);
    }
    const otherVersion = Buffer.from(a);
    otherVersion[0] = 2;
    expect(() => decryptSecret(key, otherVersion, 'ad')).toThrow(/unknown format/);
  });
});
