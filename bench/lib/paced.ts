/**
 * An open-loop load generator: requests start on a fixed schedule (rate per second, evenly
 * spaced) whatever the server's answers do, and each latency is measured from the time the
 * request was due, so a stall shows in the percentiles instead of slowing the sender down
 * (no coordinated omission).
 *
 * autocannon's `overallRate` is not this: each connection gets a per-second budget that it
 * spends as fast as it can at the start of every second (node_modules/autocannon/lib/
 * httpClient.js, `reqsMadeThisSecond`), so a "half rate" run is a full-speed burst followed
 * by idle time, and its latency is the saturated latency.
 */
import { Pool } from 'undici';
import { percentile, type LoadSummary } from './load.js';

export interface PacedOptions {
  title: string;
  origin: string;
  /** Requests per second, spread evenly. */
  rate: number;
  /** Upper bound on open connections; requests queue in the pool beyond it. */
  connections: number;
  durationS: number;
  warmupS: number;
  method: string;
  headers: Record<string, string>;
  /** Path and body of the next request. */
  next: () => { path: string; body: string };
  timeoutS?: number;
}

/** The shortest sleep of the scheduler; requests due meanwhile go out together. */
export const tick_ms = 1;

export async function runPaced(o: PacedOptions): Promise<LoadSummary> {
  const pool = new Pool(o.origin, { connections: o.connections, keepAliveTimeout: 65_000 });
  const timeoutMs = (o.timeoutS ?? 10) * 1000;
  try {
    await phase(pool, o, o.warmupS, timeoutMs, null);
    const rec: Recorder = { samples: [], counts: { errors: 0, timeouts: 0, non2xx: 0, statusCodes: {} } };
    const started = performance.now();
    const sent = await phase(pool, o, o.durationS, timeoutMs, rec);
    const seconds = (performance.now() - started) / 1000;
    const sorted = Float64Array.from(rec.samples).sort();
    const p99 = percentile(sorted, 99);
    return {
      title: o.title,
      connections: o.connections,
      durationS: seconds,
      rps: sent / seconds,
      total: sent,
      totalWithWarmup: sent + Math.round(o.rate * o.warmupS),
      p50Ms: percentile(sorted, 50),
      p975Ms: percentile(sorted, 97.5),
      p99Ms: p99,
      maxMs: sorted.length > 0 ? sorted[sorted.length - 1] : Number.NaN,
      // Latencies already count from the due time, so there is nothing to correct.
      correctedP99Ms: p99,
      ...rec.counts,
      overallRate: o.rate,
    };
  } finally {
    await pool.destroy();
  }
}

interface Recorder {
  samples: number[];
  counts: { errors: number; timeouts: number; non2xx: number; statusCodes: Record<string, number> };
}

/** Sends on schedule for `durationS`, then waits for the answers; returns how many it sent. */
async function phase(pool: Pool, o: PacedOptions, durationS: number, timeoutMs: number, rec: Recorder | null): Promise<number> {
  if (durationS <= 0) return 0;
  const intervalMs = 1000 / o.rate;
  const start = performance.now();
  const endMs = durationS * 1000;
  const inFlight = new Set<Promise<void>>();
  let sent = 0;
  const fire = (dueAt: number) => {
    const { path, body } = o.next();
    const p = pool
      .request({ method: o.method as 'POST', path, headers: o.headers, body, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
      .then(async (res) => {
        await res.body.dump();
        if (!rec) return;
        const code = String(res.statusCode);
        rec.counts.statusCodes[code] = (rec.counts.statusCodes[code] ?? 0) + 1;
        if (res.statusCode >= 200 && res.statusCode < 300) rec.samples.push(performance.now() - dueAt);
        else rec.counts.non2xx++;
      })
      .catch((err: { code?: string }) => {
        if (!rec) return;
        rec.counts.errors++;
        if (err.code === 'UND_ERR_HEADERS_TIMEOUT' || err.code === 'UND_ERR_BODY_TIMEOUT') rec.counts.timeouts++;
      })
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
  };
  for (;;) {
    const elapsed = performance.now() - start;
    if (elapsed >= endMs) break;
    const due = Math.min(Math.floor(elapsed / intervalMs) + 1, Math.ceil(endMs / intervalMs));
    while (sent < due) fire(start + sent++ * intervalMs);
    // Sleep until the next request is due; timers fire no sooner than about 1 ms anyway.
    const wait = start + sent * intervalMs - performance.now();
    await new Promise((r) => setTimeout(r, Math.max(tick_ms, wait)));
  }
  await Promise.all(inFlight);
  return sent;
}
