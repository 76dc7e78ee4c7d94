/**
 * Reads of a customer: profile and wallets, balance summary, ledger pages; and PATCH of
 * the profile. A customer-scoped key reads only its own customer.
 */
import type { RequestHandler, Response } from 'express';
import type { Route } from '../http/router.js';
import type { RedisClient } from '../redis/client.js';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { onlyQuery, parseWith } from '../http/validate.js';
import { isLedgerEntry, ledgerEntrySchema, outboxEntryToPublic, type LedgerEntry } from '../ledger/entries.js';
import { describeRoute } from '../openapi/registry.js';
import { extended, listOf, timestamp } from '../schema/zod.js';
import { readOutboxEntries } from '../ledger/outbox.js';
import type { LedgerQueries } from '../ledger/queries.js';
import type { LedgerService } from '../ledger/service.js';
import type { ProjectScope } from '../ledger/requests.js';
import type { CustomerView } from '../ledger/views.js';
import { isActive } from '../ledger/sources.js';
import type { SourceState } from '../redis/codec.js';
import { alertSettingsAnswerShape, alertSettingsOfMeta } from './alerts.js';
import { budgetStateSchema } from '../ledger/budgets.js';
import { customerNotFound } from '../errors/not-found.js';

export const page_size_default = 50;
export const page_size_max = 500;

interface Amounts {
  total: number;
  used: number;
  frozen: number;
  available: number;
}

/**
 * Wallet sums over the sources active now, as the view script made them (dead sources
 * count through counters, so the sums never read them); every source is listed with its
 * own numbers when the view has the listing.
 */
export function walletsOf(view: CustomerView, sources: SourceState[] = view.sources) {
  const wallets: Record<string, Amounts & { sources: Record<string, unknown>[] }> = {};
  const totals: Amounts = { total: 0, used: 0, frozen: 0, available: 0 };
  // Wallets by name: the sums come from a JSON object whose key order means nothing.
  for (const [name, s] of Object.entries(view.wallets).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const available = s.total - s.used - s.frozen;
    wallets[name] = { total: s.total, used: s.used, frozen: s.frozen, available, sources: [] };
    totals.total += s.total;
    totals.used += s.used;
    totals.frozen += s.frozen;
    totals.available += available;
  }
  for (const s of sources) {
    const w = (wallets[s.wallet] ??= { total: 0, used: 0, frozen: 0, available: 0, sources: [] });
    const active = isActive(s, view.nowMs);
    w.sources.push({
      account_id: s.id,
      source: s.label,
      credit_type: s.wallet,
      total: s.total,
      used: s.used,
      frozen: s.frozen,
      available: active ? s.total - s.used - s.frozen : 0,
      active,
      starts_at: s.startsAtMs === null ? null : new Date(s.startsAtMs).toISOString(),
      expires_at: s.expiresAtMs === null ? null : new Date(s.expiresAtMs).toISOString(),
    });
  }
  return { wallets, totals };
}

export const ledgerQuery = z.object({
  limit: z.coerce.number().int().min(1).max(page_size_max).default(page_size_default),
  cursor: z.string().max(200).optional(),
  // In any case: `?type=deduct` filters as `?type=DEDUCT` does.
  type: z
    .string()
    .transform((v) => v.toUpperCase())
    .pipe(z.enum(['DEPOSIT', 'FREEZE', 'CONSUME', 'DEDUCT', 'UNFREEZE', 'GATEWAY', 'EXPIRE']))
    .optional(),
  transaction_id: z.string().min(1).max(256).optional(),
});

// The documented answers of the customer reads (src/openapi/).
const amountsShape = {
  total: z.number().int(),
  used: z.number().int(),
  frozen: z.number().int(),
  available: z.number().int(),
};
export const walletAmountsSchema = z.object(amountsShape).strict().openapi('WalletAmounts', { description: 'Credits summed over the sources active now.' });
export const sourceSchema = z
  .object({
    account_id: z.string(),
    source: z.string().openapi({ description: "The grant's label." }),
    credit_type: z.string(),
    ...amountsShape,
    available: z.number().int().openapi({ description: '0 when the source is not active.' }),
    active: z.boolean(),
    starts_at: timestamp.nullable(),
    expires_at: timestamp.nullable(),
  })
  .strict()
  .openapi('Source');
const walletSchema = z.object({ ...amountsShape, sources: z.array(sourceSchema) }).strict().openapi('Wallet');
export const customerProfileSchema = z
  .object({
    id: z.string(),
    name: z.string().nullable(),
    email: z.string().nullable(),
    metadata: z.record(z.unknown()).openapi({ description: '`{}` when none was given.' }),
    ...alertSettingsAnswerShape,
    created_at: timestamp,
  })
  .strict();
// Inline, not the BudgetState reference: a nullable reference loses its null in the document.
const budgetField = z.object(budgetStateSchema.shape).strict().nullable().openapi({ description: 'The customer budget (docs/API.md, "Budgets"), null when none is set.' });
const keyBudgetsField = z.record(budgetStateSchema).openapi({
  description: 'The budgets of project keys for this customer, by key id (docs/API.md, "Budgets"): what calls made with that key for this customer may spend. `{}` when none is set.',
});
const customerSchema = extended(customerProfileSchema, { wallets: z.record(walletSchema), budget: budgetField, key_budgets: keyBudgetsField }).openapi('Customer');
/** What PATCH /v1/customers/{id} answers: the profile and the budgets. */
export const customerPatchedSchema = extended(customerProfileSchema, { budget: budgetField, key_budgets: keyBudgetsField }).openapi('CustomerPatched');
const balanceSchema = z
  .object({ customer_id: z.string(), ...amountsShape, wallets: z.record(walletAmountsSchema), as_of: timestamp })
  .strict()
  .openapi('Balance');
export const ledgerPageSchema = listOf(ledgerEntrySchema);

const readers = ['project', 'customer'] as const;
describeRoute({
  method: 'GET',
  path: '/v1/customers/:customer_id',
  tag: 'Customers',
  callers: readers,
  summary: 'A customer with its wallets and sources',
  description: 'A customer-scoped key reads only its own customer (another is 404 `customer_not_found`).',
  responses: { 200: { description: 'The customer', schema: customerSchema } },
  errors: ['customer_not_found'],
});
describeRoute({
  method: 'GET',
  path: '/v1/customers/:customer_id/balance',
  tag: 'Customers',
  callers: readers,
  summary: "A customer's balance",
  description: 'Sums over the sources active at `as_of`, per wallet and in all.',
  responses: { 200: { description: 'The balance', schema: balanceSchema } },
  errors: ['customer_not_found'],
});
describeRoute({
  method: 'GET',
  path: '/v1/customers/:customer_id/ledger',
  tag: 'Customers',
  callers: readers,
  summary: "A customer's ledger",
  description: 'Newest first; an acknowledged operation is listed at once, before the workers copy it to PostgreSQL.',
  query: ledgerQuery,
  responses: { 200: { description: 'A page of ledger entries', schema: ledgerPageSchema } },
  errors: ['customer_not_found'],
});

function encodeCursor(seq: number): string {
  return Buffer.from(JSON.stringify({ s: seq })).toString('base64url');
}

function decodeCursor(cursor: string): number {
  try {
    const v = JSON.parse(Buffer.from(cursor, 'base64url').toString()) as { s?: unknown };
    if (typeof v.s === 'number' && Number.isInteger(v.s) && v.s > 0) return v.s;
  } catch {
    // fall through to the error below
  }
  throw new ApiError('invalid_request', { param: 'cursor', message: 'cursor is not one this API returned' });
}

export interface CustomerReads {
  ledger: LedgerService;
  redis: RedisClient;
  queries: LedgerQueries;
}

/**
 * Every source of the customer: those Redis holds, and the archived ones from
 * PostgreSQL (only asked when some were archived).
 */
export async function allSources(deps: CustomerReads, scope: ProjectScope, id: string, view: CustomerView): Promise<SourceState[]> {
  if (!view.archived) return view.sources;
  const archived = await deps.queries.archivedSources(scope.projectId, id, view.sources.map((s) => s.id), view.srcSeq);
  return [...view.sources, ...archived].sort((a, b) => a.seq - b.seq);
}

/**
 * One page of a customer's ledger, newest first, with the customer's own filters: what
 * GET /v1/customers/{id}/ledger and the management API's customer ledger answer.
 */
export async function ledgerPage(deps: CustomerReads, scope: ProjectScope, id: string, q: z.infer<typeof ledgerQuery>) {
  const { ledger, redis, queries } = deps;
  const k = ledger.keys(scope, id);
  if (!(await redis.exists(k.meta))) throw customerNotFound(id);
  const beforeSeq = q.cursor === undefined ? null : decodeCursor(q.cursor);
  const matches = (e: LedgerEntry) =>
    (beforeSeq === null || e.seq < beforeSeq) &&
    (q.type === undefined || e.type === q.type) &&
    (q.transaction_id === undefined || e.transaction_id === q.transaction_id);
  // Outbox first, then PostgreSQL: an entry persisted in between shows up in both
  // (merged by id below) instead of in neither.
  const pending = (await readOutboxEntries(redis, k.outbox))
    .filter(isLedgerEntry)
    .map(outboxEntryToPublic);
  const stored = await queries.findEntriesPage(scope.projectId, id, {
    beforeSeq,
    type: q.type ?? null,
    transactionId: q.transaction_id ?? null,
    limit: q.limit + 1,
  });
  const byId = new Map<string, LedgerEntry>();
  for (const e of [...stored, ...pending.filter(matches)]) byId.set(e.id, e);
  const merged = [...byId.values()].sort((a, b) => b.seq - a.seq);
  const page = merged.slice(0, q.limit);
  const hasMore = merged.length > q.limit;
  return {
    object: 'list' as const,
    data: page.map(({ seq: _seq, ...rest }) => rest),
    has_more: hasMore,
    next_cursor: hasMore ? encodeCursor(page[page.length - 1].seq) : null,
  };
}

/** The profile and balance reads are hot routes (src/http/router.ts); ledger pages are not. */
export function customerRoutes(deps: CustomerReads): Route[] {
  const { ledger } = deps;
  const readers = requireKeyType('project', 'customer');

  /** The customer id of the path, checked against a customer-scoped key's binding. */
  function customerParam(res: Response, id: string): string {
    const { key } = authOf(res);
    if (key.type === 'customer' && key.customer_id !== id) throw customerNotFound(id);
    return id;
  }

  async function viewOr404(res: Response, id: string, listing = false): Promise<CustomerView> {
    const view = await ledger.view(authOf(res).scope, customerParam(res, id), listing);
    if (!view) throw customerNotFound(id);
    return view;
  }

  const readProfile: RequestHandler = async (req, res) => {
    onlyQuery(req);
    const id = String(req.params.customer_id);
    const view = await viewOr404(res, id, true);
    const { wallets } = walletsOf(view, await allSources(deps, authOf(res).scope, id, view));
    res.json({
      id,
      name: view.profile.name,
      email: view.profile.email,
      metadata: view.profile.metadata === null ? {} : JSON.parse(view.profile.metadata),
      ...alertSettingsOfMeta(view.profile.alerts),
      wallets,
      created_at: new Date(Number(view.profile.created_at)).toISOString(),
      budget: view.budget,
      key_budgets: view.keyBudgets,
    });
  };

  const readBalance: RequestHandler = async (req, res) => {
    onlyQuery(req);
    const id = String(req.params.customer_id);
    const view = await viewOr404(res, id);
    const { wallets, totals } = walletsOf(view);
    const summary = Object.fromEntries(
      Object.entries(wallets).map(([name, w]) => [name, { total: w.total, used: w.used, frozen: w.frozen, available: w.available }]),
    );
    res.json({ customer_id: id, ...totals, wallets: summary, as_of: new Date(view.nowMs).toISOString() });
  };

  const readLedger: RequestHandler = async (req, res) => {
    const id = customerParam(res, String(req.params.customer_id));
    onlyQuery(req, Object.keys(ledgerQuery.shape));
    res.json(await ledgerPage(deps, authOf(res).scope, id, parseWith(ledgerQuery, req.query)));
  };

  return [
    { method: 'GET', path: '/v1/customers/:customer_id', handlers: [readers, readProfile], hot: true },
    { method: 'GET', path: '/v1/customers/:customer_id/balance', handlers: [readers, readBalance], hot: true },
    { method: 'GET', path: '/v1/customers/:customer_id/ledger', handlers: [readers, readLedger] },
  ];
}

