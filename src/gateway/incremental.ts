/**
 * `X-Service-Hold: incremental` (docs/API.md, "Incremental holds"): a streamed call whose
 * hold covers its input bound and one slice of output (or what the wallet affords of it),
 * extended slice by slice in the customer's script (lua/gateway_extend-10.lua) as the
 * relayed output approaches what is held. The relay (src/gateway/relay.ts) forwards output only up to what is held
 * (StreamRelay's allowance); when an extension is refused it ends the stream itself, in
 * its format (StreamCloser), and the call is billed what was relayed.
 */
import type { Logger } from 'pino';
import type { LedgerService } from '../ledger/service.js';
import { ScriptStatus } from '../redis/scripts.js';
import { keyBudgetOf } from './budget.js';
import type { Call, IncrementalHold } from './call.js';

/**
 * Output tokens per slice (per answer, for OpenAI `n`): large enough that extensions are
 * rare (one Redis round trip per slice, off the event path). A wallet that cannot cover a
 * whole slice gets what it affords (at least one token), in the first hold and in each
 * extension: the stream ends only when not one more output token fits.
 */
export const hold_slice_tokens = 1024;

/** The header that asks for an incremental hold, and the trailer that says the wallet ended the stream. */
export const hold_header = 'X-Service-Hold';
export const hold_exhausted_trailer = 'X-Service-Hold-Exhausted';

/**
 * The extensions of one incremental call's hold, numbered 1, 2, ... (the script holds each
 * number once), one in flight at a time. `held` is the output tokens held, all answers
 * together: what the relay may forward.
 */
export class HoldExtender {
  held: number;
  /** An extension was refused (not one more token fits, or it failed): the hold will not grow, the relay stops at `held`. */
  exhausted = false;
  private extensions = 0;
  private pending: Promise<boolean> | null = null;
  private readonly sliceTokens: number;
  private readonly limitTokens: number;

  constructor(
    private readonly deps: { ledger: LedgerService; logger: Logger },
    private readonly call: Call,
    hold: IncrementalHold,
  ) {
    this.held = call.outputTokens * call.answers;
    this.sliceTokens = hold.slice * call.answers;
    this.limitTokens = hold.limit * call.answers;
  }

  /**
   * The relay's allowance: `held`, or no limit once the hold covers the output limit sent
   * upstream (the upstream itself stops there; an estimate above the real count must not
   * cut a paid answer).
   */
  allowance(): number {
    return this.held >= this.limitTokens ? Infinity : this.held;
  }

  /** Whether an extension should start: the estimate is past half the last slice, and none is in flight. */
  due(estimate: number): boolean {
    return !this.exhausted && this.pending === null && this.held < this.limitTokens && estimate > this.held - this.sliceTokens / 2;
  }

  /** The extension in flight, or a new one; true when the hold grew. Never rejects: a failure reads as a refusal. */
  extend(): Promise<boolean> {
    if (this.pending !== null) return this.pending;
    if (this.exhausted || this.held >= this.limitTokens) return Promise.resolve(false);
    this.pending = this.send().finally(() => {
      this.pending = null;
    });
    return this.pending;
  }

  private async send(): Promise<boolean> {
    const c = this.call;
    // Per answer, as the hold's output tokens: a whole slice, or what is left of the limit.
    const tokens = Math.min(this.sliceTokens, this.limitTokens - this.held) / c.answers;
    const extension = ++this.extensions;
    try {
      const [status, raw] = await this.deps.ledger.run('gateway_extend', c.scope, c.customerId, {
        transactionId: c.transactionId, extension, outputPrice: c.model.prices.output, outputTokens: tokens, answers: c.answers, keyBudget: keyBudgetOf(c.auth.key),
      });
      if (status === ScriptStatus.Ok || status === ScriptStatus.Replay) {
        // What the record holds (the wallet may have afforded less than the slice); an
        // extension sent again is the last one (one in flight), so its record is current.
        this.held = Number((JSON.parse(raw) as { output_tokens: string }).output_tokens) * c.answers;
        return true;
      }
      if (status !== ScriptStatus.Insufficient && status !== ScriptStatus.BudgetExceeded) {
        this.deps.logger.warn({ transactionId: c.transactionId, status }, 'gateway hold extension answered an unexpected status; the stream ends at its hold');
      }
    } catch (err) {
      // A Redis failure: the stream ends at what is held (an extension whose reply was lost
      // and that applied is returned by the settlement, which takes the record's hold).
      this.deps.logger.warn({ err, transactionId: c.transactionId }, 'gateway hold extension failed; the stream ends at its hold');
    }
    this.exhausted = true;
    return false;
  }
}
