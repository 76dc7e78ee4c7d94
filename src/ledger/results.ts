/**
 * A money script's answer as the operation's result, or as the error the client hears
 * (the refusals' words are in src/ledger/refusals.ts). Used by LedgerService
 * (src/ledger/service.ts).
 */
import { scriptError, ScriptStatus, type ScriptReply } from '../redis/scripts.js';
import { publicResult } from './entries.js';
import { deposit_limit_message } from './amounts.js';
import { drawRefusal, settleRefusal } from './refusals.js';
import { budgetRefusal } from './budgets.js';
import { expiredWhenSent } from './schemas.js';
import { conflictRefusal, type ConflictContext } from './conflicts.js';
import { customerNotFound } from '../errors/not-found.js';

export interface OpResult {
  body: Record<string, unknown>;
  replay: boolean;
  customerId: string;
  /** TTL freezes of this customer that the script consumed on the way (billable ops). */
  autoConsumed: number;
}

/** What a request asked, for the words of its refusal (src/ledger/refusals.ts). */
export interface Asked {
  draw?: { amount: number; wallets: string[] | null; selector: 'wallet' | 'credit_types' };
  /** A consume's amount, null for the whole frozen amount. */
  consumed?: number | null;
  /** A deposit's expires_at (ms), which the script found not later than now. */
  expiresAtMs?: number | null;
  /** A deduct's, freeze's or keyed deposit's identifier and compared fields, for a conflict's words. */
  conflict?: ConflictContext;
}

const settleCodes = new Map<number, 'actual_amount_exceeds_frozen_amount' | 'no_consumable_freeze_records' | 'freeze_records_already_consumed' | 'no_unfreezable_records'>([
  [ScriptStatus.ExceedsFrozen, 'actual_amount_exceeds_frozen_amount'],
  [ScriptStatus.NoConsumable, 'no_consumable_freeze_records'],
  [ScriptStatus.AlreadyConsumed, 'freeze_records_already_consumed'],
  [ScriptStatus.NoUnfreezable, 'no_unfreezable_records'],
]);

/**
 * The script's answer as a result, or its error. `idParam` names the request field a
 * conflict is about (the operation's identifier).
 */
export function resultOf(reply: ScriptReply, customerId: string, idParam?: string, asked?: Asked): OpResult {
  const [status, raw, autoConsumed] = reply;
  if (status === ScriptStatus.Ok || status === ScriptStatus.Replay) {
    return { body: publicResult(raw), replay: status === ScriptStatus.Replay, customerId, autoConsumed };
  }
  if (status === ScriptStatus.BudgetExceeded) throw budgetRefusal(raw, 400);
  if (status === ScriptStatus.CustomerNotFound) throw customerNotFound(customerId);
  if (status === ScriptStatus.Conflict && asked?.conflict) throw conflictRefusal(raw, asked.conflict);
  if (status === ScriptStatus.InvalidExpires && asked?.expiresAtMs != null) throw expiredWhenSent(asked.expiresAtMs, "a deposit's credits");
  if (status === ScriptStatus.DepositLimit) throw scriptError('deposit', status, { param: 'amount', message: deposit_limit_message });
  // Refusals whose script answered numbers (on its failure path only) say them.
  if ((status === ScriptStatus.Insufficient || status === ScriptStatus.InsufficientSelected) && asked?.draw) {
    throw drawRefusal(status === ScriptStatus.Insufficient ? 'insufficient_balance' : 'insufficient_balance_in_selected_credit_types', raw, asked.draw);
  }
  const settleCode = settleCodes.get(status);
  if (settleCode !== undefined) {
    const refusal = settleRefusal(settleCode, raw, { requested: asked?.consumed ?? null });
    if (refusal !== null) throw refusal;
  }
  const param =
    status === ScriptStatus.Conflict ? idParam
    : status === ScriptStatus.InvalidExpires ? 'expires_at'
    : status === ScriptStatus.ScopeMismatch ? 'customer_id'
    : undefined;
  throw scriptError('customer script', status, { param });
}
