/**
 * `npm run bootstrap [-- --json] [-- --name NAME] [-- --owner-email EMAIL]`: creates an
 * organization, its admin key and its owner member (without --owner-email, an email of
 * the organization's own: owner+<organization id>@example.com). With --json, stdout
 * carries exactly {"organization_id", "admin_key", "owner": {"email", "password"},
 * "dashboard_url"}.
 */
import { parseArgs } from 'node:util';
import { bootstrapOrganization } from '../bootstrap.js';
import { loadConfig } from '../config/index.js';
import { migrate } from '../db/migrate.js';
import { createLogger, createRuntime } from '../runtime.js';

const { values } = parseArgs({
  options: { json: { type: 'boolean', default: false }, name: { type: 'string', default: 'Organization' }, 'owner-email': { type: 'string' } },
});
const config = loadConfig(process.env, { LOG_LEVEL: 'warn' });
await migrate(config.DATABASE_URL);
const rt = await createRuntime(config, createLogger(config));
try {
  const created = await bootstrapOrganization(rt, values.name!, values['owner-email'] ?? null);
  if (values.json) {
    process.stdout.write(`${JSON.stringify(created)}\n`);
  } else {
    console.log(`Organization ${created.organization_id} created.`);
    console.log(`Admin key (shown once, keep it safe): ${created.admin_key}`);
    console.log(`Dashboard: ${created.dashboard_url}, sign in as ${created.owner.email} with ${created.owner.password} (shown once)`);
  }
} finally {
  await rt.close();
}
