import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { costOf, inputCostBound } from '../../src/gateway/pricing.js';

const prices = { input: 3_000_000, output: 15_000_000, cacheRead: 300_000, cacheWrite: 3_750_000 };

describe('gateway pricing', () => {
  it('sums every token kind at its price and rounds up once per call', () => {
    // 1000 x 3 + 200 x 15 + 5000 x 0.3 + 100 x 3.75 credits = 3000 + 3000 + 1500 + 375.
    expect(costOf({ input: 1000, output: 200, cacheRead: 5000, cacheWrite: 100 }, prices)).toBe(7875);
    // One input token at 3 credits per million tokens is 0.000003 credits: rounds up to 1.
    expect(costOf({ input: 1, output: 0, cacheRead: 0, cacheWrite: 0 }, { input: 3, output: 0, cacheRead: 0, cacheWrite: 0 })).toBe(1);
    // Fractions of several kinds add up before the single rounding: 0.5 + 0.5 = 1, not 2.
    expect(costOf({ input: 1, output: 1, cacheRead: 0, cacheWrite: 0 }, { input: 500_000, output: 500_000, cacheRead: 0, cacheWrite: 0 })).toBe(1);
    expect(costOf({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, prices)).toBe(0);
  });

  it('stays exact where tokens x price passes 2^53', () => {
    expect(costOf({ input: 9_000_000, output: 0, cacheRead: 0, cacheWrite: 0 }, { input: 1_000_000_001, output: 0, cacheRead: 0, cacheWrite: 0 })).toBe(9_000_000_009);
  });

  it('bounds the input cost of any split of the prompt between fresh and cached tokens', () => {
    fc.assert(
      fc.property(fc.nat(100_000), fc.nat(100_000), fc.nat(100_000), (bytes, a, b) => {
        const input = Math.min(a, bytes);
        const cacheRead = Math.min(b, bytes - input);
        const cost = costOf({ input, output: 0, cacheRead, cacheWrite: bytes - input - cacheRead }, prices);
        return cost <= inputCostBound(bytes, prices);
      }),
    );
  });
});
