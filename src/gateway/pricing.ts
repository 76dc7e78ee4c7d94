/**
 * The gateway's money rules (docs/API.md, "Gateway"): a call's cost is the exact sum over
 * token kinds of tokens x price per million credits / 10^6, rounded up to a whole credit
 * once per call; its hold is an upper bound of that cost.
 */
import type { Usage } from './adapters.js';

export interface Prices {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
}

const MILLION = 1_000_000n;

function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/** Exact cost in credits (BigInt inside: tokens x price can pass 2^53). */
export function costOf(usage: Usage, prices: Prices): number {
  const micro =
    BigInt(usage.input) * BigInt(prices.input) +
    BigInt(usage.output) * BigInt(prices.output) +
    BigInt(usage.cacheRead) * BigInt(prices.cacheRead) +
    BigInt(usage.cacheWrite) * BigInt(prices.cacheWrite);
  return Number(ceilDiv(micro, MILLION));
}

/**
 * Upper bound of the input side of a call. A token is at least one byte of the request,
 * so the body's size bounds the prompt, whatever part of it the upstream reads from its
 * cache, at the dearest of the input-side prices.
 */
export function inputCostBound(requestBytes: number, prices: Prices): number {
  const dearest = Math.max(prices.input, prices.cacheRead, prices.cacheWrite);
  return Number(ceilDiv(BigInt(requestBytes) * BigInt(dearest), MILLION));
}
