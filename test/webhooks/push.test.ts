/**
 * EventPush, the persist worker's hand-over to the fan-out (src/webhooks/push.ts): one
 * fan-out at a time, the ids handed over meanwhile taken together by the next; a failed
 * fan-out is logged and never reaches the caller (the persist batch is committed), and
 * the push goes on with later events.
 */
import type { Logger } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { EventPush } from '../../src/webhooks/push.js';

function logger() {
  return { error: vi.fn(), warn: vi.fn() };
}

describe('EventPush', () => {
  it('runs one fan-out at a time and takes the ids handed over meanwhile in the next', async () => {
    const calls: string[][] = [];
    let release: () => void = () => undefined;
    const first = new Promise<void>((r) => (release = r));
    const push = new EventPush(async (ids) => {
      calls.push([...ids]);
      if (calls.length === 1) await first;
    }, logger() as unknown as Logger);
    push.add(['evt_1']);
    push.add([]);
    push.add(['evt_2', 'evt_3']);
    push.add(['evt_4']);
    expect(calls).toEqual([['evt_1']]);
    release();
    await push.idle();
    expect(calls).toEqual([['evt_1'], ['evt_2', 'evt_3', 'evt_4']]);
    push.add(['evt_5']);
    await push.idle();
    expect(calls).toEqual([['evt_1'], ['evt_2', 'evt_3', 'evt_4'], ['evt_5']]);
  });

  it('logs a failed fan-out, throws nothing to the persist loop, and goes on', async () => {
    const log = logger();
    const done: string[] = [];
    const push = new EventPush(async (ids) => {
      if (ids.includes('evt_bad')) throw new Error('PostgreSQL away');
      done.push(...ids);
    }, log as unknown as Logger);
    expect(() => push.add(['evt_bad'])).not.toThrow();
    await push.idle();
    expect(log.error).toHaveBeenCalledTimes(1);
    expect(log.error.mock.calls[0][1]).toMatch(/poll/);
    push.add(['evt_ok']);
    await push.idle();
    expect(done).toEqual(['evt_ok']);
  });

  it('leaves ids to the poll when too many wait', async () => {
    const log = logger();
    let release: () => void = () => undefined;
    const blocked = new Promise<void>((r) => (release = r));
    const taken: number[] = [];
    const push = new EventPush(async (ids) => {
      taken.push(ids.length);
      await blocked;
    }, log as unknown as Logger);
    push.add(['evt_0']);
    push.add(Array.from({ length: 50_000 }, (_, i) => `evt_a${i}`));
    push.add(['evt_over']);
    expect(log.warn).toHaveBeenCalledTimes(1);
    release();
    await push.idle();
    expect(taken.reduce((a, b) => a + b, 0)).toBe(50_001);
  });
});
