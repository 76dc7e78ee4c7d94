/**
 * Shared setup of the gateway suites: one service (API and workers) and one mock upstream
 * per test file, models configured through the admin API, customers funded through the
 * deposit endpoint, the official clients pointed at the service, and a raw HTTP client
 * for what those clients cannot show (trailers, exact bytes, a disconnect mid-stream).
 * Expected amounts are computed here from the documented rules (docs/API.md, "Gateway":
 * tokens x price per million / 10^6 summed over the token kinds, rounded up once per
 * call; the hold's input and output bounds), not from the service's own pricing code.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { expect } from 'vitest';
import type { Config } from '../../src/config/index.js';
import { startMockUpstream, type MockUpstream, type MockUpstreamOptions } from '../../src/gateway/mock/server.js';
import { startTestService, type Json, type TestProject, type TestService } from '../helpers.js';

/**
 * Prices, credits per million tokens, chosen so that every kind leaves a fraction of a
 * credit for most token counts: a per-kind rounding, or none, shows in the totals.
 */
export const PRICES = { input: 1_500_000, output: 2_500_000, cacheRead: 300_000, cacheWrite: 3_750_000 } as const;

export const OPENAI_MODEL = 'gpt-test';
export const ANTHROPIC_MODEL = 'anthropic/claude-test';
export const OPENAI_UPSTREAM_MODEL = 'gpt-upstream-2025-01-01';
export const ANTHROPIC_UPSTREAM_MODEL = 'claude-upstream-2025-01-01';
export const MAX_OUTPUT_TOKENS = 4_096;

export interface TokenCounts {
  input: number;
  output: number;
  cacheRead?: number;
  cacheWrite?: number;
}

/** ceil(sum of tokens x price / 10^6), exact (BigInt), rounded once per call. */
export function expectedCost(t: TokenCounts, prices: { input: number; output: number; cacheRead: number; cacheWrite: number } = PRICES): number {
  const micro =
    BigInt(t.input) * BigInt(prices.input) +
    BigInt(t.output) * BigInt(prices.output) +
    BigInt(t.cacheRead ?? 0) * BigInt(prices.cacheRead) +
    BigInt(t.cacheWrite ?? 0) * BigInt(prices.cacheWrite);
  return Number((micro + 999_999n) / 1_000_000n);
}

/** An exact decimal string of `credits / 10^places`, without trailing zeros. */
function decimal(credits: number, places: number): string {
  const scale = 10n ** BigInt(places);
  const c = BigInt(credits);
  const frac = (c % scale).toString().padStart(places, '0').replace(/0+$/, '');
  return frac === '' ? String(c / scale) : `${c / scale}.${frac}`;
}

export const usdOf = (credits: number) => decimal(credits, 6);
export const centsOf = (credits: number) => decimal(credits, 4);

export interface GatewayEnv {
  svc: TestService;
  mock: MockUpstream;
  /** Variant B project with the two default models. */
  p: TestProject;
  upstreamKey: string;
  putModel(modelId: string, body?: Record<string, unknown>, project?: TestProject): Promise<void>;
  fund(customerId: string, amount: number, opts?: { wallet?: string; project?: TestProject }): Promise<void>;
  /** GET balance: the summary with per-wallet numbers. */
  balance(customerId: string, project?: TestProject): Promise<Balance>;
  /** GET ledger (first page, newest first), optionally of one type. */
  ledger(customerId: string, type?: string, project?: TestProject): Promise<LedgerEntry[]>;
  ops(project?: TestProject): Promise<number>;
  openai(opts?: { customer?: string; key?: string; headers?: Record<string, string> }): OpenAI;
  anthropic(opts?: { customer?: string; key?: string; headers?: Record<string, string>; fetch?: typeof fetch }): Anthropic;
  close(): Promise<void>;
}

export interface Balance {
  total: number;
  used: number;
  frozen: number;
  available: number;
  wallets: Record<string, { total: number; used: number; frozen: number; available: number }>;
}

interface LedgerEntry {
  id: string;
  type: string;
  transaction_id: string;
  amount: number;
  wallet: string | null;
  details: { account_id: string; credit_type: string; amount: number }[];
  business_type: string | null;
  description: string | null;
}

/** A model entry for the admin API; `body` overrides any field. */
export function modelBody(mock: MockUpstream, upstreamKey: string, provider: 'openai' | 'anthropic', body: Record<string, unknown> = {}) {
  return {
    provider,
    upstream_base_url: mock.url,
    upstream_model: provider === 'openai' ? OPENAI_UPSTREAM_MODEL : ANTHROPIC_UPSTREAM_MODEL,
    upstream_api_key: upstreamKey,
    display_name: `${provider} test model`,
    description: 'relayed to the mock upstream',
    context_window: 200_000,
    max_output_tokens: MAX_OUTPUT_TOKENS,
    supports_streaming: true,
    input_price_per_million_credits: PRICES.input,
    output_price_per_million_credits: PRICES.output,
    cache_read_price_per_million_credits: PRICES.cacheRead,
    cache_write_price_per_million_credits: PRICES.cacheWrite,
    ...body,
  };
}

export async function startGatewayEnv(opts: { config?: Partial<Config>; mock?: MockUpstreamOptions } = {}): Promise<GatewayEnv> {
  const upstreamKey = `sk-upstream-${randomBytes(8).toString('hex')}`;
  const mock = await startMockUpstream({ requireKey: upstreamKey, ...opts.mock });
  const svc = await startTestService({ workers: true, config: { SVC_MASTER_KEY: randomBytes(32).toString('hex'), ...opts.config } });
  const p = await svc.project('B');

  const env: GatewayEnv = {
    svc,
    mock,
    p,
    upstreamKey,
    async putModel(modelId, body = {}, project = p) {
      const provider = (body.provider as 'openai' | 'anthropic' | undefined) ?? 'openai';
      const r = await svc.call('PUT', `/v1/admin/projects/${project.projectId}/models/${encodeURIComponent(modelId)}`, {
        key: project.adminKey,
        body: modelBody(mock, upstreamKey, provider, body),
      });
      expect(r.status, JSON.stringify(r.body)).toBeLessThan(300);
    },
    async fund(customerId, amount, o = {}) {
      const project = o.project ?? p;
      const r = await svc.call('POST', '/v1/customers/deposit', {
        key: project.projectKey,
        body: { customer_id: customerId, amount, ...(o.wallet ? { wallet: o.wallet } : {}) },
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    },
    async balance(customerId, project = p) {
      const r = await svc.call('GET', `/v1/customers/${encodeURIComponent(customerId)}/balance`, { key: project.projectKey });
      expect(r.status).toBe(200);
      return r.body as Balance;
    },
    async ledger(customerId, type, project = p) {
      const q = `limit=500${type ? `&type=${type}` : ''}`;
      const r = await svc.call('GET', `/v1/customers/${encodeURIComponent(customerId)}/ledger?${q}`, { key: project.projectKey });
      expect(r.status).toBe(200);
      return r.body.data as LedgerEntry[];
    },
    async ops(project = p) {
      return (await svc.rt.plans.organization(project.organizationId)).billable_ops;
    },
    openai(o = {}) {
      return new OpenAI({
        baseURL: `${svc.url}/v1`,
        apiKey: o.key ?? p.projectKey,
        defaultHeaders: { ...(o.customer ? { 'X-Service-Customer': o.customer } : {}), ...o.headers },
        maxRetries: 0,
      });
    },
    anthropic(o = {}) {
      return new Anthropic({
        baseURL: svc.url,
        apiKey: o.key ?? p.projectKey,
        defaultHeaders: { ...(o.customer ? { 'X-Service-Customer': o.customer } : {}), ...o.headers },
        maxRetries: 0,
        ...(o.fetch ? { fetch: o.fetch } : {}),
      });
    },
    async close() {
      await svc.close();
      await mock.close();
    },
  };
  await env.putModel(OPENAI_MODEL, { provider: 'openai' });
  await env.putModel(ANTHROPIC_MODEL, { provider: 'anthropic' });
  return env;
}

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Trailers, lower-case names; empty unless the response was chunked with trailers. */
  trailers: NodeJS.Dict<string>;
  text: string;
  json(): Json;
}

/**
 * A request with the path byte for byte as written (no URL normalisation): any method, a
 * key when given, and a JSON body when given.
 */
export function rawRequest(
  baseUrl: string,
  method: string,
  path: string,
  o: { key?: string; headers?: Record<string, string>; body?: unknown } = {},
): Promise<RawResponse> {
  const payload = o.body === undefined ? undefined : typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
  const { hostname, port } = new URL(baseUrl);
  const headers: Record<string, string | number> = { ...(o.key ? { authorization: `Bearer ${o.key}` } : {}) };
  if (payload !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, path, method, headers: { ...headers, ...o.headers } });
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, trailers: res.trailers, text, json: () => JSON.parse(text) });
      });
    });
    req.end(payload);
  });
}

/**
 * POST through node:http (fetch cannot read trailers). `body` as a string is sent byte for
 * byte, so a test knows the request's exact size; so is `path` (no URL parsing, so no
 * normalisation of `./` or `//` on the way).
 */
export function rawPost(baseUrl: string, path: string, o: { key: string; headers?: Record<string, string>; body: unknown }): Promise<RawResponse> {
  return rawRequest(baseUrl, 'POST', path, o);
}

/** The `data` of every event of an SSE body, JSON-parsed (OpenAI's `[DONE]` kept as the string). */
export function sseData(text: string): unknown[] {
  const out: unknown[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data = block
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trimStart())
      .join('\n');
    if (data === '') continue;
    out.push(data === '[DONE]' ? data : JSON.parse(data));
  }
  return out;
}

/** A port nothing listens on: bound once by us, then closed. */
export async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A TCP proxy to the mock that reports when a connection made to it closes, so a test can
 * see the gateway hang up on the upstream (the mock itself does not report it).
 */
export interface WatchingProxy {
  url: string;
  opened: number;
  /** Resolves when the next connection closes, with the time it closed. */
  nextClose(): Promise<number>;
  close(): Promise<void>;
}

export async function startWatchingProxy(targetPort: number): Promise<WatchingProxy> {
  const sockets = new Set<net.Socket>();
  let waiters: ((t: number) => void)[] = [];
  const proxy: WatchingProxy = {
    url: '',
    opened: 0,
    nextClose: () => new Promise((resolve) => waiters.push(resolve)),
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  const server = net.createServer((client) => {
    proxy.opened++;
    const upstream = net.connect(targetPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.pipe(upstream).pipe(client);
    const closed = () => {
      client.destroy();
      upstream.destroy();
    };
    client.once('close', () => {
      closed();
      const now = Date.now();
      const w = waiters;
      waiters = [];
      for (const resolve of w) resolve(now);
    });
    upstream.once('close', closed);
    client.on('error', closed);
    upstream.on('error', closed);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`;
  return proxy;
}

/**
 * Starts a streamed call to `url` + `path` and hangs up once `deltas` text deltas (matches
 * of `delta`, the mock's `tokN` words by default) have arrived. Resolves with the response
 * headers, the text received and when it hung up.
 */
export function streamThenHangUp(
  url: string,
  key: string,
  path: string,
  customer: string,
  body: unknown,
  deltas: number,
  delta = /tok\d+/g,
): Promise<{ headers: http.IncomingHttpHeaders; received: string; hungUpAt: number }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'x-service-customer': customer, 'content-type': 'application/json' },
    });
    req.on('error', (err) => {
      if (!req.destroyed) reject(err);
    });
    req.on('response', (res) => {
      if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
      let received = '';
      res.on('error', () => undefined);
      res.on('data', (c: Buffer) => {
        received += c.toString('utf8');
        if ((received.match(delta) ?? []).length >= deltas && !req.destroyed) {
          req.destroy();
          resolve({ headers: res.headers, received, hungUpAt: Date.now() });
        }
      });
    });
    req.end(JSON.stringify(body));
  });
}
