/**
 * The document covers the app, and only the app: every route the app registers (its Express
 * routers, which hold the front door's hot routes too: src/http/router.ts) is described in
 * /openapi.json, and every described operation is a route of the app. A route added without
 * a description fails here, naming it: describe it with describeRoute (or describeOperation
 * for a management operation, which describes both mounts) next to the route's own schemas;
 * see src/openapi/registry.ts.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { managementOperations } from '../../src/admin/operations/index.js';
import { createApi } from '../../src/app.js';
import { openApiPath } from '../../src/openapi/registry.js';
import { openApiDocument } from '../../src/openapi/routes.js';
import { errorTypeForStatus } from '../../src/errors/catalogue.js';
import type { Json } from '../helpers.js';
import { svc, useTestService } from '../support/service.js';
import { anthropicTypeOfStatus } from '../../src/errors/anthropic.js';

/**
 * Routes that are not part of the API, and why: the dashboard's page (HTML screens and
 * their assets, src/dashboard/) and the reference page that renders the document.
 */
const not_api: { pattern: RegExp; why: string }[] = [
  { pattern: /^[A-Z]+ \/dashboard(?!\/api(?:\/|$))(?:\/|$)/, why: "the dashboard's HTML page and its assets" },
  { pattern: /^GET \/docs(?:\/|$)/, why: "the API reference page (Swagger UI) and its assets" },
];

let routes: string[];
let doc: Json;

interface Layer {
  route?: { path: string; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
}

/** `METHOD path` of every route in an Express router stack, nested routers included. */
function routesOf(stack: Layer[]): string[] {
  const out: string[] = [];
  for (const layer of stack) {
    if (layer.route) {
      for (const [method, on] of Object.entries(layer.route.methods)) if (on && method !== '_all') out.push(`${method.toUpperCase()} ${openApiPath(layer.route.path)}`);
    } else if (layer.handle?.stack) {
      out.push(...routesOf(layer.handle.stack));
    }
  }
  return out;
}

useTestService({ variants: [] });
beforeAll(async () => {
  const app = createApi(svc.rt).app as unknown as { router: { stack: Layer[] } };
  routes = [...new Set(routesOf(app.router.stack))];
  doc = openApiDocument();
});

const documented = () =>
  Object.entries<Record<string, unknown>>(doc.paths).flatMap(([path, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${path}`));

describe('the document and the routes of the app', () => {
  it('finds the routes of the app (the walk of its routers works)', () => {
    // A few routes of each kind: a hot route, a plain router's, a management operation at both mounts.
    expect(routes).toEqual(
      expect.arrayContaining([
        'POST /v1/billing/deduct',
        'GET /v1/customers/{customer_id}/ledger',
        'GET /health',
        'GET /v1/admin/projects/{project_id}',
        'GET /dashboard/api/projects/{project_id}',
        'PUT /v1/admin/projects/{project_id}/models/{model_id}',
      ]),
    );
  });

  it('describes every route the app registers', () => {
    const described = new Set(documented());
    const api = routes.filter((r) => !not_api.some((n) => n.pattern.test(r)));
    const missing = api.filter((r) => !described.has(r));
    expect(
      missing,
      `routes the app serves that /openapi.json does not describe:\n  ${missing.join('\n  ')}\n` +
        'describe each with describeRoute (or describeOperation, for a management operation: both mounts) next to the route; see src/openapi/registry.ts',
    ).toEqual([]);
  });

  it('describes no route the app does not have', () => {
    const served = new Set(routes);
    const extra = documented().filter((r) => !served.has(r));
    expect(extra, `operations of /openapi.json that no router of the app registers:\n  ${extra.join('\n  ')}`).toEqual([]);
  });

  it("gives each management operation its handler's least role", () => {
    const wrong: string[] = [];
    for (const op of managementOperations(svc.rt)) {
      for (const prefix of ['/v1/admin', '/dashboard/api']) {
        const described = doc.paths[openApiPath(`${prefix}${op.path}`)]?.[op.method.toLowerCase()];
        if (described !== undefined && described['x-role'] !== op.role) wrong.push(`${op.method} ${prefix}${op.path}: documented ${described['x-role']}, handler ${op.role}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('lists the errors of each operation with the type its status has (Anthropic\'s under /v1/messages)', () => {
    const bad: string[] = [];
    for (const [path, item] of Object.entries<Record<string, Json>>(doc.paths)) {
      for (const [method, operation] of Object.entries<Json>(item)) {
        for (const [status, response] of Object.entries<Json>(operation.responses)) {
          const error = response.content?.['application/json']?.schema?.properties?.error;
          if (error === undefined) continue;
          const type = error.allOf[1].properties.type.const;
          const anthropic = path === '/v1/messages' || path.startsWith('/v1/messages/');
          const expected = anthropic ? anthropicTypeOfStatus(Number(status)) : errorTypeForStatus(Number(status));
          if (type !== expected) bad.push(`${method.toUpperCase()} ${path} ${status}: type ${type}`);
        }
      }
    }
    expect(bad).toEqual([]);
  });
});
