/** POST /v1/customers/deposit and /v1/billing/{deduct,freeze,consume,unfreeze}. */
import { Router, type Response } from 'express';
import { authOf, requireKeyType } from '../http/auth.js';
import { jsonBody, parseWith } from '../http/validate.js';
import { readAmount } from './amounts.js';
import { depositSchema, drawSchema, readDepositWallet, readTtl, readWalletFilter, readWindow, settleSchema } from './schemas.js';
import type { LedgerService, OpResult } from './service.js';

function send(res: Response, result: OpResult, extra: Record<string, unknown> = {}): void {
  res.status(200).json({ ...result.body, ...extra, is_idempotent_replay: result.replay });
}

export function ledgerRoutes(ledger: LedgerService): Router {
  const r = Router();
  const projectOnly = requireKeyType('project');

  r.post('/v1/customers/deposit', projectOnly, async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = jsonBody(req);
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
    });
    send(res, result, { wallet: result.body.credit_type });
  });

  r.post('/v1/billing/deduct', projectOnly, async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = jsonBody(req);
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

  r.post('/v1/billing/freeze', projectOnly, async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = jsonBody(req);
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

  r.post('/v1/billing/consume', projectOnly, async (req, res) => {
    const { variant, scope } = authOf(res);
    const body = jsonBody(req);
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

  r.post('/v1/billing/unfreeze', projectOnly, async (req, res) => {
    const { scope } = authOf(res);
    const fields = parseWith(settleSchema, jsonBody(req));
    const result = await ledger.unfreeze(scope, {
      transactionId: fields.transaction_id,
      customerId: fields.customer_id ?? null,
      description: fields.description ?? null,
    });
    send(res, result);
  });

  return r;
}
