/**
 * GET /metrics against a real service (Redis, PostgreSQL, the mock upstream): the counters
 * and histograms move with the right labels after a deduct, a gateway call and a streamed
 * one; the gauges read on a scrape (outbox, every queue, plan usage) are there; the API
 * port's default scrape names no organization; METRICS_PORT serves the scrape on its own
 * port (with the per-organization series) and the API's port answers 404; a worker's metrics
 * show a persist pass. Every metric name the Grafana dashboard (docs/grafana-dashboard.json)
 * uses is in a real scrape.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countInputTokens, mockDirective } from '../../src/gateway/mock/controls.js';
import { startTestService, waitFor, type TestService } from '../helpers.js';
import { ANTHROPIC_MODEL, expectedCost, OPENAI_MODEL, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { expectError } from '../support/errors.js';

/** One sample of a scrape: name, labels, value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the text exposition format (what Prometheus reads). */
function parse(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The value of the one sample with `name` and (at least) `labels`; 0 when absent. */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}

async function scrape(url: string): Promise<{ status: number; type: string | null; samples: Sample[]; text: string }> {
  const res = await fetch(`${url}/metrics`);
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type'), samples: res.status === 200 ? parse(text) : [], text };
}

describe('GET /metrics on the API port', () => {
  let env: GatewayEnv;
  let svc: TestService;
  beforeAll(async () => {
    // Opted in to the per-organization plan usage series on this port (the Grafana
    // dashboard's panels use them); the default is tested below.
    env = await startGatewayEnv({ config: { METRICS_ORGANIZATION_SERIES: true } });
    svc = env.svc;
    await env.putModel(ANTHROPIC_MODEL, { provider: 'anthropic' });
  }, 60_000);
  afterAll(async () => {
    await env?.close();
  });

  it('answers the text format without a key, with the default process metrics', async () => {
    const r = await scrape(svc.url);
    expect(r.status).toBe(200);
    expect(r.type).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(r.samples.some((s) => s.name === 'process_cpu_seconds_total')).toBe(true);
    expect(r.samples.some((s) => s.name === 'nodejs_eventloop_lag_seconds')).toBe(true);
  });

  it('counts a deduct by operation and outcome, and its request by route pattern and status', async () => {
    const customer = `m-${Date.now()}`;
    await env.fund(customer, 10_000);
    const before = (await scrape(svc.url)).samples;
    const ok = await svc.call('POST', '/v1/billing/deduct', { key: env.p.projectKey, body: { customer_id: customer, transaction_id: `${customer}-1`, amount: 100 } });
    expect(ok.status).toBe(200);
    const replay = await svc.call('POST', '/v1/billing/deduct', { key: env.p.projectKey, body: { customer_id: customer, transaction_id: `${customer}-1`, amount: 100 } });
    expect(replay.body.is_idempotent_replay).toBe(true);
    const poor = await svc.call('POST', '/v1/billing/deduct', { key: env.p.projectKey, body: { customer_id: customer, transaction_id: `${customer}-2`, amount: 1_000_000 } });
    expect(poor.status).toBe(400);
    // A customer read: a hot route with a parameter, labelled by its pattern.
    expect((await svc.call('GET', `/v1/customers/${customer}/balance`, { key: env.p.projectKey })).status).toBe(200);
    const after = (await scrape(svc.url)).samples;

    const ops = (outcome: string, s: Sample[]) => value(s, 'svc_ledger_operations_total', { operation: 'deduct', outcome });
    expect(ops('applied', after) - ops('applied', before)).toBe(1);
    expect(ops('replay', after) - ops('replay', before)).toBe(1);
    expect(ops('insufficient_balance', after) - ops('insufficient_balance', before)).toBe(1);

    const requests = (status: string, route: string, s: Sample[]) =>
      value(s, 'svc_http_request_duration_seconds_count', { method: 'POST', route, status });
    expect(requests('200', '/v1/billing/deduct', after) - requests('200', '/v1/billing/deduct', before)).toBe(2);
    expect(requests('400', '/v1/billing/deduct', after) - requests('400', '/v1/billing/deduct', before)).toBe(1);
    const reads = (s: Sample[]) => value(s, 'svc_http_request_duration_seconds_count', { method: 'GET', route: '/v1/customers/:customer_id/balance', status: '200' });
    expect(reads(after) - reads(before)).toBe(1);
    // Never a raw path, never a customer id in any label.
    for (const s of after) for (const v of Object.values(s.labels)) expect(v).not.toContain(customer);
  });

  it('labels requests the Express app answers by pattern, and unknown paths as unmatched', async () => {
    const before = (await scrape(svc.url)).samples;
    expect((await svc.call('GET', `/v1/admin/projects/${env.p.projectId}/models`, { key: env.p.adminKey })).status).toBe(200);
    expect((await svc.call('GET', `/no/such/path/${Date.now()}`)).status).toBe(404);
    const after = (await scrape(svc.url)).samples;
    const n = (labels: Record<string, string>, s: Sample[]) => value(s, 'svc_http_request_duration_seconds_count', labels);
    const models = { method: 'GET', route: '/v1/admin/projects/:project_id/models', status: '200' };
    expect(n(models, after) - n(models, before)).toBe(1);
    const unmatched = { method: 'GET', route: 'unmatched', status: '404' };
    expect(n(unmatched, after) - n(unmatched, before)).toBe(1);
    expect(after.some((s) => Object.values(s.labels).some((v) => v.startsWith('/no/such/path')))).toBe(false);
  });

  it('counts a gateway call by model, status and stream, with its upstream time, tokens and cost', async () => {
    const customer = `g-${Date.now()}`;
    await env.fund(customer, 10_000_000);
    const before = (await scrape(svc.url)).samples;
    const content = 'count these five words';
    const r = await env.openai({ customer }).chat.completions.create({ model: OPENAI_MODEL, messages: [{ role: 'user', content }], max_tokens: 7 });
    const input = r.usage!.prompt_tokens;
    expect(input).toBe(countInputTokens('openai', { messages: [{ role: 'user', content }] }));
    const output = r.usage!.completion_tokens;
    // A model nobody configured: counted under `unknown`, not under the name sent.
    await expect(env.openai({ customer }).chat.completions.create({ model: 'no-such-model-xyz', messages: [{ role: 'user', content }] })).rejects.toThrow();
    const after = (await scrape(svc.url)).samples;
    const d = (name: string, labels: Record<string, string>) => value(after, name, labels) - value(before, name, labels);

    expect(d('svc_gateway_calls_total', { model: OPENAI_MODEL, status: '200', stream: 'false' })).toBe(1);
    expect(d('svc_gateway_calls_total', { model: 'unknown', status: '404', stream: 'false' })).toBe(1);
    expect(after.some((s) => s.labels.model === 'no-such-model-xyz')).toBe(false);
    expect(d('svc_gateway_upstream_duration_seconds_count', { model: OPENAI_MODEL, stream: 'false' })).toBe(1);
    expect(d('svc_gateway_upstream_duration_seconds_sum', { model: OPENAI_MODEL, stream: 'false' })).toBeGreaterThan(0);
    expect(d('svc_gateway_tokens_total', { model: OPENAI_MODEL, kind: 'input' })).toBe(input);
    expect(d('svc_gateway_tokens_total', { model: OPENAI_MODEL, kind: 'output' })).toBe(output);
    expect(d('svc_gateway_cost_credits_total', { model: OPENAI_MODEL })).toBe(expectedCost({ input, output }));
    expect(d('svc_http_request_duration_seconds_count', { method: 'POST', route: '/v1/chat/completions', status: '200' })).toBe(1);
  });

  it('counts a streamed call under stream="true"', async () => {
    const customer = `s-${Date.now()}`;
    await env.fund(customer, 10_000_000);
    const before = (await scrape(svc.url)).samples;
    const stream = await env.anthropic({ customer }).messages.create({ model: ANTHROPIC_MODEL, max_tokens: 9, stream: true, messages: [{ role: 'user', content: 'stream me a few tokens' }] });
    let input = 0;
    let output = 0;
    for await (const event of stream) {
      if (event.type === 'message_start') input = event.message.usage.input_tokens;
      if (event.type === 'message_delta') output = event.usage.output_tokens;
    }
    expect(output).toBeGreaterThan(0);
    await waitFor(async () => {
      const now = (await scrape(svc.url)).samples;
      return value(now, 'svc_gateway_calls_total', { model: ANTHROPIC_MODEL, status: '200', stream: 'true' }) - value(before, 'svc_gateway_calls_total', { model: ANTHROPIC_MODEL, status: '200', stream: 'true' }) === 1;
    }, 10_000, 'the streamed call counted');
    const after = (await scrape(svc.url)).samples;
    const d = (name: string, labels: Record<string, string>) => value(after, name, labels) - value(before, name, labels);
    expect(d('svc_gateway_upstream_duration_seconds_count', { model: ANTHROPIC_MODEL, stream: 'true' })).toBe(1);
    expect(d('svc_gateway_tokens_total', { model: ANTHROPIC_MODEL, kind: 'input' })).toBe(input);
    expect(d('svc_gateway_tokens_total', { model: ANTHROPIC_MODEL, kind: 'output' })).toBe(output);
    expect(d('svc_gateway_cost_credits_total', { model: ANTHROPIC_MODEL })).toBe(expectedCost({ input, output }));
    expect(d('svc_gateway_settlement_shortfall_credits_total', { model: ANTHROPIC_MODEL })).toBe(0);
  });

  it('counts the credits a settlement could not charge', async () => {
    const customer = `f-${Date.now()}`;
    await env.fund(customer, 100_000);
    const before = (await scrape(svc.url)).samples;
    // The upstream reports far more input than the request's bytes bound (an image, say).
    const r = await env.openai({ customer }).chat.completions.create({
      model: OPENAI_MODEL,
      max_tokens: 3,
      messages: [{ role: 'user', content: `describe this ${mockDirective({ input_tokens: 1_000_000 })}` }],
    });
    const cost = expectedCost({ input: r.usage!.prompt_tokens, output: r.usage!.completion_tokens });
    expect(cost).toBeGreaterThan(100_000);
    expect((await env.balance(customer)).available).toBe(0);
    const after = (await scrape(svc.url)).samples;
    const d = (name: string) => value(after, name, { model: OPENAI_MODEL }) - value(before, name, { model: OPENAI_MODEL });
    expect(d('svc_gateway_settlement_shortfall_credits_total')).toBe(cost - 100_000);
    expect(d('svc_gateway_cost_credits_total')).toBe(100_000);
  });

  it('reads the outbox, the queues and the plan usage on a scrape', async () => {
    const customer = `q-${Date.now()}`;
    await env.fund(customer, 1_000);
    await svc.call('POST', '/v1/billing/deduct', { key: env.p.projectKey, body: { customer_id: customer, transaction_id: `${customer}-1`, amount: 10 } });
    // The plan counter in Redis trails the leases by lease_report_ms.
    const usage = await waitFor(async () => {
      const s = (await scrape(svc.url)).samples;
      return value(s, 'svc_plan_usage_operations', { organization: env.p.organizationId }) >= 1 ? s : null;
    }, 10_000, 'the plan usage of the organization');
    expect(value(usage, 'svc_plan_included_operations', { organization: env.p.organizationId })).toBe(50_000);
    for (const name of ['svc_outbox_lag_seconds', 'svc_outbox_dirty_customers', 'svc_outbox_entries_waiting']) {
      const s = usage.find((x) => x.name === name);
      expect(s, name).toBeDefined();
      expect(Number.isFinite(s!.value), name).toBe(true);
    }
    // Every queue /v1/admin/queues reports, with a series for each state.
    const listed = await svc.call('GET', '/v1/admin/queues', { key: env.p.adminKey });
    expect(listed.status).toBe(200);
    const names = (listed.body.data as { name: string }[]).map((q) => q.name).sort();
    expect(names).toEqual(['ledger', 'reconcile', 'webhooks']);
    const scraped = (state: string) => [...new Set(usage.filter((s) => s.name === 'svc_queue_jobs' && s.labels.state === state).map((s) => s.labels.queue))].sort();
    for (const state of ['waiting', 'delayed', 'active', 'completed', 'failed']) expect(scraped(state), state).toEqual(names);
    // The service's workers beat every 2 s.
    expect(value(usage, 'svc_worker_heartbeat_age_seconds')).toBeLessThan(15);
    for (const gauge of ['outbox', 'queues', 'plan_usage']) expect(value(usage, 'svc_metrics_collect_errors_total', { gauge }), gauge).toBe(0);
  });

  it('counts the reconcile queue\'s jobs', async () => {
    const delayed = (s: Sample[]) => value(s, 'svc_queue_jobs', { queue: 'reconcile', state: 'delayed' });
    const before = delayed((await scrape(svc.url)).samples);
    // A job due in an hour: it stays delayed, so no worker runs it while the test looks.
    const job = await svc.rt.reconcileQueue.add('reconcile', { projectId: env.p.projectId, repair: false }, { delay: 3_600_000 });
    try {
      await waitFor(async () => delayed((await scrape(svc.url)).samples) === before + 1, 10_000, 'the delayed reconcile job counted');
    } finally {
      await job.remove();
    }
  });

  it('counts a failed PostgreSQL query', async () => {
    const before = value((await scrape(svc.url)).samples, 'svc_postgres_errors_total', { kind: 'query' });
    await expect(svc.rt.db.query(sql.unsafe`SELECT no_such_column FROM organizations`)).rejects.toThrow();
    const after = value((await scrape(svc.url)).samples, 'svc_postgres_errors_total', { kind: 'query' });
    expect(after - before).toBe(1);
  });

  it('exposes a worker\'s persist metrics after entries are persisted', async () => {
    const before = (await scrape(svc.url)).samples;
    const customer = `w-${Date.now()}`;
    await env.fund(customer, 1_000);
    await svc.drained();
    const after = (await scrape(svc.url)).samples;
    expect(value(after, 'svc_persist_entries_total') - value(before, 'svc_persist_entries_total')).toBeGreaterThanOrEqual(1);
    expect(value(after, 'svc_persist_batch_entries_count') - value(before, 'svc_persist_batch_entries_count')).toBeGreaterThanOrEqual(1);
    expect(value(after, 'svc_persist_batch_duration_seconds_count')).toBeGreaterThanOrEqual(1);
  });

  it('has every metric the Grafana dashboard uses in a real scrape', async () => {
    const dashboard = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'grafana-dashboard.json'), 'utf8');
    const exprs = [...dashboard.matchAll(/"expr":\s*"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`) as string);
    expect(exprs.length).toBeGreaterThan(10);
    const functions = new Set(['sum', 'rate', 'irate', 'increase', 'histogram_quantile', 'by', 'without', 'max', 'min', 'avg', 'topk', 'count', 'le', 'clamp_min', 'on', 'ignoring', 'group_left', 'offset', 'bool', 'and', 'or', 'unless']);
    const used = new Set<string>();
    for (const e of exprs) {
      // Metric names: identifiers outside label matchers and brackets, that are not functions or label names.
      const stripped = e.replace(/\{[^}]*\}/g, '{}').replace(/\[[^\]]*\]/g, '[]').replace(/"[^"]*"/g, '""').replace(/\bby\s*\([^)]*\)/g, '').replace(/\bwithout\s*\([^)]*\)/g, '');
      for (const m of stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) if (!functions.has(m[0]) && !/^\d/.test(m[0])) used.add(m[0]);
    }
    const scraped = new Set((await scrape(svc.url)).samples.map((s) => s.name));
    expect(used.size).toBeGreaterThan(10);
    const missing = [...used].filter((n) => !scraped.has(n));
    expect(missing).toEqual([]);
  });
});

describe('tenant ids on the API port', () => {
  it('are not in the default scrape: the plan usage is there in aggregate only', async () => {
    const own = await startTestService();
    try {
      const p = await own.project('B');
      expect((await own.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'agg', amount: 100 } })).status).toBe(200);
      expect((await own.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'agg', transaction_id: 'agg-1', amount: 1 } })).status).toBe(200);
      // The plan counter in Redis trails the leases by lease_report_ms.
      const r = await waitFor(async () => {
        const got = await scrape(own.url);
        return value(got.samples, 'svc_plan_usage_operations_sum') >= 1 ? got : null;
      }, 10_000, 'the aggregate plan usage');
      expect(r.samples.filter((x) => 'organization' in x.labels)).toEqual([]);
      expect(r.text).not.toContain(p.organizationId);
      expect(r.samples.some((x) => x.name === 'svc_plan_organizations_at_allowance')).toBe(true);
    } finally {
      await own.close();
    }
  });
});

describe('METRICS_PORT', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startTestService({ workers: true, config: { METRICS_PORT: 0, WORKER_METRICS_PORT: 0 } });
  }, 60_000);
  afterAll(async () => {
    await svc?.close();
  });

  it('serves /metrics on its own port only; the API port answers 404', async () => {
    expect(svc.server.metrics).not.toBeNull();
    expect(svc.server.metrics!.port).not.toBe(svc.server.port);
    const own = await scrape(svc.server.metrics!.url);
    expect(own.status).toBe(200);
    expect(own.samples.some((s) => s.name === 'svc_http_request_duration_seconds_count' || s.name === 'process_cpu_seconds_total')).toBe(true);
    const api = await fetch(`${svc.url}/metrics`);
    expectError({ status: api.status, text: await api.text(), headers: api.headers }, 404, 'not_found');
    // The metrics port serves nothing of the API.
    expect((await fetch(`${svc.server.metrics!.url}/health`)).status).toBe(404);
  });

  it('has the per-organization plan usage series: the port is the private one', async () => {
    const p = await svc.project('B');
    expect((await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'po', amount: 100 } })).status).toBe(200);
    expect((await svc.call('POST', '/v1/billing/deduct', { key: p.projectKey, body: { customer_id: 'po', transaction_id: 'po-1', amount: 1 } })).status).toBe(200);
    const s = await waitFor(async () => {
      const got = (await scrape(svc.server.metrics!.url)).samples;
      return value(got, 'svc_plan_usage_operations', { organization: p.organizationId }) >= 1 ? got : null;
    }, 10_000, 'the plan usage of the organization');
    expect(value(s, 'svc_plan_included_operations', { organization: p.organizationId })).toBe(50_000);
  });

  it('serves a worker\'s metrics on WORKER_METRICS_PORT: a persist pass, an expiration by its job', async () => {
    expect(svc.workers!.metrics).not.toBeNull();
    const before = (await scrape(svc.workers!.metrics!.url)).samples;
    expect(value(before, 'svc_worker_expirations_total', { via: 'job' })).toBe(0);
    const p = await svc.project('B');
    const r = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'wm-1', amount: 500 } });
    expect(r.status).toBe(200);
    const freeze = await svc.call('POST', '/v1/billing/freeze', { key: p.projectKey, body: { customer_id: 'wm-1', transaction_id: 'wm-f1', amount: 40, release_after_seconds: 1 } });
    expect(freeze.status).toBe(200);
    // The expiry job runs when the TTL is due (a second, on the real clock).
    const s = await waitFor(async () => {
      const now = (await scrape(svc.workers!.metrics!.url)).samples;
      // The job counts once BullMQ moved it to completed, a round trip after it settled the freeze.
      return value(now, 'svc_worker_jobs_total', { job: 'expire', outcome: 'completed' }) >= 1 ? now : null;
    }, 15_000, 'the freeze expired by its job');
    expect(value(s, 'svc_worker_expirations_total', { via: 'job' })).toBe(1);
    expect(value(s, 'svc_ledger_operations_total', { operation: 'expire', outcome: 'applied' })).toBeGreaterThanOrEqual(1);
    await svc.drained();
    const after = (await scrape(svc.workers!.metrics!.url)).samples;
    // The deposit, the freeze and the release: three entries persisted.
    expect(value(after, 'svc_persist_entries_total')).toBeGreaterThanOrEqual(3);
    expect(value(after, 'svc_persist_batch_entries_count')).toBeGreaterThanOrEqual(1);
    expect(value(after, 'svc_persist_batch_duration_seconds_count')).toBe(value(after, 'svc_persist_batch_entries_count'));
  });
});
