/**
 * `npm start`: everything on one machine in one process. Applies migrations, sets up the
 * demo on an empty database (printed once, and kept in .demo-credentials.json for later
 * starts), then runs the API and the workers.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { bootstrapDemo, dashboardUrl, type Demo } from './bootstrap.js';
import { createAdminQueries } from './admin/queries.js';
import { loadConfig } from './config/index.js';
import { migrate } from './db/migrate.js';
import { createRuntime } from './runtime.js';
import { listen } from './server.js';
import { exitIfPortInUse, listenError } from './config/ports.js';
// eslint-disable-next-line no-restricted-imports -- npm start runs the API and the workers in one process: the one place of src/ that starts them
import { startWorkers } from '../workers/index.js';
import { startMockUpstream } from './gateway/mock/server.js';
import { limitText } from './dashboard/format.js';
import { stopOnSignals, WebDrain } from './shutdown.js';

const credentialsFile = '.demo-credentials.json';

// The demo's models call the mock upstream on 127.0.0.1, which the gateway refuses unless
// private upstreams are allowed; the environment can still say otherwise.
const config = loadConfig({ UPSTREAM_ALLOW_PRIVATE: '1', ...process.env });
await migrate(config.DATABASE_URL);
const rt = await createRuntime(config);
// The demo models' provider. Its address is stored with the models, so it keeps its port.
const mock = await startMockUpstream({ port: config.MOCK_UPSTREAM_PORT, host: '127.0.0.1' }).catch((err: Error) => {
  const reason = listenError(err, config.MOCK_UPSTREAM_PORT, 'MOCK_UPSTREAM_PORT');
  rt.logger.warn({ err: reason }, `mock upstream not started on port ${config.MOCK_UPSTREAM_PORT}; demo models will answer 502`);
  return null;
});
const mockUrl = `http://127.0.0.1:${config.MOCK_UPSTREAM_PORT}/v1`;

let demo: Demo | null = null;
if ((await createAdminQueries(rt.db).countOrganizations()) === 0) {
  demo = await bootstrapDemo(rt, mockUrl);
  writeFileSync(credentialsFile, `${JSON.stringify(demo, null, 2)}\n`, { mode: 0o600 });
} else if (existsSync(credentialsFile)) {
  demo = JSON.parse(readFileSync(credentialsFile, 'utf8')) as Demo;
}

// A taken PORT or METRICS_PORT: one line, exit 1.
const server = await listen(rt).catch(exitIfPortInUse);
// One process: the workers' metrics are served with the API's (METRICS_PORT or /metrics).
const workers = await startWorkers(rt, { serveMetrics: false });

if (demo) {
  const u = server.url;
  // The plan in force now: an owner (or the operator) may have changed it since the demo was made.
  const now = await rt.plans.standing(demo.organization_id);
  console.log(`
Service running at ${u}

Demo organization ${demo.organization_id}, project ${demo.project_id} (kept in ${credentialsFile})
  ${config.PLANS === 'off' ? 'plans are off (PLANS=off): nothing is limited' : `on the ${now.plan === 'free' ? 'Free' : now.plan} plan with the demo allowance: ${limitText(now.limits.projectsMax, 'project', 'projects')}, ${limitText(now.limits.keysPerProjectMax, 'key', 'keys')} per project, ${limitText(now.limits.membersMax, 'member', 'members')}`}
  admin key     ${demo.admin_key}
  project key   ${demo.project_key}
  customer key  ${demo.customer_key}  (bound to ${demo.customer_id})
${demo.owner ? `  dashboard     ${dashboardUrl(config, server.port)}\n  owner         ${demo.owner.email} / ${demo.owner.password}  (signs in to the dashboard)\n` : ''}
Try it:
  curl -s ${u}/v1/customers/${demo.customer_id}/balance -H 'Authorization: Bearer ${demo.project_key}'
  curl -s ${u}/v1/billing/deduct -H 'Authorization: Bearer ${demo.project_key}' -H 'Content-Type: application/json' \\
    -d '{"customer_id": "${demo.customer_id}", "transaction_id": "demo-'$RANDOM'", "amount": 1500}'
  curl -si ${u}/v1/chat/completions -H 'Authorization: Bearer ${demo.project_key}' -H 'X-Service-Customer: ${demo.customer_id}' \\
    -H 'Content-Type: application/json' -d '{"model": "demo-gpt", "messages": [{"role": "user", "content": "Hello!"}]}'
  curl -si ${u}/v1/responses -H 'Authorization: Bearer ${demo.project_key}' -H 'X-Service-Customer: ${demo.customer_id}' \\
    -H 'Content-Type: application/json' -d '{"model": "demo-responses", "input": "Hello!"}'
  curl -si ${u}/v1/embeddings -H 'Authorization: Bearer ${demo.project_key}' -H 'X-Service-Customer: ${demo.customer_id}' \\
    -H 'Content-Type: application/json' -d '{"model": "demo-embed", "input": "Hello!", "encoding_format": "float"}'

Models (mock upstream at ${mockUrl}): ${(demo.models ?? []).join(', ')}
`);
} else {
  console.log(`Service running at ${server.url}, dashboard at ${dashboardUrl(config, server.port)} (database already set up; use npm run bootstrap for a new organization)`);
}

// SIGTERM: the API drains and settles every call while the workers and the mock upstream
// (which streams in flight read from) still run; then they stop, and Redis and PostgreSQL
// are closed (src/shutdown.ts).
const drain = new WebDrain(rt, server, config.SHUTDOWN_GRACE_MS);
stopOnSignals(
  rt.logger,
  async () => {
    await drain.run();
    await workers.stop();
    await mock?.close();
    await rt.close();
  },
  () => drain.cut(),
);
