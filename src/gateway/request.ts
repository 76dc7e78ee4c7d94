/**
 * The parse of a gateway call, once, at its start: the body fields billing needs, read by
 * its wire format (src/gateway/wire/), the customer, and the headers that steer billing.
 * Every refusal names the field or header at fault; the body itself goes upstream untouched.
 */
import type { Request } from 'express';
import { ApiError } from '../errors/catalogue.js';
import type { AuthContext } from '../http/auth.js';
import { walletNameSchema } from '../ledger/schemas.js';
import { formatOf, type WireFormat } from './adapters.js';

export type Endpoint = 'chat.completions' | 'messages';

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
  /** Bytes of the JSON body: they bound the prompt's tokens for the hold. */
  rawBytes: number;
}

function headerValue(req: Request, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A 400 naming the header at fault. */
function refusedHeader(param: string, message: string): ApiError {
  return new ApiError('invalid_request', { param, message });
}

export function parseGatewayRequest(req: Request, auth: AuthContext, endpoint: Endpoint, rawBytes: number): GatewayRequest {
  const format: WireFormat = endpoint === 'messages' ? 'anthropic' : 'openai';
  const body = req.body as Record<string, unknown>;
  const fields = formatOf(format).readBody(body);

  const named = headerValue(req, 'x-service-customer');
  const customerId = auth.key.type === 'customer' ? auth.key.customer_id! : named;
  if (!customerId) throw new ApiError('customer_required');
  // A customer-scoped key bills its own customer only: a header naming another one is
  // refused rather than ignored, so the caller learns who would have been billed.
  if (named !== undefined && named !== customerId) {
    throw new ApiError('permission_denied', {
      param: 'X-Service-Customer',
      message: `this customer-scoped key bills its own customer ${JSON.stringify(customerId)}; X-Service-Customer names another (send it only with a project key)`,
    });
  }
  const walletHeader = headerValue(req, 'x-service-wallet');
  if (walletHeader !== undefined && !walletNameSchema.safeParse(walletHeader).success) {
    throw refusedHeader('X-Service-Wallet', 'X-Service-Wallet is not a valid wallet name');
  }
  const traceId = headerValue(req, 'x-service-trace-id');
  if (traceId !== undefined && (traceId.length < 1 || traceId.length > trace_id_chars_max)) {
    throw refusedHeader('X-Service-Trace-Id', `X-Service-Trace-Id must be 1-${trace_id_chars_max} characters`);
  }
  const wallet = walletHeader ?? (auth.variant === 'A' ? 'default' : 'credits');
  const idempotencyKey = headerValue(req, 'idempotency-key');
  if (idempotencyKey !== undefined && (idempotencyKey.length < 1 || idempotencyKey.length > idempotency_key_chars_max)) {
    throw refusedHeader('Idempotency-Key', `Idempotency-Key must be 1-${idempotency_key_chars_max} characters, as transaction ids are`);
  }
  const streamBilling = headerValue(req, 'x-service-stream-billing');
  let inlineBilling = false;
  if (streamBilling !== undefined) {
    const v = streamBilling.trim().toLowerCase();
    if (v !== 'inline' && v !== 'trailers') throw refusedHeader('X-Service-Stream-Billing', 'X-Service-Stream-Billing must be inline (the billing figures also in the final usage event of a stream) or trailers (the default)');
    inlineBilling = v === 'inline';
  }

  return {
    endpoint,
    format,
    body,
    modelId: fields.model,
    stream: fields.stream,
    explicitMax: fields.limit,
    limitField: format === 'openai' && body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens',
    answers: fields.answers,
    customerId,
    wallet,
    traceId: traceId ?? null,
    // Keys are the customer's own (see the claim in billing.ts).
    idempotencyKey,
    anthropicVersion: format === 'anthropic' ? headerValue(req, 'anthropic-version') : undefined,
    inlineBilling,
    rawBytes,
  };
}
