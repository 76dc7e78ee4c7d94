/**
 * The parse of a gateway call, once, at its start: the body fields billing needs, read by
 * its wire format (src/gateway/wire/), the customer, and the headers that steer billing.
 * Every refusal names the field or header at fault, and a 400 lists each one at fault;
 * the body itself goes upstream untouched.
 */
import type { Request } from 'express';
import { ApiError } from '../errors/catalogue.js';
import type { AuthContext } from '../keys/caller.js';
import { everyFieldError, variantRefused } from '../errors/fields.js';
import { walletNameSchema } from '../ledger/schemas.js';
import { formatOf, type WireFormat } from './adapters.js';
import type { BodyFields, Json, PartCounts } from './wire/format.js';
import { embeddingsBodyChecks, readEmbeddingsBody } from './wire/embeddings.js';

export type Endpoint = 'chat.completions' | 'messages' | 'embeddings' | 'responses';

/** What each billed endpoint reads of a client's body: its wire format's reader, or the embeddings one. */
interface BodyReader {
  format: WireFormat;
  readBody(body: Json): BodyFields;
  bodyChecks: readonly ((body: Json) => unknown)[];
}

function readerOf(format: WireFormat): BodyReader {
  const { readBody, bodyChecks } = formatOf(format);
  return { format, readBody, bodyChecks };
}

const readers: Record<Endpoint, BodyReader> = {
  'chat.completions': readerOf('openai'),
  messages: readerOf('anthropic'),
  responses: readerOf('responses'),
  embeddings: { format: 'openai', readBody: readEmbeddingsBody, bodyChecks: embeddingsBodyChecks },
};

export const trace_id_chars_max = 256;
export const idempotency_key_chars_max = 256;

export interface GatewayRequest {
  endpoint: Endpoint;
  format: WireFormat;
  /** The client's body, as parsed from JSON: what goes upstream, with the gateway's few changes. */
  body: Record<string, unknown>;
  /** The model the client named (the project's model id). */
  modelId: string;
  stream: boolean;
  /** The output limit the client asked for, or null. */
  explicitMax: number | null;
  /** The body field of that limit (`max_tokens`; OpenAI's `max_completion_tokens` when the client set it). */
  limitField: string;
  /** Answers asked of the upstream (OpenAI `n`), each billed. */
  answers: number;
  customerId: string;
  wallet: string;
  traceId: string | null;
  idempotencyKey: string | undefined;
  /** The client's `anthropic-version`, passed on upstream. */
  anthropicVersion: string | undefined;
  /**
   * `X-Service-Stream-Billing: inline`: a stream's billing figures also go in its final
   * usage event (src/gateway/relay.ts); false for the default (trailers only).
   */
  inlineBilling: boolean;
  /** `X-Service-Hold: incremental` (streamed calls only): the hold grows slice by slice (src/gateway/incremental.ts). */
  incrementalHold: boolean;
  /** Bytes of the JSON body: they bound the prompt's tokens for the hold. */
  rawBytes: number;
  /** Image and file parts of the body: the hold adds their model's per-part bounds. */
  parts: PartCounts;
}

function headerValue(req: Request, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A 400 naming the header at fault. */
function refusedHeader(param: string, message: string): ApiError {
  return new ApiError('invalid_request', { param, message });
}

/**
 * authenticate took a valid X-Service-Api-Variant as `auth.variant` and left an invalid
 * one to this check (src/http/auth.ts), so that it is listed with the call's other errors.
 */
export function checkVariant(req: Request, auth: AuthContext): void {
  const v = req.headers['x-service-api-variant'];
  if (v !== undefined && v !== auth.variant) throw variantRefused();
}

/** The customer billed: a customer-scoped key's own, else the one X-Service-Customer names. */
function readCustomer(named: string | undefined, auth: AuthContext): string {
  const customerId = auth.key.type === 'customer' ? auth.key.customer_id! : named;
  if (!customerId) throw new ApiError('customer_required');
  return customerId;
}

function readWallet(req: Request, auth: AuthContext): string {
  const walletHeader = headerValue(req, 'x-service-wallet');
  if (walletHeader !== undefined && !walletNameSchema.safeParse(walletHeader).success) {
    throw refusedHeader('X-Service-Wallet', 'X-Service-Wallet is not a valid wallet name');
  }
  return walletHeader ?? (auth.variant === 'A' ? 'default' : 'credits');
}

function readTraceId(req: Request): string | null {
  const traceId = headerValue(req, 'x-service-trace-id');
  if (traceId === undefined) return null;
  if (traceId.length < 1 || traceId.length > trace_id_chars_max) throw refusedHeader('X-Service-Trace-Id', `X-Service-Trace-Id must be 1-${trace_id_chars_max} characters`);
  return traceId;
}

function readIdempotencyKey(req: Request): string | undefined {
  const idempotencyKey = headerValue(req, 'idempotency-key');
  if (idempotencyKey !== undefined && (idempotencyKey.length < 1 || idempotencyKey.length > idempotency_key_chars_max)) {
    throw refusedHeader('Idempotency-Key', `Idempotency-Key must be 1-${idempotency_key_chars_max} characters, as transaction ids are`);
  }
  return idempotencyKey;
}

/** `X-Service-Stream-Billing`: true for `inline`. */
function readInlineBilling(req: Request): boolean {
  const streamBilling = headerValue(req, 'x-service-stream-billing');
  if (streamBilling === undefined) return false;
  const v = streamBilling.trim().toLowerCase();
  if (v !== 'inline' && v !== 'trailers') throw refusedHeader('X-Service-Stream-Billing', 'X-Service-Stream-Billing must be inline (the billing figures also in the final usage event of a stream) or trailers (the default)');
  return v === 'inline';
}

/**
 * `X-Service-Hold`: true for `incremental` (docs/API.md, "Incremental holds"), false for
 * `upfront` (the default). Streamed calls only: a whole answer cannot be cut cleanly.
 */
function readIncrementalHold(req: Request, stream: boolean): boolean {
  const hold = headerValue(req, 'x-service-hold');
  if (hold === undefined) return false;
  const v = hold.trim().toLowerCase();
  if (v !== 'incremental' && v !== 'upfront') throw refusedHeader('X-Service-Hold', 'X-Service-Hold must be incremental (hold one slice of output at a time) or upfront (the default)');
  if (v === 'incremental' && !stream) throw refusedHeader('X-Service-Hold', 'X-Service-Hold: incremental needs a streamed call (stream: true): a whole answer cannot be cut cleanly');
  return v === 'incremental';
}

interface Parts {
  req: Request;
  auth: AuthContext;
}

/**
 * Every check of a call's headers and body, each on its own, in the order
 * parseGatewayRequest reads them. Not the refusal of a customer-scoped key naming another
 * customer: a 403, not an invalid field.
 */
function checksOf(endpoint: Endpoint): readonly ((c: Parts) => unknown)[] {
  return [
    (c) => checkVariant(c.req, c.auth),
    ...readers[endpoint].bodyChecks.map((check) => (c: Parts) => check(c.req.body as Record<string, unknown>)),
    (c) => readCustomer(headerValue(c.req, 'x-service-customer'), c.auth),
    (c) => readWallet(c.req, c.auth),
    (c) => readTraceId(c.req),
    (c) => readIdempotencyKey(c.req),
    (c) => readInlineBilling(c.req),
    (c) => readIncrementalHold(c.req, (c.req.body as { stream?: unknown }).stream === true),
  ];
}

const checks: Record<Endpoint, readonly ((c: Parts) => unknown)[]> = {
  'chat.completions': checksOf('chat.completions'),
  messages: checksOf('messages'),
  embeddings: checksOf('embeddings'),
  responses: checksOf('responses'),
};

/**
 * Reads a call, stopping at the first invalid header or body field; only after that
 * failure, every check runs on its own, so that the 400 lists each invalid one in
 * `error.errors` (everyFieldError) at no cost to a valid call.
 */
export function parseGatewayRequest(req: Request, auth: AuthContext, endpoint: Endpoint, rawBytes: number): GatewayRequest {
  try {
    return readRequest(req, auth, endpoint, rawBytes);
  } catch (err) {
    throw everyFieldError(err, checks[endpoint], { req, auth });
  }
}

/**
 * The customer a call is for: a customer-scoped key's own, else the one X-Service-Customer
 * names (required). A customer-scoped key naming another is refused rather than ignored,
 * so the caller learns who would have been billed.
 */
export function customerOf(req: Request, auth: AuthContext): string {
  const named = headerValue(req, 'x-service-customer');
  const customerId = readCustomer(named, auth);
  if (named !== undefined && named !== customerId) {
    throw new ApiError('permission_denied', {
      param: 'X-Service-Customer',
      message: `this customer-scoped key bills its own customer ${JSON.stringify(customerId)}; X-Service-Customer names another (send it only with a project key)`,
    });
  }
  return customerId;
}

/** The body field of the output limit, as the hold's refusal names it. */
function limitFieldOf(format: WireFormat, body: Json): string {
  if (format === 'responses') return 'max_output_tokens';
  return format === 'openai' && body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
}

function readRequest(req: Request, auth: AuthContext, endpoint: Endpoint, rawBytes: number): GatewayRequest {
  checkVariant(req, auth);
  const body = req.body as Record<string, unknown>;
  const { format, readBody } = readers[endpoint];
  const fields = readBody(body);

  const customerId = customerOf(req, auth);
  const wallet = readWallet(req, auth);
  const traceId = readTraceId(req);
  const idempotencyKey = readIdempotencyKey(req);
  const inlineBilling = readInlineBilling(req);
  const incrementalHold = readIncrementalHold(req, fields.stream);

  return {
    endpoint,
    format,
    body,
    modelId: fields.model,
    stream: fields.stream,
    explicitMax: fields.limit,
    limitField: limitFieldOf(format, body),
    answers: fields.answers,
    customerId,
    wallet,
    traceId,
    // Keys are the customer's own (see the claim in billing.ts).
    idempotencyKey,
    anthropicVersion: format === 'anthropic' ? headerValue(req, 'anthropic-version') : undefined,
    inlineBilling,
    incrementalHold,
    rawBytes,
    parts: fields.parts,
  };
}
