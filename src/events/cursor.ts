/**
 * The cursor of the listings paged by time and id (events, webhook deliveries, usage
 * records, receipts): the last item's time and id, opaque to the caller (base64url JSON).
 */
import { ApiError } from '../errors/catalogue.js';

export function encodeCursor(createdAt: string, id: string): string {
  return Buffer.from(JSON.stringify({ t: Date.parse(createdAt), i: id })).toString('base64url');
}

/** The position a cursor holds; invalid_request (param `cursor`) when this API did not make it. */
export function decodeCursor(cursor: string): { createdAtMs: number; id: string } {
  try {
    const v = JSON.parse(Buffer.from(cursor, 'base64url').toString()) as { t?: unknown; i?: unknown };
    if (typeof v.t === 'number' && Number.isFinite(v.t) && typeof v.i === 'string') return { createdAtMs: v.t, id: v.i };
  } catch {
    // fall through to the error below
  }
  throw new ApiError('invalid_request', { param: 'cursor', message: 'cursor is not one this API returned' });
}
