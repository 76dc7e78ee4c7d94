/**
 * `npm run reconcile [-- --repair] [-- --project ID] [-- --json] [-- --skip-redis-scan]`:
 * compares Redis with the state folded from PostgreSQL and prints the drift (customers
 * from PostgreSQL in pages, then a scan of every master for customers only Redis holds,
 * unless skipped); `--repair` rewrites the drifted customers from PostgreSQL. Exits 0 when nothing drifted or everything was repaired,
 * 1 when drift is left (found without --repair) or a customer could not be checked.
 */
import { parseArgs } from 'node:util';
import pino from 'pino';
import { loadConfig } from '../config/index.js';
import { reconcile, type ReconcileReport } from '../reconcile/reconcile.js';
import { createRuntime } from '../runtime.js';

const { values } = parseArgs({
  options: {
    repair: { type: 'boolean', default: false },
    project: { type: 'string' },
    json: { type: 'boolean', default: false },
    // The extra step that scans every master for customers PostgreSQL does not have.
    'skip-redis-scan': { type: 'boolean', default: false },
  },
});

function describe(report: ReconcileReport, repair: boolean): string {
  const lines = [`checked ${report.customers_checked} customers: ${report.customers_with_drift} with drift`];
  for (const d of report.drift) {
    const what = d.source ?? d.transaction_id ?? d.idempotency_key;
    lines.push(
      `  ${d.project_id} ${d.customer_id} ${d.field}${what === undefined ? '' : ` ${what}`}: redis ${JSON.stringify(d.redis)}, expected ${JSON.stringify(d.expected)}`,
    );
  }
  if (repair) lines.push(`repaired ${report.customers_repaired} customers`);
  for (const e of report.errors) lines.push(`  could not check ${e.project_id} ${e.customer_id}: ${e.message}`);
  // Kept rather than lost: an operator reads these (docs/OPERATIONS.md, "Anomalies").
  for (const a of report.anomalies) lines.push(`  anomaly ${a.project_id} ${a.customer_id}: ${a.message}`);
  return lines.join('\n');
}

const config = loadConfig();
// stdout carries the report only (--json is read by programs); logs go to stderr.
const logger = pino({ level: config.LOG_LEVEL }, pino.destination(2));
const rt = await createRuntime(config, logger);
let exitCode = 1;
try {
  const report = await reconcile(rt, { projectId: values.project, repair: values.repair, redisOnly: !values['skip-redis-scan'] });
  process.stdout.write(`${values.json ? JSON.stringify(report, null, 2) : describe(report, values.repair)}\n`);
  const unrepaired = report.customers_with_drift - (values.repair ? report.customers_repaired : 0);
  exitCode = unrepaired === 0 && report.errors.length === 0 ? 0 : 1;
} finally {
  await rt.close();
}
process.exit(exitCode);
