/**
 * `npm run bootstrap [-- --json] [-- --name NAME]`: creates an organization and its admin
 * key. With --json, stdout carries exactly {"organization_id", "admin_key"}.
 */
import { parseArgs } from 'node:util';
import { bootstrapOrganization } from '../bootstrap.js';
import { loadConfig } from '../config/index.js';
import { migrate } from '../db/migrate.js';
import { createLogger, createRuntime } from '../runtime.js';

const { values } = parseArgs({ options: { json: { type: 'boolean', default: false }, name: { type: 'string', default: 'Organization' } } });
const config = loadConfig(process.env, { LOG_LEVEL: 'warn' });
await migrate(config.DATABASE_URL);
const rt = await createRuntime(config, createLogger(config));
try {
  const created = await bootstrapOrganization(rt, values.name!);
  if (values.json) {
    process.stdout.write(`${JSON.stringify(created)}\n`);
  } else {
    console.log(`Organization ${created.organization_id} created.`);
    console.log(`Admin key (shown once, keep it safe): ${created.admin_key}`);
  }
} finally {
  await rt.close();
}
