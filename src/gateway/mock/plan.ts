/**
 * What the mock upstream answers a completion with (Plan), worked out from the request and
 * its controls by the server (src/gateway/mock/server.ts) and written in either wire
 * format (openai.ts, anthropic.ts); and the random part of their ids.
 */
import { randomBytes } from 'node:crypto';

export interface Plan {
  model: string;
  input: number;
  /** Output tokens of each answer. */
  output: number;
  /** Answers generated (OpenAI `n`); usage counts the output of all of them. */
  answers: number;
  usage: boolean;
  cacheRead: number;
  cacheWrite: number;
  truncated: boolean;
  stream: boolean;
  includeUsage: boolean;
  /** The tool the answer calls (control tool_call=1), or null for a text answer. */
  tool: string | null;
}

const B62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export function base62(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += B62[bytes[i]! % 62];
  return s;
}
