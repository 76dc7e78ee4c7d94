/**
 * The public form of ledger entries and stored results. How the scripts write them into
 * a customer's outbox (amounts and times as strings) is src/redis/codec.ts.
 */
import { z } from 'zod';
import { timestamp } from '../schema/zod.js';
import type { OutboxEntry } from '../redis/codec.js';
import { detailItemSchema } from './schemas.js';

export interface DetailItem {
  account_id: string;
  credit_type: string;
  amount: number;
}

export type LedgerEntryType = Exclude<OutboxEntry['type'], 'USAGE' | 'EVENT'>;

/** Whether an outbox entry is a ledger entry (USAGE ones are usage records only, EVENT ones events). */
export function isLedgerEntry(e: OutboxEntry): e is OutboxEntry & { type: LedgerEntryType } {
  return e.type !== 'USAGE' && e.type !== 'EVENT';
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

/** A ledger entry as the API answers it (LedgerEntry without `seq`): the documented schema. */
export const ledgerEntrySchema = z
  .object({
    id: z.string(),
    customer_id: z.string(),
    type: z.enum(['DEPOSIT', 'FREEZE', 'CONSUME', 'DEDUCT', 'UNFREEZE', 'GATEWAY', 'EXPIRE']),
    transaction_id: z.string().openapi({ description: "The operation's transaction id; EXPIRE: the expired source's id (account_id)." }),
    amount: z.number().int().openapi({ description: 'Positive magnitude in credits (0 only for a GATEWAY call that cost nothing); EXPIRE: the credits that left with the source.' }),
    returned_amount: z.number().int().nullable().openapi({ description: 'CONSUME and GATEWAY: what the hold did not need; else null.' }),
    wallet: z.string().nullable().openapi({ description: 'The wallet drawn from; null when a draw spans several.' }),
    details: z.array(detailItemSchema),
    reason: z.enum(['ttl_release', 'ttl_consume']).nullable(),
    business_type: z.string().nullable(),
    description: z.string().nullable(),
    created_at: timestamp,
  })
  .strict()
  .openapi('LedgerEntry');
