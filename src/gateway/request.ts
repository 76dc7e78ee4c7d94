/**
 * The parse of a gateway call, once, at its start: the body against its wire format's
 * schema (src/gateway/wire/), the customer, and the headers that steer billing. Every
 * refusal names the field or header at fault; the body itself goes upstream untouched.
 */
import type { Request } from 'express';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import type { AuthContext } from '../http/auth.js';
import { walletNameSchema } from '../ledger/schemas.js';
import { formatOf, type WireFormat } from './adapters.js';

export type Endpoint = 'chat.completions' | 'messages';

export const trace_id_chars_max = 256;

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
  /** Answers asked of the upstream (OpenAI `n`), each billed. */
  answers: number;
  customerId: string;
  wallet: string;
  traceId: string | null;
  idempotencyKey: string | undefined;
  /** The client's `anthropic-version`, passed on upstream. */
  anthropicVersion: string | undefined;
  /** Bytes of the JSON body: they bound the prompt's tokens for the hold. */
  rawBytes: number;
}

/** The headers read, by the name an error reports them under. */
const headersSchema = z.object({
  'X-Service-Wallet': z.custom<string | undefined>((v) => v === undefined || walletNameSchema.safeParse(v).success, {
    message: 'X-Service-Wallet is not a valid wallet name',
  }),
  'X-Service-Trace-Id': z.custom<string | undefined>((v) => v === undefined || (typeof v === 'string' && v.length >= 1 && v.length <= trace_id_chars_max), {
    message: `X-Service-Trace-Id must be 1-${trace_id_chars_max} characters`,
  }),
});

function headerValue(req: Request, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The first issue of a failed parse as a 400 naming its field. */
function refusal(error: z.ZodError): ApiError {
  const issue = error.issues[0]!;
  const param = issue.path.join('.') || undefined;
  return new ApiError('invalid_request', { param, message: issue.message });
}

export function parseGatewayRequest(req: Request, auth: AuthContext, endpoint: Endpoint, rawBytes: number): GatewayRequest {
  const format: WireFormat = endpoint === 'messages' ? 'anthropic' : 'openai';
  const body = req.body as Record<string, unknown>;
  const parsed = formatOf(format).bodySchema.safeParse(body);
  if (!parsed.success) throw refusal(parsed.error);

  const customerId = auth.key.type === 'customer' ? auth.key.customer_id! : headerValue(req, 'x-service-customer');
  if (!customerId) throw new ApiError('customer_required');
  const headers = headersSchema.safeParse({
    'X-Service-Wallet': headerValue(req, 'x-service-wallet'),
    'X-Service-Trace-Id': headerValue(req, 'x-service-trace-id'),
  });
  if (!headers.success) throw refusal(headers.error);
  const wallet = headers.data['X-Service-Wallet'] ?? (auth.variant === 'A' ? 'default' : 'credits');

  return {
    endpoint,
    format,
    body,
    modelId: parsed.data.model,
    stream: parsed.data.stream,
    explicitMax: parsed.data.limit,
    answers: parsed.data.answers,
    customerId,
    wallet,
    traceId: headers.data['X-Service-Trace-Id'] ?? null,
    // Keys are the customer's own (see the claim in billing.ts).
    idempotencyKey: headerValue(req, 'idempotency-key'),
    anthropicVersion: format === 'anthropic' ? headerValue(req, 'anthropic-version') : undefined,
    rawBytes,
  };
}
