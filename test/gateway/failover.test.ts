/**
 * Resilient routing (docs/API.md, "Upstreams and failover"): a model with several
 * upstreams fails over, before any byte reached the client, from one that refuses the
 * connection, one that hangs before its first byte and one that answers 429 with
 * retry-after (skipped by the next calls until then); never after a streamed event went
 * out. A call is held once and billed once whatever its attempts; its receipt, its
 * X-Service-Upstream header and its usage record name the upstream that served and every
 * attempt. A circuit opens after consecutive failures; all upstreams failing releases the hold.
 * The upstreams are mock upstreams (several, each failing its own way) and closed ports.
 */
import net from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mockDirective, type MockControls } from '../../src/gateway/mock/controls.js';
import { retryAfterMs } from '../../src/gateway/failover.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { closedPort, expectedCost, modelBody, rawPost, sseData, startGatewayEnv, type GatewayEnv, type RawResponse } from './support.js';

let env: GatewayEnv;
let hanging: MockUpstream;
let limited: MockUpstream;
let cutting: MockUpstream;
let failing: MockUpstream;
let quiet: MockUpstream;
let stalling: MockUpstream;
let downUrl: string;
let silent: net.Server;
const silentSockets: net.Socket[] = [];

const first_byte_ms = 300;
const idle_ms = 300;
const connect_ms = 300;

beforeAll(async () => {
  env = await startGatewayEnv();
  const opts = { requireKey: env.upstreamKey };
  hanging = await startMockUpstream({ ...opts, latencyMs: 5_000 });
  limited = await startMockUpstream({ ...opts, controls: { fail: 429, retry_after: 1 } });
  cutting = await startMockUpstream({ ...opts, controls: { fail: 'midstream', output_tokens: 20 } });
  failing = await startMockUpstream({ ...opts, controls: { fail: 503 } });
  // Headers, then silence before the first event; or the first 3 events, then silence.
  quiet = await startMockUpstream({ ...opts, controls: { pause_before: 1, pause_ms: 5_000 } });
  stalling = await startMockUpstream({ ...opts, controls: { pause_before: 4, pause_ms: 5_000 } });
  downUrl = `http://127.0.0.1:${await closedPort()}/v1`;
  // Accepts the TCP connection and never says a word: an https connection to it never
  // completes its TLS handshake, which undici counts in its connect timeout.
  silent = net.createServer((socket) => silentSockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
});
afterAll(async () => {
  await env?.close();
  await Promise.all([hanging, limited, cutting, failing, quiet, stalling].map((m) => m?.close()));
  for (const socket of silentSockets) socket.destroy();
  await new Promise((resolve) => silent?.close(resolve));
});
// In list order: the first upstream that is neither tried, cooling down nor open.
beforeEach(() => {
  env.svc.rt.upstream.router.random = () => 0;
});

const upstream = (id: string, base_url: string) => ({ id, base_url });

async function model(id: string, upstreams: { id: string; base_url: string }[], timeouts: Record<string, number> = { first_byte_ms }) {
  await env.putModel(id, { provider: 'openai', upstreams, timeouts });
}

function chat(modelId: string, customer: string, o: { stream?: boolean; controls?: MockControls } = {}): Promise<RawResponse> {
  return rawPost(env.svc.url, '/v1/chat/completions', {
    key: env.p.projectKey,
    headers: { 'x-service-customer': customer },
    body: {
      model: modelId,
      messages: [{ role: 'user', content: `route me somewhere ${mockDirective({ output_tokens: 7, ...o.controls })}` }],
      ...(o.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    },
  });
}

async function receipt(txid: string) {
  const r = await env.svc.call('GET', `/v1/billing/receipts/${txid}`, { key: env.p.projectKey });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as { upstream: string; attempts: { upstream: string; outcome: number | string; ms: number }[]; cost_credits: number; usage_estimated: boolean };
}

/** Held once, billed once: one GATEWAY entry, nothing left frozen, charged the cost. */
async function expectBilledOnce(customer: string, txid: string, cost: number) {
  const gateway = await env.ledger(customer, 'GATEWAY');
  expect(gateway.map((e) => e.transaction_id)).toEqual([txid]);
  const balance = await env.balance(customer);
  expect(balance.frozen).toBe(0);
  expect(balance.used).toBe(cost);
}

const outcomes = (r: { attempts: { upstream: string; outcome: number | string }[] }) => r.attempts.map((a) => [a.upstream, a.outcome]);

describe('fails over before anything reached the client', () => {
  it('from an upstream that refuses the connection: the next serves, billed once, named', async () => {
    await model('gpt-refusing', [upstream('down', downUrl), upstream('up', env.mock.url)]);
    await env.fund('fo-refused', 1_000_000);
    const res = await chat('gpt-refusing', 'fo-refused');
    expect(res.status, res.text).toBe(200);
    expect(res.headers['x-service-upstream']).toBe('up');
    const txid = String(res.headers['x-service-transaction-id']);
    const r = await receipt(txid);
    expect(r.upstream).toBe('up');
    expect(outcomes(r)).toEqual([['down', 'unreachable'], ['up', 200]]);
    expect(r.cost_credits).toBe(Number(res.headers['x-service-cost-credits']));
    await expectBilledOnce('fo-refused', txid, r.cost_credits);
    // The usage record in PostgreSQL keeps them too.
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?customer_id=fo-refused', { key: env.p.projectKey });
    expect(usage.body.data).toEqual([expect.objectContaining({ upstream: 'up', attempts: [expect.objectContaining({ upstream: 'down', outcome: 'unreachable' }), expect.objectContaining({ upstream: 'up', outcome: 200 })] })]);
  });

  it('from an upstream that hangs before its first byte (first_byte_ms), streamed', async () => {
    await model('gpt-hanging', [upstream('slow', hanging.url), upstream('up', env.mock.url)]);
    await env.fund('fo-hang', 1_000_000);
    const started = Date.now();
    const res = await chat('gpt-hanging', 'fo-hang', { stream: true });
    expect(res.status, res.text).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(first_byte_ms - 20);
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(res.headers['x-service-upstream']).toBe('up');
    expect(sseData(res.text).at(-1)).toBe('[DONE]');
    const txid = String(res.headers['x-service-transaction-id']);
    const r = await receipt(txid);
    expect(outcomes(r)).toEqual([['slow', 'timeout'], ['up', 200]]);
    expect(r.cost_credits).toBe(Number(res.trailers['x-service-cost-credits']));
    await expectBilledOnce('fo-hang', txid, r.cost_credits);
  });

  it('from an upstream slower than first_byte_ms, a whole answer', async () => {
    await model('gpt-slow-whole', [upstream('slow', hanging.url), upstream('up', env.mock.url)]);
    await env.fund('fo-slow-whole', 1_000_000);
    const started = Date.now();
    const res = await chat('gpt-slow-whole', 'fo-slow-whole');
    expect(res.status, res.text).toBe(200);
    expect(Date.now() - started).toBeLessThan(4_000);
    const txid = String(res.headers['x-service-transaction-id']);
    const r = await receipt(txid);
    expect(outcomes(r)).toEqual([['slow', 'timeout'], ['up', 200]]);
    expect(r.cost_credits).toBe(expectedCost({ input: Number(res.json().usage.prompt_tokens), output: 7 }));
    await expectBilledOnce('fo-slow-whole', txid, r.cost_credits);
  });

  it('from a stream that goes quiet longer than idle_ms before its first event', async () => {
    await model('gpt-quiet', [upstream('quiet', quiet.url), upstream('up', env.mock.url)], { idle_ms });
    await env.fund('fo-quiet', 1_000_000);
    const started = Date.now();
    const res = await chat('gpt-quiet', 'fo-quiet', { stream: true });
    expect(res.status, res.text).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(idle_ms - 20);
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(res.headers['x-service-upstream']).toBe('up');
    expect(sseData(res.text).at(-1)).toBe('[DONE]');
    const txid = String(res.headers['x-service-transaction-id']);
    const r = await receipt(txid);
    expect(outcomes(r)).toEqual([['quiet', 'timeout'], ['up', 200]]);
    expect(r.usage_estimated).toBe(false);
    expect(r.cost_credits).toBe(Number(res.trailers['x-service-cost-credits']));
    await expectBilledOnce('fo-quiet', txid, r.cost_credits);
  });

  it('from an upstream whose connection does not complete within connect_ms', async () => {
    const port = (silent.address() as net.AddressInfo).port;
    await model('gpt-connecting', [upstream('silent', `https://127.0.0.1:${port}/v1`), upstream('up', env.mock.url)], { connect_ms });
    await env.fund('fo-connect', 1_000_000);
    const started = Date.now();
    const res = await chat('gpt-connecting', 'fo-connect');
    expect(res.status, res.text).toBe(200);
    // undici checks its connect timeout on a coarse timer (about a second), never near the 10 s default.
    expect(Date.now() - started).toBeLessThan(4_000);
    const txid = String(res.headers['x-service-transaction-id']);
    const r = await receipt(txid);
    expect(outcomes(r)).toEqual([['silent', 'timeout'], ['up', 200]]);
    await expectBilledOnce('fo-connect', txid, r.cost_credits);
  });

  it("from a 429 with retry-after: later calls skip that upstream without trying it until the time passed", async () => {
    await model('gpt-limited', [upstream('limited', limited.url), upstream('up', env.mock.url)]);
    await env.fund('fo-429', 1_000_000);
    const one = await chat('gpt-limited', 'fo-429');
    expect(one.status, one.text).toBe(200);
    expect(outcomes(await receipt(String(one.headers['x-service-transaction-id'])))).toEqual([['limited', 429], ['up', 200]]);
    const sentToLimited = limited.requests.length;

    const two = await chat('gpt-limited', 'fo-429');
    expect(two.status).toBe(200);
    // Skipped, not tried: recorded with its reason and 0 ms.
    const skipped = await receipt(String(two.headers['x-service-transaction-id']));
    expect(outcomes(skipped)).toEqual([['limited', 'cooling_down'], ['up', 200]]);
    expect(skipped.attempts[0]!.ms).toBe(0);
    expect(limited.requests.length).toBe(sentToLimited);
    const read = await env.svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models?limit=100`, { key: env.p.adminKey });
    const [cooling] = (read.body.data as { id: string; upstreams: { state: string; cooling_until: string }[] }[]).find((m) => m.id === 'gpt-limited')!.upstreams;
    expect(cooling!.state).toBe('cooling');
    expect(Date.parse(cooling!.cooling_until)).toBeGreaterThan(Date.now());

    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const three = await chat('gpt-limited', 'fo-429');
    expect(outcomes(await receipt(String(three.headers['x-service-transaction-id'])))).toEqual([['limited', 429], ['up', 200]]);
    expect(limited.requests.length).toBe(sentToLimited + 1);
    const gateway = await env.ledger('fo-429', 'GATEWAY');
    expect(gateway).toHaveLength(3);
  });
});

describe('never fails over once a byte reached the client', () => {
  it('a stream cut after its first events is billed as a cut stream, the next upstream never asked', async () => {
    await model('gpt-cutting', [upstream('cut', cutting.url), upstream('up', env.mock.url)]);
    await env.fund('fo-cut', 1_000_000);
    const sentToGood = env.mock.requests.length;
    const res = await chat('gpt-cutting', 'fo-cut', { stream: true, controls: { output_tokens: 20 } });
    expect(res.status).toBe(200);
    expect(res.headers['x-service-upstream']).toBe('cut');
    expect(sseData(res.text).length).toBeGreaterThan(0);
    expect(env.mock.requests.length).toBe(sentToGood);
    const txid = String(res.headers['x-service-transaction-id']);
    const r = await receipt(txid);
    expect(outcomes(r)).toEqual([['cut', 200]]);
    expect(r.usage_estimated).toBe(true);
    expect(r.cost_credits).toBeGreaterThan(0);
    await expectBilledOnce('fo-cut', txid, r.cost_credits);
  });

  it('a stream that goes quiet longer than idle_ms after its first events is cut, billed as a cut stream', async () => {
    await model('gpt-stalling', [upstream('stall', stalling.url), upstream('up', env.mock.url)], { idle_ms });
    await env.fund('fo-stall', 1_000_000);
    const sentToGood = env.mock.requests.length;
    const res = await chat('gpt-stalling', 'fo-stall', { stream: true });
    expect(res.status).toBe(200);
    expect(res.headers['x-service-upstream']).toBe('stall');
    const events = sseData(res.text);
    expect(events.length).toBeGreaterThan(0);
    expect(events).not.toContain('[DONE]');
    expect(env.mock.requests.length).toBe(sentToGood);
    const txid = String(res.headers['x-service-transaction-id']);
    const r = await receipt(txid);
    expect(outcomes(r)).toEqual([['stall', 200]]);
    expect(r.usage_estimated).toBe(true);
    expect(r.cost_credits).toBe(Number(res.trailers['x-service-cost-credits']));
    await expectBilledOnce('fo-stall', txid, r.cost_credits);
  });
});

describe('circuits and exhaustion', () => {
  it('a circuit opens after consecutive failures: later calls skip it, /metrics and the model screen show it', async () => {
    await model('gpt-breaking', [upstream('flaky', failing.url), upstream('up', env.mock.url)]);
    await env.fund('fo-breaker', 10_000_000);
    for (let i = 0; i < 5; i++) {
      const res = await chat('gpt-breaking', 'fo-breaker');
      expect(res.status).toBe(200);
      expect(outcomes(await receipt(String(res.headers['x-service-transaction-id'])))).toEqual([['flaky', 503], ['up', 200]]);
    }
    const sentToFlaky = failing.requests.length;
    const after = await chat('gpt-breaking', 'fo-breaker');
    expect(outcomes(await receipt(String(after.headers['x-service-transaction-id'])))).toEqual([['flaky', 'circuit_open'], ['up', 200]]);
    expect(failing.requests.length).toBe(sentToFlaky);
    expect(await env.ledger('fo-breaker', 'GATEWAY')).toHaveLength(6);

    const { body } = await env.svc.rt.metrics.exposition();
    expect(body).toContain('svc_gateway_upstream_circuit_open{model="gpt-breaking",upstream="flaky"} 1');
    expect(body).toContain('svc_gateway_failovers_total{model="gpt-breaking",upstream="flaky"} 5');
    expect(body).toContain('svc_gateway_upstream_attempts_total{model="gpt-breaking",upstream="flaky",outcome="503"} 5');
    expect(body).toContain('svc_gateway_upstream_attempts_total{model="gpt-breaking",upstream="up",outcome="200"} 6');
    // The model read (what the dashboard's model screen shows) says so too.
    const read = await env.svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models?limit=100`, { key: env.p.adminKey });
    expect((read.body.data as Record<string, unknown>[]).find((m) => m.id === 'gpt-breaking')!.upstreams).toEqual([
      expect.objectContaining({ id: 'flaky', state: 'circuit_open', cooling_until: null }),
      expect.objectContaining({ id: 'up', state: 'ok', cooling_until: null }),
    ]);
  });

  it('every upstream failing: the hold is released, the last error answered, every attempt recorded', async () => {
    await model('gpt-all-down', [upstream('down', downUrl), upstream('flaky', failing.url)]);
    await env.fund('fo-down', 1_000_000);
    const res = await chat('gpt-all-down', 'fo-down', { controls: {} });
    // The last upstream's own answer, relayed as it came.
    expect(res.status).toBe(503);
    expect(res.headers['x-service-upstream']).toBe('flaky');
    expect(await env.ledger('fo-down', 'GATEWAY')).toEqual([]);
    const balance = await env.balance('fo-down');
    expect(balance.frozen).toBe(0);
    expect(balance.used).toBe(0);
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?customer_id=fo-down', { key: env.p.projectKey });
    expect(usage.body.data).toEqual([
      expect.objectContaining({ status: 'failed', upstream: 'flaky', attempts: [expect.objectContaining({ upstream: 'down', outcome: 'unreachable' }), expect.objectContaining({ upstream: 'flaky', outcome: 503 })] }),
    ]);
  });

  it('every upstream unreachable: the 502 names the upstreams tried and the last one; the usage record is found by trace id', async () => {
    await model('gpt-unreachable', [upstream('a', downUrl), upstream('b', downUrl)]);
    await env.fund('fo-unreachable', 1_000_000);
    const res = await rawPost(env.svc.url, '/v1/chat/completions', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'fo-unreachable', 'x-service-trace-id': 'fo-trace-unreachable' },
      body: { model: 'gpt-unreachable', messages: [{ role: 'user', content: 'anyone?' }] },
    });
    expect(res.status, res.text).toBe(502);
    expect(res.json().error.code).toBe('upstream_error');
    expect(res.json().error.message).toMatch(/; tried: a \(unreachable\), b \(unreachable\)$/);
    expect(res.headers['x-service-upstream']).toBe('b');
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?trace_id=fo-trace-unreachable', { key: env.p.projectKey });
    expect(usage.body.data).toEqual([
      expect.objectContaining({ status: 'failed', attempts: [expect.objectContaining({ upstream: 'a', outcome: 'unreachable' }), expect.objectContaining({ upstream: 'b', outcome: 'unreachable' })] }),
    ]);
  });

  it('every upstream cooling down: the last 429 is relayed with its retry-after, then a 502 with Retry-After until the first is free', async () => {
    await model('gpt-all-limited', [upstream('a', limited.url), upstream('b', limited.url)]);
    await env.fund('fo-all-limited', 1_000_000);
    const first = await chat('gpt-all-limited', 'fo-all-limited');
    expect(first.status).toBe(429);
    expect(first.headers['retry-after']).toBe('1');
    expect(first.headers['x-service-upstream']).toBe('b');
    const second = await chat('gpt-all-limited', 'fo-all-limited');
    expect(second.status, second.text).toBe(502);
    expect(second.json().error.message).toContain('every upstream of model gpt-all-limited is cooling down');
    expect(second.headers['retry-after']).toBe('1');
    expect(second.headers['x-service-upstream']).toBeUndefined();
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?customer_id=fo-all-limited', { key: env.p.projectKey });
    const attempts = (usage.body.data as { attempts: { upstream: string; outcome: string; ms: number }[] }[]).map((u) => u.attempts);
    expect(attempts).toContainEqual([
      { upstream: 'a', outcome: 'cooling_down', ms: 0 },
      { upstream: 'b', outcome: 'cooling_down', ms: 0 },
    ]);
    expect(await env.balance('fo-all-limited')).toMatchObject({ frozen: 0, used: 0 });
  });

  it("an upstream's 429 is relayed with its retry-after and rate-limit headers, natively and translated, nothing else of its headers", async () => {
    await env.putModel('gpt-one-limited', { provider: 'openai', upstream_base_url: limited.url });
    await env.fund('fo-one-limited', 1_000_000);
    const native = await chat('gpt-one-limited', 'fo-one-limited');
    expect(native.status).toBe(429);
    expect(native.headers).toMatchObject({ 'retry-after': '1', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '1s' });
    expect(native.headers['x-request-id']).toBeUndefined();
    // The service's own X-RateLimit-Limit is kept, not the upstream's.
    expect(native.headers['x-ratelimit-limit']).toBe(String(await serviceRateLimit()));
    const translated = await rawPost(env.svc.url, '/v1/messages', {
      key: env.p.projectKey,
      headers: { 'x-service-customer': 'fo-one-limited', 'anthropic-version': '2023-06-01' },
      body: { model: 'gpt-one-limited', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(translated.status).toBe(429);
    expect(translated.json().type).toBe('error');
    expect(translated.headers).toMatchObject({ 'retry-after': '1', 'x-ratelimit-remaining-requests': '0' });
    expect(await env.balance('fo-one-limited')).toMatchObject({ frozen: 0, used: 0 });
  });

  it('a model without a list keeps its one upstream as `primary`, cost as before', async () => {
    await env.fund('fo-primary', 1_000_000);
    const res = await chat('gpt-test', 'fo-primary');
    expect(res.status).toBe(200);
    expect(res.headers['x-service-upstream']).toBe('primary');
    const r = await receipt(String(res.headers['x-service-transaction-id']));
    expect(outcomes(r)).toEqual([['primary', 200]]);
    expect(r.cost_credits).toBe(expectedCost({ input: Number(res.json().usage.prompt_tokens), output: 7 }));
  });
});

/** The service's own X-RateLimit-Limit, as a successful call carries it. */
async function serviceRateLimit(): Promise<number> {
  await env.fund('fo-limit-probe', 1_000_000);
  return Number((await chat('gpt-test', 'fo-limit-probe')).headers['x-ratelimit-limit']);
}

describe('the model write', () => {
  const path = (id: string) => `/v1/admin/projects/${env.p.projectId}/models/${id}`;

  it('lists the upstreams without their keys; a PATCH without a key keeps the stored one', async () => {
    await env.putModel('gpt-keyed', { provider: 'openai', upstreams: [{ id: 'a', base_url: env.mock.url, api_key: env.upstreamKey, weight: 3 }, { id: 'b', base_url: env.mock.url }], timeouts: { connect_ms: 2_000 } });
    const read = await env.svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models?limit=100`, { key: env.p.adminKey });
    const entry = (read.body.data as Record<string, unknown>[]).find((m) => m.id === 'gpt-keyed')!;
    expect(entry.upstreams).toEqual([
      { id: 'a', base_url: env.mock.url, upstream_model: null, weight: 3, has_api_key: true, uses_model_key: false, state: 'ok', cooling_until: null },
      { id: 'b', base_url: env.mock.url, upstream_model: null, weight: 1, has_api_key: false, uses_model_key: true, state: 'ok', cooling_until: null },
    ]);
    expect(entry.timeouts).toEqual({ connect_ms: 2_000 });
    expect(JSON.stringify(read.body)).not.toContain(env.upstreamKey);

    // The model's own key removed: `a` still calls with its own, `b` has none and is left out.
    const patched = await env.svc.call('PATCH', path('gpt-keyed'), { key: env.p.adminKey, body: { upstream_api_key: null, upstreams: [{ id: 'a', base_url: env.mock.url, weight: 3 }, { id: 'b', base_url: downUrl }] } });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect(patched.body.upstreams.map((u: Record<string, unknown>) => [u.id, u.has_api_key, u.uses_model_key])).toEqual([['a', true, false], ['b', false, false]]);
    await env.fund('fo-keyed', 1_000_000);
    const res = await chat('gpt-keyed', 'fo-keyed');
    expect(res.status, res.text).toBe(200);
    expect(outcomes(await receipt(String(res.headers['x-service-transaction-id'])))).toEqual([['a', 200]]);
  });

  it('byok_key_required counts the upstreams\' keys: keys only on the list is callable, no key anywhere is a 402', async () => {
    const put = (id: string, body: Record<string, unknown>) => env.svc.call('PUT', path(id), { key: env.p.adminKey, body: modelBody(env.mock, env.upstreamKey, 'openai', { upstream_api_key: undefined, ...body }) });
    const listKeyed = await put('gpt-list-keyed', { upstreams: [{ id: 'a', base_url: env.mock.url, api_key: env.upstreamKey }, { id: 'b', base_url: env.mock.url }] });
    expect(listKeyed.status, JSON.stringify(listKeyed.body)).toBe(201);
    expect(listKeyed.body).toMatchObject({ has_upstream_key: false, warnings: [] });
    const keyless = await put('gpt-keyless-list', { upstreams: [{ id: 'a', base_url: env.mock.url }, { id: 'b', base_url: env.mock.url }] });
    expect(keyless.body.warnings.map((w: { code: string }) => w.code)).toEqual(['byok_key_required']);
    expect(keyless.body.warnings[0].message).toContain('none of its upstreams has an api_key');

    await env.fund('fo-byok', 1_000_000);
    const served = await chat('gpt-list-keyed', 'fo-byok');
    expect(served.status, served.text).toBe(200);
    expect(outcomes(await receipt(String(served.headers['x-service-transaction-id'])))).toEqual([['a', 200]]);
    const refused = await chat('gpt-keyless-list', 'fo-byok');
    expect(refused.status).toBe(402);
    expect(refused.json().error.code).toBe('byok_key_required');
  });

  it('refuses a bad list, naming the field, and changes nothing', async () => {
    const cases: [unknown, string][] = [
      [[{ id: 'a', base_url: env.mock.url }, { id: 'a', base_url: env.mock.url }], 'upstreams.1.id'],
      [[{ id: 'a', base_url: env.mock.url, weight: 0 }], 'upstreams.0.weight'],
      [[{ id: 'a b', base_url: env.mock.url }], 'upstreams.0.id'],
      [[{ id: 'a', base_url: 'ftp://x' }], 'upstreams.0.base_url'],
      [[], 'upstreams'],
    ];
    for (const [upstreams, param] of cases) {
      const r = await env.svc.call('PATCH', path('gpt-refusing'), { key: env.p.adminKey, body: { upstreams } });
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_request', param });
    }
    const r = await env.svc.call('PATCH', path('gpt-refusing'), { key: env.p.adminKey, body: { timeouts: { first_byte_ms: 0 } } });
    expect(r.body.error).toMatchObject({ code: 'invalid_request', param: 'timeouts.first_byte_ms' });
    const read = await env.svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models?limit=100`, { key: env.p.adminKey });
    expect((read.body.data as Record<string, unknown>[]).find((m) => m.id === 'gpt-refusing')!.upstreams).toEqual([
      expect.objectContaining({ id: 'down' }),
      expect.objectContaining({ id: 'up' }),
    ]);
  });
});

describe('retry-after', () => {
  it('is read as seconds or as an HTTP date; anything else is no cooldown', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs('2', now)).toBe(now + 2_000);
    expect(retryAfterMs(['1.5'], now)).toBe(now + 1_500);
    expect(retryAfterMs('Thu, 01 Jan 2026 00:00:30 GMT', now)).toBe(now + 30_000);
    for (const none of [undefined, '', '0', '-3', 'soon']) expect(retryAfterMs(none, now)).toBe(0);
  });
});
