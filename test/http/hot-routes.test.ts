/**
 * The hot routes are served by the front door, in front of the Express app
 * (src/http/front-door.ts). What the routers did for these paths must not change: the customer
 * reads' id decoded (a malformed escape a 400), their path variants 404, HEAD and OPTIONS
 * answered by the routers as before, the `/v1` authentication in any case, and a throw or a
 * rejected promise of a handler reaching the error middleware.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type RequestHandler } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorHandler } from '../../src/http/errors.js';
import { underPrefix } from '../../src/http/router.js';
import { expressClasses, frontDoor } from '../../src/http/front-door.js';
import { ApiError } from '../../src/errors/catalogue.js';
import { Metrics } from '../../src/metrics/metrics.js';
import { rawRequest, startGatewayEnv, type GatewayEnv, type RawResponse } from '../gateway/support.js';

let env: GatewayEnv;

beforeAll(async () => {
  env = await startGatewayEnv();
});
afterAll(() => env?.close());

type Raw = RawResponse;

/** A request with the path byte for byte as written (no URL normalisation). */
function send(base: string, method: string, path: string, key?: string): Promise<Raw> {
  return rawRequest(base, method, path, { key });
}

const code = (r: Raw) => (JSON.parse(r.text) as { error: { code: string } }).error.code;

describe('hot routes in the app', () => {
  it('reads a customer whose id needs escaping, and answers a malformed escape with 400', async () => {
    const id = 'hot/routes é';
    await env.fund(id, 1_000);
    const path = `/v1/customers/${encodeURIComponent(id)}/balance`;
    const ok = await send(env.svc.url, 'GET', path, env.p.projectKey);
    expect(ok.status, ok.text).toBe(200);
    expect(JSON.parse(ok.text)).toMatchObject({ customer_id: id, available: 1_000 });
    const profile = await send(env.svc.url, 'GET', `/v1/customers/${encodeURIComponent(id)}`, env.p.projectKey);
    expect(profile.status, profile.text).toBe(200);
    expect(JSON.parse(profile.text)).toMatchObject({ id });

    const bad = await send(env.svc.url, 'GET', '/v1/customers/%E0%A4%A/balance', env.p.projectKey);
    expect(bad.status, bad.text).toBe(400);
    expect(code(bad)).toBe('invalid_request');
  });

  it('refuses the variants of the reads as the routers did', async () => {
    await env.fund('hot_variants', 1_000);
    for (const path of [
      '/v1/customers/hot_variants/balance/',
      '/v1/customers/hot_variants/BALANCE',
      '/v1/Customers/hot_variants',
      '/v1/customers//balance',
      '/v1/customers/hot_variants/./balance',
      '/v1//customers/hot_variants',
    ]) {
      const r = await send(env.svc.url, 'GET', path, env.p.projectKey);
      expect([path, r.status], r.text).toEqual([path, 404]);
      expect(code(r)).toBe('not_found');
    }
  });

  it('leaves HEAD and OPTIONS of a hot path to the routers', async () => {
    await env.fund('hot_head', 1_000);
    const head = await send(env.svc.url, 'HEAD', '/v1/customers/hot_head/balance', env.p.projectKey);
    expect(head.status).toBe(200);
    expect(head.text).toBe('');
    const options = await send(env.svc.url, 'OPTIONS', '/v1/billing/deduct', env.p.projectKey);
    expect(options.status, options.text).toBe(200);
    expect(options.headers.allow).toBe('POST');
  });

  it('authenticates /v1 in any case, and nothing outside it', async () => {
    const upper = await send(env.svc.url, 'POST', '/V1/billing/deduct');
    expect(upper.status, upper.text).toBe(401);
    expect(code(upper)).toBe('missing_api_key');
    const upperKeyed = await send(env.svc.url, 'POST', '/V1/billing/deduct', env.p.projectKey);
    expect(upperKeyed.status, upperKeyed.text).toBe(404);
    for (const path of ['/v1x/billing/deduct', '//v1/billing/deduct']) {
      const r = await send(env.svc.url, 'POST', path);
      expect([path, r.status], r.text).toEqual([path, 404]);
    }
  });
});

describe('the front door', () => {
  it('hands a throw, a rejection and next(err) to the error middleware, and leaves other methods and paths to the app', async () => {
    const app = express();
    const seen: string[] = [];
    const auth: RequestHandler = (req, _res, next) => (seen.push(`auth ${req.path}`), next());
    app.use(underPrefix('/v1', [auth]));
    app.use((req, res) => void res.status(418).json({ fell_through: `${req.method} ${req.path}` }));
    app.use(errorHandler());
    const listener = frontDoor({
      app,
      first: [],
      metrics: new Metrics({ defaultMetrics: false }),
      bodyParser: () => null,
      underV1: [auth],
      routes: [
        { method: 'GET', path: '/v1/throws', handlers: [() => { throw new ApiError('permission_denied'); }] },
        { method: 'GET', path: '/v1/rejects', handlers: [async () => { throw new ApiError('customer_not_found'); }] },
        { method: 'GET', path: '/v1/next-error', handlers: [(_req, _res, next) => next(new ApiError('payload_too_large'))] },
        { method: 'GET', path: '/v1/lets-through', handlers: [(_req, _res, next) => next()] },
        { method: 'GET', path: '/v1/items/:item_id', handlers: [(_req, _res, next) => next(), (req, res) => void res.json({ item: req.params.item_id })] },
      ],
      onError: errorHandler(),
    });
    const server = await new Promise<http.Server>((resolve) => {
      const s = http.createServer(expressClasses(app), listener).listen(0, '127.0.0.1', () => resolve(s));
    });
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      expect((await send(url, 'GET', '/v1/throws')).status).toBe(403);
      expect((await send(url, 'GET', '/v1/rejects')).status).toBe(404);
      expect((await send(url, 'GET', '/v1/next-error')).status).toBe(413);
      const through = await send(url, 'GET', '/v1/lets-through');
      expect([through.status, code(through)]).toEqual([404, 'not_found']);
      const item = await send(url, 'GET', '/v1/items/a%20b?x=1');
      expect(JSON.parse(item.text)).toEqual({ item: 'a b' });
      const bad = await send(url, 'GET', '/v1/items/%E0%A4%A');
      expect([bad.status, code(bad)]).toEqual([400, 'invalid_request']);
      for (const [method, path] of [['POST', '/v1/throws'], ['GET', '/v1/items/a/b'], ['GET', '/v1/items/'], ['GET', '/V1/throws']]) {
        const r = await send(url, method!, path!);
        expect([method, path, r.status]).toEqual([method, path, 418]);
      }
      // Once per request: by the front door for its routes (the malformed escape included),
      // by the app for the rest.
      expect(seen).toContain('auth /V1/throws');
      expect(seen.filter((s) => s.startsWith('auth')).length).toBe(10);
      await send(url, 'GET', '/v1x');
      expect(seen.length).toBe(10);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
