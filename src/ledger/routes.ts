/** POST /v1/customers/deposit and /v1/billing/{deduct,freeze,consume,unfreeze}. */
import type { Request, RequestHandler, Response } from 'express';
import type { Route } from '../http/router.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { everyFieldError } from '../errors/fields.js';
import { jsonBody, onlyFields, onlyQuery, parseWith } from '../http/validate.js';
import { ApiError } from '../errors/catalogue.js';
import { sendJson } from '../http/respond.js';
import { keyBudgetArg } from './budgets.js';
import { describeRoute, type DocumentedError, type RouteDoc } from '../openapi/registry.js';
import {
  consumeBody,
  consumeResultSchema,
  deductBody,
  deductResultSchema,
  depositBody,
  freezeBody,
  freezeResultSchema,
  publicDepositResultSchema,
  unfreezeBody,
  unfreezeResultSchema,
  depositSchema,
  drawSchema,
  ledgerFields,
  readDepositWallet,
  readTtl,
  readWalletFilter,
  readWindow,
  settleSchema,
  type LedgerOp,
} from './schemas.js';
import { amountFields, readAmount, type Variant } from './amounts.js';
import type { LedgerService } from './service.js';
import type { DepositInput, DrawInput, FreezeInput } from './requests.js';
import type { OpResult } from './results.js';

function send(res: Response, result: OpResult, extra: Record<string, unknown> = {}): void {
  sendJson(res, 200, { ...result.body, ...extra, is_idempotent_replay: result.replay });
}

/**
 * The JSON body of a ledger operation, refused when the request carries a query parameter
 * (none of these endpoints reads one) or a body field the operation does not read in this
 * variant.
 */
function operationBody(req: Request, op: LedgerOp, variant: Variant): Record<string, unknown> {
  onlyQuery(req);
  const body = jsonBody(req);
  onlyKnownFields(op, { body, variant });
  return body;
}

function onlyKnownFields(op: LedgerOp, { body, variant }: Checked): void {
  const { reads, allowed } = ledgerFields(op, variant);
  onlyFields(body, allowed, { suggest: reads });
}

interface Checked {
  body: Record<string, unknown>;
  variant: Variant;
}

/**
 * Variant B's wallet names, checked apart from the filter: a filter refused for carrying
 * credit_types stops before it reads them.
 */
const walletNames = (c: Checked) => (c.variant === 'B' ? readDepositWallet(c.body, 'B') : null);

/**
 * Every check of an operation's body, each on its own. The routes read a body step by
 * step and stop at the first invalid field; after that failure only, these run, so that
 * the answer lists every invalid field (error.errors) at no cost to a valid request.
 */
const checksOf: Record<LedgerOp, readonly ((c: Checked) => unknown)[]> = {
  deposit: [
    (c) => onlyKnownFields('deposit', c), (c) => parseWith(depositSchema, c.body), (c) => readAmount(c.body, c.variant),
    (c) => readDepositWallet(c.body, c.variant), (c) => readWindow(c.body),
  ],
  deduct: [
    (c) => onlyKnownFields('deduct', c), (c) => parseWith(drawSchema, c.body), (c) => readAmount(c.body, c.variant),
    (c) => readWalletFilter(c.body, c.variant), walletNames,
  ],
  freeze: [
    (c) => onlyKnownFields('freeze', c), (c) => parseWith(drawSchema, c.body), (c) => readAmount(c.body, c.variant),
    (c) => readWalletFilter(c.body, c.variant), walletNames, (c) => readTtl(c.body, parseWith),
  ],
  consume: [(c) => onlyKnownFields('consume', c), (c) => parseWith(settleSchema, c.body), (c) => readAmount(c.body, c.variant, { consume: true })],
  unfreeze: [(c) => onlyKnownFields('unfreeze', c), (c) => parseWith(settleSchema, c.body)],
};

/** Reads an operation's input with `read`; a field error becomes the error of every invalid field. */
function readInput<T>(req: Request, op: LedgerOp, variant: Variant, read: (body: Record<string, unknown>, variant: Variant) => T): T {
  try {
    return read(operationBody(req, op, variant), variant);
  } catch (err) {
    const raw = req.body as unknown;
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw err;
    throw everyFieldError(err, checksOf[op], { body: raw as Record<string, unknown>, variant });
  }
}

function readDeposit(body: Record<string, unknown>, variant: Variant): { input: DepositInput; body: Record<string, unknown> } {
  const fields = parseWith(depositSchema, body);
  const amount = readAmount(body, variant)!;
  const wallet = readDepositWallet(body, variant);
  const { startsAtMs, expiresAtMs } = readWindow(body);
  const input: DepositInput = {
    customerId: fields.customer_id,
    amount,
    wallet,
    label: fields.source ?? fields.description ?? 'deposit',
    startsAtMs,
    expiresAtMs,
    idempotencyKey: fields.idempotency_key ?? null,
    name: fields.name ?? undefined,
    email: fields.email ?? undefined,
    metadata: fields.metadata ?? undefined,
    description: fields.description ?? null,
  };
  return { input, body };
}

function readDraw(body: Record<string, unknown>, variant: Variant): DrawInput {
  const fields = parseWith(drawSchema, body);
  const amount = readAmount(body, variant)!;
  const wallets = readWalletFilter(body, variant);
  return {
    customerId: fields.customer_id,
    transactionId: fields.transaction_id,
    amount,
    wallets,
    walletField: variant === 'A' ? 'credit_types' : 'wallet',
    businessType: fields.business_type ?? null,
    description: fields.description ?? null,
  };
}

function readFreeze(body: Record<string, unknown>, variant: Variant): FreezeInput {
  const input = readDraw(body, variant) as FreezeInput;
  input.ttl = readTtl(body, parseWith);
  return input;
}

function readConsume(body: Record<string, unknown>, variant: Variant) {
  const fields = parseWith(settleSchema, body);
  const amount = readAmount(body, variant, { consume: true });
  const input = { transactionId: fields.transaction_id, customerId: fields.customer_id ?? null, amount, description: fields.description ?? null };
  return { input, body };
}

function readUnfreeze(body: Record<string, unknown>) {
  const fields = parseWith(settleSchema, body);
  return { transactionId: fields.transaction_id, customerId: fields.customer_id ?? null, description: fields.description ?? null };
}

const moneyErrors: DocumentedError[] = ['invalid_amount', 'unsupported_amount_field', 'transaction_conflict', 'usage_limit_exceeded', 'billing_account_not_found'];
const describeMoney = (path: string, doc: Pick<RouteDoc, 'summary' | 'description' | 'body' | 'responses' | 'errors'>) =>
  describeRoute({ method: 'POST', path, tag: 'Ledger', callers: ['project'], ...doc, errors: [...moneyErrors, ...(doc.errors ?? [])] });

describeMoney('/v1/customers/deposit', {
  summary: 'Deposit credits to a customer',
  description:
    'Adds a source of credits to a wallet of the customer, creating the customer on its first deposit (`name`, `email`, `metadata` are used then). ' +
    '`idempotency_key` makes a retry answer the first result (`is_idempotent_replay: true`). `starts_at` and `expires_at` bound when the credits may be used.',
  body: depositBody,
  responses: { 200: { description: 'The deposit (or its replay)', schema: publicDepositResultSchema } },
  errors: ['invalid_starts_at', 'invalid_expires_at'],
});
describeMoney('/v1/billing/deduct', {
  summary: 'Deduct credits',
  description: 'Draws the amount from the sources active now, soonest expiry first. `transaction_id` is unique within the project: a retry answers the first result.',
  body: deductBody,
  responses: { 200: { description: 'The deduction (or its replay)', schema: deductResultSchema } },
  errors: ['customer_not_found', 'insufficient_balance', 'insufficient_balance_in_selected_credit_types', 'invalid_credit_types', 'budget_exceeded'],
});
describeMoney('/v1/billing/freeze', {
  summary: 'Freeze (hold) credits',
  description:
    'Holds the amount for a later consume or unfreeze, optionally settled automatically after a TTL. ' +
    'With `consume_after_seconds` the freeze is the billable operation (counted when accepted, 429 `usage_limit_exceeded` past the Free limit); its consume is never refused on the plan.',
  body: freezeBody,
  responses: { 200: { description: 'The hold (or its replay)', schema: freezeResultSchema } },
  errors: ['customer_not_found', 'insufficient_balance', 'insufficient_balance_in_selected_credit_types', 'invalid_credit_types', 'budget_exceeded'],
});
describeMoney('/v1/billing/consume', {
  summary: 'Consume a hold',
  description: 'Charges all or part of a frozen transaction; the rest returns to its sources.',
  body: consumeBody,
  responses: { 200: { description: 'The consumption (or its replay)', schema: consumeResultSchema } },
  errors: ['customer_scope_mismatch', 'no_consumable_freeze_records', 'freeze_records_already_consumed', 'actual_amount_exceeds_frozen_amount', 'customer_not_found'],
});
describeMoney('/v1/billing/unfreeze', {
  summary: 'Release a hold',
  description: 'Returns the frozen credits of a transaction to their sources.',
  body: unfreezeBody,
  responses: { 200: { description: 'The release (or its replay)', schema: unfreezeResultSchema } },
  errors: ['customer_scope_mismatch', 'no_unfreezable_records', 'customer_not_found'],
});

/** The money operations: all hot routes (src/http/router.ts). */
export function ledgerRoutes(ledger: LedgerService): Route[] {
  const routes: Route[] = [];
  const projectOnly = requireKeyType('project');
  const post = (path: string, handler: RequestHandler) => {
    routes.push({ method: 'POST', path, handlers: [projectOnly, handler], hot: true });
  };

  post('/v1/customers/deposit', async (req, res) => {
    const { variant, scope } = authOf(res);
    const { input, body } = readInput(req, 'deposit', variant, readDeposit);
    const result = await ledger.deposit(scope, input).catch((err: unknown) => {
      // The deposit limit names `amount`; a Variant A caller may have used a unit field.
      if (!(err instanceof ApiError && err.code === 'invalid_amount')) throw err;
      const given = amountFields(variant).reads.find((f) => body[f] != null) ?? 'amount';
      throw new ApiError('invalid_amount', { param: given, message: err.message });
    });
    send(res, result, { wallet: result.body.credit_type });
  });

  post('/v1/billing/deduct', async (req, res) => {
    const { variant, scope, key } = authOf(res);
    send(res, await ledger.deduct(scope, { ...readInput(req, 'deduct', variant, readDraw), keyBudget: keyBudgetArg(key) }));
  });

  post('/v1/billing/freeze', async (req, res) => {
    const { variant, scope, key } = authOf(res);
    send(res, await ledger.freeze(scope, { ...readInput(req, 'freeze', variant, readFreeze), keyBudget: keyBudgetArg(key) }));
  });

  post('/v1/billing/consume', async (req, res) => {
    const { variant, scope } = authOf(res);
    const { input, body } = readInput(req, 'consume', variant, readConsume);
    const result = await ledger.consume(scope, input).catch((err: unknown) => {
      // The service names `amount`; a Variant A caller sent one of the actual_amount fields.
      if (!(err instanceof ApiError && err.code === 'actual_amount_exceeds_frozen_amount' && err.param === 'amount')) throw err;
      const given = amountFields(variant, { consume: true }).reads.find((f) => body[f] != null) ?? 'amount';
      throw new ApiError(err.code, { param: given, message: err.message, extra: err.extra });
    });
    send(res, result);
  });

  post('/v1/billing/unfreeze', async (req, res) => {
    const { variant, scope } = authOf(res);
    send(res, await ledger.unfreeze(scope, readInput(req, 'unfreeze', variant, readUnfreeze)));
  });

  return routes;
}
