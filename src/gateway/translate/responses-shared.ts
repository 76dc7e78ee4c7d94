/**
 * Small helpers of the Responses API translator (responses.ts): the refusal every
 * mapping throws for a feature with no counterpart, and readers of untyped JSON.
 */
import { ApiError } from '../../errors/catalogue.js';
import type { Json } from '../wire/format.js';

/** A 400 `invalid_request` naming the client's field that the target format cannot carry. */
export function refuse(param: string, why: string): ApiError {
  return new ApiError('invalid_request', { param, message: `${param}: ${why}` });
}

export function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The value as a list of objects, `[]` when absent; a non-list, or a non-object inside, is refused naming the field. */
export function records(value: unknown, param: string): Json[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw refuse(param, 'must be an array');
  return value.map((item, i) => {
    if (!isRecord(item)) throw refuse(`${param}[${i}]`, 'must be an object');
    return item;
  });
}

/** Set: a field's value that is neither absent nor null (a null is an explicit default, carried nowhere). */
export function isSet(value: unknown): boolean {
  return value !== undefined && value !== null;
}

/** Refuses the first field of `body` not in `known` that is set, named under `at`: what a translation does not map is never dropped. */
export function refuseUnknown(body: Json, known: ReadonlySet<string>, target: string, at = ''): void {
  for (const [key, value] of Object.entries(body)) {
    if (!known.has(key) && isSet(value)) throw refuse(at === '' ? key : `${at}.${key}`, `has no counterpart in ${target}`);
  }
}

/** Copies the fields that mean the same in both formats, when set. */
export function copySet(from: Json, to: Json, keys: readonly string[]): void {
  for (const key of keys) if (isSet(from[key])) to[key] = from[key];
}

export function asString(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

export function asNumber(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0;
}
