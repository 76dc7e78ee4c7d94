/**
 * What a ledger operation is asked: the project it runs in and each money operation's
 * input (LedgerService, src/ledger/service.ts; the HTTP requests' in src/ledger/routes.ts).
 */

/** The project a ledger operation runs in, and its organization (whose plan counts it). */
export interface ProjectScope {
  projectId: string;
  organizationId: string;
}

export interface DepositInput {
  customerId: string;
  amount: number;
  wallet: string;
  label: string;
  startsAtMs: number | null;
  expiresAtMs: number | null;
  idempotencyKey: string | null;
  name?: string;
  email?: string;
  metadata?: unknown;
  description: string | null;
}

export interface DrawInput {
  customerId: string;
  transactionId: string;
  amount: number;
  /** Wallets to draw from; null for all. */
  wallets: string[] | null;
  /** The request field that chose the wallets (Variant B `wallet`, A `credit_types`): a refusal's message names it. */
  walletField?: 'wallet' | 'credit_types';
  businessType: string | null;
  description: string | null;
  /**
   * The calling key's budget as the scripts take it (keyBudgetArg, src/ledger/budgets.ts):
   * a project key's budget for this customer counts the operation; absent or '' for none.
   */
  keyBudget?: string;
}

/** Consume and unfreeze: the transaction, and its customer when the caller names it. */
export interface SettleInput {
  transactionId: string;
  customerId: string | null;
  description: string | null;
}

export interface FreezeInput extends DrawInput {
  ttl: { kind: 'release' | 'consume'; seconds: number } | null;
}
