/**
 * The one error assertion of the tests: the status, `error.code`, and `error.type`, which
 * follows the status by the catalogue's own rule (src/errors/catalogue.ts,
 * errorTypeForStatus), or in the Anthropic envelope (`"type": "error"`, /v1/messages) by
 * Anthropic's (src/errors/anthropic.ts), so a test cannot carry a table of types that
 * drifts from the service's. Every error has a non-empty message; `param`, `message` and `fields` match
 * more when a test names them. All of it is compared in one assertion, so a failure shows
 * the whole answer.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { expect } from 'vitest';
import { anthropicTypeOfStatus } from '../../src/errors/anthropic.js';
import { errorTypeForStatus, type ErrorCode } from '../../src/errors/catalogue.js';

/** What a test client answers: `svc.call`'s parsed body, or a raw response's text. */
export type ErrorResponse =
  | { status: number; body: unknown; headers?: Headers | IncomingHttpHeaders }
  | { status: number; text: string; headers?: Headers | IncomingHttpHeaders };

export interface ErrorMatch {
  /** `error.param` must equal it; null: the error has no param. */
  param?: string | null;
  /** `error.message` must equal the string, or match the pattern. */
  message?: string | RegExp;
  /** More fields `error` must have (e.g. `role_required`, `limit`), matched as toMatchObject does. */
  fields?: Record<string, unknown>;
  /** The body is exactly `{ error }` with only these fields beside message, type, code and param. */
  onlyFields?: readonly string[];
  /** Names the case in a failure (a loop's path, method or body). */
  label?: string;
}

function bodyOf(res: ErrorResponse): unknown {
  if ('body' in res) return res.body;
  try {
    return JSON.parse(res.text);
  } catch {
    return res.text;
  }
}

function contentType(res: ErrorResponse): string | undefined {
  const h = res.headers;
  if (!h) return undefined;
  if (typeof (h as Headers).get === 'function') return (h as Headers).get('content-type') ?? undefined;
  const v = (h as IncomingHttpHeaders)['content-type'];
  return Array.isArray(v) ? v[0] : v;
}

/** Asserts an error answer of the catalogue: status, code, the status's type, a message. */
export function expectError(res: ErrorResponse, status: number, code: ErrorCode, opts: ErrorMatch = {}): void {
  const body = bodyOf(res);
  const error = body !== null && typeof body === 'object' ? (body as { error?: Record<string, unknown> }).error : undefined;
  const expected: Record<string, unknown> = {
    code,
    type: (body as { type?: unknown } | null)?.type === 'error' ? anthropicTypeOfStatus(status) : errorTypeForStatus(status),
    message: opts.message === undefined ? expect.stringMatching(/./) : typeof opts.message === 'string' ? opts.message : expect.stringMatching(opts.message),
    ...opts.fields,
  };
  if (opts.param !== undefined && opts.param !== null) expected.param = opts.param;
  const context = `${opts.label ? `${opts.label}: ` : ''}${typeof body === 'string' ? body.slice(0, 300) : JSON.stringify(body)}`;
  expect({ status: res.status, error }, context).toMatchObject({ status, error: expected });
  if (opts.param === null) expect(error, context).not.toHaveProperty('param');
  if (opts.onlyFields) {
    expect(Object.keys(body as object), context).toEqual(['error']);
    expect(['message', 'type', 'code', 'param', ...opts.onlyFields], context).toEqual(expect.arrayContaining(Object.keys(error ?? {})));
  }
  // An error is JSON, whichever layer answered it.
  const type = contentType(res);
  if (res.headers) expect(type, context).toMatch(/^application\/json/);
}
