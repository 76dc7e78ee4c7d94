/** Request fields shared by the ledger endpoints, read per contract variant. */
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { storedJsonObject } from '../schema/json.js';
import { amount_credits_max, amountFields, type Variant } from './amounts.js';
import { extended, timestamp } from '../schema/zod.js';

export const walletNameSchema = z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, 'wallet names are 1-64 characters of A-Z a-z 0-9 _ . : -');
export const identifierSchema = z.string().min(1).max(256);
const optionalText = z.string().max(1024).nullish();

export const ttl_seconds_max = 2_592_000;

export const depositSchema = z.object({
  customer_id: identifierSchema,
  idempotency_key: identifierSchema.nullish(),
  name: z.string().max(256).nullish(),
  email: z.string().max(320).email().nullish(),
  metadata: storedJsonObject.nullish(),
  description: optionalText,
  source: z.string().min(1).max(128).nullish(),
});

export const drawSchema = z.object({
  customer_id: identifierSchema,
  transaction_id: identifierSchema,
  business_type: z.string().min(1).max(64).nullish(),
  description: optionalText,
});

const freezeTtlSchema = z.object({
  release_after_seconds: z.number().int().min(1).max(ttl_seconds_max).nullish(),
  consume_after_seconds: z.number().int().min(1).max(ttl_seconds_max).nullish(),
});

export const settleSchema = z.object({
  transaction_id: identifierSchema,
  customer_id: identifierSchema.nullish(),
  description: optionalText,
});

const isoPattern = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

/** Characters of an unreadable time that its error quotes, at most. */
const quoted_time_chars_max = 64;

/**
 * The 400 of a time that cannot be read (its field's own code), quoting what was sent:
 * unlike a time in the past (expiredWhenSent), fixing it means fixing its format.
 */
function unreadableTime(field: 'starts_at' | 'expires_at', v: unknown): ApiError {
  const got = typeof v === 'string' ? JSON.stringify(v.length > quoted_time_chars_max ? `${v.slice(0, quoted_time_chars_max)}...` : v) : `a ${Array.isArray(v) ? 'list' : typeof v}`;
  return new ApiError(field === 'starts_at' ? 'invalid_starts_at' : 'invalid_expires_at', {
    param: field,
    message: `${field} is not a readable ISO 8601 timestamp (such as 2030-01-01T00:00:00Z): got ${got}`,
  });
}

/**
 * The 400 invalid_expires_at of a readable `expires_at` that is not later than now: what
 * it expires (`what`: "a deposit's credits", "a key") would be dead when made.
 */
export function expiredWhenSent(expiresAtMs: number, what: string): ApiError {
  return new ApiError('invalid_expires_at', {
    param: 'expires_at',
    message: `expires_at ${new Date(expiresAtMs).toISOString()} is not in the future: ${what} must expire later than now`,
  });
}

/** ISO 8601 to epoch ms; a time without zone is UTC. Null when absent. */
export function readTimestamp(body: Record<string, unknown>, field: 'starts_at' | 'expires_at'): number | null {
  const v = body[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw unreadableTime(field, v);
  const m = isoPattern.exec(v);
  if (!m) throw unreadableTime(field, v);
  // Date.parse rolls an impossible day over (February 30 becomes March 2); reject it instead.
  const [year, month, day] = v.slice(0, 10).split('-').map(Number);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) throw unreadableTime(field, v);
  const text = v.length > 10 && !m[1] ? `${v}Z` : v;
  const ms = Date.parse(text);
  if (Number.isNaN(ms)) throw unreadableTime(field, v);
  return ms;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/**
 * A deposit's validity window. The order of the two times is checked here, where the
 * offending field can be named; whether expires_at is still in the future needs the
 * service clock and is left to the deposit script.
 */
export function readWindow(body: Record<string, unknown>): { startsAtMs: number | null; expiresAtMs: number | null } {
  const startsAtMs = readTimestamp(body, 'starts_at');
  const expiresAtMs = readTimestamp(body, 'expires_at');
  if (startsAtMs !== null && expiresAtMs !== null && expiresAtMs <= startsAtMs) {
    throw new ApiError('invalid_expires_at', { param: 'expires_at', message: 'expires_at must be later than starts_at' });
  }
  return { startsAtMs, expiresAtMs };
}

function walletField(body: Record<string, unknown>, field: string): string {
  const parsed = walletNameSchema.safeParse(body[field]);
  if (!parsed.success) throw new ApiError('invalid_request', { param: field, message: `${field}: ${parsed.error.issues[0].message}` });
  return parsed.data;
}

/** The wallet a deposit goes to: `credit_type` in A, `wallet` (or its alias) in B. */
export function readDepositWallet(body: Record<string, unknown>, variant: Variant): string {
  if (variant === 'A') {
    if (body.wallet != null) throw new ApiError('invalid_request', { param: 'wallet', message: 'Variant A selects the wallet with credit_type' });
    return body.credit_type == null ? 'default' : walletField(body, 'credit_type');
  }
  return readSingleWallet(body) ?? 'credits';
}

function readSingleWallet(body: Record<string, unknown>): string | null {
  const wallet = body.wallet == null ? null : walletField(body, 'wallet');
  const alias = body.credit_type == null ? null : walletField(body, 'credit_type');
  if (wallet !== null && alias !== null && wallet !== alias) {
    throw new ApiError('invalid_request', { param: 'credit_type', message: 'wallet and its deprecated alias credit_type differ' });
  }
  return wallet ?? alias;
}

/** The wallet filter of a deduct or freeze: `credit_types` in A, `wallet` in B; null = all. */
export function readWalletFilter(body: Record<string, unknown>, variant: Variant): string[] | null {
  if (variant === 'A') {
    if (body.wallet != null) throw new ApiError('invalid_request', { param: 'wallet', message: 'Variant A selects wallets with credit_types' });
    const v = body.credit_types;
    if (v === undefined || v === null) return null;
    if (!Array.isArray(v) || v.length === 0 || !v.every((w) => walletNameSchema.safeParse(w).success)) {
      throw new ApiError('invalid_credit_types', { param: 'credit_types' });
    }
    return v as string[];
  }
  if (body.credit_types != null) throw new ApiError('invalid_request', { param: 'credit_types', message: 'Variant B selects one wallet with wallet' });
  const w = readSingleWallet(body);
  return w === null ? null : [w];
}

export function readTtl(body: Record<string, unknown>, parse: <T extends z.ZodTypeAny>(s: T, v: unknown) => z.infer<T>) {
  const t = parse(freezeTtlSchema, body);
  if (t.release_after_seconds != null && t.consume_after_seconds != null) {
    throw new ApiError('invalid_request', { param: 'consume_after_seconds', message: 'give at most one of release_after_seconds and consume_after_seconds' });
  }
  if (t.release_after_seconds != null) return { kind: 'release' as const, seconds: t.release_after_seconds };
  if (t.consume_after_seconds != null) return { kind: 'consume' as const, seconds: t.consume_after_seconds };
  return null;
}

export type LedgerOp = 'deposit' | 'deduct' | 'freeze' | 'consume' | 'unfreeze';

/**
 * The body fields of a ledger endpoint in a contract variant, for the unknown-field check:
 * `reads`, what the endpoint reads; `allowed`, those plus the fields the readers above
 * refuse with a message of their own (the other variant's wallet and amount fields).
 */
export function ledgerFields(op: LedgerOp, variant: Variant): { reads: string[]; allowed: string[] } {
  const key = `${op} ${variant}`;
  let fields = fieldsByOp.get(key);
  if (fields === undefined) fieldsByOp.set(key, (fields = fieldsOf(op, variant)));
  return fields;
}

/** ledgerFields by operation and variant, built once: they are the same on every request. */
const fieldsByOp = new Map<string, { reads: string[]; allowed: string[] }>();

function fieldsOf(op: LedgerOp, variant: Variant): { reads: string[]; allowed: string[] } {
  const common: Record<LedgerOp, string[]> = {
    deposit: [...Object.keys(depositSchema.shape), 'starts_at', 'expires_at'],
    deduct: Object.keys(drawSchema.shape),
    freeze: [...Object.keys(drawSchema.shape), ...Object.keys(freezeTtlSchema.shape)],
    consume: Object.keys(settleSchema.shape),
    unfreeze: Object.keys(settleSchema.shape),
  };
  const amounts = op === 'unfreeze' ? { reads: [], refused: [] } : amountFields(variant, { consume: op === 'consume' });
  const wallets =
    op === 'deposit'
      ? variant === 'A'
        ? { reads: ['credit_type'], refused: ['wallet'] }
        : { reads: ['wallet', 'credit_type'], refused: [] }
      : op === 'deduct' || op === 'freeze'
        ? variant === 'A'
          ? { reads: ['credit_types'], refused: ['wallet'] }
          : { reads: ['wallet', 'credit_type'], refused: ['credit_types'] }
        : { reads: [], refused: [] };
  const reads = [...common[op], ...amounts.reads, ...wallets.reads];
  return { reads, allowed: [...reads, ...amounts.refused, ...wallets.refused] };
}

// The documented bodies (src/openapi/): the schemas above, with the amount and wallet
// fields that readAmount, readDepositWallet and readWalletFilter read by hand, per variant.

const creditsAmount = z.number().int().min(1).max(amount_credits_max);
const unitAmount = z.number().positive();
const variantAAmounts = (prefix: 'amount' | 'actual_amount') =>
  ({
    [`${prefix}_usd`]: unitAmount.optional().openapi({ description: 'USD (a number); must come to a whole number of credits.' }),
    [`${prefix}_cents`]: unitAmount.optional().openapi({ description: 'US cents (a number); must come to a whole number of credits.' }),
    [`${prefix}_credits`]: creditsAmount.optional().openapi({ description: 'Integer credits.' }),
    [prefix]: unitAmount.optional().openapi({ description: 'Legacy: US cents. Exactly one of the four amount fields.' }),
  }) as Record<string, z.ZodOptional<z.ZodNumber>>;
const timestampField = z.string().nullish().openapi({ description: 'ISO 8601; a time without a zone is UTC.' });
const ttlFields = {
  release_after_seconds: freezeTtlSchema.shape.release_after_seconds.openapi({ description: 'Releases the hold automatically after this many seconds (at most one TTL field).' }),
  consume_after_seconds: freezeTtlSchema.shape.consume_after_seconds.openapi({ description: 'Consumes the hold automatically after this many seconds (at most one TTL field).' }),
};
const walletB = {
  wallet: walletNameSchema.nullish().openapi({ description: 'The wallet (default `credits`).' }),
  credit_type: walletNameSchema.nullish().openapi({ description: 'Deprecated alias of `wallet`; both and different is 400.', deprecated: true }),
};
const drawWalletB = {
  wallet: walletNameSchema.nullish().openapi({ description: 'Draw from this wallet only (default: every wallet).' }),
  credit_type: walletB.credit_type,
};
const drawWalletA = { credit_types: z.array(walletNameSchema).min(1).nullish().openapi({ description: 'Draw from these wallets only (default: every wallet).' }) };
const amountB = { amount: creditsAmount.openapi({ description: 'Integer credits (1 USD = 1,000,000 credits), at most 10^15.' }) };

function variants(a: z.AnyZodObject, b: z.AnyZodObject) {
  return z.union([
    a.strict().openapi({ title: 'Variant A', description: "A project whose `contract` is `A`, or the header `X-Service-Api-Variant: A`." }),
    b.strict().openapi({ title: 'Variant B', description: "A project whose `contract` is `B` (the default), or the header `X-Service-Api-Variant: B`." }),
  ]);
}

const window = { starts_at: timestampField, expires_at: timestampField };
export const depositBody = variants(
  depositSchema.extend({ ...variantAAmounts('amount'), credit_type: walletNameSchema.nullish().openapi({ description: 'The wallet (default `default`).' }), ...window }),
  depositSchema.extend({ ...amountB, ...walletB, ...window }),
);
export const deductBody = variants(drawSchema.extend({ ...variantAAmounts('amount'), ...drawWalletA }), drawSchema.extend({ ...amountB, ...drawWalletB }));
export const freezeBody = variants(
  drawSchema.extend({ ...variantAAmounts('amount'), ...drawWalletA, ...ttlFields }),
  drawSchema.extend({ ...amountB, ...drawWalletB, ...ttlFields }),
);
export const consumeBody = variants(
  settleSchema.extend(variantAAmounts('actual_amount')),
  settleSchema.extend({ amount: creditsAmount.optional().openapi({ description: 'Integer credits to consume; default the whole frozen amount.' }) }),
);
export const unfreezeBody = settleSchema.strict();

/** How much of which source an operation moved. */
export const detailItemSchema = z
  .object({ account_id: z.string().openapi({ description: 'The source (`src_...`).' }), credit_type: z.string().openapi({ description: "The source's wallet." }), amount: z.number().int() })
  .strict()
  .openapi('DetailItem');

const replay = { is_idempotent_replay: z.boolean().openapi({ description: 'True when this answers an earlier identical request again.' }) };

export const depositResultSchema = z
  .object({
    record_id: z.string().openapi({ description: 'The ledger entry (also its `transaction_id`).' }),
    customer_id: z.string(),
    account_id: z.string().openapi({ description: 'The new source.' }),
    credit_type: z.string().openapi({ description: 'The wallet.' }),
    added_amount: z.number().int(),
    total_amount: z.number().int().openapi({ description: "The wallet's total of sources active now, after the deposit." }),
    starts_at: timestamp.nullable(),
    expires_at: timestamp.nullable(),
    ...replay,
  })
  .strict()
  .openapi('DepositResult');

/** The public deposit's answer: the result and `wallet`, the same name as `credit_type`. */
export const publicDepositResultSchema = extended(depositResultSchema, { wallet: z.string() }).openapi('PublicDepositResult');

export const deductResultSchema = z
  .object({ transaction_id: z.string(), deducted_amount: z.number().int(), deduct_details: z.array(detailItemSchema), deducted_at: timestamp, ...replay })
  .strict()
  .openapi('DeductResult');

export const freezeResultSchema = z
  .object({
    transaction_id: z.string(),
    frozen_amount: z.number().int(),
    freeze_details: z.array(detailItemSchema),
    frozen_at: timestamp,
    auto_settle: z.enum(['release', 'consume']).nullable(),
    auto_settle_at: timestamp.nullable(),
    ...replay,
  })
  .strict()
  .openapi('FreezeResult');

export const consumeResultSchema = z
  .object({
    transaction_id: z.string(),
    consumed_amount: z.number().int(),
    returned_amount: z.number().int().openapi({ description: 'What the hold did not need, returned to its sources.' }),
    consume_details: z.array(detailItemSchema),
    consumed_at: timestamp,
    ...replay,
  })
  .strict()
  .openapi('ConsumeResult');

export const unfreezeResultSchema = z
  .object({ transaction_id: z.string(), unfrozen_amount: z.number().int(), unfreeze_details: z.array(detailItemSchema), unfrozen_at: timestamp, ...replay })
  .strict()
  .openapi('UnfreezeResult');
