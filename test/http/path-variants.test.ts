/**
 * Every billable route under path variants (issue 8, item 1): a trailing slash, capitals,
 * duplicate slashes, a `.` segment and query strings. A variant either answers exactly as
 * the canonical path does (same status, hold, cost and headers) or is refused with nothing
 * changed: no balance moved, no ledger entry, nothing sent upstream. Requests go through
 * node:http with the path as written, since fetch and URL would normalise `./`.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gatewayRoutes } from '../../src/gateway/routes.js';
import { jsonBodies } from '../../src/app.js';
import { authenticate } from '../../src/http/auth.js';
import { errorHandler } from '../../src/http/errors.js';
import { exactRouter } from '../../src/http/router.js';
import type { Json } from '../helpers.js';
import { ANTHROPIC_MODEL, OPENAI_MODEL, rawPost, startGatewayEnv, type GatewayEnv } from '../gateway/support.js';
import { expectError } from '../support/errors.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env?.close());

interface Raw {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Json;
}

/** POSTs `path` byte for byte (rawPost parses no URL), the body parsed when it is JSON. */
async function send(path: string, o: { key: string; body: unknown; headers?: Record<string, string>; url?: string }): Promise<Raw> {
  const res = await rawPost(o.url ?? env.svc.url, path, o);
  let body: unknown = res.text;
  try {
    body = res.json();
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, headers: res.headers, body };
}

type Expect = 'canonical' | 'not_found' | 'unknown_query';

/**
 * The variants of a canonical path and what each must do. `?` is an empty query string:
 * the canonical request. A query parameter is pass-through on the gateway; the ledger
 * refuses any it does not read (item 11), with nothing changed.
 */
function variants(path: string, queryOnLedger: Expect): [string, string, Expect][] {
  return [
    ['trailing slash', `${path}/`, 'not_found'],
    ['capitals', path.toUpperCase(), 'not_found'],
    ['one capital', path.replace(/\/(\w)(\w*)$/, (_, a: string, b: string) => `/${a.toUpperCase()}${b}`), 'not_found'],
    ['duplicate slash inside', path.replace('/v1/', '/v1//'), 'not_found'],
    ['duplicate leading slash', `/${path}`, 'not_found'],
    ['dot segment', path.replace('/v1/', '/v1/./'), 'not_found'],
    ['empty query string', `${path}?`, 'canonical'],
    ['query parameter', `${path}?x=1`, queryOnLedger],
  ];
}

const billingHeaders = [
  'x-service-reserved-credits',
  'x-service-max-tokens',
  'x-service-cost-credits',
  'x-service-cost-cents',
  'x-service-cost-usd',
  'x-service-balance-credits',
  'x-service-balance-usd',
];

async function ledgerCount(customer: string): Promise<number> {
  return (await env.ledger(customer)).length;
}

function expectRefused(r: Raw, expected: Expect, label: string) {
  if (expected === 'not_found') expectError(r, 404, 'not_found', { label });
  else expectError(r, 400, 'invalid_request', { param: 'x', label });
}

describe('gateway routes', () => {
  // About 200 KB of prompt and one output token: the hold is almost all input, so a hold
  // computed without the body's bytes shows at once.
  const prompt = 'lorem ipsum dolor sit amet '.repeat(7_500);
  const gateways = [
    { path: '/v1/chat/completions', body: { model: OPENAI_MODEL, max_tokens: 1, messages: [{ role: 'user', content: prompt }] } },
    { path: '/v1/messages', body: { model: ANTHROPIC_MODEL, max_tokens: 1, messages: [{ role: 'user', content: prompt }] } },
  ];
  const funding = 10_000_000;

  for (const g of gateways) {
    it(`${g.path}: every variant answers as the canonical path or 404 with nothing held, charged or relayed`, async () => {
      const tag = g.path.replace(/\W+/g, '_');
      const call = async (path: string, customer: string) => {
        await env.fund(customer, funding);
        return send(path, { key: env.p.projectKey, body: g.body, headers: { 'x-service-customer': customer } });
      };
      const canonical = await call(g.path, `${tag}_canonical`);
      expect(canonical.status, JSON.stringify(canonical.body)).toBe(200);
      // The hold covers the prompt's bytes: far more than one output token.
      expect(Number(canonical.headers['x-service-reserved-credits'])).toBeGreaterThan(Buffer.byteLength(prompt));

      for (const [name, path, expected] of variants(g.path, 'canonical')) {
        const customer = `${tag}_${name.replace(/\W+/g, '_')}`;
        const relayed = env.mock.requests.length;
        const r = await call(path, customer);
        if (expected === 'canonical') {
          expect(r.status, `${name}: ${JSON.stringify(r.body)}`).toBe(canonical.status);
          for (const h of billingHeaders) expect(r.headers[h], `${name}: ${h}`).toBe(canonical.headers[h]);
          continue;
        }
        expectRefused(r, expected, name);
        expect(env.mock.requests.length, name).toBe(relayed);
        const b = await env.balance(customer);
        expect(b, name).toMatchObject({ total: funding, used: 0, frozen: 0, available: funding });
        expect(await ledgerCount(customer), name).toBe(1);
      }
    });
  }
});

describe('the gateway router behind the app parser', () => {
  // The second layer: were some path other than the two exact ones ever to reach the
  // gateway router (here: the real router mounted under a prefix, behind the app's own body
  // parser, which reads that path's body first), the hold must still come from the bytes of
  // the body the gateway is handed.
  it('holds for the body the app parser read, exactly as on the canonical path', async () => {
    const app = express();
    app.use(jsonBodies());
    app.use(authenticate(env.svc.rt.keyCache));
    app.use('/mounted', exactRouter(gatewayRoutes(env.svc.rt.gateway)));
    app.use(errorHandler());
    const server = await new Promise<http.Server>((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const body = { model: OPENAI_MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'lorem ipsum '.repeat(20_000) }] };
      const results: Raw[] = [];
      for (const [customer, path, base] of [
        ['mounted_canonical', '/v1/chat/completions', undefined],
        ['mounted_prefixed', '/mounted/v1/chat/completions', url],
      ] as const) {
        await env.fund(customer, 10_000_000);
        results.push(await send(path, { key: env.p.projectKey, body, headers: { 'x-service-customer': customer }, url: base }));
      }
      const [canonical, mounted] = results;
      expect(canonical!.status, JSON.stringify(canonical!.body)).toBe(200);
      expect(mounted!.status, JSON.stringify(mounted!.body)).toBe(200);
      for (const h of billingHeaders) expect(mounted!.headers[h], h).toBe(canonical!.headers[h]);
      expect(Number(mounted!.headers['x-service-reserved-credits'])).toBeGreaterThan(JSON.stringify(body).length);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('ledger routes', () => {
  const funding = 1_000;
  let n = 0;

  /**
   * A funded customer with a freeze of 100 (for consume and unfreeze to act on), and the
   * request body of `op` for it.
   */
  async function prepare(op: string): Promise<{ customer: string; body: Record<string, unknown> }> {
    const customer = `ledger_${op}_${++n}`;
    await env.fund(customer, funding);
    const frozen = `frz_${customer}`;
    const f = await env.svc.call('POST', '/v1/billing/freeze', {
      key: env.p.projectKey,
      body: { customer_id: customer, transaction_id: frozen, amount: 100 },
    });
    expect(f.status).toBe(200);
    const bodies: Record<string, Record<string, unknown>> = {
      deposit: { customer_id: customer, amount: 10 },
      deduct: { customer_id: customer, transaction_id: `ded_${customer}`, amount: 10 },
      freeze: { customer_id: customer, transaction_id: `frz2_${customer}`, amount: 10 },
      consume: { transaction_id: frozen, amount: 10 },
      unfreeze: { transaction_id: frozen },
    };
    return { customer, body: bodies[op]! };
  }

  const routes: [string, string][] = [
    ['deposit', '/v1/customers/deposit'],
    ['deduct', '/v1/billing/deduct'],
    ['freeze', '/v1/billing/freeze'],
    ['consume', '/v1/billing/consume'],
    ['unfreeze', '/v1/billing/unfreeze'],
  ];

  for (const [op, path] of routes) {
    it(`${path}: every variant answers as the canonical path or is refused with nothing changed`, async () => {
      const base = await prepare(op);
      const canonical = await send(path, { key: env.p.projectKey, body: base.body });
      expect(canonical.status, JSON.stringify(canonical.body)).toBe(200);
      const canonicalBalance = await env.balance(base.customer);

      for (const [name, variant, expected] of variants(path, 'unknown_query')) {
        const { customer, body } = await prepare(op);
        const before = await env.balance(customer);
        const entries = await ledgerCount(customer);
        const r = await send(variant, { key: env.p.projectKey, body });
        if (expected === 'canonical') {
          expect(r.status, `${name}: ${JSON.stringify(r.body)}`).toBe(canonical.status);
          expect(Object.keys(r.body).sort(), name).toEqual(Object.keys(canonical.body).sort());
          expect(r.body.is_idempotent_replay, name).toBe(false);
          expect(await env.balance(customer), name).toMatchObject({
            total: canonicalBalance.total,
            used: canonicalBalance.used,
            frozen: canonicalBalance.frozen,
            available: canonicalBalance.available,
          });
          continue;
        }
        expectRefused(r, expected, name);
        const after = await env.balance(customer);
        expect({ ...after, as_of: null }, name).toEqual({ ...before, as_of: null });
        expect(await ledgerCount(customer), name).toBe(entries);
      }
    });
  }
});
