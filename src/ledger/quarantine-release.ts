/**
 * An operator's repair of a quarantined entry (src/ledger/quarantine.ts; the CLI is
 * src/cli/quarantine.ts): once its fields are fixed, the entry is written to the ledger at
 * its own seq, filling the hole, and the quarantine row is marked released. An entry that
 * still cannot be written stays parked, and the answer says why.
 */
import { parseOutboxEntry } from '../redis/codec.js';
import type { LedgerQueries } from './queries.js';
import type { QuarantineQueries } from './quarantine.js';
import { unwritableReason } from './write-refusals.js';

export type ReleaseOutcome =
  | { released: true; inserted: number }
  | { released: false; reason: string };

/** Writes quarantined entry `id` to the ledger as its fields now stand, and releases it. */
export async function releaseQuarantined(
  ledger: Pick<LedgerQueries, 'insertEntries'>,
  quarantine: QuarantineQueries,
  id: number,
): Promise<ReleaseOutcome> {
  const row = await quarantine.get(id);
  if (row === null) return { released: false, reason: `no quarantined entry ${id}` };
  if (row.released_at !== null) return { released: false, reason: `entry ${id} was released already (${row.release_note ?? ''})` };
  let entry;
  try {
    entry = parseOutboxEntry(row.fields.map((f) => f.toString('utf8')));
  } catch (err) {
    return { released: false, reason: `its fields do not parse as an entry: ${(err as Error).message}` };
  }
  if (entry.project_id !== row.project_id || entry.customer_id !== row.customer_id) {
    return { released: false, reason: `its fields name ${entry.project_id}/${entry.customer_id}, not the customer whose outbox held it (${row.project_id}/${row.customer_id})` };
  }
  const unwritable = unwritableReason(entry);
  if (unwritable !== null) return { released: false, reason: `it still cannot be written: ${unwritable.message}` };
  let inserted: number;
  try {
    inserted = await ledger.insertEntries([entry]);
  } catch (err) {
    return { released: false, reason: `PostgreSQL refused it: ${(err as Error).message}` };
  }
  await quarantine.release(id, inserted === 1 ? `written at seq ${entry.seq}` : `entry ${entry.id} was in the ledger already`);
  return { released: true, inserted };
}
