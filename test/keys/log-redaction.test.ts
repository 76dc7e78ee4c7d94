/**
 * Secrets never reach the logs (docs/API.md: keys are shown once, upstream keys "never
 * returned or logged"). A real API process (`src/web.ts`, its own logger on stdout) runs
 * at LOG_LEVEL=debug beside the test's service; requests carry a project key in
 * Authorization, a customer key and a new key in x-api-key, an admin key that creates a
 * key (the answer holds the secret), a model PUT with an upstream key, a mistyped key, a
 * body that does not parse, and gateway calls that fail upstream and are logged. The
 * access log lines of those requests must be in the output (logging is on), and no
 * secret anywhere in it.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { OPENAI_MODEL, closedPort, modelBody, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { spawnService, type ServiceProcess } from '../support/processes.js';

let env: GatewayEnv;
let api: ServiceProcess;

beforeAll(async () => {
  env = await startGatewayEnv();
  const config = env.svc.rt.config;
  api = await spawnService('src/web.ts', {
    LOG_LEVEL: 'debug',
    REDIS_PREFIX: config.REDIS_PREFIX,
    QUEUE_PREFIX: config.QUEUE_PREFIX,
    DATABASE_URL: process.env.TEST_DATABASE_URL!,
    SVC_MASTER_KEY: config.SVC_MASTER_KEY!,
  });
});
afterAll(async () => {
  await api?.kill();
  await env?.close();
});

interface LogLine {
  level: number;
  msg?: string;
  err?: unknown;
  method?: string;
  path?: string;
  status?: number;
}

function logLines(): LogLine[] {
  return api
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as LogLine);
}

/** Waits for the asynchronous logger to write what is expected, or fails with what it wrote. */
async function waitForLines(expected: ((lines: LogLine[]) => boolean)[]): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!expected.every((e) => e(logLines()))) {
    if (Date.now() > deadline) throw new Error(`expected log lines missing; output:\n${api.output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const accessLine = (method: string, path: string, status: number) => (lines: LogLine[]) =>
  lines.some((l) => l.msg === 'request' && l.method === method && l.path === path && l.status === status);

async function send(method: string, path: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) };
}

describe('log redaction', () => {
  it('logs each request but none of the secrets it carried', async () => {
    const p = env.p;
    await env.fund('logged', 10_000_000);
    const customerKey = await p.customerKey('logged');
    const upstreamSecret = `sk-log-${randomBytes(12).toString('hex')}`;
    const mistyped = `svc_live_${randomBytes(32).toString('base64url')}`;
    const bodySecret = `svc_live_${randomBytes(32).toString('base64url')}`;
    const expected: ((lines: LogLine[]) => boolean)[] = [];
    const expectStatus = async (method: string, path: string, status: number, r: Promise<{ status: number; text: string }>) => {
      const res = await r;
      expect([method, path, res.status], res.text).toEqual([method, path, status]);
      expected.push(accessLine(method, path, status));
      return res;
    };

    await expectStatus('GET', '/v1/customers/logged', 200, send('GET', '/v1/customers/logged', { authorization: `Bearer ${p.projectKey}` }));
    await expectStatus('GET', '/v1/customers/logged/balance', 200, send('GET', '/v1/customers/logged/balance', { 'x-api-key': customerKey }));
    await expectStatus('GET', '/v1/customers/logged/ledger', 401, send('GET', '/v1/customers/logged/ledger', { authorization: `Bearer ${mistyped}` }));

    // The Free plan's two keys are taken; a paid plan makes room for one more.
    await expectStatus('PUT', '/v1/admin/organization/plan', 200, send('PUT', '/v1/admin/organization/plan', { authorization: `Bearer ${p.adminKey}` }, { plan: 'pro_500k' }));
    const keysPath = `/v1/admin/projects/${p.projectId}/keys`;
    const created = await expectStatus('POST', keysPath, 201, send('POST', keysPath, { authorization: `Bearer ${p.adminKey}` }, { type: 'customer', customer_id: 'logged' }));
    const newKey = JSON.parse(created.text).key as string;
    expect(newKey).toMatch(/^svc_customer_/);
    await expectStatus('GET', '/v1/models', 200, send('GET', '/v1/models', { 'x-api-key': newKey }));

    // A model whose upstream key is the mock's (so calls get through), and one whose key is
    // only ever sent in the PUT and to an upstream nobody listens on.
    const loggedModel = `/v1/admin/projects/${p.projectId}/models/logged-model`;
    await expectStatus('PUT', loggedModel, 201, send('PUT', loggedModel, { authorization: `Bearer ${p.adminKey}` }, modelBody(env.mock, env.upstreamKey, 'openai')));
    const deadModel = `/v1/admin/projects/${p.projectId}/models/dead-model`;
    const deadBody = modelBody(env.mock, upstreamSecret, 'openai', { upstream_base_url: `http://127.0.0.1:${await closedPort()}/v1` });
    await expectStatus('PUT', deadModel, 201, send('PUT', deadModel, { authorization: `Bearer ${p.adminKey}` }, deadBody));

    // A body that does not parse, with a key inside it.
    await expectStatus('POST', '/v1/billing/deduct', 400, send('POST', '/v1/billing/deduct', { authorization: `Bearer ${p.projectKey}` }, `{"customer_id": "logged", "note": "${bodySecret}"`));

    // Gateway calls: one settled, one the upstream breaks off (logged as a warning with the
    // error), one to an unreachable upstream with the other upstream key.
    const chat = (model: string, controls: Record<string, unknown> = {}) => ({ model, stream: true, messages: [{ role: 'user', content: `hi ${mockDirective({ output_tokens: 3, ...controls })}` }] });
    const gw = { authorization: `Bearer ${p.projectKey}`, 'x-service-customer': 'logged' };
    const ok = await expectStatus('POST', '/v1/chat/completions', 200, send('POST', '/v1/chat/completions', gw, chat('logged-model')));
    expect(ok.text).toContain('[DONE]');
    const broken = await send('POST', '/v1/chat/completions', { 'x-api-key': customerKey }, chat(OPENAI_MODEL, { fail: 'midstream' }));
    expect(broken.status).toBe(200);
    expect(broken.text).not.toContain('[DONE]');
    await expectStatus('POST', '/v1/chat/completions', 502, send('POST', '/v1/chat/completions', gw, chat('dead-model')));
    expected.push((lines) => lines.some((l) => l.level >= 40 && l.msg === 'upstream stream failed' && l.err !== undefined));

    await waitForLines(expected);
    const output = api.output();
    const secrets = {
      projectKey: p.projectKey,
      customerKey,
      adminKey: p.adminKey,
      newKey,
      mistyped,
      bodySecret,
      mockUpstreamKey: env.upstreamKey,
      upstreamSecret,
    };
    for (const [name, secret] of Object.entries(secrets)) {
      // The whole secret, and its random part alone (a log could strip the prefix).
      const random = secret.replace(/^(svc_(live|customer|admin)_|sk-(log|upstream)-)/, '');
      expect(random.length).toBeGreaterThanOrEqual(16);
      expect([name, output.includes(secret), output.includes(random)]).toEqual([name, false, false]);
    }
  });
});
