/** Reading the page's form fields (application/x-www-form-urlencoded) into the API's JSON values. */
import type { Request } from 'express';
import { credits_per_usd } from '../admin/models.js';
import { ApiError } from '../errors/catalogue.js';
import { amount_credits_max, toCredits, writtenExactly } from '../ledger/amounts.js';
import { count, usd } from './format.js';

type Fields = Record<string, unknown>;

function fields(req: Request): Fields {
  return (req.body ?? {}) as Fields;
}

/** A text field, trimmed; '' when absent. A repeated field counts as its last value. */
export function text(req: Request, name: string): string {
  const v = fields(req)[name];
  const last = Array.isArray(v) ? v[v.length - 1] : v;
  return typeof last === 'string' ? last.trim() : '';
}

/** A text field, or undefined when left empty: the API then applies its default. */
export function optional(req: Request, name: string): string | undefined {
  const v = text(req, name);
  return v === '' ? undefined : v;
}

/** Every value of a repeated field (checkboxes), empty ones left out. */
export function list(req: Request, name: string): string[] {
  const v = fields(req)[name];
  const all = Array.isArray(v) ? v : v === undefined ? [] : [v];
  return all.filter((x): x is string => typeof x === 'string' && x.trim() !== '').map((x) => x.trim());
}

export function checked(req: Request, name: string): boolean {
  return list(req, name).length > 0;
}

/**
 * A number field as a JSON number, so that the API's own validation speaks about it; text
 * that is not a number goes through as it is and is refused by the API with its message.
 */
export function number(req: Request, name: string): number | string | undefined {
  const v = text(req, name).replace(/[,_\s]/g, '');
  if (v === '') return undefined;
  const n = Number(v);
  // A number the text does not write exactly (`100.0000000000000001` would read as 100)
  // goes on as the text, which the API refuses as not a number, as it refuses it in JSON.
  return Number.isFinite(n) && writtenExactly(v, n) ? n : v;
}

/** The units an amount field may be typed in (a select beside it): credits, or USD. */
export const amount_units = ['credits', 'usd'] as const;
export type AmountUnit = (typeof amount_units)[number];

export function unitOf(req: Request, name: string): AmountUnit {
  return text(req, name) === 'usd' ? 'usd' : 'credits';
}

/**
 * An amount field in the unit its select names, as the API's integer credits. Credits go
 * as `number` reads them (the API speaks about a bad one). USD converts exactly, by
 * decimal arithmetic on the text typed (never a float product), at 1 USD =
 * `credits_per_usd` credits; a USD amount that is not a whole number of credits, or
 * past the API's most, is refused here in words (400 invalid_amount) and nothing is sent.
 */
export function creditsAmount(req: Request, name: string, unitName: string): number | string | undefined {
  const v = number(req, name);
  if (unitOf(req, unitName) === 'credits' || typeof v !== 'number' || v <= 0) return v;
  const converted = toCredits(v, 'usd');
  const typed = text(req, name);
  if (converted === null) {
    throw new ApiError('invalid_amount', {
      param: name,
      message: `$${typed} is not a whole number of credits (1 USD = ${count(credits_per_usd)} credits, so at most 6 decimal places): nothing was deposited`,
    });
  }
  if (converted > amount_credits_max) {
    throw new ApiError('invalid_amount', { param: name, message: `$${typed} is more than the most one deposit may add, ${usd(amount_credits_max)}: nothing was deposited` });
  }
  return converted;
}

/**
 * A field holding a JSON object (a customer's metadata): the object, null when left
 * empty and `empty` is 'null', undefined when left empty and it is 'absent'. Text that is
 * not JSON is refused here in words (400 invalid_request); JSON that is not an object
 * goes on, and the API refuses it with its message.
 */
export function jsonField(req: Request, name: string, empty: 'null' | 'absent'): unknown {
  const v = text(req, name);
  if (v === '') return empty === 'null' ? null : undefined;
  try {
    return JSON.parse(v) as unknown;
  } catch (err) {
    throw new ApiError('invalid_request', { param: name, message: `${name} is not valid JSON (${(err as Error).message}): write an object, such as {"plan": "pro"}` });
  }
}

const localDateTime = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/;

/**
 * The pattern attribute of a time field typed as text: a day, or a day and a time after a
 * space or a T (seconds optional), which the API reads as UTC; or ISO 8601 with its zone.
 */
export const utc_time_pattern = String.raw`\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?|\d{4}-\d{2}-\d{2}T.+(Z|[+\-]\d{2}:\d{2})`;

/**
 * A time field, read as UTC (the form says so) as the API's ISO 8601: a datetime-local
 * value gets its seconds and Z; other text goes on as it is, and the API reads a time
 * without a zone as UTC, or refuses the text with its message.
 */
export function utcTime(req: Request, name: string): string | undefined {
  const v = text(req, name);
  if (v === '') return undefined;
  return localDateTime.test(v) ? `${v}:00Z` : v;
}

/** A query parameter as one string, or undefined. */
export function queryParam(req: Request, name: string): string | undefined {
  const v = req.query[name];
  const one = Array.isArray(v) ? v[0] : v;
  return typeof one === 'string' && one.trim() !== '' ? one.trim() : undefined;
}
