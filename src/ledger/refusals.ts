/**
 * The errors of a refused draw (deduct, freeze) or gateway hold: which wallets were looked
 * at, what they have, what was needed, and what to change. The numbers come from the
 * script's refusal (`shortfall` in lua/includes/customer.lua), which computes them on the
 * failure path only; the words are made here. Each error also carries the numbers in
 * `error.details` (docs/API.md, "Errors").
 */
import { ApiError } from '../errors/catalogue.js';

/** A refusal's numbers as the script answers them: amounts as strings of credits. */
interface ShortfallReply {
  /** Credits available now per wallet that has any. */
  available?: Record<string, string>;
  /** Wallets looked at that never had a source, space-separated. */
  none?: string;
}

/** How the request chose its wallets: the body field (ledger) or the header (gateway). */
type WalletSelector = 'wallet' | 'credit_types' | 'X-Service-Wallet';

function parse<T>(raw: string): T | null {
  if (raw === '') return null;
  try {
    return JSON.parse(raw) as T;
  } catch {
    return null;
  }
}

function byWallet(reply: ShortfallReply | null): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [w, n] of Object.entries(reply?.available ?? {})) out[w] = Number(n);
  return out;
}

function noneOf(reply: ShortfallReply | null): string[] {
  return reply?.none ? reply.none.split(' ') : [];
}

const listed = (names: readonly string[]) => names.join(', ');

/**
 * The other wallets that hold credits, and how to draw from them: `"wallet": "x"` in
 * Variant B, credit_types in Variant A, the X-Service-Wallet header on the gateway. Empty
 * when no other wallet has credits.
 */
function otherWallets(available: Record<string, number>, looked: readonly string[], selector: WalletSelector): string {
  const others = Object.entries(available)
    .filter(([w, n]) => n > 0 && !looked.includes(w))
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  if (others.length === 0) return '';
  const list = others.map(([w, n]) => `${w} (${n} available)`).join(', ');
  const best = others[0][0];
  const how =
    selector === 'X-Service-Wallet' ? `send the header X-Service-Wallet: ${best}`
    : selector === 'wallet' ? `send "wallet": "${best}"`
    : `add ${best} to credit_types, or leave credit_types out to draw from every wallet`;
  return ` Other wallets of this customer hold credits: ${list}; to draw from one, ${how}.`;
}

/**
 * The error of a deduct or freeze that its script refused for lack of funds
 * (insufficient_balance or insufficient_balance_in_selected_credit_types): `wallets` is
 * the request's wallet filter (null: every wallet), `amount` the credits asked for.
 */
export function drawRefusal(
  code: 'insufficient_balance' | 'insufficient_balance_in_selected_credit_types',
  raw: string,
  o: { amount: number; wallets: readonly string[] | null; selector: 'wallet' | 'credit_types' },
): ApiError {
  const reply = parse<ShortfallReply>(raw);
  const available = byWallet(reply);
  const none = noneOf(reply);
  const wallets = o.wallets === null ? null : [...new Set(o.wallets)];
  const looked = wallets ?? Object.keys(available);
  const availableHere = looked.reduce((sum, w) => sum + (available[w] ?? 0), 0);
  const lead = code === 'insufficient_balance' ? 'insufficient balance' : 'insufficient balance in selected credit_types';
  let message: string;
  if (wallets === null) {
    const each = Object.entries(available)
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
      .map(([w, n]) => `${w} ${n}`);
    message = `${lead}: ${o.amount} credits needed, ${availableHere} available across all wallets${each.length > 0 ? ` (${each.join(', ')})` : ''}.`;
  } else if (none.length === wallets.length) {
    // No selected wallet ever had a source: the usual cause is a wallet name of the other
    // contract variant (deposits of A go to `default`, B draws from `credits`).
    const them = wallets.length === 1 ? `wallet ${wallets[0]} has` : `wallets ${listed(wallets)} have`;
    message = `${them} no sources: nothing was ever deposited to ${wallets.length === 1 ? 'it' : 'them'} (${o.amount} credits needed).`;
  } else {
    const them = wallets.length === 1 ? `wallet ${wallets[0]} has` : `wallets ${listed(wallets)} have`;
    message = `${lead}: ${them} ${availableHere} credits available, ${o.amount} needed.`;
    if (none.length > 0) message += ` ${none.length === 1 ? `Wallet ${none[0]} has` : `Wallets ${listed(none)} have`} no sources.`;
  }
  message += otherWallets(available, looked, o.selector);
  return new ApiError(code, {
    message,
    param: wallets !== null && none.length === wallets.length ? o.selector : undefined,
    extra: {
      details: {
        wallets,
        required_credits: o.amount,
        available_credits: availableHere,
        available_credits_by_wallet: available,
        wallets_without_sources: none,
      },
    },
  });
}

/** The numbers of a refused gateway hold (lua/gateway_hold-10.lua). */
interface HoldReply extends ShortfallReply {
  hold?: string;
  input?: string;
  output?: string;
  tokens?: string;
  fits?: string;
}

/**
 * The 402 insufficient_balance of a gateway call whose hold the wallet cannot afford:
 * the hold it needed (input bound and output bound), what the wallet has, the output limit
 * that would fit when lowering the client's limit would help (`limitField` names the
 * client's field), and the other wallets that hold credits.
 */
export function holdRefusal(raw: string, o: { wallet: string; explicitMax: number | null; limitField: string; answers: number }): ApiError {
  // A refusal of the hold's draw (which cannot happen once the wallet covered the hold)
  // would answer the shortfall alone, without the hold's numbers.
  const reply = parse<HoldReply>(raw);
  const hold = reply?.hold === undefined ? null : Number(reply.hold);
  const available = byWallet(reply);
  const inWallet = available[o.wallet] ?? 0;
  const none = noneOf(reply);
  const fits = reply?.fits ? Number(reply.fits) : null;
  const tokens = reply?.tokens === undefined ? null : Number(reply.tokens);
  const output = reply?.output === undefined ? null : Number(reply.output);
  const input = reply?.input === undefined ? null : Number(reply.input);
  let message: string;
  const needs =
    hold === null ? ''
    : tokens === 0 ? `this call needs a hold of ${hold} credits (its input bound; it generates no output)`
    : o.explicitMax === null && fits === null && tokens === 1
      ? `this call needs a hold of at least ${hold} credits (its input bound ${input} and one output token ${output})`
      : `this call needs a hold of ${hold} credits (input bound ${input}, output bound ${output} for ${tokens} output tokens${o.answers > 1 ? ` x ${o.answers} answers` : ''})`;
  if (none.includes(o.wallet)) {
    message = `wallet ${o.wallet} has no sources: nothing was ever deposited to it${needs ? `; ${needs}` : ''}.`;
  } else {
    message = `insufficient balance: ${needs ? `${needs} and ` : ''}wallet ${o.wallet} has ${inWallet} credits available.`;
    if (fits !== null) message += ` Lower ${o.limitField} to ${fits} or less to fit.`;
  }
  message += otherWallets(available, [o.wallet], 'X-Service-Wallet');
  return new ApiError('insufficient_balance', {
    status: 402,
    message,
    extra: {
      details: {
        wallet: o.wallet,
        required_credits: hold,
        available_credits: inWallet,
        input_bound_credits: input,
        output_bound_credits: output,
        output_tokens: tokens,
        max_tokens_that_fit: fits,
        available_credits_by_wallet: available,
        wallets_without_sources: none,
      },
    },
  });
}

/** What a consume or unfreeze refusal's script answered: ms strings, or the frozen amount. */
interface SettleReply {
  frozen?: string;
  released_at?: string;
  consumed_at?: string;
  due_at?: string;
}

const iso = (ms: string | undefined) => (ms === undefined || ms === '' ? null : new Date(Number(ms)).toISOString());

/**
 * The error of a refused consume or unfreeze, with the numbers and times its script
 * answered: the frozen amount a consume exceeded, or when a freeze's TTL settled it (and
 * when it was due). null when the status carries none: the caller answers the code's own
 * message.
 */
export function settleRefusal(
  code: 'actual_amount_exceeds_frozen_amount' | 'no_consumable_freeze_records' | 'freeze_records_already_consumed' | 'no_unfreezable_records',
  raw: string,
  o: { requested?: number | null } = {},
): ApiError | null {
  const reply = parse<SettleReply>(raw);
  if (reply === null) return null;
  if (code === 'actual_amount_exceeds_frozen_amount' && reply.frozen !== undefined) {
    const frozen = Number(reply.frozen);
    return new ApiError(code, {
      param: 'amount',
      message: `actual amount exceeds the frozen amount: ${o.requested ?? 'more than'} credits asked, ${frozen} credits frozen; consume at most ${frozen}`,
      extra: { details: { frozen_credits: frozen, requested_credits: o.requested ?? null } },
    });
  }
  const due = iso(reply.due_at);
  const dueText = due === null ? '' : ` (due at ${due})`;
  if (reply.released_at !== undefined) {
    const at = iso(reply.released_at);
    const what =
      code === 'no_consumable_freeze_records' ? 'no consumable freeze records: nothing is left to consume'
      : 'no unfreezable records: its credits are back in their wallet already';
    return new ApiError(code, {
      message: `${what}; the freeze's TTL (release_after_seconds) released it at ${at}${dueText}`,
      extra: { details: { settled_by: 'ttl_release', settled_at: at, auto_settle_at: due } },
    });
  }
  if (reply.consumed_at !== undefined) {
    const at = iso(reply.consumed_at);
    const what =
      code === 'freeze_records_already_consumed' ? 'the frozen funds of this transaction are already consumed'
      : 'no unfreezable records: the frozen funds were consumed';
    return new ApiError(code, {
      message: `${what}; the freeze's TTL (consume_after_seconds) consumed them at ${at}${dueText}`,
      extra: { details: { settled_by: 'ttl_consume', settled_at: at, auto_settle_at: due } },
    });
  }
  return null;
}

/** The 402 of a hold whose output limit, lowered by the wallet or a budget, is below the least the model's upstream accepts. */
export function tooFewOutputTokens(o: { wallet: string; modelId: string; min: number }, hold: { output_tokens: string; lowered_by_budget: string }): ApiError {
  const by = hold.lowered_by_budget === '1' ? 'the budget' : `wallet ${o.wallet}`;
  return new ApiError('insufficient_balance', {
    status: 402,
    message: `insufficient balance: ${by} covers ${hold.output_tokens} output tokens, and model ${o.modelId} (Responses format) needs an output limit of at least ${o.min}.`,
    extra: { details: { wallet: o.wallet, output_tokens: Number(hold.output_tokens), min_output_tokens: o.min } },
  });
}
