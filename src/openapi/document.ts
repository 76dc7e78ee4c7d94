/**
 * The OpenAPI 3.1 document, generated from the routes described with src/openapi/registry.ts
 * by @asteasolutions/zod-to-openapi. Built once, on the first request of /openapi.json (or
 * by `npm run openapi`), after every module that describes routes is loaded.
 */
import { OpenAPIRegistry, OpenApiGeneratorV31, type RouteConfig } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';
import { errorCatalogue, errorTypeForStatus, type ErrorCode } from '../errors/catalogue.js';
import { codeOf, describedRoutes, openApiPath, routeErrors, statusOf, tags, type Caller, type RouteDoc } from './registry.js';
import { timestamp } from '../schema/zod.js';
import { anthropic_error_types, anthropicTypeOfStatus } from '../errors/anthropic.js';

const intro = `Metered billing for AI products: a model gateway (OpenAI chat completions and Anthropic
messages, billed per token) and a wallet ledger (deposit, deduct, freeze, consume, unfreeze).

## Authentication

Everything under \`/v1\` takes an API key, as \`Authorization: Bearer <key>\` or \`x-api-key: <key>\`.
The key's type decides what it may call: admin keys (\`svc_admin_...\`) the management API under
\`/v1/admin\` only; project keys (\`svc_live_...\`) customers, billing, gateway, usage, receipts and
models; customer-scoped keys (\`svc_customer_...\`) the reads of their own customer, models and the
gateway. The dashboard's API under \`/dashboard/api\` is the management API again, for a member
signed in with \`POST /dashboard/api/session\`: the session cookie, and the \`X-CSRF-Token\` header on
every change, within the member's role.

## Contract variants A and B

Each project has a \`contract\` setting, \`B\` (default) or \`A\` (see the projects of the management API);
a request may override it with the header \`X-Service-Api-Variant: A\` or \`B\`. Only amounts and
wallets differ:

- **Variant B**: \`amount\` is a positive integer of credits (1 USD = 1,000,000 credits); unit-suffixed
  fields are 400 \`unsupported_amount_field\`. The default wallet is \`credits\`; \`wallet\` selects one
  (\`credit_type\` is its deprecated alias). Consume takes an optional \`amount\`.
- **Variant A**: exactly one of \`amount_usd\`, \`amount_cents\`, \`amount_credits\` (a bare \`amount\`
  is legacy cents); consume takes \`actual_amount_usd|cents|credits\` (or \`actual_amount\`, cents).
  The default wallet is \`default\`; deposits select it with \`credit_type\`, deduct and freeze filter
  with \`credit_types\` (an array).

Request bodies of the money operations are described as the union of both variants; answers are the
same in both (amounts in integer credits).

## Errors

Every error is \`{"error": {"message", "type", "code", "param"?}}\`; \`type\` follows the status
(400 \`bad_request\`, 401 and 403 \`auth_error\`, 404 \`not_found\`, 409 \`conflict\`, 429
\`too_many_requests\`, 5xx \`server_error\`). \`code\` is one of the catalogue (the \`ErrorCode\`
schema); each operation lists the codes it may answer at each status. Some errors add fields
(the \`ErrorObject\` schema): \`errors\`, every invalid field of a request at once, and
\`details\`, the numbers of a refusal (\`ErrorDetails\`). On \`POST /v1/messages\` the service's
errors also carry Anthropic's top-level \`"type": "error"\` and \`message\`, and \`error.type\` is Anthropic's
for the status (\`invalid_request_error\`, \`billing_error\`, \`not_found_error\`, ...).`;

const securitySchemes: Record<Exclude<Caller, 'public'>, object> = {
  project: { type: 'http', scheme: 'bearer', description: 'A project key (`svc_live_...`); also accepted as `x-api-key`.' },
  customer: { type: 'http', scheme: 'bearer', description: 'A customer-scoped key (`svc_customer_...`): reads of its own customer, models, gateway.' },
  admin: { type: 'http', scheme: 'bearer', description: 'An organization admin key (`svc_admin_...`), acting as an owner; only `/v1/admin`.' },
  session: { type: 'apiKey', in: 'cookie', name: 'svc_session', description: 'A dashboard session, from `POST /dashboard/api/session`.' },
};
const scheme_names: Record<Exclude<Caller, 'public'>, string> = { project: 'projectKey', customer: 'customerKey', admin: 'adminKey', session: 'session' };

const variantHeader = z
  .enum(['A', 'B'])
  .optional()
  .openapi({ param: { description: "The contract variant of this request, overriding the project's `contract` setting (`A` or `B`; another value is 400 `invalid_request`)." } });

/** The catalogue as a schema: every code, with its status and default message. */
const errorCodeSchema = z.enum(Object.keys(errorCatalogue) as [ErrorCode, ...ErrorCode[]]).openapi('ErrorCode', {
  description: [
    'Every error code of the service, with its default HTTP status and message:',
    '',
    '| code | status | message |',
    '|---|---|---|',
    ...Object.entries(errorCatalogue).map(([code, e]) => `| \`${code}\` | ${e.status} | ${e.message.replace(/\|/g, '\\|')} |`),
  ].join('\n'),
});

/** One invalid field of a request (`error.errors`). */
const fieldErrorSchema = z
  .object({
    param: z.string().nullable().openapi({ description: 'The field, query parameter or header; null for a problem of the whole body, and for the gateway\'s `customer_required`.' }),
    code: errorCodeSchema,
    message: z.string(),
  })
  .strict()
  .openapi('FieldError');

const credits = z.number().int();
const creditsOrNull = z.number().int().nullable();
const byWallet = z.record(z.number().int()).openapi({ description: 'Every wallet of the customer with credits available now: wallet -> credits.' });
const noSources = z.array(z.string()).openapi({ description: 'The wallets looked at that never had a source (nothing was ever deposited to them).' });

/** The numbers of an error (`error.details`): one shape per kind of error. */
const errorDetailsSchema = z
  .union([
    z
      .object({
        wallets: z.array(z.string()).nullable().openapi({ description: "The request's wallet filter (`wallet`, `credit_types`); null when it drew from every wallet." }),
        required_credits: credits,
        available_credits: credits.openapi({ description: 'What those wallets (or all) have available now.' }),
        available_credits_by_wallet: byWallet,
        wallets_without_sources: noSources,
      })
      .strict()
      .openapi('DrawShortfall', { description: '`insufficient_balance`, `insufficient_balance_in_selected_credit_types` of a deduct or freeze.' }),
    z
      .object({
        wallet: z.string(),
        required_credits: creditsOrNull.openapi({ description: 'The hold the call needed: input bound plus output bound.' }),
        available_credits: credits.openapi({ description: "The wallet's credits available now." }),
        input_bound_credits: creditsOrNull.openapi({ description: "The body's bytes at the dearest input-side price." }),
        output_bound_credits: creditsOrNull.openapi({ description: '`output_tokens` at the output price, times `n`.' }),
        output_tokens: creditsOrNull.openapi({ description: "The client's output limit, or 1 when it set none." }),
        max_tokens_that_fit: creditsOrNull.openapi({ description: 'The largest client limit the wallet could hold now; null when lowering the limit would not help.' }),
        available_credits_by_wallet: byWallet,
        wallets_without_sources: noSources,
      })
      .strict()
      .openapi('HoldShortfall', { description: '`insufficient_balance` (402) of a gateway call.' }),
    z
      .object({ frozen_credits: credits, requested_credits: creditsOrNull })
      .strict()
      .openapi('FrozenAmountExceeded', { description: '`actual_amount_exceeds_frozen_amount`.' }),
    z
      .object({
        settled_by: z.enum(['ttl_release', 'ttl_consume']),
        settled_at: timestamp.nullable().openapi({ description: "When the TTL settled the freeze (its ledger entry's `created_at`)." }),
        auto_settle_at: timestamp.nullable().openapi({ description: "When it was due (the freeze's `auto_settle_at`)." }),
      })
      .strict()
      .openapi('SettledByTtl', { description: '`no_consumable_freeze_records`, `freeze_records_already_consumed`, `no_unfreezable_records` of a freeze its TTL settled.' }),
    z
      .object({ limit_bytes: z.number().int(), length_bytes: z.number().int().nullable().openapi({ description: "The body's declared length; null for a chunked body." }) })
      .strict()
      .openapi('BodyTooLarge', { description: '`payload_too_large`.' }),
  ])
  .openapi('ErrorDetails', { description: "An error's numbers, in integer credits (null where one does not apply): one shape per kind of error." });

const keyTypes = z.enum(['admin', 'project', 'customer']);

/** The error object of every error answer: `{"error": ErrorObject}`. */
const errorObjectSchema = z
  .object({
    message: z.string().openapi({ description: 'For people: what was wrong and what to change. Programs branch on `code`.' }),
    type: z
      .enum(['bad_request', 'auth_error', 'not_found', 'conflict', 'too_many_requests', 'server_error', ...anthropic_error_types])
      .openapi({ description: "Follows the status: the service's types, or in Anthropic's envelope (POST /v1/messages) Anthropic's." }),
    code: errorCodeSchema,
    param: z.string().optional().openapi({ description: 'The request field, header or parameter at fault.' }),
    errors: z.array(fieldErrorSchema).optional().openapi({
      description:
        'Validation errors: every invalid field of the body or query string (on the gateway, and its headers), in the order the endpoint reads them (unknown fields first); the first is also `code`, `param` and `message`.',
    }),
    details: errorDetailsSchema.optional(),
    transaction_id: z.string().optional().openapi({ description: '`idempotency_key_reused`: the transaction of the first call.' }),
    customer_id: z.string().optional().openapi({ description: '`customer_not_found`: the customer id looked for.' }),
    fields: z
      .array(z.object({ field: z.string(), first: z.unknown().optional(), this: z.unknown().optional() }).strict())
      .optional()
      .openapi({
        description:
          '`transaction_conflict` of a retry: each request field that differs from the first request, with both values (amounts in credits; absent for a value too long to keep), or `customer_id` for an identifier of another customer.',
      }),
    suggested_model: z.string().nullable().optional().openapi({
      description: "`model_not_found` of a gateway call: the project's active model nearest in spelling to the one asked for, null when none is near.",
    }),
    limit: z.number().int().optional().openapi({ description: '`plan_limit_reached`: the plan limit.' }),
    role_required: z.string().optional().openapi({ description: '`permission_denied` of a role: the least role needed.' }),
    role: z.string().optional().openapi({ description: "`permission_denied` of a role: the caller's role." }),
    key_types_allowed: z.array(keyTypes).optional().openapi({ description: '`permission_denied` of a key type: the key types the endpoint takes.' }),
    key_type: keyTypes.optional().openapi({ description: '`permission_denied` of a key type: the type of the key sent.' }),
  })
  .strict()
  .openapi('ErrorObject');

/** The ErrorObject of an error answer at `status` with one of `codes`, its `type` the service's for the status (or Anthropic's). */
function narrowedError(status: number, codes: ErrorCode[], type = errorTypeForStatus(status) as string) {
  return {
    allOf: [
      { $ref: '#/components/schemas/ErrorObject' },
      { type: 'object' as const, properties: { type: { const: type }, code: { enum: codes } } },
    ],
  };
}

/** An error answer at `status` with one of `codes`: `{"error": ErrorObject}`, narrowed. */
function errorSchema(status: number, codes: ErrorCode[]) {
  return {
    type: 'object' as const,
    properties: { error: narrowedError(status, codes) },
    required: ['error'],
    additionalProperties: false,
  };
}

/** The same in Anthropic's envelope (POST /v1/messages): `{"type": "error", "error": ErrorObject, "message"}`. */
function anthropicErrorSchema(status: number, codes: ErrorCode[]) {
  return {
    type: 'object' as const,
    description: "Anthropic's error envelope around the service's error object: `type` is always `error`, `error.type` Anthropic's for the status, `message` the error's message.",
    properties: { type: { const: 'error' }, error: narrowedError(status, codes, anthropicTypeOfStatus(status)), message: { type: 'string' as const } },
    required: ['type', 'error', 'message'],
    additionalProperties: false,
  };
}

const statusText: Record<number, string> = {
  400: 'Bad request',
  401: 'Not authenticated',
  402: 'Payment required',
  403: 'Forbidden',
  404: 'Not found',
  409: 'Conflict',
  413: 'Body too large',
  429: 'Too many requests',
  500: 'Server error',
  502: 'Upstream error',
  503: 'A backing service is unavailable',
  504: 'Upstream timeout',
};

function routeConfig(doc: RouteDoc): RouteConfig {
  const path = openApiPath(doc.path);
  const paramNames = [...doc.path.matchAll(/[:*]([A-Za-z0-9_]+)/g)].map((m) => m[1]);
  const params = doc.params ?? (paramNames.length > 0 ? z.object(Object.fromEntries(paramNames.map((n) => [n, z.string()]))) : undefined);
  const keyed = doc.callers.some((c) => c === 'project' || c === 'customer');
  const headers = keyed ? (doc.headers ?? z.object({})).extend({ 'X-Service-Api-Variant': variantHeader }) : doc.headers;

  const responses: RouteConfig['responses'] = {};
  for (const [status, r] of Object.entries(doc.responses)) {
    const content: Record<string, { schema: z.ZodTypeAny }> = {};
    if (r.schema) content['application/json'] = { schema: r.schema };
    for (const [type, schema] of Object.entries(r.content ?? {})) content[type] = { schema };
    const headerObjects = r.headers
      ? Object.fromEntries(
          Object.entries(r.headers).map(([name, h]) => [name, { description: h.description, required: h.required ?? false, schema: { type: 'string' as const } }]),
        )
      : undefined;
    responses[status] = { description: r.description, ...(Object.keys(content).length > 0 ? { content } : {}), ...(headerObjects ? { headers: headerObjects } : {}) };
  }
  if (doc.otherResponses) responses.default = { description: doc.otherResponses.default.description };
  const byStatus = new Map<number, Set<ErrorCode>>();
  // The errors every route of its kind answers, unless the route answers that status with a body of its own (GET /health's 503).
  const automatic = routeErrors(doc).filter((e) => doc.responses[statusOf(e)] === undefined);
  for (const e of [...(doc.errors ?? []), ...automatic]) {
    const s = statusOf(e);
    if (!byStatus.has(s)) byStatus.set(s, new Set());
    byStatus.get(s)!.add(codeOf(e));
  }
  for (const [status, codes] of [...byStatus.entries()].sort(([a], [b]) => a - b)) {
    if (responses[status] !== undefined) throw new Error(`${doc.method} ${doc.path}: status ${status} is both a response and an error`);
    const list = [...codes].sort();
    responses[status] = {
      description: `${statusText[status] ?? 'Error'}: ${list.map((c) => `\`${c}\``).join(', ')}`,
      content: { 'application/json': { schema: doc.errorEnvelope === 'anthropic' ? anthropicErrorSchema(status, list) : errorSchema(status, list) } },
    };
  }

  const security = doc.callers.includes('public')
    ? []
    : doc.callers.map((c) => ({ [scheme_names[c as Exclude<Caller, 'public'>]]: [] as string[] }));
  const roleNote =
    doc.role === undefined
      ? ''
      : doc.callers.includes('session')
        ? `\n\nLeast role: \`${doc.role}\`. The same operation as \`${doc.method} /v1/admin${doc.path.slice('/dashboard/api'.length)}\`, for a member's session${doc.method === 'GET' ? '' : ' with its `X-CSRF-Token`'}.`
        : `\n\nAn admin key acts as an owner (a dashboard member needs at least \`${doc.role}\`).`;
  return {
    method: doc.method.toLowerCase() as RouteConfig['method'],
    path,
    operationId: operationId(doc),
    summary: doc.summary,
    description: `${doc.description ?? ''}${roleNote}`.trim() || undefined,
    tags: [doc.tag],
    security,
    ...(doc.role !== undefined ? { 'x-role': doc.role } : {}),
    request: {
      ...(params ? { params } : {}),
      ...(doc.query ? { query: doc.query } : {}),
      ...(headers ? { headers } : {}),
      ...(doc.body ? { body: { required: !doc.bodyOptional, content: { 'application/json': { schema: doc.body } } } } : {}),
    },
    responses,
  };
}

/** A stable, unique id: the method and the path's words (`getV1CustomersCustomerIdBalance`). */
function operationId(doc: RouteDoc): string {
  const words = doc.path.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return [doc.method.toLowerCase(), ...words.map((w) => w[0]!.toUpperCase() + w.slice(1))].join('');
}

export interface DocumentOptions {
  /** The service's own address, listed as the server. */
  serverUrl?: string;
}

/** The OpenAPI 3.1 document of every route described so far. */
export function generateDocument(opts: DocumentOptions = {}): Record<string, unknown> {
  const registry = new OpenAPIRegistry();
  registry.register('ErrorCode', errorCodeSchema);
  registry.register('ErrorObject', errorObjectSchema);
  for (const [caller, scheme] of Object.entries(securitySchemes)) {
    registry.registerComponent('securitySchemes', scheme_names[caller as Exclude<Caller, 'public'>], scheme as never);
  }
  const seen = new Set<string>();
  for (const doc of describedRoutes()) {
    const key = `${doc.method} ${doc.path}`;
    if (seen.has(key)) throw new Error(`${key} is described twice`);
    seen.add(key);
    registry.registerPath(routeConfig(doc));
  }
  const generator = new OpenApiGeneratorV31(registry.definitions);
  const document = generator.generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'svc-billing API',
      version: '0.1.0',
      description: intro,
      license: { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' },
    },
    servers: [{ url: opts.serverUrl ?? '/', description: 'This service' }],
    tags: Object.entries(tags).map(([name, description]) => ({ name, description })),
  }) as unknown as Record<string, unknown>;
  allowNullInNullableEnums(document);
  liftParameterDescriptions(document);
  return document;
}

/** A parameter described on its schema (`.openapi({description})`) gets the description itself, where viewers show it. */
function liftParameterDescriptions(document: Record<string, unknown>): void {
  for (const item of Object.values(document.paths as Record<string, Record<string, { parameters?: { description?: string; schema?: { description?: string } }[] }>>)) {
    for (const operation of Object.values(item)) {
      for (const p of operation.parameters ?? []) {
        if (p.description === undefined && p.schema?.description !== undefined) p.description = p.schema.description;
      }
    }
  }
}

/**
 * zod-to-openapi writes a nullable enum as `{type: [..., "null"], enum: [...]}` without null
 * among the values, which a validator then refuses: null is added to the values.
 */
function allowNullInNullableEnums(node: unknown): void {
  if (Array.isArray(node)) {
    for (const item of node) allowNullInNullableEnums(item);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  const o = node as Record<string, unknown>;
  if (Array.isArray(o.enum) && Array.isArray(o.type) && o.type.includes('null') && !o.enum.includes(null)) o.enum = [...o.enum, null];
  for (const value of Object.values(o)) allowNullInNullableEnums(value);
}
