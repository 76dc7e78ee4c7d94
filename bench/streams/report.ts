/**
 * The report of `npm run bench:streams` (bench/streams/run.ts): per target and round the
 * completion latency of the concurrent streams, the all-done time, CPU seconds per process,
 * memory per open stream, the billing check, and the gateway against the bare proxy, as
 * markdown for docs/PERFORMANCE.md.
 */
import { fmt, machineInfo, markdownTable, type Cell } from '../lib/report.js';
import type { ClientResult } from './client.js';
import type { RssReading } from './rss.js';

export type Target = 'direct' | 'bare proxy' | 'gateway';

/** bare proxy p99 / gateway p99 and the same for the all-done time (issue 22, part 6). */
export const vs_bare_target = 0.8;

export interface StreamsRun {
  target: Target;
  round: number;
  result: ClientResult;
  /** CPU seconds per process while the streams ran; `proxy` is the bare proxy's or the API's. */
  cpu: Record<string, number>;
  memory: RssReading | null;
  /** GATEWAY ledger entries PostgreSQL recorded for the run (gateway only). */
  ledgerEntries: number | null;
}

interface ReportInput {
  command: string;
  settings: { streams: number; rounds: number; warmup: number; chunkDelayMs: number; events: number; customers: number };
  runs: StreamsRun[];
  loadBefore: string;
  loadAfter: string;
  redisUsed: string;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export function buildStreamsReport(input: ReportInput): { markdown: string; billingComplete: boolean } {
  const { settings: s, runs } = input;
  const m = machineInfo();
  const cpuNames = ['proxy', 'mock', 'worker', 'postgres', 'redis'];
  const rows: Cell[][] = runs.map((r) => {
    const lat = r.result.latenciesMs;
    const perStreamKb = r.memory ? ((r.memory.peakMb - r.memory.idleMb) * 1024) / s.streams : Number.NaN;
    return [
      `${r.target} (round ${r.round})`,
      `${r.result.completed} / ${r.result.streams}`,
      fmt.int(percentile(r.result.firstEventMs, 50)),
      fmt.int(percentile(lat, 50)),
      fmt.int(percentile(lat, 99)),
      fmt.int(percentile(lat, 100)),
      fmt.int(r.result.allDoneMs),
      fmt.int(r.result.chunks),
      fmt.int(r.result.events),
      ...cpuNames.map((n) => (r.cpu[n] === undefined ? '-' : r.cpu[n]!.toFixed(2))),
      r.result.cpuS.toFixed(2),
      r.memory ? `${fmt.int(r.memory.idleMb)} -> ${fmt.int(r.memory.peakMb)}` : '-',
      Number.isFinite(perStreamKb) ? fmt.int(perStreamKb) : '-',
    ];
  });

  const ratioRows: Cell[][] = [];
  const missed: number[] = [];
  for (let round = 1; round <= s.rounds; round++) {
    const bare = runs.find((r) => r.target === 'bare proxy' && r.round === round);
    const gw = runs.find((r) => r.target === 'gateway' && r.round === round);
    if (!bare || !gw) continue;
    const p99 = percentile(bare.result.latenciesMs, 99) / percentile(gw.result.latenciesMs, 99);
    const done = bare.result.allDoneMs / gw.result.allDoneMs;
    if (!(p99 >= vs_bare_target && done >= vs_bare_target)) missed.push(round);
    ratioRows.push([`round ${round}`, fmt.ratio(p99), fmt.ratio(done)]);
  }

  const gatewayRuns = runs.filter((r) => r.target === 'gateway');
  const billingComplete = gatewayRuns.every((r) => r.result.costTrailers === r.result.streams && r.ledgerEntries === r.result.streams);
  const billingRows: Cell[][] = gatewayRuns.map((r) => [`round ${r.round}`, fmt.int(r.result.streams), fmt.int(r.result.costTrailers), fmt.int(r.ledgerEntries ?? Number.NaN)]);

  const markdown = [
    '## Many streams at once (`npm run bench:streams`)',
    '',
    `Command: \`${input.command}\` (from the repository root; Redis and PostgreSQL on 127.0.0.1).`,
    '',
    `${fmt.int(s.streams)} streamed chat completions started at once per target and round, each ${s.events} events ${s.chunkDelayMs} ms apart ` +
      `from the mock (its own timer per stream), read to the end by a load generator in its own process (bench/streams/client.ts; one ` +
      `connection per stream; its CPU is the "load gen" column and competes with the rest on the same cores). Latency: from the start of ` +
      `all the streams to each one's first event and last byte (trailers included). ${s.warmup} streams per target first as a warm-up; ${s.rounds} rounds, ` +
      `order reversed every other round; the gateway bills ${s.customers} customers in turn. RSS: the proxy's VmRSS before the round and its ` +
      `peak during it; per stream = (peak - before) / streams.`,
    '',
    `Machine: ${m.cpus} CPUs (${m.cpuModel}), Node ${m.node}. Load before: ${input.loadBefore}. After: ${input.loadAfter}. ${input.redisUsed}.`,
    '',
    markdownTable(
      ['target', 'done', 'first event p50 ms', 'p50 ms', 'p99 ms', 'max ms', 'all done ms', 'chunks', 'events', 'proxy CPU s', 'mock', 'worker', 'postgres', 'redis', 'load gen', 'RSS MB', 'KB per stream'],
      rows,
    ),
    '',
    `Gateway against the bare proxy (target: >= ${vs_bare_target}x on both; ${missed.length === 0 ? 'met in every round' : `**not met** in round ${missed.join(', ')}`}):`,
    '',
    markdownTable(['round', 'bare p99 / gateway p99', 'bare all done / gateway all done'], ratioRows),
    '',
    `Billing (every stream must carry its cost trailer and have its GATEWAY ledger entry in PostgreSQL): ${billingComplete ? 'complete' : '**incomplete**'}.`,
    '',
    markdownTable(['gateway', 'streams', 'cost trailers', 'GATEWAY entries'], billingRows),
  ].join('\n');
  return { markdown, billingComplete };
}
