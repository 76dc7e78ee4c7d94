/**
 * The one codec for what the Lua scripts store in Redis (lua/includes/customer.lua): the
 * service, the persist worker, reconcile, the tests and the benches read and write these
 * values through this module only.
 *
 * - Sources (`src` hash, `live`, `spent` zsets): `<id>` the static fields as JSON
 *   {w, l, t, s, e, q}; `<id>:u` used and `<id>:f` frozen as integers; `<id>:d` the meta
 *   seq when the source died. A live member is `<creation seq on 15 digits>:<id>`, a
 *   spent member `id|total|used|wallet`.
 * - Transaction records (`tx` hash): JSON StoredTransaction; deposit records (`dep`
 *   hash): JSON {h, r}.
 * - Outbox entries (`outbox` stream): one stream field per entry field (see
 *   outbox_entry_fields). Entries of an earlier version hold the whole entry as JSON in one
 *   field `e`; parseOutboxEntry reads both.
 *
 * Amounts and times are strings everywhere, as the scripts print them with '%.0f'.
 */

// ---------------------------------------------------------------- sources

/** A whole source, every field a string, '' for no start or expiry (the deposit entry's `x.source`). */
export interface StoredSource {
  id: string;
  w: string;
  l: string;
  q: string;
  t: string;
  u: string;
  f: string;
  s: string;
  e: string;
}

export interface SourceState {
  id: string;
  wallet: string;
  label: string;
  seq: number;
  total: number;
  used: number;
  frozen: number;
  startsAtMs: number | null;
  expiresAtMs: number | null;
}

/** encode_source in lua/includes/customer.lua: every field a string. */
export function encodeSource(s: StoredSource): string {
  return JSON.stringify({ id: s.id, w: s.w, l: s.l, q: s.q, t: s.t, u: s.u, f: s.f, s: s.s, e: s.e });
}

/** The whole source of encodeSource (the deposit entry's `x.source`, the fold's `src`). */
export function parseStoredSource(raw: string): StoredSource {
  return JSON.parse(raw) as StoredSource;
}

export function toSourceState(s: StoredSource): SourceState {
  return {
    id: s.id,
    wallet: s.w,
    label: s.l,
    seq: Number(s.q),
    total: Number(s.t),
    used: Number(s.u),
    frozen: Number(s.f),
    startsAtMs: s.s === '' ? null : Number(s.s),
    expiresAtMs: s.e === '' ? null : Number(s.e),
  };
}

/** A source as the view script lists it (encode_source). */
export function decodeSource(raw: string): SourceState {
  return toSourceState(parseStoredSource(raw));
}

/** live_member in customer.lua. */
export function liveMember(s: StoredSource): string {
  return `${s.q.padStart(15, '0')}:${s.id}`;
}

/** live_score in customer.lua. */
export function liveScore(s: StoredSource): string {
  return s.e === '' ? 'inf' : s.e;
}

/** The spent zset member of retire in customer.lua. */
export function spentMember(s: StoredSource): string {
  return `${s.id}|${s.t}|${s.u}|${s.w}`;
}

/** Total, used and wallet of a spent member, or null for a malformed one. */
export function parseSpentMember(m: string): { total: number; used: number; wallet: string } | null {
  const match = /^[^|]*\|(\d+)\|(\d+)\|(.*)$/.exec(m);
  return match ? { total: Number(match[1]), used: Number(match[2]), wallet: match[3] } : null;
}

/** The src hash fields of one source (create_source). */
export function sourceFields(s: StoredSource): Record<string, string> {
  return {
    [s.id]: JSON.stringify({ w: s.w, l: s.l, q: s.q, t: s.t, s: s.s, e: s.e }),
    [`${s.id}:u`]: s.u,
    [`${s.id}:f`]: s.f,
  };
}

/**
 * The sources of a src hash as read with HGETALL, by id; `died` holds the seq recorded at
 * death. A source whose static field is missing has only the fields found.
 */
export function sourcesOfHash(hash: Record<string, string>): Map<string, { source: Partial<StoredSource> & { id: string }; died: string | null }> {
  const out = new Map<string, { source: Partial<StoredSource> & { id: string }; died: string | null }>();
  const entry = (id: string) => {
    let e = out.get(id);
    if (!e) out.set(id, (e = { source: { id }, died: null }));
    return e;
  };
  for (const [field, value] of Object.entries(hash)) {
    const m = /^(.*):([ufd])$/.exec(field);
    if (m === null) {
      let st: Record<string, string>;
      try {
        st = JSON.parse(value) as Record<string, string>;
      } catch {
        st = {};
      }
      Object.assign(entry(field).source, { w: st.w, l: st.l, q: st.q, t: st.t, s: st.s, e: st.e });
    } else if (m[2] === 'd') {
      entry(m[1]).died = value;
    } else {
      entry(m[1]).source[m[2] as 'u' | 'f'] = value;
    }
  }
  return out;
}

// ---------------------------------------------------------------- transaction records

export interface StoredHold {
  account_id: string;
  credit_type: string;
  amount: string;
}

/**
 * A transaction as stored in the tx hash (deduct-10.lua, freeze-10.lua, gateway_hold-10.lua
 * and the settlements).
 */
export interface StoredTransaction {
  k: 'deduct' | 'freeze' | 'gateway';
  st: string;
  h?: string;
  /** A deduct's or freeze's compared request fields (src/ledger/conflicts.ts); not in the ledger. */
  q?: string;
  a: string;
  r?: string;
  holds?: StoredHold[];
  w?: string | null;
  bt?: string;
  ttlk?: string;
  ttla?: string;
  /** '1': the plan counted the freeze when it was accepted (a consume TTL); its consume counts nothing. */
  pc?: '1';
  ca?: string;
  by?: 'api' | 'ttl';
  cr?: string;
  ur?: string;
  /** A gateway call's Idempotency-Key (gateway_hold-10.lua; the GATEWAY entry's extra.gk). */
  ik?: string;
  /** A gateway hold's output token limit, for a hold sent again (gateway_hold-10.lua's REPLAY). */
  ot?: string;
  /** Budget marks (lua/includes/budget.lua): '1' when the customer's budget holds the record, the key id whose budget does. */
  bc?: '1';
  bk?: string;
}

export function encodeTransaction(tx: StoredTransaction): string {
  return JSON.stringify(tx);
}

export function parseTransaction(raw: string): StoredTransaction {
  return JSON.parse(raw) as StoredTransaction;
}

/** A deposit's idempotency record in the dep hash: request hash and result JSON. */
export interface StoredDeposit {
  h: string;
  /** The compared request fields (src/ledger/conflicts.ts), absent from a record restored from PostgreSQL. */
  q?: string;
  r: string;
}

export function encodeDeposit(d: StoredDeposit): string {
  return JSON.stringify({ h: d.h, r: d.r });
}

// ---------------------------------------------------------------- outbox entries

const outboxEntryTypes = ['DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY', 'EXPIRE', 'USAGE', 'EVENT'] as const;

interface DetailRaw {
  account_id: string;
  credit_type: string;
  amount: string;
}

export interface OutboxEntry {
  id: string;
  seq: string;
  project_id: string;
  customer_id: string;
  /**
   * USAGE: a gateway call that moved no money; it carries a usage record only. EVENT: a
   * money event (lua/includes/events.lua), no ledger entry: see eventOfEntry.
   */
  type: (typeof outboxEntryTypes)[number];
  transaction_id: string;
  amount: string;
  returned_amount?: string | null;
  wallet?: string | null;
  /** cjson encodes an empty list as {}. */
  details: DetailRaw[] | Record<string, never>;
  reason?: 'ttl_release' | 'ttl_consume' | null;
  business_type?: string | null;
  description?: string | null;
  state?: string | null;
  /** The operation's result, JSON. */
  result: string;
  x?: Record<string, unknown> | null;
  /** Gateway calls: the usage record (JSON), persisted beside the entry. */
  usage?: string;
  at: string;
}

const entryTypes: ReadonlySet<string> = new Set(outboxEntryTypes);
const requiredStrings = ['id', 'seq', 'project_id', 'customer_id', 'transaction_id', 'amount', 'result', 'at'] as const;
/**
 * The stream fields of an entry, in the order write_entry (lua/includes/customer.lua)
 * writes them, every one always present. An optional field is '' when null, and `details`
 * and `x` hold JSON of their own ('' for no `x`).
 */
export const outbox_entry_fields = [
  'id', 'seq', 'project_id', 'customer_id', 'at', 'type', 'transaction_id', 'amount', 'returned_amount', 'wallet', 'reason',
  'business_type', 'description', 'state', 'result', 'usage', 'details', 'x',
] as const;
const jsonFields: ReadonlySet<string> = new Set(['details', 'x']);
const optionalFields: ReadonlySet<string> = new Set(['returned_amount', 'wallet', 'reason', 'business_type', 'description', 'state', 'usage', 'x']);

/** The stream fields of an entry as write_entry writes them (tests and benches that write entries). */
export function outboxEntryFields(e: OutboxEntry): string[] {
  const out: string[] = [];
  for (const k of outbox_entry_fields) {
    const v = e[k];
    out.push(k, v === null || v === undefined ? '' : jsonFields.has(k) ? JSON.stringify(v) : String(v));
  }
  return out;
}

/**
 * Parses the stream fields of an entry the scripts wrote: one field per entry field, or
 * (an outbox written before, during a rolling upgrade) the whole entry as JSON in `e`. No
 * schema validation: the service wrote it itself. The sanity check (the fields every
 * entry has, a known type) catches an outbox of another version or a corrupted one before
 * PostgreSQL does, with a clearer message.
 */
export function parseOutboxEntry(fields: string[]): OutboxEntry {
  let e: OutboxEntry;
  if (fields.length === 2 && fields[0] === 'e') {
    e = JSON.parse(fields[1]) as OutboxEntry;
  } else {
    const o: Record<string, unknown> = {};
    for (let i = 0; i < fields.length; i += 2) {
      const k = fields[i];
      const v = fields[i + 1];
      if (v === '' && optionalFields.has(k)) continue;
      o[k] = jsonFields.has(k) ? JSON.parse(v) : v;
    }
    e = o as unknown as OutboxEntry;
  }
  for (const f of requiredStrings) {
    if (typeof e[f] !== 'string') throw new Error(`outbox entry ${String(e.id)}: ${f} is not a string`);
  }
  if (!entryTypes.has(e.type)) throw new Error(`outbox entry ${e.id}: unknown type ${String(e.type)}`);
  return e;
}

// ---------------------------------------------------------------- events

/** An event as an EVENT entry carries it (eventOfEntry), before the event store's types. */
export interface OutboxEvent {
  id: string;
  type: string;
  /** ISO 8601 in UTC with milliseconds. */
  created_at: string;
  project_id: string;
  data: Record<string, unknown>;
}

/**
 * Data fields that the scripts write as integer strings (cjson prints numbers with 14
 * significant digits) and events answer as numbers.
 */
const event_amount_fields: ReadonlySet<string> = new Set([
  'amount', 'wallet_total', 'available', 'threshold', 'below', 'monthly_limit', 'requested_this_month', 'cost', 'charged', 'uncovered', 'consumed_amount', 'returned_amount',
  'budget_credits', 'spent_credits', 'held_credits', 'requested_credits',
]);
/** Data fields that the scripts write as ms strings ('' for none) and events answer as ISO 8601 or null. */
const event_time_fields: ReadonlySet<string> = new Set(['starts_at', 'expires_at', 'open_until', 'resets_at']);

/**
 * The event an EVENT entry carries (emit_event in lua/includes/events.lua): `state` is
 * its type, `result` its data, `at` its time. Amount fields become numbers and time
 * fields ISO strings; the data keeps the rest as the script wrote it.
 */
export function eventOfEntry(e: OutboxEntry): OutboxEvent {
  if (e.type !== 'EVENT' || typeof e.state !== 'string') throw new Error(`outbox entry ${e.id}: not an event`);
  const raw = JSON.parse(e.result) as Record<string, unknown>;
  const data: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(raw)) {
    if (event_amount_fields.has(k) && typeof v === 'string') data[k] = Number(v);
    else if (event_time_fields.has(k) && typeof v === 'string') data[k] = v === '' ? null : new Date(Number(v)).toISOString();
    else data[k] = v;
  }
  return { id: e.id, type: e.state, created_at: new Date(Number(e.at)).toISOString(), project_id: e.project_id, data };
}
