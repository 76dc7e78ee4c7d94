/**
 * Latency at one connection, compared across servers by interleaving: each contender runs
 * a short round of back-to-back requests on its own keep-alive connection, then the next
 * contender runs one, and so on until every contender has its samples. Drift in the load
 * of a shared machine then hits every contender alike instead of whichever ran last.
 *
 * A sample runs from just before the request is written to the last byte of the answer
 * (time to last byte, which for a streamed answer is the whole stream). Every answer is
 * checked; one that fails its check stops the run, since a fast error is not latency.
 */
import { Client } from 'undici';
import { percentile } from './load.js';

export interface LatencyContender {
  name: string;
  origin: string;
  path: string;
  /** Called for every request, so that requests may differ (e.g. one customer after another). */
  headers(): Record<string, string>;
  body: string;
  /** Null when the answer is the expected one, else what is wrong with it. */
  check(status: number, body: string): string | null;
}

export interface InterleavedOptions {
  contenders: LatencyContender[];
  /** Measured requests per contender. */
  samples: number;
  /** Requests per contender in one round. */
  roundSize: number;
  /** Unmeasured requests per contender first (connections, JIT, caches). */
  warmup: number;
  timeoutS?: number;
}

export interface LatencySummary {
  name: string;
  count: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

export async function runInterleaved(o: InterleavedOptions): Promise<LatencySummary[]> {
  const timeoutMs = (o.timeoutS ?? 10) * 1000;
  const clients = o.contenders.map((c) => new Client(c.origin, { pipelining: 1, keepAliveTimeout: 65_000 }));
  const samples = o.contenders.map(() => new Float64Array(o.samples));
  try {
    const once = async (i: number): Promise<number> => {
      const c = o.contenders[i];
      const started = performance.now();
      const res = await clients[i].request({
        method: 'POST',
        path: c.path,
        headers: c.headers(),
        body: c.body,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      const text = await res.body.text();
      const elapsed = performance.now() - started;
      const problem = c.check(res.statusCode, text);
      if (problem !== null) throw new Error(`${c.name}: ${problem}`);
      return elapsed;
    };
    for (let i = 0; i < o.contenders.length; i++) for (let n = 0; n < o.warmup; n++) await once(i);
    for (let done = 0; done < o.samples; done += o.roundSize) {
      const size = Math.min(o.roundSize, o.samples - done);
      for (let i = 0; i < o.contenders.length; i++) {
        for (let n = 0; n < size; n++) samples[i][done + n] = await once(i);
      }
    }
  } finally {
    await Promise.all(clients.map((c) => c.destroy()));
  }
  return o.contenders.map((c, i) => {
    const sorted = samples[i].sort();
    return {
      name: c.name,
      count: sorted.length,
      p50Ms: percentile(sorted, 50),
      p90Ms: percentile(sorted, 90),
      p99Ms: percentile(sorted, 99),
      maxMs: sorted[sorted.length - 1],
    };
  });
}
