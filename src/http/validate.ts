/**
 * zod at the edge: every issue becomes invalid_request, the first in `param` and
 * `message`, all of them in `errors` (FieldError).
 */
import express, { type Request, type RequestHandler } from 'express';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { everyFieldError, type FieldError } from '../errors/fields.js';
import { body_depth_max, bodyTexts, jsonFault } from '../schema/json.js';

export function parseWith<T extends z.ZodTypeAny>(schema: T, value: unknown): z.infer<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const errors: FieldError[] = result.error.issues.map((issue) => {
    const param = issue.path.join('.') || null;
    return { param, code: 'invalid_request', message: param ? `${param}: ${issue.message}` : issue.message };
  });
  const first = errors[0];
  throw new ApiError('invalid_request', { param: first.param ?? undefined, message: first.message, extra: { errors } });
}

/**
 * The JSON body as an object, or invalid_json; a string it cannot store, or nesting past
 * body_depth_max, is invalid_request naming the top-level field (before any money moves).
 */
export function jsonBody(req: Request): Record<string, unknown> {
  const body: unknown = req.body;
  // The JSON parser reads an empty body as {}, but an empty body is not a JSON object.
  const empty = req.headers['content-length'] === '0';
  if (empty || body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new ApiError('invalid_json', { message: 'request body must be a JSON object (Content-Type: application/json)' });
  }
  const bad = jsonFault(body);
  if (bad?.fault === 'depth') {
    const param = bad.path[0];
    throw new ApiError('invalid_request', { param, message: `${param ?? 'body'}: JSON nested more than ${body_depth_max} levels deep (the limit of a request body)` });
  }
  if (bad !== null) {
    const param = bad.path.join('.') || undefined;
    throw new ApiError('invalid_request', { param, message: `${param ?? 'body'}: strings must not contain U+0000 or unpaired surrogates` });
  }
  return body as Record<string, unknown>;
}

/**
 * A JSON body parser that records how many bytes it read (`bodyBytes`). Every JSON parser
 * of the API is one of these, so whichever parser read a body, a gateway hold is bounded
 * by the bytes of that same body.
 *
 * The common request (a declared length within the limit, `Content-Type: application/json`
 * with no charset or utf-8, no Content-Encoding) is read here, with one listener set and
 * no stream machinery: body-parser's read (raw-body, on-finished, type-is, content-type,
 * iconv) was about 5% of the API's CPU on the deduct route. It answers exactly what
 * express.json would. Anything else (chunked, compressed, another charset or media type, an
 * empty or oversized declared body, a body already read) goes to express.json itself.
 */
export function measuredJson(limit: number, full = measuredExpressJson(limit), opts: BodyTextOptions = {}): RequestHandler {
  const keepText = opts.keepText === true;
  return (req, res, next) => {
    const length = plainJsonLength(req, limit);
    if (length === null) return full(req, res, next);
    readDeclared(req, length, (err, bytes) => {
      if (err !== null) return next(err);
      (req as unknown as { bodyBytes: number }).bodyBytes = bytes!.length;
      // As iconv-lite's utf-8 decoder: a byte order mark is not part of the text.
      const bom = bytes!.length >= 3 && bytes![0] === 0xef && bytes![1] === 0xbb && bytes![2] === 0xbf;
      const text = bytes!.toString('utf8', bom ? 3 : 0);
      try {
        req.body = JSON.parse(text);
      } catch {
        return next(clientError(400, 'entity.parse.failed', 'request body is not valid JSON'));
      }
      if (keepText && typeof req.body === 'object' && req.body !== null) bodyTexts.set(req.body as object, text);
      next();
    });
  };
}

export interface BodyTextOptions {
  /**
   * Keep the text each JSON object body was parsed from (bodyTextOf), for the amounts read
   * from it (src/ledger/amounts.ts). Billing bodies only: a gateway body is large and
   * reads no amount.
   */
  keepText?: boolean;
}


/** What body-parser read and in which charset (measuredExpressJson with keepText). */
const readBytes = Symbol('readBytes');

/** express.json with the API's settings, measuring what it reads: measuredJson's fallback. */
export function measuredExpressJson(limit: number, opts: BodyTextOptions = {}): RequestHandler {
  const parse = express.json({
    limit,
    strict: false,
    type: ['application/json', 'application/*+json'],
    verify: (req, _res, buf, encoding) => {
      (req as unknown as { bodyBytes: number }).bodyBytes = buf.length;
      if (opts.keepText === true) (req as unknown as Record<symbol, unknown>)[readBytes] = { buf, encoding };
    },
  });
  if (opts.keepText !== true) return parse;
  return (req, res, next) => {
    parse(req, res, (err?: unknown) => {
      const read = (req as unknown as Record<symbol, { buf: Buffer; encoding: string } | undefined>)[readBytes];
      if (err === undefined && read !== undefined && typeof req.body === 'object' && req.body !== null) {
        // Decoded as body-parser decoded it (a byte order mark is not part of the text);
        // a charset TextDecoder does not know leaves the text unknown.
        bodyTexts.set(req.body as object, () => {
          try {
            return new TextDecoder(read.encoding).decode(read.buf);
          } catch {
            return null;
          }
        });
      }
      next(err);
    });
  };
}

const plainJsonType = /^application\/json\s*(?:;\s*charset\s*=\s*"?utf-8"?\s*)?$/i;

/**
 * The declared length of a body that measuredJson reads itself, else null. The HTTP parser
 * of node:http has checked the Content-Length header and delivers exactly that many bytes.
 */
function plainJsonLength(req: Request, limit: number): number | null {
  const h = req.headers;
  if (h['transfer-encoding'] !== undefined || (h['content-encoding'] !== undefined && h['content-encoding'].toLowerCase() !== 'identity')) return null;
  const declared = h['content-length'];
  const type = h['content-type'];
  if (declared === undefined || type === undefined || !plainJsonType.test(type)) return null;
  const n = Number(declared);
  if (!(n > 0 && n <= limit) || (req as unknown as { bodyBytes?: number }).bodyBytes !== undefined || req.readableEnded) return null;
  return n;
}

/** An error as body-parser makes them, for the error middleware (src/http/errors.ts). */
function clientError(status: number, type: string, message: string): Error {
  return Object.assign(new Error(message), { status, statusCode: status, expose: true, type });
}

/** Reads a body of `length` declared bytes; one callback, with the bytes or an error. */
function readDeclared(req: Request, length: number, done: (err: Error | null, bytes?: Buffer) => void): void {
  let first: Buffer | null = null;
  let chunks: Buffer[] | null = null;
  let got = 0;
  let settled = false;
  const finish = (err: Error | null) => {
    if (settled) return;
    settled = true;
    req.removeListener('data', onData);
    req.removeListener('end', onEnd);
    req.removeListener('error', onAbort);
    req.removeListener('close', onAbort);
    if (err !== null) return done(err);
    done(null, chunks === null ? (first ?? Buffer.alloc(0)) : Buffer.concat(chunks, got));
  };
  const onData = (chunk: Buffer) => {
    got += chunk.length;
    if (first === null) first = chunk;
    else (chunks ??= [first]).push(chunk);
  };
  const onEnd = () => finish(got === length ? null : clientError(400, 'request.size.invalid', 'request size did not match content length'));
  // raw-body's answer to a body the client did not finish sending.
  const onAbort = () => finish(clientError(400, 'request.aborted', 'request aborted'));
  req.on('data', onData);
  req.on('end', onEnd);
  req.on('error', onAbort);
  req.on('close', onAbort);
}

/**
 * The bytes of the parsed JSON body. A body that some parser read without measuring it
 * would bound a hold by nothing, so it is an error rather than 0.
 */
export function bodyBytes(req: Request): number {
  const n = (req as unknown as { bodyBytes?: number }).bodyBytes;
  if (n !== undefined) return n;
  if ((req as unknown as { _body?: boolean })._body) throw new Error('a JSON body was parsed without measuring its bytes');
  return 0;
}

/**
 * Fields a caller likely sent for another one: the identifier of another kind of
 * operation, a name from another API, a unit or wallet field of the other contract variant.
 * Only those the endpoint reads are suggested.
 */
const mixUps: Record<string, string[]> = {
  transaction_id: ['idempotency_key'],
  idempotency_key: ['transaction_id'],
  request_id: ['idempotency_key', 'transaction_id'],
  user: ['customer_id'],
  user_id: ['customer_id'],
  account_id: ['customer_id'],
  expiry: ['expires_at'],
  expiration: ['expires_at'],
  expire_at: ['expires_at'],
  expires_in: ['expires_at'],
  start: ['starts_at'],
  start_at: ['starts_at'],
  ttl: ['release_after_seconds', 'consume_after_seconds'],
  ttl_seconds: ['release_after_seconds', 'consume_after_seconds'],
  expires_after_seconds: ['release_after_seconds', 'consume_after_seconds'],
  wallet: ['credit_type', 'credit_types'],
  wallets: ['credit_types', 'wallet'],
  credit_type: ['wallet', 'credit_types'],
  credit_types: ['wallet', 'credit_type'],
  label: ['source'],
  memo: ['description'],
  note: ['description'],
  reason: ['description'],
  since: ['from'],
  until: ['to'],
  page_size: ['limit'],
  after: ['cursor'],
  before: ['cursor'],
};

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length];
}

/** The allowed field(s) a caller most likely meant by `name`, or none. */
function suggestField(name: string, allowed: readonly string[]): string[] {
  const known = new Set(allowed);
  const lower = name.toLowerCase();
  // A known mix-up first, then the unit fields of the other amount (amount_usd for
  // actual_amount_usd and back), then the same name in another case or separator style.
  const listed = [...(mixUps[lower] ?? []), `actual_${lower}`, lower.replace(/^actual_/, '')].filter((f) => f !== name && known.has(f));
  if (listed.length > 0) return [...new Set(listed)].slice(0, 2);
  const squash = (s: string) => s.toLowerCase().replace(/[^a-z0-9]/g, '');
  const same = allowed.find((f) => squash(f) === squash(name));
  if (same !== undefined) return [same];
  // The name without its suffix: `customer` for customer_id, `expires` for expires_at.
  const longer = allowed.filter((f) => f.startsWith(`${lower}_`));
  if (longer.length === 1) return longer;
  // A typo: the nearest field within a third of the name's length (two edits at most).
  const within = Math.min(2, Math.floor(name.length / 3));
  let best: string | null = null;
  let bestDistance = within + 1;
  for (const f of allowed) {
    const d = editDistance(lower, f);
    if (d < bestDistance) [best, bestDistance] = [f, d];
  }
  return best === null ? [] : [best];
}

/**
 * Refuses a field the endpoint does not read: a misspelt or misplaced field would
 * otherwise be dropped while the request succeeds (a retry keyed by a field the endpoint
 * ignores pays twice). `allowed` is every field the endpoint reads or answers with an
 * error of its own; `suggest`, the ones worth suggesting (default: all of `allowed`).
 */
export function onlyFields(
  values: Record<string, unknown>,
  allowed: readonly string[],
  opts: { where?: 'body' | 'query'; suggest?: readonly string[] } = {},
): void {
  const unknown = Object.keys(values).find((f) => !allowed.includes(f));
  if (unknown === undefined) return;
  const what = opts.where === 'query' ? 'unknown query parameter' : 'unknown field';
  const errors: FieldError[] = Object.keys(values)
    .filter((f) => !allowed.includes(f))
    .map((f) => {
      const meant = suggestField(f, opts.suggest ?? allowed);
      return { param: f, code: 'invalid_request', message: meant.length > 0 ? `${what} ${f}; did you mean ${meant.join(' or ')}?` : `${what} ${f}` };
    });
  throw new ApiError('invalid_request', { param: unknown, message: errors[0].message, extra: { errors } });
}

/** Refuses a query parameter the endpoint does not read (none, when `allowed` is empty). */
export function onlyQuery(req: Request, allowed: readonly string[] = []): void {
  // Express parses the query string again on every read of req.query: a URL without one
  // has no parameter to check, and nearly every money operation's URL has none.
  if (!req.url.includes('?')) return;
  onlyFields(req.query as Record<string, unknown>, allowed, { where: 'query' });
}

/**
 * A JSON object body with only the schema's fields, and no query parameter: an unknown
 * field (a typo such as `upstreamApiKey`) is 400 naming it, instead of being dropped while
 * the request succeeds.
 */
export function strictBody<T extends z.AnyZodObject | z.ZodEffects<z.AnyZodObject>>(req: Request, schema: T, { optional = false } = {}): z.infer<T> {
  onlyQuery(req);
  const absent = req.body === undefined || req.body === null || req.headers['content-length'] === '0';
  const body = optional && absent ? {} : jsonBody(req);
  const shape = schema instanceof z.ZodEffects ? schema.innerType().shape : (schema as z.AnyZodObject).shape;
  try {
    onlyFields(body, Object.keys(shape));
  } catch (err) {
    // The unknown fields and the invalid known ones, in one answer.
    throw everyFieldError(err, [(b: Record<string, unknown>) => parseWith(schema, b)], body);
  }
  return parseWith(schema, body);
}
