/**
 * `npm run reconcile -- [--repair] [--project ID [--customer ID]...] [--json]
 * [--skip-redis-scan] [--concurrency N] [--list-max N]`: compares Redis with the state
 * folded from PostgreSQL and prints the drift (customers from PostgreSQL in pages, N at a
 * time, then a scan of every master for customers only Redis holds, unless skipped or
 * customers are named); `--repair` rewrites the drifted customers from PostgreSQL.
 *
 * stdout carries the report only (JSON with --json); progress (customers done of the
 * total, drift found, rate) and logs go to stderr. Exits 0 when nothing drifted or
 * everything was repaired, 1 when drift is left (found without --repair) or a customer
 * could not be checked, 2 on bad arguments (nothing is checked).
 */
import pino from 'pino';
import { sql } from 'slonik';
import { z } from 'zod';
import { loadConfig } from '../config/index.js';
import { concurrency_default, concurrency_max, report_items_max, type ReconcileProgress, type ReconcileReport } from '../reconcile/report.js';
import { reconcile } from '../reconcile/walk.js';
import { createRuntime } from '../runtime.js';
import { commandLine } from './command-line.js';

const usage = `usage: npm run reconcile -- [--repair] [--project ID [--customer ID]...] [--json]
                              [--skip-redis-scan] [--concurrency N] [--list-max N]
  --repair           rewrite the customers with drift in Redis from the ledger
  --project ID       only this project's customers
  --customer ID      only this customer of --project (repeatable)
  --json             the report as JSON on stdout (progress stays on stderr)
  --skip-redis-scan  leave out the scan for customers only Redis holds
  --concurrency N    customers checked at once (1-${concurrency_max}, default ${concurrency_default})
  --list-max N       drift items, errors and anomalies listed at most, each (default ${report_items_max}; counts cover all)`;

function parseCommandLine() {
  const { values, fail } = commandLine(
    'reconcile',
    usage,
    {
      repair: { type: 'boolean', default: false },
      project: { type: 'string' },
      customer: { type: 'string', multiple: true },
      json: { type: 'boolean', default: false },
      // The extra step that scans every master for customers PostgreSQL does not have.
      'skip-redis-scan': { type: 'boolean', default: false },
      concurrency: { type: 'string' },
      'list-max': { type: 'string' },
    },
    { positionals: false },
  );
  const integer = (name: string, raw: string | undefined, min: number, max: number, fallback: number): number => {
    if (raw === undefined) return fallback;
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) fail(`--${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`);
    return n;
  };
  for (const [name, v] of [['project', values.project], ...(values.customer ?? []).map((c) => ['customer', c])] as [string, string | undefined][]) {
    if (v !== undefined && v.trim() === '') fail(`--${name} needs a non-empty id`);
  }
  if (values.customer && values.project === undefined) fail('--customer needs --project (a customer id is unique within its project)');
  return {
    repair: values.repair,
    projectId: values.project,
    customerIds: values.customer ?? null,
    json: values.json,
    redisScan: !values['skip-redis-scan'],
    concurrency: integer('concurrency', values.concurrency, 1, concurrency_max, concurrency_default),
    listMax: integer('list-max', values['list-max'], 0, 1_000_000, report_items_max),
  };
}

const count = (n: number) => n.toLocaleString('en-US');

/** One progress line: done of total, drift, errors, and the rate since the start. */
function progressLine(p: ReconcileProgress): string {
  const rate = p.elapsed_ms > 0 ? Math.round((p.customers_done * 1000) / p.elapsed_ms) : 0;
  const pct = p.customers_total > 0 ? ` (${Math.min(100, Math.floor((p.customers_done * 100) / p.customers_total))}%)` : '';
  return `reconcile: ${count(p.customers_done)}/${count(p.customers_total)} customers${pct}, ${count(p.customers_with_drift)} with drift (${count(p.drift_total)} items), ${count(p.errors_total)} errors, ${count(rate)}/s, ${(p.elapsed_ms / 1000).toFixed(1)} s`;
}

function describe(report: ReconcileReport, repair: boolean): string {
  const lines = [`checked ${report.customers_checked} customers: ${report.customers_with_drift} with drift`];
  for (const d of report.drift) {
    const what = d.source ?? d.transaction_id ?? d.idempotency_key;
    lines.push(
      `  ${d.project_id} ${d.customer_id} ${d.field}${what === undefined ? '' : ` ${what}`}: redis ${JSON.stringify(d.redis)}, expected ${JSON.stringify(d.expected)}`,
    );
  }
  const more = (listed: number, total: number, what: string) => {
    if (total > listed) lines.push(`  ... and ${total - listed} more ${what} not listed (--list-max ${report.items_max})`);
  };
  more(report.drift.length, report.drift_total, 'drift items');
  if (repair) lines.push(`repaired ${report.customers_repaired} customers`);
  for (const e of report.errors) lines.push(`  could not check ${e.project_id} ${e.customer_id}: ${e.message}`);
  more(report.errors.length, report.errors_total, 'errors');
  // Kept rather than lost: an operator reads these (docs/OPERATIONS.md, "Anomalies").
  for (const a of report.anomalies) lines.push(`  anomaly ${a.project_id} ${a.customer_id}: ${a.message}`);
  more(report.anomalies.length, report.anomalies_total, 'anomalies');
  // Holes in the ledger of record until released (docs/OPERATIONS.md, "Quarantined ledger entries").
  for (const q of report.quarantined) {
    lines.push(`  quarantined ${q.project_id} ${q.customer_id} seq ${q.seq ?? '?'} (npm run quarantine -- show ${q.quarantine_id}): ${q.error}`);
  }
  more(report.quarantined.length, report.quarantined_total, 'quarantined entries');
  return lines.join('\n');
}

const args = parseCommandLine();
const config = loadConfig();
// stdout carries the report only (--json is read by programs); logs go to stderr.
const logger = pino({ level: config.LOG_LEVEL }, pino.destination(2));
const rt = await createRuntime(config, logger);
let exitCode = 1;
try {
  if (args.projectId !== undefined) {
    const found = await rt.db.maybeOne(sql.type(z.object({ id: z.string() }))`SELECT id FROM projects WHERE id = ${args.projectId}`);
    if (!found) {
      process.stderr.write(`reconcile: project ${JSON.stringify(args.projectId)} not found\n`);
      exitCode = 2;
    }
  }
  if (exitCode !== 2) {
    // On a terminal the line is rewritten in place; in a log, one line per update.
    const tty = process.stderr.isTTY === true;
    const report = await reconcile(rt, {
      projectId: args.projectId,
      customers: args.customerIds?.map((customerId) => ({ projectId: args.projectId!, customerId })),
      repair: args.repair,
      redisOnly: args.redisScan,
      concurrency: args.concurrency,
      itemsMax: args.listMax,
      onProgress: (p) => process.stderr.write(tty ? `\r${progressLine(p)}\x1b[K` : `${progressLine(p)}\n`),
    });
    if (tty) process.stderr.write('\n');
    process.stdout.write(`${args.json ? JSON.stringify(report, null, 2) : describe(report, args.repair)}\n`);
    const unrepaired = report.customers_with_drift - (args.repair ? report.customers_repaired : 0);
    exitCode = unrepaired === 0 && report.errors_total === 0 ? 0 : 1;
  }
} finally {
  await rt.close();
}
process.exit(exitCode);
