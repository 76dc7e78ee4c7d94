/**
 * Pins what the front door (src/http/front-door.ts) copies of Express: the same probe
 * handler is reached through a plain Express server (app.handle and its router) and through
 * the front door wired as src/app.ts wires it, with the same requests, and what the handler
 * sees of `req` and `res` must be the same but for the differences written out in
 * `behindTheFrontDoor` below. It fails when an Express (or router) upgrade sets up a request
 * differently from what the front door copies.
 *
 * Upgrading Express (package.json pins the minor, `~5.3.x`, because the front door copies
 * Express's app.handle and router by hand, and a minor may add to them):
 * 1. Read the release notes of express and of router (its dependency) for changes to
 *    app.handle, Router#handle, Route#dispatch, and request.js/response.js getters.
 * 2. Run this test: a new own field of `req` or `res`, a prototype change, or a helper
 *    reading something only the router sets (req.route, req.next) shows here.
 * 3. Copy any new setup into frontDoor(), or add it to `behindTheFrontDoor` with why the
 *    hot routes do not need it; run test/http/* (hot routes, path variants, bodies).
 * 4. Check `req.query`, `req.ip`/`req.protocol` under `trust proxy`, the 400 of a malformed
 *    escape, and that HEAD/OPTIONS of a hot path still go to the app (hot-routes.test.ts).
 * 5. Only then widen the pin to the new minor (package.json and package-lock.json).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type ErrorRequestHandler, type Express, type Request, type RequestHandler, type Response } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bodyParsers, expressApp, jsonBodies } from '../../src/app.js';
import { requestEnd } from '../../src/http/access-log.js';
import { errorHandler, notFound } from '../../src/http/errors.js';
import { exactRouter, underPrefix, type Route } from '../../src/http/router.js';
import { expressClasses, frontDoor } from '../../src/http/front-door.js';
import { Metrics } from '../../src/metrics/metrics.js';
import { createLogger } from '../../src/runtime.js';

/** How the probe handler saw `req` and `res`; JSON-comparable. */
interface Shape {
  reqChain: string[];
  resChain: string[];
  reqOwn: string[];
  resOwn: string[];
  reqHasRes: boolean;
  resHasReq: boolean;
  localsProto: null | 'other';
  localsKeys: string[];
  reqApp: boolean;
  resApp: boolean;
  method: string;
  url: string;
  originalUrl: string;
  baseUrl: string;
  path: string;
  query: unknown;
  params: unknown;
  paramsProto: null | 'Object' | 'other';
  body: unknown;
  route: boolean;
  next: string;
  get: string | undefined;
  ip: string | undefined;
  ips: string[];
  protocol: string;
  secure: boolean;
  hostname: string | undefined;
}

/** The prototype chain of `o`, named: Express's objects by name, the rest by constructor. */
function chain(o: object, app: Express): string[] {
  const names = new Map<unknown, string>([
    [app.request, 'app.request'],
    [app.response, 'app.response'],
    [express.request, 'express.request'],
    [express.response, 'express.response'],
  ]);
  const out: string[] = [];
  for (let p = Object.getPrototypeOf(o) as object | null; p !== null; p = Object.getPrototypeOf(p) as object | null) {
    out.push(names.get(p) ?? (Object.hasOwn(p, 'constructor') ? `class ${(p.constructor as { name: string }).name}` : 'unnamed'));
  }
  return out;
}

const ownKeys = (o: object): string[] => Reflect.ownKeys(o).map(String).sort();

/** The handler under test: records its view of `req` and `res`, then answers with Express's helpers. */
function probe(app: Express, seen: Shape[]): RequestHandler {
  return (req: Request, res: Response) => {
    // Own keys first: reading req.path or req.query caches parseurl's result on `req`.
    const reqOwn = ownKeys(req);
    const resOwn = ownKeys(res);
    const paramsProto = Object.getPrototypeOf(req.params) as unknown;
    seen.push({
      reqChain: chain(req, app),
      resChain: chain(res, app),
      reqOwn,
      resOwn,
      reqHasRes: req.res === res,
      resHasReq: res.req === req,
      localsProto: Object.getPrototypeOf(res.locals) === null ? null : 'other',
      localsKeys: Object.keys(res.locals),
      reqApp: req.app === app,
      resApp: res.app === app,
      method: req.method,
      url: req.url,
      originalUrl: req.originalUrl,
      baseUrl: req.baseUrl,
      path: req.path,
      query: req.query,
      params: { ...req.params },
      paramsProto: paramsProto === null ? null : paramsProto === Object.prototype ? 'Object' : 'other',
      body: req.body as unknown,
      route: req.route !== undefined,
      next: typeof req.next,
      get: req.get('x-probe'),
      ip: req.ip,
      ips: req.ips,
      protocol: req.protocol,
      secure: req.secure,
      hostname: req.hostname,
    });
    res.status(201).set('x-probe', 'answered').json({ path: req.path, params: req.params });
  };
}

/** Own fields of a request the front door serves that only Express's router sets. */
const routerOnly = [
  // The router's `next` (handlers get theirs as an argument; nothing in src reads req.next).
  'next',
  // The matched Route; the access log uses it for the app's requests only, and the front
  // door gives a hot response its route's series instead (src/http/access-log.ts).
  'route',
  // The router's diagnostics_channel tracing: hot requests are not traced by the router.
  'Symbol(router.tracing.matchedRoute)',
  // parseurl's cache, made by the router's path match; behind the front door it is made
  // by the first read of req.path or req.query.
  '_parsedUrl',
];

/**
 * What a handler behind the front door sees, given what it saw through Express. `hot`: the
 * front door served the request; otherwise it handed it to the app (a HEAD, an unmatched
 * path), and only the server's response class differs.
 */
function behindTheFrontDoor(viaExpress: Shape, hot: boolean): Shape {
  // The server's response class (expressClasses) has the request-end fields from its
  // construction; through Express, requestEnd adds only startedAt.
  const resOwn = [...viaExpress.resOwn, 'Symbol(request.routeSeries)'].sort();
  if (!hot) return { ...viaExpress, resOwn };
  return {
    ...viaExpress,
    // The server's classes have Express's prototypes (expressClasses), so app.handle's
    // Object.setPrototypeOf is not needed: one more link, above app.request.
    reqChain: ['class ExpressRequest', ...viaExpress.reqChain],
    resChain: ['class ExpressResponse', ...viaExpress.resChain],
    reqOwn: viaExpress.reqOwn.filter((k) => !routerOnly.includes(k)),
    resOwn,
    route: false,
    next: 'undefined',
    // routeTable's params are a plain object; the router's have a null prototype. Not
    // deliberate, and harmless: handlers read named params only.
    paramsProto: 'Object',
  };
}

/** The app and the front door over it, as createApi wires them, with the probe as the hot routes. */
function wire(trustProxy: boolean | string, onError: ErrorRequestHandler = errorHandler()) {
  const app = expressApp(trustProxy);
  const metrics = new Metrics({ defaultMetrics: false });
  const ended = requestEnd(createLogger({ LOG_LEVEL: 'silent' }), metrics);
  const parsers = bodyParsers();
  // In place of authentication and the rate limit: what authenticate leaves for the routes.
  const underV1: RequestHandler[] = [
    (_req, res, next) => {
      res.locals.auth = { probe: true };
      next();
    },
  ];
  const seen: Shape[] = [];
  const handler = probe(app, seen);
  const routes: Route[] = [
    { method: 'GET', path: '/v1/probe', handlers: [handler], hot: true },
    { method: 'POST', path: '/v1/probe', handlers: [handler], hot: true },
    { method: 'GET', path: '/v1/probe/:item_id', handlers: [handler], hot: true },
  ];
  app.use(ended);
  app.use(jsonBodies(parsers));
  app.use(underPrefix('/v1', underV1));
  app.use(exactRouter(routes));
  app.use(notFound);
  app.use(onError);
  const listener = frontDoor({ app, first: [ended], metrics, bodyParser: parsers, underV1, routes: routes.filter((r) => r.hot), onError });
  return {
    seen,
    viaExpress: http.createServer(app),
    viaFrontDoor: http.createServer(expressClasses(app), listener),
  };
}

async function listen(server: http.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** One request, its path byte for byte; the answer without its Date header. */
function send(port: number, method: string, path: string, body?: string): Promise<Answer> {
  const headers: Record<string, string> = {
    'x-probe': 'probed',
    'x-forwarded-for': '203.0.113.7',
    'x-forwarded-proto': 'https',
    'x-forwarded-host': 'billing.example',
  };
  if (body !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) });
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers });
    // A request left unanswered (a handler that threw where nothing catches) fails here, not at the test's timeout.
    req.setTimeout(5_000, () => req.destroy(new Error(`no answer to ${method} ${path} in 5 s`)));
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const { date: _date, ...rest } = res.headers;
        resolve({ status: res.statusCode ?? 0, headers: rest, text: Buffer.concat(parts).toString('utf8') });
      });
    });
    req.end(body);
  });
}

/** The requests: method, path, body, whether the front door serves it, and whether the probe runs. */
const requests: { method: string; path: string; body?: string; hot: boolean; probed: boolean }[] = [
  { method: 'GET', path: '/v1/probe?a=1&b=x%20y&c[d]=e&arr=1&arr=2&e=%E2%82%AC', hot: true, probed: true },
  { method: 'POST', path: '/v1/probe?dry=1', body: '{"amount":"5.00","note":"é","nested":{"n":[1,2]}}', hot: true, probed: true },
  { method: 'GET', path: '/v1/probe/a%20b%2Fc%C3%A9?x=%26', hot: true, probed: true },
  // HEAD of a hot path: Express answers it from the GET route, in both servers.
  { method: 'HEAD', path: '/v1/probe/item', hot: false, probed: true },
  // A malformed escape in a parameter: the router's 400, through the error middleware.
  { method: 'GET', path: '/v1/probe/%E0%A4%A', hot: true, probed: false },
];

// TRUST_PROXY unset, and set as a deployment behind a local proxy sets it (src/config).
describe.each([false, 'loopback'])('with trust proxy %s', (trustProxy) => {
  const w = wire(trustProxy);
  const ports = { viaExpress: 0, viaFrontDoor: 0 };

  beforeAll(async () => {
    ports.viaExpress = await listen(w.viaExpress);
    ports.viaFrontDoor = await listen(w.viaFrontDoor);
  });
  afterAll(async () => {
    await Promise.all([w.viaExpress, w.viaFrontDoor].map((s) => new Promise((resolve) => s.close(resolve))));
  });

  /** The answer, and the probe's view (if it ran), of one request to one server. */
  async function through(port: number, r: (typeof requests)[number]): Promise<{ answer: Answer; shape: Shape | undefined }> {
    w.seen.length = 0;
    const answer = await send(port, r.method, r.path, r.body);
    expect(w.seen.length, `${r.method} ${r.path}`).toBe(r.probed ? 1 : 0);
    return { answer, shape: w.seen[0] };
  }

  for (const r of requests) {
    it(`${r.method} ${r.path}: the handler sees what it would through Express, and the answer is the same`, async () => {
      const viaExpress = await through(ports.viaExpress, r);
      const viaFrontDoor = await through(ports.viaFrontDoor, r);
      expect(viaFrontDoor.answer).toEqual(viaExpress.answer);
      if (!r.probed) {
        expect(viaExpress.answer.status).toBe(400);
        return;
      }
      expect(viaFrontDoor.shape).toEqual(behindTheFrontDoor(viaExpress.shape!, r.hot));
      // Not vacuous: the probe saw Express's own objects and values through both.
      const seen = viaExpress.shape!;
      expect(seen).toMatchObject({ reqHasRes: true, resHasReq: true, reqApp: true, resApp: true, localsProto: null, localsKeys: ['auth'], baseUrl: '', get: 'probed' });
      // The differences written out above are still there to be written out.
      expect(seen).toMatchObject({ route: true, next: 'function', paramsProto: null });
      expect(seen.reqOwn).toEqual(expect.arrayContaining(routerOnly));
      expect(seen.reqChain.slice(0, 3)).toEqual(['app.request', 'express.request', 'class IncomingMessage']);
      expect(seen.resChain.slice(0, 3)).toEqual(['app.response', 'express.response', 'class ServerResponse']);
      expect(seen.originalUrl).toBe(r.path);
      expect(seen).toMatchObject(
        trustProxy === false
          ? { ip: '127.0.0.1', ips: [], protocol: 'http', secure: false, hostname: '127.0.0.1' }
          : { ip: '203.0.113.7', ips: ['203.0.113.7'], protocol: 'https', secure: true, hostname: 'billing.example' },
      );
      expect(viaExpress.answer.status).toBe(201);
      expect(viaExpress.answer.headers).toMatchObject({ 'x-probe': 'answered', 'content-type': 'application/json; charset=utf-8' });
      expect(viaExpress.answer.headers).not.toHaveProperty('x-powered-by');
    });
  }

  it('parses the query, the JSON body and the parameters as Express does', async () => {
    const shapes: (Shape | undefined)[] = [];
    for (const r of requests.slice(0, 3)) shapes.push((await through(ports.viaFrontDoor, r)).shape);
    const [get, post, param] = shapes;
    expect(get?.query).toEqual({ a: '1', b: 'x y', 'c[d]': 'e', arr: ['1', '2'], e: '€' });
    expect(post).toMatchObject({ query: { dry: '1' }, body: { amount: '5.00', note: 'é', nested: { n: [1, 2] } } });
    expect(param).toMatchObject({ params: { item_id: 'a b/cé' }, path: '/v1/probe/a%20b%2Fc%C3%A9', query: { x: '&' } });
  });
});

describe('an error handler that throws', () => {
  it('is answered 500 by both, where the request would otherwise hang', async () => {
    // Four parameters: Express calls only such a function with an error.
    const { viaExpress, viaFrontDoor } = wire(false, (_err: unknown, _req: Request, _res: Response, _next: unknown) => {
      throw new Error('the error handler failed');
    });
    const [expressPort, frontDoorPort] = [await listen(viaExpress), await listen(viaFrontDoor)];
    try {
      // The malformed escape reaches the error handler in both servers.
      const malformed = requests[requests.length - 1];
      const [a, b] = [await send(expressPort, malformed.method, malformed.path), await send(frontDoorPort, malformed.method, malformed.path)];
      expect(a.status).toBe(500);
      expect(b.status).toBe(500);
    } finally {
      viaExpress.close();
      viaFrontDoor.close();
    }
  });
});
