/**
 * Learning the outcome of a money script whose reply was lost (a connection that closed
 * after the send): the idempotent scripts are sent again with the same arguments, within
 * the request's time, and answer REPLAY when the lost send applied. Used by LedgerService
 * (src/ledger/service.ts) for its scripts and its bindings.
 */
import { ScriptStatus, type CustomerScriptName, type ScriptReply } from '../redis/scripts.js';
import { OutcomeUnknownError, provesNothingSent } from '../redis/sent.js';
import type { Metrics, OutcomePath } from '../metrics/metrics.js';

/** How long a money script whose reply was lost waits for Redis by default (LedgerHooks.outcomeWaitMs). */
const outcome_wait_ms_default = 2_000;
/** The pause before each try of learning a lost reply's outcome. */
const outcome_retry_pause_ms = 50;

/**
 * Scripts whose outcome is learned by sending them again with the same arguments when
 * their reply is lost (OutcomeLearner.learn): each answers REPLAY with its stored result
 * when its identifier already applied, so a second send never applies twice. A deposit
 * only with an idempotency key (without one it is not idempotent). The others are reads
 * and worker jobs, whose callers try again themselves.
 */
const learnableScripts: ReadonlySet<CustomerScriptName> = new Set([
  'deposit', 'deduct', 'freeze', 'consume', 'unfreeze', 'gateway_hold', 'gateway_settle', 'gateway_release', 'gateway_extend',
]);

const timed_out = Symbol('timed out');

/** Whether a script's outcome is learned when its reply is lost (learnableScripts). */
export function learnable(name: CustomerScriptName, args: object): boolean {
  return learnableScripts.has(name) && !(name === 'deposit' && (args as { idempotencyKey?: unknown }).idempotencyKey === '');
}

/**
 * A failure of a sent script without its reply: not proven unsent, and not an answer of
 * Redis (a ReplyError is one: the script ran, or was refused, and said so).
 */
export function replyLost(err: unknown): boolean {
  return !provesNothingSent(err) && (err as { name?: string })?.name !== 'ReplyError';
}

export class OutcomeLearner {
  /**
   * `ready` is the Redis generation guard (LedgerService.ready); `waitMs` how long a lost
   * reply waits for Redis to answer again (LedgerHooks.outcomeWaitMs).
   */
  constructor(
    private readonly ready: () => Promise<void>,
    private readonly waitMs: number = outcome_wait_ms_default,
    private readonly metrics?: Metrics,
  ) {}

  /**
   * Learns the outcome of a script whose reply was lost (`lost`), within the request's
   * time: sends it again, with the same arguments, once Redis answers and the generation
   * guard passes, until one try answers or waitMs is over. The script is idempotent
   * (learnableScripts): when the lost send applied, the new one answers REPLAY with its
   * stored result, which is answered as OK, as the lost reply would have been (the client
   * asked once); when it did not, the new one applies it now, or refuses it. No answer in
   * time: OutcomeUnknownError (503 outcome_unknown). Counted in svc_outcome_learning_total.
   */
  async learn(call: () => Promise<ScriptReply>, lost: unknown): Promise<ScriptReply> {
    let reply: ScriptReply;
    try {
      reply = await this.resend(call, lost);
    } catch (err) {
      this.learned('unknown');
      throw err;
    }
    if (reply[0] === ScriptStatus.Replay) {
      this.learned('learned_applied');
      return [ScriptStatus.Ok, ...reply.slice(1)] as ScriptReply;
    }
    this.learned(reply[0] === ScriptStatus.Ok ? 'learned_not_applied_then_applied' : 'learned_not_applied_then_refused');
    return reply;
  }

  /**
   * Sends an idempotent `call` whose reply was lost (`lost`) again, once Redis answers and
   * the generation guard passes, until one try answers or waitMs is over; then
   * OutcomeUnknownError. A try still in flight then is left to finish: it applies at most
   * once, like the lost one.
   */
  async resend<T>(call: () => Promise<T>, lost: unknown): Promise<T> {
    const deadline = Date.now() + this.waitMs;
    let last = lost;
    for (let left = deadline - Date.now(); left > 0; left = deadline - Date.now()) {
      await sleep(Math.min(outcome_retry_pause_ms, left));
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<typeof timed_out>((resolve) => {
        timer = setTimeout(() => resolve(timed_out), Math.max(0, deadline - Date.now()));
      });
      try {
        const tried = this.ready().then(call);
        // A try that loses the race still ends; its failure is nobody's to hear.
        tried.catch(() => undefined);
        const answer = await Promise.race([tried, late]);
        if (answer === timed_out) break;
        return answer;
      } catch (err) {
        last = err;
      } finally {
        clearTimeout(timer);
      }
    }
    throw last instanceof OutcomeUnknownError ? last : new OutcomeUnknownError(last instanceof Error ? last : new Error(String(last)));
  }

  private learned(path: OutcomePath): void {
    this.metrics?.outcomeLearning.inc({ path });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
