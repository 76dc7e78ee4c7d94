/**
 * Gateway calls that end without a normal settlement: a hold whose outcome was unknown
 * when the call failed (its reply lost, or on a Redis Cluster the receipt index not
 * written) is released once Redis answers, its index entry taken back, and a release sent twice releases once; a client that leaves before
 * the answer is billed its input at least (`client_aborted`), streamed or not, with
 * nothing left frozen; and a call in flight at the Free limit does not refuse an
 * operation that fits once it has failed.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countInputTokens, mockDirective } from '../../src/gateway/mock/controls.js';
import { periodAt } from '../../src/plans/catalogue.js';
import { detectCluster } from '../../src/redis/client.js';
import { ScriptStatus, type ScriptReply } from '../../src/redis/scripts.js';
import { ANTHROPIC_MODEL, expectedCost, OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv } from './support.js';
import { reconcileOverApi, testConfig } from '../helpers.js';

const clustered = await detectCluster(testConfig().REDIS_URL, undefined);

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env.close());

const user = (text: string) => [{ role: 'user' as const, content: text }];

async function until(what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('a hold whose outcome was unknown when the call failed', () => {
  it('is released once Redis answers again when the hold reply was lost; a second release changes nothing', async () => {
    await env.fund('lost-hold', 1_000_000);
    const ledger = env.svc.rt.ledger;
    const run = ledger.run.bind(ledger);
    const runBound = ledger.runBound.bind(ledger);
    let txid = '';
    let releasesRefused = 0;
    // The hold's script (on a single Redis the one that writes the receipt index entry
    // too) runs; its reply never arrives, as when the connection drops.
    ledger.runBound = async (...args: Parameters<typeof runBound>): Promise<ScriptReply> => {
      if (args[0] === 'gateway_hold' && args[2] === 'lost-hold') {
        txid = args[3];
        await runBound(...args);
        throw new Error('Command timed out');
      }
      return runBound(...args);
    };
    ledger.run = async (...args: Parameters<typeof run>): Promise<ScriptReply> => {
      if (args[0] === 'gateway_hold' && args[2] === 'lost-hold') {
        txid = String((args[3] as { transactionId: string }).transactionId);
        await run(...args);
        throw new Error('Command timed out');
      }
      // Redis does not answer the first two releases either.
      if (args[0] === 'gateway_release' && args[2] === 'lost-hold' && releasesRefused < 2) {
        releasesRefused++;
        throw new Error('Connection is closed.');
      }
      return run(...args);
    };
    try {
      const res = await rawPost(env.svc.url, '/v1/chat/completions', {
        key: env.p.projectKey,
        headers: { 'x-service-customer': 'lost-hold', 'x-service-trace-id': 'lost-hold' },
        body: { model: OPENAI_MODEL, messages: user('hi') },
      });
      expect(res.status).toBeGreaterThanOrEqual(500);
      expect(txid).not.toBe('');
      await until('the hold to be released', async () => (await env.balance('lost-hold')).frozen === 0);
      expect(releasesRefused).toBe(2);
    } finally {
      ledger.run = run;
      ledger.runBound = runBound;
    }
    expect(await env.balance('lost-hold')).toMatchObject({ used: 0, frozen: 0, available: 1_000_000 });
    // The receipt index entry the hold may have written was taken back.
    expect((await ledger.bindings.command(env.p.projectId, 't', txid, '', true)).owner).toBeNull();

    // Released before: a second release answers so and changes nothing.
    const scope = { projectId: env.p.projectId, organizationId: env.p.organizationId };
    const again = await ledger.run('gateway_release', scope, 'lost-hold', { transactionId: txid, usageRecord: JSON.stringify({ id: 'usage_again' }) });
    expect(again[0]).toBe(ScriptStatus.Replay);
    expect(await env.balance('lost-hold')).toMatchObject({ used: 0, frozen: 0, available: 1_000_000 });
    await env.svc.drained();
    const usage = await env.svc.call('GET', '/v1/usage?trace_id=lost-hold', { key: env.p.projectKey });
    expect(usage.body.data.map((u: { status: string; cost_credits: number }) => [u.status, u.cost_credits])).toEqual([['failed', 0]]);
    expect(await env.ledger('lost-hold', 'GATEWAY')).toEqual([]);
  });

  // Two commands on a Redis Cluster only: a single Redis writes the entry in the hold's
  // script (test/gateway/one-script.test.ts).
  it.runIf(clustered)('is released when the receipt-index write fails', async () => {
    await env.fund('no-index', 1_000_000);
    // The receipt index is the call's transaction binding (src/ledger/bindings.ts).
    const bindings = env.svc.rt.ledger.bindings;
    const command = bindings.command.bind(bindings);
    let failed = 0;
    bindings.command = (projectId, kind, id, owner, force) => {
      if (kind === 't' && owner === 'no-index') {
        failed++;
        return Promise.reject(new Error('Connection is closed.'));
      }
      return command(projectId, kind, id, owner, force);
    };
    try {
      const res = await rawPost(env.svc.url, '/v1/chat/completions', {
        key: env.p.projectKey,
        headers: { 'x-service-customer': 'no-index' },
        body: { model: OPENAI_MODEL, messages: user('hi') },
      });
      expect(res.status).toBeGreaterThanOrEqual(500);
      expect(failed).toBe(1);
    } finally {
      bindings.command = command;
    }
    await until('the hold to be released', async () => (await env.balance('no-index')).frozen === 0);
    expect(await env.balance('no-index')).toMatchObject({ used: 0, frozen: 0, available: 1_000_000 });
  });
});

/** Sends a call and hangs up once the mock upstream has it (it answers after 5 s). */
async function abortedCall(path: string, body: Record<string, unknown>, customer: string): Promise<number> {
  const marker = `abort-${customer}`;
  const payload = JSON.stringify({ ...body, metadata_marker: marker });
  const req = http.request(`${env.svc.url}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${env.p.projectKey}`,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(payload),
      'x-service-customer': customer,
      'x-service-trace-id': customer,
      'anthropic-version': '2023-06-01',
    },
  });
  req.on('error', () => undefined);
  req.end(payload);
  await until('the upstream to get the call', async () => env.mock.requests.some((r) => (r.body as { metadata_marker?: string })?.metadata_marker === marker));
  req.destroy();
  return Buffer.byteLength(payload);
}

describe('a client that leaves before the answer', () => {
  const late = mockDirective({ latency_ms: 5_000, output_tokens: 7 });
  it.each([
    ['a non-streamed OpenAI call', '/v1/chat/completions', { model: OPENAI_MODEL, messages: user(`tell me a story ${late}`) }, 'openai'],
    ['a non-streamed Anthropic call', '/v1/messages', { model: ANTHROPIC_MODEL, max_tokens: 100, messages: user(`tell me a story ${late}`) }, 'anthropic'],
    ['a streamed call (the upstream had not answered yet)', '/v1/chat/completions', { model: OPENAI_MODEL, stream: true, messages: user(`tell me a story ${late}`) }, 'openai'],
  ] as const)('%s is billed its input (estimated from the request size), client_aborted, nothing left frozen', async (_, path, body, format) => {
    const customer = `gone-${path.length}-${'stream' in body ? 's' : 'w'}`;
    await env.fund(customer, 1_000_000);
    const bytes = await abortedCall(path, body, customer);
    await until('the GATEWAY entry', async () => (await env.ledger(customer, 'GATEWAY')).length === 1);
    const [entry] = await env.ledger(customer, 'GATEWAY');
    const estimate = expectedCost({ input: Math.ceil(bytes / 4), output: 0 });
    expect(entry.amount).toBe(estimate);
    expect(entry.amount).toBeGreaterThanOrEqual(expectedCost({ input: countInputTokens(format, body), output: 0 }));
    expect(await env.balance(customer)).toMatchObject({ used: estimate, frozen: 0, available: 1_000_000 - estimate });
    await env.svc.drained();
    const usage = await env.svc.call('GET', `/v1/usage?trace_id=${customer}`, { key: env.p.projectKey });
    expect(usage.body.data).toEqual([expect.objectContaining({ status: 'client_aborted', usage_estimated: true, cost_credits: estimate, output_tokens: 0 })]);
  });
});

describe('a gateway call in flight at the Free limit', () => {
  it('does not refuse a deduct that fits once the call has failed', async () => {
    await env.fund('edge', 1_000_000);
    const plans = env.svc.rt.plans;
    await plans.organization(env.p.organizationId);
    const period = periodAt(await plans.organizationAnchor(env.p.organizationId), Date.now() + env.svc.rt.clock.offsetMs());
    await env.svc.rt.redis.set(`${env.svc.rt.config.REDIS_PREFIX}o:{${env.p.organizationId}}:ops:${period.startMs}`, 50_000 - 1);
    try {
      const failing = rawPost(env.svc.url, '/v1/chat/completions', {
        key: env.p.projectKey,
        headers: { 'x-service-customer': 'edge' },
        body: { model: OPENAI_MODEL, messages: user(`hi ${mockDirective({ latency_ms: 800, fail: 500 })}`) },
      });
      await until('the call to reach the upstream', async () => env.mock.requests.some((r) => JSON.stringify(r.body).includes('fail=500')));
      const deduct = await env.svc.call('POST', '/v1/billing/deduct', { key: env.p.projectKey, body: { customer_id: 'edge', transaction_id: 'edge-1', amount: 1 } });
      expect((await failing).status).toBe(500);
      expect(deduct.status, JSON.stringify(deduct.body)).toBe(200);
      expect(await env.ops()).toBe(50_000);
    } finally {
      await plans.setPlan(env.p.organizationId, 'pro_500k');
    }
  });
});

describe('after all of the above', () => {
  it('Redis and the ledger in PostgreSQL agree: reconcile finds no drift', async () => {
    await env.svc.drained();
    const report = await reconcileOverApi(env.svc, env.p);
    expect(report.errors).toEqual([]);
    expect(report.drift).toEqual([]);
  });
});
