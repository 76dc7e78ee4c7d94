/**
 * A ledger entry as one row of COPY's text format (src/ledger/copy-writer.ts writes them;
 * src/ledger/write-refusals.ts builds one to tell an entry our own code cannot serialize).
 */
import type { OutboxEntry } from '../redis/codec.js';
import { toDetails } from './entries.js';

/** The columns the COPY writes, in order (the same as the statement path's INSERT). */
export const copy_columns = [
  'id', 'project_id', 'customer_id', 'seq', 'type', 'transaction_id', 'amount', 'returned_amount', 'wallet', 'details', 'reason',
  'business_type', 'description', 'state', 'result', 'extra', 'created_at',
] as const;
const needsEscape = /[\\\t\n\r]/;
/** A value in COPY's text format: backslash, tab, newline and carriage return escaped. */
function text(v: string): string {
  return needsEscape.test(v) ? v.replace(/[\\\t\n\r]/g, (c) => (c === '\\' ? '\\\\' : c === '\t' ? '\\t' : c === '\n' ? '\\n' : '\\r')) : v;
}
/** An optional value: \N for null, undefined or (as the outbox writes a missing one) ''. */
function opt(v: string | null | undefined): string {
  return v === null || v === undefined ? '\\N' : text(v);
}

/**
 * One row of COPY text for an entry, with the values the statement path stores: details
 * with numeric amounts, `extra` as JSON, the time as an ISO timestamp.
 */
export function copyRow(e: OutboxEntry): string {
  return (
    `${text(e.id)}\t${text(e.project_id)}\t${text(e.customer_id)}\t${e.seq}\t${e.type}\t${text(e.transaction_id)}\t${e.amount}\t` +
    `${opt(e.returned_amount)}\t${opt(e.wallet)}\t${text(JSON.stringify(toDetails(e.details)))}\t${opt(e.reason)}\t` +
    `${opt(e.business_type)}\t${opt(e.description)}\t${opt(e.state)}\t${text(e.result)}\t${e.x ? text(JSON.stringify(e.x)) : '\\N'}\t` +
    `${new Date(Number(e.at)).toISOString()}\n`
  );
}
