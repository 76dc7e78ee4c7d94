/**
 * A PostgreSQL database of a test file's own, made afresh and migrated: for tests whose
 * jobs act on every organization of their database (closing billing periods on a clock
 * moved by months), which would otherwise reach the organizations of the test files
 * running beside them.
 */
import pg from 'pg';
import { migrate } from '../../src/db/migrate.js';

/** Drops and creates `<test database>_<suffix>`, migrates it, and returns its URL. */
export async function ownDatabase(suffix: string): Promise<string> {
  const base = new URL(process.env.TEST_DATABASE_URL!);
  const name = `${base.pathname.slice(1)}_${suffix}`;
  const admin = new URL(base);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await client.query(`CREATE DATABASE "${name}"`);
  } finally {
    await client.end();
  }
  const url = new URL(base);
  url.pathname = `/${name}`;
  await migrate(url.toString());
  return url.toString();
}
