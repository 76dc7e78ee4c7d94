/**
 * A conflicting retry (409 transaction_conflict): a deduct or freeze reusing a
 * transaction_id, or a deposit reusing an idempotency_key, with other parameters than the
 * first request. Replay or conflict is decided in the script by the request hash alone;
 * beside it each record keeps the request's compared fields (`q`: requestFields below, a
 * value longer than kept_value_chars_max by a digest of it), which the script answers
 * only with a conflict. The refusal then names each field that differs, with both values
 * (`error.fields`). A binding to another customer names the customer. A record that has no
 * `q` (one restored from PostgreSQL after the retention) gets the general message.
 */
import { createHash } from 'node:crypto';
import { ApiError } from '../errors/catalogue.js';
import type { DepositInput, DrawInput, FreezeInput } from './requests.js';

/** A request's compared fields by request field name; amounts in credits, times ISO 8601. */
export type RequestFields = Record<string, unknown>;

/** One field of a conflicting retry that differs from the first request. `first` and `this` are absent for a value too long to keep. */
interface FieldDifference {
  field: string;
  first?: unknown;
  this?: unknown;
}

/** Longer values (descriptions, metadata) are kept by a digest: compared, not shown. */
const kept_value_chars_max = 64;

interface Digest {
  sha256: string;
}

function isDigest(v: unknown): v is Digest {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && typeof (v as Digest).sha256 === 'string';
}

function kept(v: unknown): unknown {
  const text = typeof v === 'string' ? v : v !== null && typeof v === 'object' ? JSON.stringify(v) : null;
  if (text === null || text.length <= kept_value_chars_max) return v;
  return { sha256: createHash('sha256').update(text).digest('hex').slice(0, 16) } satisfies Digest;
}

/** The fields as the scripts keep them (ARGV request_fields, the record's `q`). */
export function keptFields(fields: RequestFields): string {
  return JSON.stringify(Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, kept(v)])));
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** A deduct's or freeze's compared fields (what its request hash covers). */
export function drawFields(operation: 'deduct' | 'freeze', input: DrawInput | FreezeInput): RequestFields {
  const walletField = input.walletField ?? 'wallet';
  const wallets = input.wallets === null ? null : [...new Set(input.wallets)].sort();
  const fields: RequestFields = {
    operation,
    amount: input.amount,
    // Variant B names one wallet, Variant A a list (credit_types).
    [walletField]: wallets !== null && walletField === 'wallet' && wallets.length === 1 ? wallets[0] : wallets,
    business_type: input.businessType,
    description: input.description,
  };
  if (operation === 'freeze') {
    const ttl = (input as FreezeInput).ttl;
    fields.release_after_seconds = ttl?.kind === 'release' ? ttl.seconds : null;
    fields.consume_after_seconds = ttl?.kind === 'consume' ? ttl.seconds : null;
  }
  return fields;
}

/** A deposit's compared fields (what its request hash covers). */
export function depositFields(input: DepositInput): RequestFields {
  return {
    amount: input.amount, wallet: input.wallet, source: input.label, starts_at: iso(input.startsAtMs), expires_at: iso(input.expiresAtMs),
    description: input.description, name: input.name ?? null, email: input.email ?? null, metadata: input.metadata ?? null,
  };
}

/** What a conflict is about: the identifier's field and value, and this request's customer and fields. */
export interface ConflictContext {
  param: string;
  id: string;
  customerId: string;
  fields: RequestFields;
}

function shown(v: unknown): string {
  if (v === null || v === undefined) return 'none';
  if (typeof v === 'number') return String(v);
  return JSON.stringify(v);
}

function conflict(c: ConflictContext, what: string, fields: FieldDifference[] | null): ApiError {
  return new ApiError('transaction_conflict', {
    param: c.param,
    message: `${c.param} ${c.id} ${what}`,
    ...(fields === null ? {} : { extra: { fields } }),
  });
}

/** The 409 of an identifier bound to another customer (`owner`). */
export function customerConflict(c: ConflictContext, owner: string): ApiError {
  return conflict(c, `is already used by another customer: customer_id differs: first request ${shown(owner)}, this one ${shown(c.customerId)}. Use a new ${c.param}.`, [
    { field: 'customer_id', first: owner, this: c.customerId },
  ]);
}

function differences(first: RequestFields, now: RequestFields): FieldDifference[] {
  const out: FieldDifference[] = [];
  for (const field of new Set([...Object.keys(now), ...Object.keys(first)])) {
    const a = first[field] ?? null;
    const b = now[field] ?? null;
    if (JSON.stringify(a) === JSON.stringify(b)) continue;
    out.push(isDigest(a) || isDigest(b) ? { field } : { field, first: a, this: b });
  }
  return out;
}

/**
 * The 409 of a script's E_CONFLICT, from its second value (`raw`): '{"owner": ...}' (the
 * binding names another customer), '{"first": <q>}' (the stored record's fields), or ''.
 */
export function conflictRefusal(raw: string, c: ConflictContext): ApiError {
  const reply = raw === '' ? {} : (JSON.parse(raw) as { owner?: string; first?: string });
  if (typeof reply.owner === 'string') return customerConflict(c, reply.owner);
  const found = typeof reply.first === 'string' ? differences(JSON.parse(reply.first) as RequestFields, JSON.parse(keptFields(c.fields)) as RequestFields) : [];
  if (found.length === 0) {
    return conflict(c, 'is already used by another operation or request with other parameters; a retry must repeat the first request exactly', null);
  }
  const said = found.map((d) => ('first' in d ? `${d.field} differs: first request ${shown(d.first)}, this one ${shown(d.this)}` : `${d.field} differs`));
  return conflict(c, `was first used with other parameters: ${said.join('; ')}. A retry must repeat the first request exactly; a new operation takes a new ${c.param}.`, found);
}
