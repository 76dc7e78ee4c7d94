/**
 * Runs autocannon and reduces its result to the numbers a bench table needs. Latency
 * percentiles come from the response times autocannon reports per request (sub-millisecond
 * floats) because its own histogram records whole milliseconds; its coordinated-omission
 * corrected p99 is kept beside them for rate-limited runs.
 */
import autocannon from 'autocannon';

/** Share of failed requests (connection errors, timeouts, non-2xx) a measurement may have. */
export const failure_ratio_max = 0.001;
export const latency_samples_max = 5_000_000;

export interface LoadOptions {
  title: string;
  url: string;
  connections: number;
  durationS: number;
  warmupS: number;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  requests?: autocannon.RequestStep[];
  /** Requests per second over all connections; unlimited when absent. */
  overallRate?: number;
  /** Seconds after which one request counts as a timeout. */
  timeoutS?: number;
}

export interface LoadSummary {
  title: string;
  connections: number;
  durationS: number;
  /** Mean 2xx-or-not responses per second (autocannon's per-second samples). */
  rps: number;
  total: number;
  /** Requests including the warmup's, for CPU per request over the whole run. */
  totalWithWarmup: number;
  p50Ms: number;
  p975Ms: number;
  p99Ms: number;
  maxMs: number;
  /** autocannon's p99 in whole ms; corrected for coordinated omission when rate-limited. */
  correctedP99Ms: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  overallRate?: number;
}

/** Percentile (0..100) of sorted values by the nearest-rank method. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

export async function runLoad(o: LoadOptions): Promise<LoadSummary> {
  let samples = new Float64Array(1 << 16);
  let count = 0;
  const opts: autocannon.Options = { url: o.url, title: o.title, connections: o.connections, duration: o.durationS, timeout: o.timeoutS ?? 10 };
  // autocannon merges options over its defaults, so an explicit undefined would erase one.
  if (o.warmupS > 0) opts.warmup = { connections: o.connections, duration: o.warmupS };
  if (o.method !== undefined) opts.method = o.method;
  if (o.headers !== undefined) opts.headers = o.headers;
  if (o.body !== undefined) opts.body = o.body;
  if (o.requests !== undefined) opts.requests = o.requests;
  if (o.overallRate !== undefined) opts.overallRate = o.overallRate;
  const instance = autocannon(opts);
  // With a warmup, autocannon returns the tracker of the measured run, so warmup responses
  // never reach this listener.
  instance.on('response', (_client, status, _bytes, ms) => {
    if (status < 200 || status >= 300 || count >= latency_samples_max) return;
    if (count === samples.length) {
      const grown = new Float64Array(samples.length * 2);
      grown.set(samples);
      samples = grown;
    }
    samples[count++] = ms;
  });
  const r = await instance;
  const sorted = samples.subarray(0, count).sort();
  const statusCodes: Record<string, number> = {};
  for (const [code, s] of Object.entries(r.statusCodeStats ?? {})) statusCodes[code] = Number(s.count);
  return {
    title: o.title,
    connections: o.connections,
    durationS: r.duration,
    rps: r.requests.average,
    total: r.requests.total,
    totalWithWarmup: r.requests.total + (r.warmup?.requests.total ?? 0),
    p50Ms: percentile(sorted, 50),
    p975Ms: percentile(sorted, 97.5),
    p99Ms: percentile(sorted, 99),
    maxMs: count > 0 ? sorted[count - 1] : Number.NaN,
    correctedP99Ms: r.latency.p99,
    errors: r.errors,
    timeouts: r.timeouts,
    non2xx: r.non2xx,
    statusCodes,
    overallRate: o.overallRate,
  };
}

/**
 * A run whose failures exceed failure_ratio_max measured the wrong thing (fast 4xx answers
 * or a dead server look like throughput), so it stops the bench.
 */
export function assertHealthy(s: LoadSummary): LoadSummary {
  const failed = s.errors + s.non2xx;
  if (s.total === 0 || failed > s.total * failure_ratio_max) {
    throw new Error(
      `${s.title}: ${failed} of ${s.total} requests failed (errors ${s.errors}, timeouts ${s.timeouts}, status codes ${JSON.stringify(s.statusCodes)})`,
    );
  }
  return s;
}

/** Runs `measure` for each connection count and returns the one with the most requests/s. */
export async function pickConnections(
  candidates: number[],
  measure: (connections: number) => Promise<LoadSummary>,
): Promise<{ connections: number; trials: LoadSummary[] }> {
  const trials: LoadSummary[] = [];
  for (const c of candidates) trials.push(assertHealthy(await measure(c)));
  const best = trials.reduce((a, b) => (b.rps > a.rps ? b : a));
  return { connections: best.connections, trials };
}
