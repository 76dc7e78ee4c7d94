/**
 * POST /v1/chat/completions, /v1/responses, /v1/messages and /v1/embeddings (billed), and
 * /v1/messages/count_tokens (not billed): 8 MiB bodies, for project and customer keys.
 */
import type { Request, Response } from 'express';
import { authOf, requireKeyType } from '../http/auth.js';
import type { Route } from '../http/router.js';
import { bodyBytes, jsonBody, measuredJson } from '../http/validate.js';
import type { Endpoint, GatewayService } from './service.js';
import { z } from 'zod';
import { describeRoute, type DocumentedResponse } from '../openapi/registry.js';

export const body_bytes_max_gateway = 8 * 1024 * 1024;

// The documented requests and answers (src/openapi/). The gateway validates no body with
// zod (its hot path parses nothing it does not need): these schemas describe what it reads;
// every other field is relayed to the provider as sent.
const gatewayHeaders = z.object({
  'X-Service-Customer': z.string().optional().openapi({ description: 'The customer billed (project keys; a customer-scoped key bills its own).' }),
  'X-Service-Wallet': z.string().optional().openapi({ description: 'The wallet billed (default: the variant\'s, `credits` in B, `default` in A).' }),
  'X-Service-Trace-Id': z.string().optional().openapi({ description: 'Echoed, and kept on the usage record.' }),
  'Idempotency-Key': z.string().optional().openapi({ description: "The customer's key for this call: a later call with it is 409 `idempotency_key_reused`." }),
  'X-Service-Stream-Billing': z
    .string()
    .optional()
    .openapi({ description: '`trailers` (default) or `inline`: a stream\'s billing figures also go in its final usage event, as `service_billing`.' }),
  'X-Service-Hold': z
    .string()
    .optional()
    .openapi({ description: '`upfront` (default) or `incremental` (streamed calls only): hold one slice of output at a time, the stream ended cleanly when the wallet cannot pay for more (docs/API.md, "Incremental holds").' }),
});
const message = z.object({ role: z.string(), content: z.unknown() }).passthrough();
const chatBody = z
  .object({
    model: z.string().openapi({ description: 'A model id of the project (`GET /v1/models`) whose provider is `openai`.' }),
    messages: z.array(message),
    stream: z.boolean().optional(),
    max_tokens: z.number().int().positive().optional(),
    max_completion_tokens: z.number().int().positive().optional(),
    n: z.number().int().min(1).max(128).optional(),
  })
  .passthrough()
  .openapi('ChatCompletionRequest', { description: 'The OpenAI chat-completions request; other fields are relayed as sent.' });
const messagesBody = z
  .object({
    model: z.string().openapi({ description: 'A model id of the project whose provider is `anthropic`.' }),
    messages: z.array(message),
    max_tokens: z.number().int().positive().optional(),
    stream: z.boolean().optional(),
  })
  .passthrough()
  .openapi('MessagesRequest', { description: 'The Anthropic messages request; other fields are relayed as sent.' });
const responsesBody = z
  .object({
    model: z.string().openapi({ description: 'A model id of the project: natively one whose `wire_format` is `responses`, any other translated (docs/API.md, "Any model through any format").' }),
    input: z.union([z.string(), z.array(z.object({}).passthrough())]).optional().openapi({ description: 'A string (one user message) or an array of input items; its `input_image` and `input_file` parts add to the hold.' }),
    instructions: z.string().nullable().optional(),
    stream: z.boolean().optional(),
    max_output_tokens: z.number().int().positive().optional().openapi({ description: "The output limit; the gateway sends the hold's (`X-Service-Max-Tokens`)." }),
    background: z.literal(false).optional().openapi({ description: '`true` is refused (400): a background response has no usage to bill when it is answered.' }),
    store: z.boolean().optional().openapi({ description: 'Relayed as sent: the upstream stores the response; the service keeps only the usage record.' }),
    previous_response_id: z.string().nullable().optional().openapi({ description: 'Relayed as sent: a response the upstream stored.' }),
  })
  .passthrough()
  .openapi('ResponsesRequest', { description: 'The OpenAI Responses API request; other fields (`tools`, `reasoning`, `text`, ...) are relayed as sent.' });
const responsesAnswer = z
  .object({ id: z.string(), object: z.literal('response'), model: z.string(), status: z.string(), output: z.array(z.object({}).passthrough()) })
  .passthrough()
  .openapi('Response', { description: "The upstream's answer, unchanged." });
const chatAnswer = z
  .object({ id: z.string(), object: z.literal('chat.completion'), model: z.string(), choices: z.array(z.object({}).passthrough()) })
  .passthrough()
  .openapi('ChatCompletion', { description: "The upstream's answer, unchanged." });
const messagesAnswer = z
  .object({ id: z.string(), type: z.literal('message'), role: z.literal('assistant'), model: z.string(), content: z.array(z.object({}).passthrough()) })
  .passthrough()
  .openapi('Message', { description: "The upstream's answer, unchanged." });
const billingHeaders: NonNullable<DocumentedResponse['headers']> = {
  'X-Service-Transaction-Id': { description: "The call's transaction (its receipt: `GET /v1/billing/receipts/{transaction_id}`).", required: true },
  'X-Service-Trace-Id': { description: 'The request\'s trace id, echoed.' },
  'X-Service-Reserved-Credits': { description: 'The hold made before relaying.' },
  'X-Service-Max-Tokens': { description: 'The output limit sent upstream.' },
  'X-Service-Cost-Credits': { description: 'What the call cost (a trailer when streamed).' },
  'X-Service-Cost-Cents': { description: 'The same in cents, an exact decimal string.' },
  'X-Service-Cost-Usd': { description: 'The same in USD, an exact decimal string.' },
  'X-Service-Balance-Credits': { description: "The billed wallet's available credits after settlement." },
  'X-Service-Balance-Usd': { description: 'The same in USD.' },
  'X-Service-Budget-Remaining-Credits': { description: 'Under a spending budget: what its tightest budget has left after the call (a trailer when streamed; docs/API.md, "Budgets").' },
  'X-Service-Max-Tokens-Limited-By': { description: '`budget` when a spending budget, not the wallet, lowered the output limit sent upstream.' },
  'X-Service-Hold': { description: '`incremental` when the hold grows slice by slice.' },
  'X-Service-Hold-Exhausted': { description: 'Trailer of an incremental stream: `true` when the wallet (or a budget) ended it, else `false`.' },
};
const gatewayErrors = [
  'customer_required',
  'model_not_found',
  'model_not_allowed',
  { code: 'byok_key_required', status: 402 },
  { code: 'insufficient_balance', status: 402 },
  { code: 'budget_exceeded', status: 402 },
  'idempotency_key_reused',
  'customer_not_found',
  'usage_limit_exceeded',
  'upstream_error',
  'upstream_timeout',
  // A settlement that finds a source of its hold missing (src/gateway/billing.ts).
  'billing_account_not_found',
] as const;
const embeddingsBody = z
  .object({
    model: z.string().openapi({ description: 'A model id of the project whose provider is `openai`.' }),
    input: z
      .union([z.string(), z.array(z.string()), z.array(z.number().int()), z.array(z.array(z.number().int()))])
      .openapi({ description: 'A string, an array of strings, a token array or an array of token arrays; none empty.' }),
    encoding_format: z.enum(['float', 'base64']).optional(),
    dimensions: z.number().int().positive().optional(),
  })
  .passthrough()
  .openapi('EmbeddingsRequest', { description: 'The OpenAI embeddings request; other fields are relayed as sent.' });
const embeddingsAnswer = z
  .object({
    object: z.literal('list'),
    data: z.array(z.object({ object: z.literal('embedding'), index: z.number().int(), embedding: z.union([z.array(z.number()), z.string()]) }).passthrough()),
    model: z.string(),
    usage: z.object({ prompt_tokens: z.number().int(), total_tokens: z.number().int() }).passthrough(),
  })
  .passthrough()
  .openapi('Embeddings', { description: "The upstream's answer, unchanged: each embedding an array of floats, or base64 of little-endian float32 with `encoding_format: base64`." });
const countTokensBody = z
  .object({
    model: z.string().openapi({ description: 'A model id of the project whose provider is `anthropic`.' }),
    messages: z.array(message),
  })
  .passthrough()
  .openapi('CountTokensRequest', { description: 'The Anthropic token-count request; other fields (`system`, `tools`, ...) are relayed as sent.' });
const countTokensAnswer = z
  .object({ input_tokens: z.number().int() })
  .passthrough()
  .openapi('TokenCount', { description: "The upstream's answer, unchanged." });
const streamBody = z.string().openapi({ description: 'Server-sent events as the upstream sent them; cost and balance follow as HTTP trailers.' });
const upstreamError = { description: "An upstream HTTP error, relayed with the provider's status and body; nothing is charged." };

describeRoute({
  method: 'POST',
  path: '/v1/chat/completions',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: 'OpenAI chat completions, billed per token',
  description:
    'Relays the call to the model\'s upstream (OpenAI format), streaming or not, and bills the customer: a hold before relaying, the exact cost after. Bodies up to 8 MiB.',
  headers: gatewayHeaders,
  body: chatBody,
  responses: {
    200: { description: 'The upstream answer', schema: chatAnswer, content: { 'text/event-stream': streamBody }, headers: billingHeaders },
  },
  otherResponses: { default: upstreamError },
  errors: gatewayErrors,
});
describeRoute({
  method: 'POST',
  path: '/v1/responses',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: 'OpenAI Responses API, billed per token',
  description:
    "As `POST /v1/chat/completions`, in the OpenAI Responses format: natively for models whose `wire_format` is `responses`, translated for the others. Streamed, its events are relayed as they came; the usage of `response.completed` (or `response.incomplete`) is billed. `GET /v1/responses/{id}` and the other stored-response routes are not served.",
  headers: gatewayHeaders,
  body: responsesBody,
  responses: {
    200: { description: 'The upstream answer', schema: responsesAnswer, content: { 'text/event-stream': streamBody }, headers: billingHeaders },
  },
  otherResponses: { default: upstreamError },
  errors: gatewayErrors,
});
describeRoute({
  method: 'POST',
  path: '/v1/messages',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: 'Anthropic messages, billed per token',
  description:
    "As `POST /v1/chat/completions`, in the Anthropic messages format. The service's own errors come in a body Anthropic clients read too: the `error` object of every route, with Anthropic's top-level `\"type\": \"error\"` and the message at the top level as well (where `@anthropic-ai/sdk` reads an error's message from). An upstream's errors are relayed as they are.",
  headers: gatewayHeaders,
  body: messagesBody,
  responses: {
    200: { description: 'The upstream answer', schema: messagesAnswer, content: { 'text/event-stream': streamBody }, headers: billingHeaders },
  },
  otherResponses: { default: upstreamError },
  errors: gatewayErrors,
  errorEnvelope: 'anthropic',
});

const embeddingsHeaders = Object.fromEntries(Object.entries(billingHeaders).filter(([name]) => !name.startsWith('X-Service-Max-Tokens') && !name.startsWith('X-Service-Hold')));
describeRoute({
  method: 'POST',
  path: '/v1/embeddings',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: 'OpenAI embeddings, billed per input token',
  description:
    "Relays the call to the model's upstream (OpenAI format: an Anthropic-format model answers 400 naming `model`) and bills the customer per input token at the model's input price: a hold of the input's bound (the body's bytes) before relaying, `usage.prompt_tokens` x the input price after, rounded up once. Bodies up to 8 MiB.",
  headers: gatewayHeaders.omit({ 'X-Service-Stream-Billing': true, 'X-Service-Hold': true }),
  body: embeddingsBody,
  responses: { 200: { description: 'The upstream answer', schema: embeddingsAnswer, headers: embeddingsHeaders } },
  otherResponses: { default: upstreamError },
  errors: gatewayErrors,
});
describeRoute({
  method: 'POST',
  path: '/v1/messages/count_tokens',
  tag: 'Gateway',
  callers: ['project', 'customer'],
  summary: 'Anthropic token count, not billed',
  description:
    "Relays the request to the model's Anthropic-format upstream (`/messages/count_tokens`) and answers what it answered, status and body as they are. Nothing is billed or counted (no hold, no ledger entry, no plan operation); the key, model and customer rules are those of `POST /v1/messages` (the customer must exist). Errors come in the Anthropic-readable body of `POST /v1/messages`.",
  headers: gatewayHeaders.pick({ 'X-Service-Customer': true }),
  body: countTokensBody,
  responses: { 200: { description: 'The upstream answer', schema: countTokensAnswer } },
  otherResponses: { default: { description: "An upstream HTTP error, relayed with the provider's status and body." } },
  errors: ['customer_required', 'model_not_found', 'model_not_allowed', { code: 'byok_key_required', status: 402 }, 'customer_not_found', 'upstream_error', 'upstream_timeout'],
  errorEnvelope: 'anthropic',
});

/** The paths of the gateway's routes: their bodies are parsed by the routes themselves (8 MiB). */
export const gateway_paths = ['/v1/chat/completions', '/v1/responses', '/v1/messages', '/v1/embeddings', '/v1/messages/count_tokens'] as const;

/** All are hot routes (src/http/router.ts). */
export function gatewayRoutes(gateway: GatewayService): Route[] {
  // The body's bytes bound the prompt's tokens for the hold. The parser skips a body that
  // the app's parser already read, and that one measures too: the hold always comes from
  // the bytes of the body the gateway is handed.
  const parse = measuredJson(body_bytes_max_gateway);
  const callers = requireKeyType('project', 'customer');
  const route = (path: string, endpoint: Endpoint): Route => ({
    method: 'POST',
    path,
    hot: true,
    handlers: [
      parse,
      callers,
      async (req: Request, res: Response) => {
        // Counted until settled or released, for a graceful shutdown (src/shutdown.ts).
        gateway.inFlight.begin();
        try {
          jsonBody(req);
          await gateway.handle(req, res, authOf(res), endpoint, bodyBytes(req));
        } finally {
          gateway.inFlight.end();
        }
      },
    ],
  });
  const countTokens: Route = {
    method: 'POST',
    path: '/v1/messages/count_tokens',
    hot: true,
    handlers: [
      parse,
      callers,
      async (req: Request, res: Response) => {
        jsonBody(req);
        await gateway.countTokens(req, res, authOf(res));
      },
    ],
  };
  return [route('/v1/chat/completions', 'chat.completions'), route('/v1/responses', 'responses'), route('/v1/messages', 'messages'), route('/v1/embeddings', 'embeddings'), countTokens];
}
