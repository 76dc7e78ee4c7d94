/**
 * Billable operations (deduct, consume, a freeze with a consume TTL) under the plan's
 * accounting (src/plans/service.ts): a reservation before the script, committed or given
 * back by what the script answered. Used by LedgerService (src/ledger/service.ts).
 */
import type { ApiError } from '../errors/catalogue.js';
import { ScriptStatus, type ScriptReply } from '../redis/scripts.js';
import { provesNothingSent } from '../redis/sent.js';
import type { ProjectScope } from './requests.js';

/** Plan accounting of billable operations (src/plans/service.ts). */
export interface BillableOps {
  /**
   * Reserves one operation ahead; `admitted` false when the plan's hard limit refuses it,
   * and then `refusal` is the error to answer. Normally served from the process's lease
   * of the organization's operations: it resolves without any Redis command. `commit` (the operation applied, or may
   * have) and `release` (it did not) never reject: a reservation that neither reaches
   * counts once its deadline passes.
   */
  reserve(scope: ProjectScope): Promise<{ admitted: boolean; refusal: ApiError | null; commit(): Promise<void>; release(): Promise<void> }>;
  /**
   * Counts TTL auto-consumes that a script applied on the way. Never throws: the script
   * applied, so its answer must not become an error; the count is retried, then logged.
   */
  record(scope: ProjectScope, n: number): void;
}

/**
 * Runs a billable script under a plan reservation (none without `billable`). `lookup`
 * (binding or finding the transaction's customer; a value when the script binds itself)
 * goes out in the same round trip as the reservation: neither needs the other's answer.
 * `script` gets what the lookup found and whether the plan admits a new operation (its
 * last argument); the reservation is committed when the operation applied now (or may
 * have), and given back otherwise.
 */
export async function runBillable<T>(
  billable: BillableOps | undefined,
  scope: ProjectScope,
  lookup: T | Promise<T>,
  script: (found: T, admitted: '0' | '1') => Promise<ScriptReply>,
): Promise<{ reply: ScriptReply; found: T }> {
  const [found, reserved] = await Promise.allSettled([lookup, billable?.reserve(scope) ?? null]);
  const reservation = reserved.status === 'fulfilled' ? reserved.value : null;
  let reply: ScriptReply | undefined;
  let unsent = false;
  try {
    if (found.status === 'rejected') throw found.reason;
    if (reserved.status === 'rejected') throw reserved.reason;
    try {
      reply = await script(found.value, reservation && !reservation.admitted ? '0' : '1');
    } catch (err) {
      unsent = provesNothingSent(err);
      throw err;
    }
    if (reply[0] === ScriptStatus.UsageLimit && reservation?.refusal) throw reservation.refusal;
    return { reply, found: found.value };
  } finally {
    // Given back when the script answered that nothing applied, or provably never
    // reached Redis (never written, or refused by the generation guard). Without an
    // answer otherwise (a lost reply) it may have applied: it counts, one too high at
    // worst, never too low.
    // A consume of a freeze that the plan counted when it was accepted (reply[4] = 1,
    // lua/consume-10.lua) gives its reservation back too: counted once.
    const notApplied = reply !== undefined
      ? reply[0] !== ScriptStatus.Ok || reply[4] === 1
      : unsent || found.status === 'rejected' || reserved.status === 'rejected';
    // Not awaited: the answer does not wait on the count (neither rejects).
    if (reservation) void (notApplied ? reservation.release() : reservation.commit());
  }
}
