/**
 * An upstream's answer relayed as it came (its status, type and body; for a cross-format
 * call an error in the client's envelope), with the upstream's rate-limit headers on an
 * error: a client backs off by the provider's `retry-after`, which its SDK reads.
 */
import type { Response } from 'express';
import type { CallTranslation } from './translate/call.js';
import type { UpstreamResponse } from './upstream.js';

/**
 * The Content-Type of a relayed answer, by the upstream's: what Express's `res.type`
 * makes of it (a charset added to a type that has one, `application/json; charset=utf-8`
 * for `application/json`), computed once per distinct upstream type instead of on every
 * answer. At most content_types_remembered types are kept.
 */
const relayedTypes = new Map<string, string>();
const content_types_remembered = 64;

function relayedContentType(res: Response, upstreamType: string): string {
  let type = relayedTypes.get(upstreamType);
  if (type === undefined) {
    res.type(upstreamType);
    type = String(res.getHeader('Content-Type'));
    if (relayedTypes.size >= content_types_remembered) relayedTypes.clear();
    relayedTypes.set(upstreamType, type);
  }
  return type;
}

/**
 * Whether an upstream error's header is relayed: `retry-after` (and OpenAI's
 * `retry-after-ms`) and the providers' rate-limit families. Nothing else of the upstream
 * (its cookies, request ids, organization) reaches the client.
 */
function relayedOnError(name: string): boolean {
  return name === 'retry-after' || name === 'retry-after-ms' || name.startsWith('x-ratelimit-') || name.startsWith('anthropic-ratelimit-');
}

/** Copies an upstream error's rate-limit headers, never one the service set itself (its own X-RateLimit-*). */
function relayLimitHeaders(res: Response, headers: UpstreamResponse['headers']): void {
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined && relayedOnError(name) && !res.hasHeader(name)) res.setHeader(name, value);
  }
}

/**
 * Answers with the upstream's status and body, as Express's res.status().type().send(bytes)
 * would with this app's settings (no ETag; a POST, so never fresh), without its settings
 * lookups and header re-reads on every call. Only an error's headers are looked at.
 */
export function sendRelayed(res: Response, upstream: { status: number; headers: UpstreamResponse['headers'] }, bytes: Buffer, translation: CallTranslation | null = null): void {
  if (upstream.status >= 400) relayLimitHeaders(res, upstream.headers);
  if (translation !== null && upstream.status >= 400) {
    // An upstream error in the client's envelope, same status.
    const error = translation.error(upstream.status, bytes);
    res.statusCode = error.status;
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.setHeader('Content-Length', error.bytes.length);
    res.end(error.bytes);
    return;
  }
  res.statusCode = upstream.status;
  res.setHeader('Content-Type', relayedContentType(res, String(upstream.headers['content-type'] ?? 'application/json')));
  res.setHeader('Content-Length', bytes.length);
  res.end(bytes);
}
