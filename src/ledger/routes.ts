/** POST /v1/customers/deposit and /v1/billing/{deduct,freeze,consume,unfreeze}. */
import type { Request, RequestHandler, Response } from 'express';
import type { Route } from '../http/router.js';
import { authOf, requireKeyType } from '../http/auth.js';
import { jsonBody, onlyFields, onlyQuery, parseWith } from '../http/validate.js';
import { ApiError } from '../errors/catalogue.js';
import { sendJson } from '../http/respond.js';
import {
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
import type { LedgerService, OpResult } from './service.js';

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
  const { reads, allowed } = ledgerFields(op, variant);
  onlyFields(body, allowed, { suggest: reads });
  return body;
}

/** The money operations: all hot routes (src/http/router.ts). */
export function ledgerRoutes(ledger: LedgerService): Route[] {
  const routes: Route[] = [];
  const projectOnly = requireKeyType('project');
  const post = (path: string, handler: RequestHandler) => {
    routes.push({ method: 'POST', path, handlers: [projectOnly, handler], hot: true });
  };

  post('/v1/customers/deposit', async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = operationBody(req, 'deposit', variant);
    const fields = parseWith(depositSchema, body);
    const amount = readAmount(body, variant)!;
    const wallet = readDepositWallet(body, variant);
    const { startsAtMs, expiresAtMs } = readWindow(body);
    const result = await ledger.deposit(scope, {
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
    }).catch((err: unknown) => {
      // The deposit limit names `amount`; a Variant A caller may have used a unit field.
      if (!(err instanceof ApiError && err.code === 'invalid_amount')) throw err;
      const given = amountFields(variant).reads.find((f) => body[f] != null) ?? 'amount';
      throw new ApiError('invalid_amount', { param: given, message: err.message });
    });
    send(res, result, { wallet: result.body.credit_type });
  });

  post('/v1/billing/deduct', async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = operationBody(req, 'deduct', variant);
    const fields = parseWith(drawSchema, body);
    const amount = readAmount(body, variant)!;
    const wallets = readWalletFilter(body, variant);
    const result = await ledger.deduct(scope, {
      customerId: fields.customer_id,
      transactionId: fields.transaction_id,
      amount,
      wallets,
      businessType: fields.business_type ?? null,
      description: fields.description ?? null,
    });
    send(res, result);
  });

  post('/v1/billing/freeze', async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = operationBody(req, 'freeze', variant);
    const fields = parseWith(drawSchema, body);
    const amount = readAmount(body, variant)!;
    const wallets = readWalletFilter(body, variant);
    const ttl = readTtl(body, parseWith);
    const result = await ledger.freeze(scope, {
      customerId: fields.customer_id,
      transactionId: fields.transaction_id,
      amount,
      wallets,
      ttl,
      businessType: fields.business_type ?? null,
      description: fields.description ?? null,
    });
    send(res, result);
  });

  post('/v1/billing/consume', async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = operationBody(req, 'consume', variant);
    const fields = parseWith(settleSchema, body);
    const amount = readAmount(body, variant, { consume: true });
    const result = await ledger.consume(scope, {
      transactionId: fields.transaction_id,
      customerId: fields.customer_id ?? null,
      amount,
      description: fields.description ?? null,
    });
    send(res, result);
  });

  post('/v1/billing/unfreeze', async (req, res) => {
    const { variant, scope } = authOf(res);
    const fields = parseWith(settleSchema, operationBody(req, 'unfreeze', variant));
    const result = await ledger.unfreeze(scope, {
      transactionId: fields.transaction_id,
      customerId: fields.customer_id ?? null,
      description: fields.description ?? null,
    });
    send(res, result);
  });

  return routes;
}
