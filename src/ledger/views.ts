/**
 * What the view script (lua/view-10.lua) answers of a customer: its profile, each wallet's sums
 * and, when listed, the sources Redis holds. Read through LedgerService.view
 * (src/ledger/service.ts).
 */
import { ScriptStatus, type ScriptReply } from '../redis/scripts.js';
import { decodeSource, type SourceState } from '../redis/codec.js';
import { customerBudgetOf, projectKeyBudgetsOf, type BudgetState } from './budgets.js';

/** A wallet's sums over the sources active now. */
interface WalletSums {
  total: number;
  used: number;
  frozen: number;
}

export interface CustomerView {
  profile: { created_at: string; name: string | null; email: string | null; metadata: string | null; alerts?: string | null };
  nowMs: number;
  /** Every wallet the customer ever had, with its sums over the sources active now. */
  wallets: Record<string, WalletSums>;
  /** The sources Redis holds, by creation order (only with `listing`). */
  sources: SourceState[];
  /** The creation seq of the customer's newest source. */
  srcSeq: number;
  /** Some sources were archived: PostgreSQL alone holds them. */
  archived: boolean;
  autoConsumed: number;
  /** The customer budget with this period's counters, null when none is set. */
  budget: BudgetState | null;
  /** The project keys' budgets for this customer (`key_budgets`), by key id; {} for none. */
  keyBudgets: Record<string, BudgetState>;
}

/** The view script's reply as a CustomerView; null when the customer is absent. */
export function customerViewOf(reply: ScriptReply): CustomerView | null {
  if (reply[0] === ScriptStatus.CustomerNotFound) return null;
  const profile = JSON.parse(reply[1]) as CustomerView['profile'];
  const nowMs = Number(reply[4]);
  const sums = JSON.parse(reply[5] as string) as Record<string, { t: string; u: string; f: string }>;
  const wallets: Record<string, WalletSums> = {};
  for (const [name, a] of Object.entries(sums)) wallets[name] = { total: Number(a.t), used: Number(a.u), frozen: Number(a.f) };
  const sources = (reply[6] as string[]).map(decodeSource).sort((a, b) => a.seq - b.seq);
  return { profile, nowMs, wallets, sources, srcSeq: Number(reply[7]), archived: reply[8] === '1', autoConsumed: reply[2],
    budget: customerBudgetOf(reply[9] as string | undefined), keyBudgets: projectKeyBudgetsOf(reply[10] as string | undefined) };
}
