/**
 * The persist loop's wait after a small pass (workers/persist.ts, batchWaitMs): long
 * enough that the next pass carries about persist_batch_grow_below entries at the rate the
 * last one saw, never shorter than persist_batch_wait_ms nor longer than
 * persist_batch_wait_max_ms, so that the outbox lag stays well within its 1 s bound.
 */
import { describe, expect, it } from 'vitest';
import { batchWaitMs, persist_batch_grow_below, persist_batch_wait_max_ms, persist_batch_wait_ms } from '../../workers/persist.js';

describe('the wait after a small pass', () => {
  it('grows as the rate falls, within its bounds', () => {
    // 1,000 entries/s: 40 entries over 40 ms; 256 need 256 ms, more than the bound.
    expect(batchWaitMs(40, 40, 5)).toBe(persist_batch_wait_max_ms);
    // 4,000 entries/s: 180 entries over 45 ms; 256 need 64 ms, of which the pass took 4.
    expect(batchWaitMs(180, 45, 4)).toBe(60);
    // Near persist_batch_grow_below already: the shortest wait.
    expect(batchWaitMs(persist_batch_grow_below - 1, 45, 10)).toBe(persist_batch_wait_ms);
    // A lone entry after an idle spell: the longest.
    expect(batchWaitMs(1, 25, 1)).toBe(persist_batch_wait_max_ms);
    expect(persist_batch_wait_max_ms).toBeLessThan(1_000);
  });
});
