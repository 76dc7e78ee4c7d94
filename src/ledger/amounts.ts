/**
 * Amounts at the edge: Variant A's unit fields and Variant B's integer credits, turned
 * into integer credits exactly (never rounded) or rejected with invalid_amount.
 */
import { ApiError } from '../errors/catalogue.js';
import { bodyTextOf } from '../schema/json.js';

export const amount_credits_max = 1_000_000_000_000_000; // 10^15 per operation

/**
 * 2^53 - 1: the most a customer's deposits may add up to (the totals of all its sources,
 * expired and not yet started ones included). Every sum the service keeps (a wallet's or
 * the customer's total, used, frozen, available; a draw's eligible funds) is at most that
 * sum, so each stays exact in Lua and JS doubles. The deposit script checks it atomically.
 */
export const credits_sum_max = Number.MAX_SAFE_INTEGER;

export const deposit_limit_message =
  `the customer's deposits would add up to more than ${credits_sum_max} credits ` +
  `(${shiftDecimal(credits_sum_max, 6)} USD), the most this service keeps exact; nothing was deposited`;

export type Variant = 'A' | 'B';

/** Scale (decimal places) from a unit to credits. */
const unitScale = { usd: 6, cents: 4, credits: 0 } as const;
type Unit = keyof typeof unitScale;

/**
 * Converts a JSON number in `unit` to credits with decimal arithmetic on its shortest
 * string form (so 0.1 USD is exactly 100000 credits). Returns null when the result is not
 * a whole number of credits.
 */
export function toCredits(value: number, unit: Unit): number | null {
  const m = /^(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/i.exec(String(value));
  if (!m) return null;
  const digits = m[1] + (m[2] ?? '');
  const exponent = Number(m[3] ?? 0) - (m[2]?.length ?? 0) + unitScale[unit];
  let n: bigint;
  if (exponent >= 0) {
    if (exponent > 30) return null;
    n = BigInt(digits) * 10n ** BigInt(exponent);
  } else {
    const div = 10n ** BigInt(-exponent);
    const big = BigInt(digits);
    if (big % div !== 0n) return null;
    n = big / div;
  }
  if (n > BigInt(amount_credits_max)) return Number.POSITIVE_INFINITY;
  return Number(n);
}

function checkRange(credits: number | null, param: string): number {
  if (credits === null) throw new ApiError('invalid_amount', { param, message: `${param} is not a whole number of credits` });
  if (credits <= 0) throw new ApiError('invalid_amount', { param, message: `${param} must be greater than 0` });
  if (credits > amount_credits_max) throw new ApiError('invalid_amount', { param, message: `${param} must be at most 10^15 credits` });
  return credits;
}

function numberField(body: Record<string, unknown>, field: string): number {
  const v = body[field];
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new ApiError('invalid_amount', { param: field, message: `${field} must be a number` });
  if (v <= 0) throw new ApiError('invalid_amount', { param: field, message: `${field} must be greater than 0` });
  exactInText(body, field, v);
  return v;
}

/**
 * Refuses an amount whose number in the request's text is not the number JSON.parse made
 * of it: `100.0000000000000001` parses to 100, `0.1000000000000000001` to 0.1, and either
 * would be billed as what it is not. The decimal value written must be the decimal value
 * of the double's shortest form (so `1e2`, `100.0` and `100.00` are 100, and `0.1` is
 * 0.1). Only the amount field's token is read from the text (topLevelToken), no second
 * parse of the body; a body without its text (made in process) was never text.
 */
function exactInText(body: Record<string, unknown>, field: string, v: number): void {
  const text = bodyTextOf(body);
  if (text === null) return;
  const token = topLevelToken(text, field);
  if (token === null || writtenExactly(token, v)) return;
  throw new ApiError('invalid_amount', {
    param: field,
    message: `${field} ${token.length > 40 ? `${token.slice(0, 40)}...` : token} cannot be read exactly (it would be ${v}); send the amount with at most 15 significant digits`,
  });
}

/** A decimal number's digits without leading or trailing zeros, and its power of ten. */
function decimalOf(token: string): { digits: string; exponent: number } | null {
  const m = /^-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(token);
  if (!m) return null;
  let digits = (m[1] + (m[2] ?? '')).replace(/^0+/, '');
  let exponent = Number(m[3] ?? 0) - (m[2]?.length ?? 0);
  if (digits === '') return { digits: '0', exponent: 0 };
  const trimmed = digits.replace(/0+$/, '');
  exponent += digits.length - trimmed.length;
  digits = trimmed;
  return { digits, exponent };
}

/**
 * Whether the number token `token` (JSON's syntax) writes exactly `v`, the number parsed
 * from it: the same decimal value as the double's shortest form (`1e2` and `100.00` are
 * 100; `100.0000000000000001` is not).
 */
export function writtenExactly(token: string, v: number): boolean {
  return sameDecimal(token, String(v));
}

/** Whether two number tokens write the same decimal value (`1e2`, `100.00`, `100`). */
function sameDecimal(a: string, b: string): boolean {
  const x = decimalOf(a);
  const y = decimalOf(b);
  return x !== null && y !== null && x.digits === y.digits && x.exponent === y.exponent && a.startsWith('-') === b.startsWith('-');
}

const json_whitespace = new Set([' ', '\t', '\n', '\r']);
/** Characters that start or end a nested value, or a string inside it. */
const structural = /["{}[\]]/g;

/**
 * The raw text of the value of the top-level member `field` of a JSON object text (the
 * last one, as JSON.parse keeps the last of repeated keys), or null. The text is valid
 * JSON (it was parsed): strings are skipped with indexOf, nested values with one regular
 * expression over their structural characters, so a nested member of the same name (in
 * `metadata`) or the name inside a string is never taken for it.
 */
function topLevelToken(text: string, field: string): string | null {
  const len = text.length;
  const ws = (i: number) => {
    while (i < len && json_whitespace.has(text[i])) i++;
    return i;
  };
  const stringEnd = (i: number) => {
    for (let j = i + 1; ; ) {
      const q = text.indexOf('"', j);
      if (q < 0) return len;
      let backslashes = 0;
      while (text[q - 1 - backslashes] === '\\') backslashes++;
      if (backslashes % 2 === 0) return q + 1;
      j = q + 1;
    }
  };
  const valueEnd = (i: number) => {
    const c = text[i];
    if (c === '"') return stringEnd(i);
    if (c === '{' || c === '[') {
      let depth = 0;
      structural.lastIndex = i;
      for (let m = structural.exec(text); m !== null; m = structural.exec(text)) {
        const ch = m[0];
        if (ch === '"') {
          structural.lastIndex = stringEnd(m.index);
          continue;
        }
        depth += ch === '{' || ch === '[' ? 1 : -1;
        if (depth === 0) return m.index + 1;
      }
      return len;
    }
    let j = i;
    while (j < len && text[j] !== ',' && text[j] !== '}' && text[j] !== ']' && !json_whitespace.has(text[j])) j++;
    return j;
  };
  let found: string | null = null;
  let i = ws(0);
  if (text[i] !== '{') return null;
  i = ws(i + 1);
  while (i < len && text[i] === '"') {
    const keyEnd = stringEnd(i);
    const raw = text.slice(i + 1, keyEnd - 1);
    const key = raw.includes('\\') ? (JSON.parse(text.slice(i, keyEnd)) as string) : raw;
    i = ws(ws(keyEnd) + 1); // past the colon
    const end = valueEnd(i);
    if (key === field) found = text.slice(i, end);
    i = ws(end);
    if (text[i] !== ',') break;
    i = ws(i + 1);
  }
  return found;
}

/** Unit-suffixed amount fields: Variant A's, answered 400 unsupported_amount_field in B. */
const unit_fields = ['amount_usd', 'amount_cents', 'amount_credits', 'actual_amount_usd', 'actual_amount_cents', 'actual_amount_credits'];

/**
 * The amount fields a request may carry, for the unknown-field check: `reads`, those
 * readAmount reads in this variant; `refused`, those it refuses with an error of its own
 * (the other variant's unit fields in B).
 */
export function amountFields(variant: Variant, opts: { consume?: boolean } = {}): { reads: string[]; refused: string[] } {
  if (variant === 'B') return { reads: ['amount'], refused: [...unit_fields, 'actual_amount'] };
  const prefix = opts.consume ? 'actual_amount' : 'amount';
  return { reads: [`${prefix}_usd`, `${prefix}_cents`, `${prefix}_credits`, prefix], refused: [] };
}

/**
 * Reads the amount of a deposit, deduct or freeze (`prefix` 'amount') or of a consume
 * (`prefix` 'actual_amount' in A, 'amount' in B). `required` false lets B's consume omit
 * it (null: the whole frozen amount).
 */
export function readAmount(body: Record<string, unknown>, variant: Variant, opts: { consume?: boolean } = {}): number | null {
  const prefix = variant === 'A' && opts.consume ? 'actual_amount' : 'amount';
  if (variant === 'B') {
    const suffixed = unit_fields.find((f) => body[f] !== undefined) ?? (body.actual_amount !== undefined ? 'actual_amount' : undefined);
    if (suffixed) throw new ApiError('unsupported_amount_field', { param: suffixed });
    if (body.amount === undefined || body.amount === null) {
      if (opts.consume) return null;
      throw new ApiError('invalid_amount', { param: 'amount', message: 'amount (positive integer credits) is required' });
    }
    const v = body.amount;
    if (typeof v !== 'number' || !Number.isInteger(v)) {
      throw new ApiError('invalid_amount', { param: 'amount', message: 'amount must be a positive integer of credits' });
    }
    if (v > 0) exactInText(body, 'amount', v);
    return checkRange(v, 'amount');
  }
  const candidates: [string, Unit][] = [
    [`${prefix}_usd`, 'usd'],
    [`${prefix}_cents`, 'cents'],
    [`${prefix}_credits`, 'credits'],
    [prefix, 'cents'],
  ];
  const given = candidates.filter(([f]) => body[f] !== undefined && body[f] !== null);
  if (given.length === 0) {
    throw new ApiError('invalid_amount', { param: `${prefix}_credits`, message: `one of ${prefix}_usd, ${prefix}_cents, ${prefix}_credits is required` });
  }
  if (given.length > 1) {
    throw new ApiError('invalid_amount', { param: given[1][0], message: `give exactly one of ${given.map(([f]) => f).join(', ')}` });
  }
  const [field, unit] = given[0];
  return checkRange(toCredits(numberField(body, field), unit), field);
}

/** Exact decimal strings for headers and receipts: credits to USD and to cents. */
export function creditsToUsd(credits: number): string {
  return shiftDecimal(credits, 6);
}

export function creditsToCents(credits: number): string {
  return shiftDecimal(credits, 4);
}

function shiftDecimal(credits: number, places: number): string {
  const negative = credits < 0;
  const digits = String(Math.abs(credits)).padStart(places + 1, '0');
  const whole = digits.slice(0, digits.length - places);
  const frac = digits.slice(digits.length - places).replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}
