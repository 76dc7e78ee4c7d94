/**
 * The gateway bench's report: the targets and whether they were met, latency at one
 * connection, requests/s at many, CPU per request per process, and the billing check,
 * as markdown for docs/PERFORMANCE.md (bench/gateway/run.ts measures).
 */
import type { LatencySummary } from '../lib/interleaved.js';
import type { LoadSummary } from '../lib/load.js';
import { fmt, machineInfo, markdownTable, type Cell } from '../lib/report.js';

export type ContenderName = 'direct' | 'gateway' | 'gateway + spend controls' | 'gateway, translated' | 'bare proxy' | 'bare proxy + access log' | 'Portkey' | 'direct, Responses API' | 'gateway, Responses API';

/** Where CPU time is counted; `proxy` is the process between the load generator and the mock. */
export const cpuParts = ['proxy', 'mock', 'worker', 'postgres', 'redis', 'load generator'] as const;
export type CpuPart = (typeof cpuParts)[number];

/**
 * The hot path targets (docs/PERFORMANCE.md, "Hot path v2 targets"): req/s against the bare
 * proxy, and the p50 the gateway adds at one connection over what the bare proxy adds; the
 * others are this bench's own.
 */
export const targets = { addedP50Ms: 1.5, addedP99Ms: 5, overBareP50Ms: 1.0, vsPortkey: 3, vsBareProxy: 0.65, withControls: 0.95, translated: 0.9 };

/** Steal above this share during a measurement gets a warning in the report. */
export const steal_share_warning = 0.1;

export interface Measured {
  contender: ContenderName;
  stream: boolean;
  round: number;
  load: LoadSummary;
  /** CPU seconds per part while the measurement (warmup included) ran. */
  cpu: Record<CpuPart, number>;
  wallS: number;
  /** Share of the machine's CPU time the hypervisor took meanwhile (bench/lib/cpu.ts stealShare). */
  steal: number;
  /** Plan operations the gateway counted during the run (gateway only). */
  billed: number | null;
}

/** One kind of answer's latency rounds, with CPU microseconds per call of each process. */
export interface LatencyRun {
  stream: boolean;
  results: LatencySummary[];
  cpuUs: { api: number; worker: number; postgres: number; redis: number; bareProxy: number; mock: number };
  /** Share of the machine's CPU time the hypervisor took meanwhile. */
  steal: number;
}

export interface ReportInput {
  command: string;
  /** Which code ran: the commit and any uncommitted changes. */
  codeState: string;
  settings: {
    durationS: number;
    warmupS: number;
    connections: number;
    rounds: number;
    latencySamples: number;
    latencyRoundSize: number;
    latencyDelayMs: number;
    apiLogLevel: string;
  };
  throughput: Measured[];
  latency: LatencyRun[];
  /** Usage records of the bench project in PostgreSQL, by status. */
  usageRecords: Record<string, number>;
  /** Plan operations the organization counted over the whole run. */
  opsTotal: number;
  backlogAfterLoad: number;
  loadBefore: string;
  loadAfter: string;
  /** Which Redis the run used and what it persisted (describeRedis). */
  redisUsed: string;
  /** The run started its own Redis, which no other client uses. */
  ownRedis: boolean;
}

const answerName = (stream: boolean) => (stream ? 'streamed' : 'whole');
const percent = (share: number) => (Number.isFinite(share) ? `${Math.round(share * 100)}%` : '-');

/** A contender's runs of one kind of answer, summed over the rounds. */
function combined(all: Measured[], name: ContenderName, stream: boolean) {
  const runs = all.filter((m) => m.contender === name && m.stream === stream);
  const sum = (f: (m: Measured) => number) => runs.reduce((s, m) => s + f(m), 0);
  const requests = sum((m) => m.load.totalWithWarmup);
  return {
    runs,
    rps: sum((m) => m.load.rps) / runs.length,
    p50Ms: sum((m) => m.load.p50Ms) / runs.length,
    p99Ms: sum((m) => m.load.p99Ms) / runs.length,
    steal: sum((m) => m.steal) / runs.length,
    /** CPU microseconds per request, warmup included. */
    cpuUs: (part: CpuPart) => (sum((m) => m.cpu[part]) / requests) * 1e6,
    proxyCores: sum((m) => m.cpu.proxy) / sum((m) => m.wallS),
  };
}

export function buildReport(r: ReportInput): { markdown: string; allMet: boolean; billingConsistent: boolean } {
  const s = r.settings;
  const names: ContenderName[] = ['direct', 'gateway', 'gateway + spend controls', 'gateway, translated', 'bare proxy', 'bare proxy + access log', 'Portkey', 'direct, Responses API', 'gateway, Responses API'];
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met');
  const checks: { name: string; measured: string; ok: boolean }[] = [];

  const latencyRows: Cell[][] = [];
  const latencyCpuRows: Cell[][] = [];
  for (const { stream, results, cpuUs, steal } of r.latency) {
    const gatewayTotal = cpuUs.api + cpuUs.worker + cpuUs.postgres + cpuUs.redis;
    latencyCpuRows.push([
      answerName(stream),
      ...[cpuUs.api, cpuUs.worker, cpuUs.postgres, cpuUs.redis, gatewayTotal, cpuUs.bareProxy, cpuUs.mock].map(fmt.int),
      percent(steal),
    ]);
    const direct = results.find((x) => x.name === 'direct')!;
    const gateway = results.find((x) => x.name === 'gateway')!;
    for (const x of results) {
      const added = x.name === 'direct' ? ['-', '-'] : [fmt.ms(x.p50Ms - direct.p50Ms), fmt.ms(x.p99Ms - direct.p99Ms)];
      latencyRows.push([answerName(stream), x.name, fmt.int(x.count), fmt.ms(x.p50Ms), fmt.ms(x.p90Ms), fmt.ms(x.p99Ms), fmt.ms(x.maxMs), ...added]);
    }
    const addedP50 = gateway.p50Ms - direct.p50Ms;
    const addedP99 = gateway.p99Ms - direct.p99Ms;
    checks.push({ name: `added p50 latency, ${answerName(stream)} < ${targets.addedP50Ms} ms`, measured: `${fmt.ms(addedP50)} ms`, ok: addedP50 < targets.addedP50Ms });
    checks.push({ name: `added p99 latency, ${answerName(stream)} < ${targets.addedP99Ms} ms`, measured: `${fmt.ms(addedP99)} ms`, ok: addedP99 < targets.addedP99Ms });
    const bare = results.find((x) => x.name === 'bare proxy');
    if (bare) {
      const overBare = gateway.p50Ms - bare.p50Ms;
      checks.push({ name: `added p50 over the bare proxy's, ${answerName(stream)} <= ${targets.overBareP50Ms} ms`, measured: `${fmt.ms(overBare)} ms`, ok: overBare <= targets.overBareP50Ms });
    }
  }

  const throughputRows: Cell[][] = [];
  const cpuRows: Cell[][] = [];
  for (const stream of [false, true]) {
    const gateway = combined(r.throughput, 'gateway', stream);
    for (const name of names) {
      const c = combined(r.throughput, name, stream);
      throughputRows.push([
        answerName(stream),
        name,
        fmt.int(c.rps),
        c.runs.map((m) => fmt.int(m.load.rps)).join(' / '),
        fmt.ms(c.p50Ms),
        fmt.ms(c.p99Ms),
        name === 'gateway' ? '-' : fmt.ratio(gateway.rps / c.rps),
        percent(c.steal),
      ]);
      const direct = name.startsWith('direct');
      const parts = cpuParts.map((p) => (p === 'proxy' && direct ? '-' : fmt.int(c.cpuUs(p))));
      const total = cpuParts.reduce((sum, p) => sum + c.cpuUs(p), 0);
      cpuRows.push([answerName(stream), name, ...parts, fmt.int(total), direct ? '-' : c.proxyCores.toFixed(2)]);
    }
    const vsPortkey = gateway.rps / combined(r.throughput, 'Portkey', stream).rps;
    const vsBare = gateway.rps / combined(r.throughput, 'bare proxy', stream).rps;
    checks.push({ name: `gateway req/s >= ${targets.vsPortkey}x Portkey's, ${answerName(stream)}`, measured: fmt.ratio(vsPortkey), ok: vsPortkey >= targets.vsPortkey });
    checks.push({ name: `gateway req/s >= ${targets.vsBareProxy}x the bare proxy's, ${answerName(stream)}`, measured: fmt.ratio(vsBare), ok: vsBare >= targets.vsBareProxy });
    const withControls = combined(r.throughput, 'gateway + spend controls', stream).rps / gateway.rps;
    checks.push({
      name: `gateway req/s with a budget and alert settings on every customer >= ${targets.withControls}x without, ${answerName(stream)}`,
      measured: fmt.ratio(withControls),
      ok: withControls >= targets.withControls,
    });
    // Issue 22: a chat client calling an Anthropic-format model, translated both ways.
    const translated = combined(r.throughput, 'gateway, translated', stream).rps / gateway.rps;
    checks.push({
      name: `gateway req/s through the chat <-> messages translation >= ${targets.translated}x native, ${answerName(stream)}`,
      measured: fmt.ratio(translated),
      ok: translated >= targets.translated,
    });
  }

  const gatewayRuns = r.throughput.filter((m) => m.billed !== null);
  const billedInLoad = gatewayRuns.reduce((sum, m) => sum + (m.billed ?? 0), 0);
  const answeredInLoad = gatewayRuns.reduce((sum, m) => sum + m.load.totalWithWarmup - m.load.non2xx, 0);
  const settled = r.usageRecords.settled ?? 0;
  const aborted = r.usageRecords.client_aborted ?? 0;
  const failed = r.usageRecords.failed ?? 0;
  // Every call that was charged has one settled or client_aborted record and one plan operation.
  const billingConsistent = settled + aborted === r.opsTotal;

  const steals = [...r.throughput.map((x) => x.steal), ...r.latency.map((x) => x.steal)];
  const stealMax = Math.max(...steals);
  const m = machineInfo();
  const markdown = [
    '## Model gateway (`npm run bench:gateway`)',
    '',
    `Command: \`${r.command}\` (from the repository root; Redis and PostgreSQL on 127.0.0.1).`,
    '',
    `Run ${new Date().toISOString()} on ${m.cpus} CPUs (${m.cpuModel}), Node ${m.node}; one mock upstream process for every contender; ` +
      `gateway API log level \`${s.apiLogLevel}\`. Code: ${r.codeState}.`,
    '',
    `- ${r.redisUsed}`,
    `- load before: \`${r.loadBefore}\``,
    `- load after: \`${r.loadAfter}\``,
    ...(stealMax > steal_share_warning
      ? [`- the hypervisor took up to ${percent(stealMax)} of this VM's CPU time during a measurement (steal column): such numbers say more about the host than about the code`]
      : []),
    '',
    markdownTable(
      ['target', 'measured', 'verdict'],
      checks.map((c) => [c.name, c.measured, verdict(c.ok)]),
    ),
    '',
    `Latency at one connection, the mock waiting ${s.latencyDelayMs} ms before it answers; ${fmt.int(s.latencySamples)} samples per contender ` +
      `in interleaved rounds of ${s.latencyRoundSize}; time to the last byte; added = contender minus direct:`,
    '',
    markdownTable(['answer', 'contender', 'samples', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'added p50 ms', 'added p99 ms'], latencyRows),
    '',
    'CPU microseconds per call during those rounds (warmup included): the gateway\'s API process, and the worker, PostgreSQL and Redis, ' +
      'which only gateway calls use then (their polling included); the bare proxy process; the mock, per call of any contender; ' +
      'and the steal meanwhile:',
    '',
    markdownTable(['answer', 'gateway API', 'worker', 'PostgreSQL', 'Redis', 'gateway total', 'bare proxy', 'mock', 'steal'], latencyCpuRows),
    '',
    `Requests/s at ${s.connections} connections, the mock answering at once; ${s.rounds} rounds of ${s.durationS} s after a ${s.warmupS} s warmup ` +
      'per contender (the order reversed every other round); req/s, percentiles and steal (the share of the machine\'s CPU time ' +
      'the hypervisor gave to other guests meanwhile) are the means of the rounds. "bare proxy + access log" is the bare proxy ' +
      'writing the API\'s access log (src/http/access-log.ts at the API\'s log level): the difference between the two is the price of that log. ' +
      'The ", Responses API" rows are the same call as a Responses API call (`POST /v1/responses`, a model of wire format `responses`), to the mock directly and through the gateway:',
    '',
    markdownTable(['answer', 'contender', 'req/s', 'req/s per round', 'p50 ms', 'p99 ms', 'gateway ÷ this', 'steal'], throughputRows),
    '',
    `CPU microseconds per request, by process, over the rounds (warmup included; ${r.ownRedis ? "PostgreSQL is shared, so other clients' work is counted too; Redis is the bench's own" : "Redis and PostgreSQL are shared, so other clients' work is counted too"}); ` +
      "proxy cores = the proxy's CPU seconds per second:",
    '',
    markdownTable(['answer', 'contender', 'proxy', 'mock', 'worker', 'PostgreSQL', 'Redis', 'load generator', 'total', 'proxy cores'], cpuRows),
    '',
    `Billing: the gateway counted ${fmt.int(billedInLoad)} billed calls during its throughput runs, which answered ${fmt.int(answeredInLoad)} ` +
      `(calls cut off when a run stopped are billed as client_aborted). After the run PostgreSQL holds ${fmt.int(settled)} settled, ` +
      `${fmt.int(aborted)} client_aborted and ${fmt.int(failed)} failed usage records for the bench project, and the plan counted ` +
      `${fmt.int(r.opsTotal)} operations: ${billingConsistent ? 'consistent' : 'NOT consistent'}. ` +
      `Outbox entries waiting right after the throughput runs: ${fmt.int(r.backlogAfterLoad)}.`,
  ].join('\n');
  return { markdown, allMet: checks.every((c) => c.ok), billingConsistent };
}
