/** zod at the edge: the first issue becomes invalid_request with `param`. */
import type { Request } from 'express';
import type { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';

export function parseWith<T extends z.ZodTypeAny>(schema: T, value: unknown): z.infer<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const param = issue.path.join('.') || undefined;
  throw new ApiError('invalid_request', { param, message: param ? `${param}: ${issue.message}` : issue.message });
}

const unstorable = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The path of the first string (value or key) in a JSON value that PostgreSQL cannot
 * store as it is: text and jsonb refuse U+0000, and a lone surrogate would be stored as
 * U+FFFD, so the ledger of record would differ from what Redis answered. Null when none.
 */
export function unstorableStringPath(value: unknown, path: string[] = []): string[] | null {
  if (typeof value === 'string') return unstorable.test(value) ? path : null;
  if (value === null || typeof value !== 'object') return null;
  const entries: [string, unknown][] = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  for (const [k, v] of entries) {
    if (!Array.isArray(value) && unstorableStringPath(k) !== null) return [...path, k];
    const found = unstorableStringPath(v, [...path, k]);
    if (found !== null) return found;
  }
  return null;
}

/** The JSON body as an object, or invalid_json; a string it cannot store is invalid_request. */
export function jsonBody(req: Request): Record<string, unknown> {
  const body: unknown = req.body;
  // The JSON parser reads an empty body as {}, but an empty body is not a JSON object.
  const empty = req.headers['content-length'] === '0';
  if (empty || body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new ApiError('invalid_json', { message: 'request body must be a JSON object (Content-Type: application/json)' });
  }
  const bad = unstorableStringPath(body);
  if (bad !== null) {
    const param = bad.join('.') || undefined;
    throw new ApiError('invalid_request', { param, message: `${param ?? 'body'}: strings must not contain U+0000 or unpaired surrogates` });
  }
  return body as Record<string, unknown>;
}
