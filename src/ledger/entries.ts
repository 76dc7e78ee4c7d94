/**
 * Ledger entries as the Lua scripts write them into a customer's outbox (amounts and
 * times as strings), and their public form.
 */
export const outboxEntryTypes = ['DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY', 'USAGE'] as const;

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
  /** USAGE: a gateway call that moved no money; it carries a usage record only. */
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
  result: string;
  x?: Record<string, unknown> | null;
  /** Gateway calls: the usage record (JSON), persisted beside the entry. */
  usage?: string;
  at: string;
}

const entryTypes: ReadonlySet<string> = new Set(outboxEntryTypes);
const requiredStrings = ['id', 'seq', 'project_id', 'customer_id', 'transaction_id', 'amount', 'result', 'at'] as const;

export interface DetailItem {
  account_id: string;
  credit_type: string;
  amount: number;
}

export type LedgerEntryType = Exclude<OutboxEntry['type'], 'USAGE'>;

/** Whether an outbox entry is a ledger entry (USAGE ones are usage records only). */
export function isLedgerEntry(e: OutboxEntry): e is OutboxEntry & { type: LedgerEntryType } {
  return e.type !== 'USAGE';
}

export interface LedgerEntry {
  id: string;
  seq: number;
  customer_id: string;
  type: LedgerEntryType;
  transaction_id: string;
  amount: number;
  returned_amount: number | null;
  wallet: string | null;
  details: DetailItem[];
  reason: 'ttl_release' | 'ttl_consume' | null;
  business_type: string | null;
  description: string | null;
  created_at: string;
}

export function toDetails(raw: unknown): DetailItem[] {
  if (!Array.isArray(raw)) return []; // cjson encodes an empty list as {}
  return raw.map((d: { account_id: string; credit_type: string; amount: string | number }) => ({
    account_id: d.account_id,
    credit_type: d.credit_type,
    amount: Number(d.amount),
  }));
}

/**
 * Parses an entry the scripts wrote. No schema validation: the service wrote it itself.
 * The sanity check (the fields every entry has, a known type) catches an outbox of
 * another version or a corrupted one before PostgreSQL does, with a clearer message.
 */
export function parseOutboxEntry(json: string): OutboxEntry {
  const e = JSON.parse(json) as OutboxEntry;
  for (const f of requiredStrings) {
    if (typeof e[f] !== 'string') throw new Error(`outbox entry ${String(e.id)}: ${f} is not a string`);
  }
  if (!entryTypes.has(e.type)) throw new Error(`outbox entry ${e.id}: unknown type ${String(e.type)}`);
  return e;
}

export function outboxEntryToPublic(e: OutboxEntry & { type: LedgerEntryType }): LedgerEntry {
  return {
    id: e.id,
    seq: Number(e.seq),
    customer_id: e.customer_id,
    type: e.type,
    transaction_id: e.transaction_id,
    amount: Number(e.amount),
    returned_amount: e.returned_amount == null ? null : Number(e.returned_amount),
    wallet: e.wallet ?? null,
    details: toDetails(e.details),
    reason: e.reason ?? null,
    business_type: e.business_type ?? null,
    description: e.description ?? null,
    created_at: new Date(Number(e.at)).toISOString(),
  };
}

/** Results stored by the scripts: amounts as strings, times as ms strings. */
export function publicResult(raw: string): Record<string, unknown> {
  const r = JSON.parse(raw) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) {
    if (k.endsWith('_details')) out[k] = toDetails(v);
    else if (k.endsWith('_at')) out[k] = v === '' || v == null ? null : new Date(Number(v)).toISOString();
    else if (k.endsWith('_amount') && typeof v === 'string') out[k] = Number(v);
    else out[k] = v;
  }
  return out;
}
