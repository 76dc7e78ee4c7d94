/**
 * JSON as the service reads and stores it: the nesting and size limits of request bodies
 * and of stored free-form JSON, the bounded walk that checks them, and the text a body was
 * parsed from (read back for exact amounts). Foundation, so that the domain's schemas and
 * the HTTP layer's body readers (src/http/validate.ts) share one rule.
 */
import { z } from 'zod';

// eslint-disable-next-line no-control-regex -- U+0000 is what PostgreSQL cannot store, and what this finds
const unstorable = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The most levels of nesting a request body may have (the body object is level 1), on
 * every route that reads JSON. Stored free-form JSON has a tighter limit
 * (stored_json_depth_max). Every walk of a body after jsonBody's check is so bounded: no
 * request can drive a recursion to a stack overflow.
 */
export const body_depth_max = 64;
/** Free-form JSON the service stores (`metadata`): levels of nesting and serialized bytes at most. */
export const stored_json_depth_max = 32;
export const stored_json_bytes_max = 16 * 1024;

/** What is wrong with a JSON value, and where: a string PostgreSQL cannot store, or nesting past the limit. */
export interface JsonFault {
  fault: 'unstorable' | 'depth';
  path: string[];
}

/**
 * The first fault of a JSON value: a string (value or key) that PostgreSQL cannot store as
 * it is (text and jsonb refuse U+0000, and a lone surrogate would be stored as U+FFFD, so
 * the ledger of record would differ from what Redis answered), or an object or array
 * nested deeper than `levels_max` (the value itself is level 1). Null when none. The
 * recursion stops at `levels_max`, so a body nested 100,000 deep costs 64 frames.
 */
export function jsonFault(value: unknown, levels_max = body_depth_max): JsonFault | null {
  // The walk allocates nothing unless it finds one: it runs on every money operation.
  if (typeof value === 'string') return unstorable.test(value) ? { fault: 'unstorable', path: [] } : null;
  if (value === null || typeof value !== 'object') return null;
  if (levels_max <= 0) return { fault: 'depth', path: [] };
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = jsonFault(value[i], levels_max - 1);
      if (found !== null) return (found.path.unshift(String(i)), found);
    }
    return null;
  }
  for (const k in value) {
    if (!Object.hasOwn(value, k)) continue;
    if (unstorable.test(k)) return { fault: 'unstorable', path: [k] };
    const found = jsonFault((value as Record<string, unknown>)[k], levels_max - 1);
    if (found !== null) return (found.path.unshift(k), found);
  }
  return null;
}

/**
 * A free-form JSON object the service stores: at most stored_json_depth_max levels and
 * stored_json_bytes_max bytes serialized (what PostgreSQL's jsonb and the persist worker
 * can always take), else 400 invalid_request naming the field and the limit.
 */
export const storedJsonObject = z.record(z.unknown()).superRefine((value, ctx) => {
  if (jsonFault(value, stored_json_depth_max)?.fault === 'depth') {
    ctx.addIssue({ code: z.ZodIssueCode.custom, message: `nested more than ${stored_json_depth_max} levels deep (the limit of stored JSON)` });
    return;
  }
  const bytes = Buffer.byteLength(JSON.stringify(value));
  if (bytes > stored_json_bytes_max) {
    ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${bytes} bytes as JSON, more than the limit of ${stored_json_bytes_max} (16 KiB)` });
  }
});

/**
 * The text of parsed JSON bodies, by the parsed object (a parser with keepText): a string
 * (the fast path already made it) or how to decode the bytes body-parser read, done only
 * when an amount is read.
 */
export const bodyTexts = new WeakMap<object, string | (() => string | null)>();

/**
 * The JSON text `body` was parsed from, or null when no parser kept it (a body made in
 * process, as the dashboard's calls) or its charset has no decoder here.
 */
export function bodyTextOf(body: object): string | null {
  const t = bodyTexts.get(body);
  if (t === undefined) return null;
  return typeof t === 'string' ? t : t();
}
