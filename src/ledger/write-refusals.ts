/**
 * Which failures of a ledger write retrying can fix. A refusal is permanent when it
 * cannot: a data exception (SQLSTATE class 22: a NUL byte in text, a number out of range),
 * an integrity violation (class 23) other than a seq clash (which reconcile repairs,
 * src/ledger/outbox.ts), or an entry our own code cannot turn into its rows (a stored
 * value that does not parse or serialize). Anything else (a lost connection, a timeout,
 * 57P01, 40001, 40P01, 53xxx, a statement we got wrong) is transient: the entries stay in
 * the outbox and are tried again. The outbox parks what is refused for good
 * (src/ledger/quarantine.ts).
 */
import { eventOfEntry, type OutboxEntry } from '../redis/codec.js';
import { copyRow } from './copy-row.js';

/**
 * True for PostgreSQL's refusal of an entry whose (project, customer, seq) is taken: the
 * ledger table's primary key (migrations/007_ledger_keys.sql).
 */
export function isSeqClash(err: unknown): boolean {
  for (let e = err as { constraint?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (e.constraint === 'ledger_entries_pkey') return true;
  }
  return false;
}

/** The SQLSTATE of a PostgreSQL error, found on the error or its causes; else null. */
export function sqlStateOf(err: unknown): string | null {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) && /^[0-9]/.test(e.code)) return e.code;
  }
  return null;
}

/**
 * Why `e` cannot be turned into its rows by our own code (the COPY row and the statement
 * path's parses), or null when it can. Pure: the same entry always gives the same answer,
 * so an entry it refuses can never be written as it is.
 */
export function unwritableReason(e: OutboxEntry): Error | null {
  try {
    if (e.type === 'EVENT') JSON.stringify(eventOfEntry(e));
    else if (e.type !== 'USAGE') copyRow(e);
    if (e.type === 'DEPOSIT' && e.x) {
      const customer = e.x.customer as { metadata?: string | null; created_at?: string } | null | undefined;
      if (customer?.metadata != null) JSON.stringify(JSON.parse(customer.metadata));
      if (customer) new Date(Number(customer.created_at)).toISOString();
      const s = JSON.parse(e.x.source as string) as Record<string, string>;
      if (s.s !== '') new Date(Number(s.s)).toISOString();
      if (s.e !== '') new Date(Number(s.e)).toISOString();
    }
    if (e.usage !== undefined) {
      JSON.parse(e.usage);
      JSON.parse(e.result);
    }
    return null;
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

/**
 * How a failed write of `entries` is to be taken: `clash` (a seq PostgreSQL holds for
 * another entry), `data` (PostgreSQL or our code refuses some entry for good: isolate it),
 * or `transient` (try again later).
 */
export function refusalOf(err: unknown, entries: readonly OutboxEntry[]): 'clash' | 'data' | 'transient' {
  if (isSeqClash(err)) return 'clash';
  const state = sqlStateOf(err);
  if (state !== null) return state.startsWith('22') || state.startsWith('23') ? 'data' : 'transient';
  // Not PostgreSQL's word: one of our own parses or serializations, if an entry fails
  // them; else something around the write (the connection), to retry.
  return entries.some((e) => unwritableReason(e) !== null) ? 'data' : 'transient';
}

/**
 * Whether a transient failure may be one customer's alone, worth finding by splitting the
 * batch: PostgreSQL answered with an error of the statement (a deadlock, a serialization
 * failure, a lock or statement timeout). A lost connection, a server shutting down (57P)
 * or out of resources (53) fails every customer alike: their batch is retried as a whole.
 */
export function mayBeOneCustomers(err: unknown): boolean {
  const state = sqlStateOf(err);
  return state !== null && !/^(08|53|57P)/.test(state);
}
