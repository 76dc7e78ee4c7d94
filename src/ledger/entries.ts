/**
 * Ledger entries as the Lua scripts write them into a customer's outbox (amounts and
 * times as strings), and their public form.
 */
import { z } from 'zod';

const detailRaw = z.object({ account_id: z.string(), credit_type: z.string(), amount: z.string() });

export const outboxEntrySchema = z.object({
  id: z.string(),
  seq: z.string(),
  project_id: z.string(),
  customer_id: z.string(),
  /** USAGE: a gateway call that moved no money; it carries a usage record only. */
  type: z.enum(['DEPOSIT', 'DEDUCT', 'FREEZE', 'CONSUME', 'UNFREEZE', 'GATEWAY', 'USAGE']),
  transaction_id: z.string(),
  amount: z.string(),
  returned_amount: z.string().nullable().optional(),
  wallet: z.string().nullable().optional(),
  details: z.union([z.array(detailRaw), z.object({}).strict()]),
  reason: z.enum(['ttl_release', 'ttl_consume']).nullable().optional(),
  business_type: z.string().nullable().optional(),
  description: z.string().nullable().optional(),
  state: z.string().nullable().optional(),
  result: z.string(),
  x: z.record(z.unknown()).nullable().optional(),
  /** Gateway calls: the usage record (JSON), persisted beside the entry. */
  usage: z.string().optional(),
  at: z.string(),
});
export type OutboxEntry = z.infer<typeof outboxEntrySchema>;

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

export function parseOutboxEntry(json: string): OutboxEntry {
  return outboxEntrySchema.parse(JSON.parse(json));
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
