/**
 * What the process printed through console.error during a test. The service logs through
 * pino; console.error is where a library reports what nobody listened to: ioredis's
 * "[ioredis] Unhandled error event" for a connection without an `error` listener, and
 * BullMQ's printed error for a Queue or Worker without one. A test that breaks Redis
 * asserts that nothing came out there.
 */
import { vi } from 'vitest';

export interface ConsoleErrors {
  /** Each console.error call, its arguments turned into text. */
  readonly lines: string[];
  restore(): void;
}

export function captureConsoleErrors(): ConsoleErrors {
  const lines: string[] = [];
  const spy = vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
    lines.push(args.map((a) => (a instanceof Error ? (a.stack ?? a.message) : String(a))).join(' '));
  });
  return { lines, restore: () => spy.mockRestore() };
}
