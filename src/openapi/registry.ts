/**
 * The API's description: one `describeRoute` per route (or `describeOperation` per
 * management operation, described under /v1/admin and /dashboard/api at once), called
 * at module load next to the route's own schemas. src/openapi/document.ts turns them into
 * the OpenAPI 3.1 document served at /openapi.json; test/openapi/ checks that every route
 * the app registers is described here, and that real answers match what is described.
 *
 * Request schemas are the zod schemas that validate the requests (or those extended with
 * the fields a route reads by hand, such as amounts); response schemas are zod schemas of
 * the modules that make the answers. Nothing here runs per request.
 */
import { z } from 'zod';
import '../schema/zod.js';
import { errorCatalogue, type ErrorCode } from '../errors/catalogue.js';
import type { Method } from '../http/router.js';
import type { Role } from '../members/store.js';


/** Who may call a route: a key type, a dashboard session, or anyone (no authentication). */
export type Caller = 'project' | 'customer' | 'admin' | 'session' | 'public';

/** An error a route may answer: a catalogue code at its own status, or at another one. */
export type DocumentedError = ErrorCode | { code: ErrorCode; status: number };

export interface DocumentedResponse {
  description: string;
  /** The JSON body; omitted for a response whose body is not JSON (see `content`). */
  schema?: z.ZodTypeAny;
  /** Other media types than JSON (a stream, a page), with their schema. */
  content?: Record<string, z.ZodTypeAny>;
  headers?: Record<string, { description: string; schema?: z.ZodTypeAny; required?: boolean }>;
}

export interface RouteDoc {
  method: Method;
  /** The route's path as the router has it: `:name` and `*name` are parameters. */
  path: string;
  summary: string;
  description?: string;
  /** The section of the document (a tag). */
  tag: Tag;
  callers: readonly Caller[];
  /** Path parameters; by default each `:name` of the path is a string. */
  params?: z.AnyZodObject;
  query?: z.AnyZodObject;
  headers?: z.AnyZodObject;
  /** The JSON body; `bodyOptional` when the route accepts none. */
  body?: z.ZodTypeAny;
  bodyOptional?: boolean;
  responses: Record<number, DocumentedResponse>;
  /** A `default` response: what the route relays from elsewhere (the gateway's upstream errors). */
  otherResponses?: { default: { description: string } };
  /**
   * The errors of the route itself; those of its authentication, of JSON bodies and of
   * the backing stores are added (routeErrors).
   */
  errors?: readonly DocumentedError[];
  /** The least role of a management operation (dashboard sessions; an admin key acts as an owner). */
  role?: Role;
  /**
   * The body of the route's own errors: `{"error": ErrorObject}`, or for `anthropic` (the
   * Anthropic wire format, POST /v1/messages) the same with Anthropic's top-level
   * `"type": "error"` and the message beside it (src/http/errors.ts).
   */
  errorEnvelope?: 'anthropic';
}

/** The sections of the document, in this order; a route's `tag` must be one of them. */
export const tags = {
  Ledger: 'The money operations on customer wallets: deposit, deduct, freeze, consume, unfreeze. Amounts and wallets depend on the contract variant.',
  Customers: 'Customers, their wallets, balances and ledgers.',
  Events: 'What happened to money and customers, as events: read them here or receive them by webhook.',
  Webhooks: 'Webhook endpoints, their signed deliveries, the delivery log and replays.',
  Gateway: 'The model gateway (OpenAI and Anthropic wire formats, billed per token), its models, usage records and receipts.',
  Organization: 'The organization, its plan, usage per day, invoices and the job queues (management API).',
  Projects: 'Projects and their contract variant (management API).',
  Keys: 'Project and customer-scoped API keys (management API).',
  Models: "A project's models and their upstreams (management API).",
  Members: "The organization's members and roles (management API).",
  'Dashboard sessions': "Sign-in for the dashboard's API under /dashboard/api.",
  Health: 'Service health for load balancers and operators.',
  Documentation: 'This document.',
} as const;
type Tag = keyof typeof tags;

const routes: RouteDoc[] = [];

/** Describes one route of the API. */
export function describeRoute(doc: RouteDoc): void {
  routes.push(doc);
}

export const admin_prefix = '/v1/admin';
export const dashboard_api_prefix = '/dashboard/api';

/**
 * Describes one management operation (src/admin/operations/) at both of its mounts:
 * `/v1/admin<path>` for an admin key and `/dashboard/api<path>` for a member's session.
 */
export function describeOperation(doc: Omit<RouteDoc, 'callers' | 'role'> & { role: Role }): void {
  routes.push({ ...doc, path: `${admin_prefix}${doc.path}`, callers: ['admin'] });
  routes.push({ ...doc, path: `${dashboard_api_prefix}${doc.path}`, callers: ['session'] });
}

/** Every route described so far (every module that describes one must be loaded). */
export function describedRoutes(): readonly RouteDoc[] {
  return routes;
}

/** The path in OpenAPI's form: `/v1/customers/{customer_id}`. */
export function openApiPath(path: string): string {
  return path.replace(/[:*]([A-Za-z0-9_]+)/g, '{$1}');
}

/** The errors a route answers besides its own: authentication, body parsing, the stores. */
export function routeErrors(doc: RouteDoc): DocumentedError[] {
  const out: DocumentedError[] = ['server_error', 'service_unavailable'];
  // A write whose store stopped answering after it was sent (src/http/errors.ts).
  if (doc.method !== 'GET') out.push('outcome_unknown');
  const keyed = doc.callers.some((c) => c === 'project' || c === 'customer' || c === 'admin');
  if (keyed) out.push('missing_api_key', 'invalid_api_key', 'api_key_revoked', 'api_key_expired', 'permission_denied', 'rate_limited', 'invalid_request');
  if (doc.callers.includes('session')) {
    out.push('not_signed_in', 'permission_denied');
    if (doc.method !== 'GET') out.push('csrf_token_invalid');
  }
  if (doc.body !== undefined) out.push('invalid_json', 'invalid_request', 'payload_too_large');
  if (doc.query !== undefined || doc.params !== undefined || /[:*]/.test(doc.path)) out.push('invalid_request');
  return out;
}

/** The status of a documented error. */
export function statusOf(e: DocumentedError): number {
  return typeof e === 'string' ? errorCatalogue[e].status : e.status;
}

export function codeOf(e: DocumentedError): ErrorCode {
  return typeof e === 'string' ? e : e.code;
}

