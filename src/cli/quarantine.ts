/**
 * `npm run quarantine -- <command>`: the operator's view and repair of ledger entries
 * PostgreSQL refused for good (src/ledger/quarantine.ts, docs/OPERATIONS.md "Quarantined
 * ledger entries"), for the service of this REDIS_PREFIX.
 *
 *   list [--project ID] [--customer ID] [--json]   the open entries
 *   show ID                                        one entry: its fields as Redis held them
 *   set ID FIELD VALUE                             replaces a field's value (UTF-8 text)
 *   release ID                                     writes the entry to the ledger at its seq
 *   drop ID --note TEXT                            releases it without writing (the operation is void)
 *
 * Exits 0 on success, 1 when the entry could not be released or found, 2 on bad arguments.
 */
import pino from 'pino';
import { loadConfig } from '../config/index.js';
import { createDb } from '../db/pool.js';
import { createLedgerQueries } from '../ledger/queries.js';
import { releaseQuarantined } from '../ledger/quarantine-release.js';
import type { QuarantineRow } from '../ledger/quarantine.js';
import { commandLine } from './command-line.js';

const usage = `usage: npm run quarantine -- list [--project ID] [--customer ID] [--json]
       npm run quarantine -- show ID
       npm run quarantine -- set ID FIELD VALUE
       npm run quarantine -- release ID
       npm run quarantine -- drop ID --note TEXT`;

const { values, positionals, fail } = commandLine('quarantine', usage, {
  project: { type: 'string' },
  customer: { type: 'string' },
  json: { type: 'boolean', default: false },
  note: { type: 'string' },
});
const [command, rawId, ...rest] = positionals;
const arity: Record<string, number> = { list: 0, show: 1, set: 3, release: 1, drop: 1 };
if (command === undefined || !(command in arity)) fail(command === undefined ? 'a command is needed' : `unknown command ${JSON.stringify(command)}`);
if (positionals.length - 1 !== arity[command]) fail(`${command} takes ${arity[command]} argument(s)`);
const id = rawId === undefined ? 0 : /^[1-9]\d{0,15}$/.test(rawId) ? Number(rawId) : fail(`ID must be a quarantine id (a positive integer), got ${JSON.stringify(rawId)}`);
if (command === 'drop' && (values.note ?? '').trim() === '') fail('drop needs --note saying why the operation is void');

/** A field's bytes as text, escapes for what a terminal should not get raw (a NUL byte). */
const shown = (b: Buffer) => JSON.stringify(b.toString('utf8'));

function describe(r: QuarantineRow): string {
  const fields: string[] = [];
  for (let i = 0; i < r.fields.length; i += 2) fields.push(`    ${r.fields[i].toString('utf8')} = ${shown(r.fields[i + 1])}`);
  return [
    `${r.id}  ${r.project_id} ${r.customer_id} seq ${r.seq ?? '?'}  entry ${r.entry_id ?? '?'} (${r.entry_type ?? '?'})  stream id ${r.stream_id}`,
    `    refused: ${r.error}${r.sqlstate ? ` (SQLSTATE ${r.sqlstate})` : ''}; seen ${r.seen_count}x, first ${new Date(r.first_seen_at).toISOString()}, last ${new Date(r.last_seen_at).toISOString()}`,
    ...(r.released_at === null ? [] : [`    released ${new Date(r.released_at).toISOString()}: ${r.release_note ?? ''}`]),
    ...fields,
  ].join('\n');
}

const config = loadConfig();
const logger = pino({ level: config.LOG_LEVEL }, pino.destination(2));
const db = await createDb(config.DATABASE_URL, 2);
const ledger = createLedgerQueries(db);
const quarantine = ledger.quarantine(config.REDIS_PREFIX);
let exitCode = 0;
try {
  if (command === 'list') {
    const rows = await quarantine.open({ projectId: values.project, customerId: values.customer });
    if (values.json) process.stdout.write(`${JSON.stringify(rows.map((r) => ({ ...r, fields: r.fields.map((f) => f.toString('utf8')) })), null, 2)}\n`);
    else process.stdout.write(rows.length === 0 ? 'no quarantined entries\n' : `${rows.map((r) => describe(r).split('\n').slice(0, 2).join('\n')).join('\n')}\n`);
  } else if (command === 'show') {
    const row = await quarantine.get(id);
    if (row === null) {
      process.stderr.write(`quarantine: no entry ${id}\n`);
      exitCode = 1;
    } else process.stdout.write(`${describe(row)}\n`);
  } else if (command === 'set') {
    const [field, value] = rest;
    if (!(await quarantine.setField(id, field, Buffer.from(value, 'utf8')))) {
      process.stderr.write(`quarantine: no open entry ${id}\n`);
      exitCode = 1;
    } else process.stdout.write(`${describe((await quarantine.get(id))!)}\n`);
  } else if (command === 'release') {
    const outcome = await releaseQuarantined(ledger, quarantine, id);
    if (outcome.released) process.stdout.write(`released ${id}: ${outcome.inserted === 1 ? 'written to the ledger' : 'the ledger had it already'}\n`);
    else {
      process.stderr.write(`quarantine: ${id} not released: ${outcome.reason}\n`);
      exitCode = 1;
    }
  } else if (command === 'drop') {
    if (await quarantine.release(id, `dropped: ${values.note!}`)) process.stdout.write(`dropped ${id}; Redis still holds what the operation did: npm run reconcile -- --repair --project <its project> --customer <id> rewrites it from the ledger\n`);
    else {
      process.stderr.write(`quarantine: no open entry ${id}\n`);
      exitCode = 1;
    }
  }
} catch (err) {
  logger.error({ err }, 'quarantine command failed');
  exitCode = 1;
} finally {
  await db.end();
}
process.exit(exitCode);
