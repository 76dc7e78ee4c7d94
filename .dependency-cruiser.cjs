/**
 * The layer map of docs/ARCHITECTURE.md ("Layers"), held by `npm run lint`
 * (dependency-cruiser; type-only imports count). A module may import its own layer and
 * the layers below it, never above, and no import cycle is allowed:
 *   foundation  config, errors, ids, db, redis, cache, the zod schema base, the metrics' instruments
 *   domain      ledger, keys, members, plans, billing, usage, customers, reconcile, gateway, events, webhooks
 *   edge        http plumbing, each feature's routes.ts, openapi, dashboard, the admin (management)
 *               operations and routes, metrics exposition (src/metrics/stores.ts), health
 *   composition runtime, app, server, main, web, cli, workers, the mock upstream program
 */
const foundation = '^src/(config|errors|db|redis|cache|schema|types)/|^src/metrics/(metrics|series|worker)\\.ts$|^src/(ids|root|lifecycle)\\.ts$';
// Route modules: each feature's routes.ts, the gateway's model listing, the customer profile routes.
const routes = '^src/[^/]+/(routes|model-routes)\\.ts$|^src/customers/profile\\.ts$';
// The management operations answer /v1/admin and /dashboard/api: admin routes, except their PostgreSQL queries.
const edge = `${routes}|^src/(http|openapi|dashboard)/|^src/admin/(?!(queries|models)\\.ts$)|^src/metrics/stores\\.ts$|^src/health\\.ts$`;
const composition =
  '^src/(runtime|app|server|main|web|shutdown|bootstrap)\\.ts$|^src/cli/|^src/gateway/mock/|^workers/';
const domain = '^src/(ledger|keys|members|plans|billing|usage|customers|reconcile|events|webhooks)/|^src/gateway/(?!mock/)|^src/admin/(queries|models)\\.ts$';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      severity: 'error',
      comment: 'An import cycle (type-only imports included): move the shared thing below both.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'foundation-imports-only-foundation',
      severity: 'error',
      comment: 'config, errors, ids, db, redis and cache are the bottom layer.',
      from: { path: foundation },
      to: { path: '^(src|workers)/', pathNot: foundation },
    },
    {
      name: 'domain-imports-no-edge-or-composition',
      severity: 'error',
      comment: 'The domain does not know HTTP, the OpenAPI document, the dashboard or how processes are put together.',
      from: { path: domain, pathNot: edge },
      to: { path: `${edge}|${composition}` },
    },
    {
      name: 'edge-imports-no-composition',
      severity: 'error',
      comment: 'Routes, pages and metrics are handed their collaborators; they do not build them.',
      from: { path: edge },
      to: { path: composition },
    },
    {
      name: 'only-composition-imports-workers',
      severity: 'error',
      comment: 'workers/ are processes: only composition starts them.',
      from: { pathNot: `${composition}|^test/|^bench/|^scripts/` },
      to: { path: '^workers/' },
    },
    {
      name: 'every-module-has-a-layer',
      severity: 'error',
      comment: 'A new directory under src/ gets a place in the layer map first.',
      from: { path: '^src/', pathNot: `${foundation}|${domain}|${edge}|${composition}` },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    includeOnly: '^(src|workers)/',
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default'], extensions: ['.ts', '.js'] },
  },
};
