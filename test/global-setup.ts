/** Once per run: the test database exists and is migrated. Services: scripts/ensure-services.sh. */
import { execFileSync } from 'node:child_process';
import { migrate } from '../src/db/migrate.js';

export default async function setup(): Promise<void> {
  const url = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/svc_test';
  execFileSync('bash', ['scripts/ensure-services.sh'], { env: { ...process.env, DATABASE_URL: url }, stdio: 'inherit' });
  await migrate(url);
}
