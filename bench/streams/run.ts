/**
 * `npm run bench:streams`: many streamed calls at once (issue 22, part 6). For each target,
 * in one run on one mock upstream (src/gateway/mock/main.ts, pacing each stream with its own
 * timers): STREAMS_COUNT (1,000) concurrent streamed chat completions of 20 events 100 ms
 * apart, each read to its end by a load generator in a process of its own
 * (bench/streams/client.ts). Targets: the mock called directly, the bare Express + undici
 * proxy (bench/gateway/bare-proxy.ts) and the gateway (one API process and one worker, as
 * bench:gateway starts them: every call held, relayed, settled, its trailers sent, and
 * persisted). Per run: completion latency p50/p99/max, all-done time, chunks and events
 * received, CPU seconds of each process, the proxy's RSS idle and peak (memory per open
 * stream = (peak - idle) / streams), and for the gateway the cost trailers and the GATEWAY
 * ledger entries PostgreSQL recorded, which must both equal the streams.
 *
 * Knobs: STREAMS_COUNT (1000), BENCH_ROUNDS (2), STREAMS_WARMUP (200 streams per target
 * first), STREAMS_CHUNK_DELAY_MS (100), STREAMS_PAUSE_MS (5000, before each run), and those
 * of every bench (docs/PERFORMANCE.md). With BENCH_CPU_PROF_DIR it also writes
 * gateway-windows.json there, the gateway's rounds for bench/streams/parts.ts.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'slonik';
import { request } from 'undici';
import { z } from 'zod';
import { mockDirective } from '../../src/gateway/mock/controls.js';
import { matchingProcessesCpu, processCpu, redisCpu, withCpu, type CpuSource } from '../lib/cpu.js';
import { describeRedis } from '../lib/bench-redis.js';
import { freePort, waitForPort, waitUntil, type NodeProcess } from '../lib/processes.js';
import { uptime, writeSection } from '../lib/report.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { createBenchRuntime, createPaidProject, outboxBacklog, startBenchService, type BenchServiceOptions } from '../lib/service.js';
import { startBareProxy, startMock } from '../gateway/contenders.js';
import type { ClientResult } from './client.js';
import { buildStreamsReport, type StreamsRun, type Target } from './report.js';
import { rssSampler } from './rss.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const env = process.env;

const settings = {
  streams: Number(env.STREAMS_COUNT ?? 1000),
  rounds: Number(env.BENCH_ROUNDS ?? 2),
  warmup: Number(env.STREAMS_WARMUP ?? 200),
  chunkDelayMs: Number(env.STREAMS_CHUNK_DELAY_MS ?? 100),
  /**
   * Before each measured run: longer than undici's keep-alive (4 s), so that every proxy
   * opens its connections to the mock anew, as the first round's would.
   */
  pauseMs: Number(env.STREAMS_PAUSE_MS ?? 5_000),
  /** 16 output tokens: the role chunk, 16 deltas, the finish chunk, the usage chunk and [DONE]. */
  outputTokens: 16,
  events: 20,
  customers: 8,
  depositCredits: 1_000_000_000_000,
  ...benchEnvSettings(env),
  startTimeoutMs: 30_000,
  drainTimeoutMs: 120_000,
  runTimeoutMs: 900_000,
};

const gatewayModel = 'bench-chat';
const upstreamModel = 'gpt-4o-mini';
const command = `${settings.redisPersistence === 'shared' ? '' : `BENCH_REDIS_PERSISTENCE=${settings.redisPersistence} `}npm run bench:streams`;
const run = createBenchRun({ logDirPrefix: 'svc-bench-streams-', runTimeoutMs: settings.runTimeoutMs });
const { tag, redisPrefix, group, logDir } = run;

interface Contender {
  name: Target;
  origin: string;
  model: string;
  headers: Record<string, string>;
  proc: NodeProcess | null;
}

async function main(): Promise<void> {
  const loadBefore = uptime();
  console.log(`bench:streams ${tag}; ${loadBefore}`);
  const redisUrl = await run.startRedis(settings.redisPersistence, settings.startTimeoutMs);
  const serviceOptions: BenchServiceOptions = { ...settings, root, group, logDir, redisPrefix, redisUrl };
  const service = await createBenchRuntime(serviceOptions);
  run.runtime = service.rt;
  const redisUsed = await describeRedis(service.rt.redis, settings.redisPersistence, run.ownRedis);
  const { api, worker, apiUrl } = await startBenchService(serviceOptions, service);

  const [mockPort, barePort] = [await freePort(), await freePort()];
  const upstreamKey = `sk-bench-${randomBytes(12).toString('hex')}`;
  const mockUrl = `http://127.0.0.1:${mockPort}/v1`;
  const children = { group, root, logDir, env, fromSource: settings.fromSource };
  const mock = startMock(children, mockPort, upstreamKey);
  const bare = startBareProxy(children, { name: 'bare proxy', port: barePort, mockUrl, log: 'bare-proxy.log' });
  await waitForPort(mockPort, settings.startTimeoutMs, mock);
  await waitForPort(barePort, settings.startTimeoutMs, bare);
  console.log(`children: api ${api.pid}, worker ${worker.pid}, mock ${mock.pid}, bare proxy ${bare.pid}; logs in ${logDir}`);

  const { organizationId, projectId, projectKey } = await createPaidProject(service.rt, `bench streams ${tag}`);
  const { secret: adminKey } = await service.rt.keyQueries.insertKey({ organizationId, projectId: null, type: 'admin' });
  await callApi(apiUrl, 'PUT', `/v1/admin/projects/${projectId}/models/${gatewayModel}`, adminKey, {
    provider: 'openai',
    upstream_base_url: mockUrl,
    upstream_model: upstreamModel,
    upstream_api_key: upstreamKey,
    context_window: 128_000,
    max_output_tokens: 4_096,
    supports_streaming: true,
    input_price_per_million_credits: 150_000,
    output_price_per_million_credits: 600_000,
  });
  const customers = Array.from({ length: settings.customers }, (_, i) => `bench-${i}`);
  for (const c of customers) await callApi(apiUrl, 'POST', '/v1/customers/deposit', projectKey, { customer_id: c, amount: settings.depositCredits });

  const json = { 'content-type': 'application/json' };
  const upstreamAuth = { ...json, authorization: `Bearer ${upstreamKey}` };
  const contenders: Contender[] = [
    { name: 'direct', origin: `http://127.0.0.1:${mockPort}`, model: upstreamModel, headers: upstreamAuth, proc: null },
    { name: 'bare proxy', origin: `http://127.0.0.1:${barePort}`, model: upstreamModel, headers: upstreamAuth, proc: bare },
    {
      name: 'gateway',
      origin: apiUrl,
      model: gatewayModel,
      headers: { ...json, authorization: `Bearer ${projectKey}`, 'x-service-customer': '{customer}' },
      proc: api,
    },
  ];

  const database = new URL(settings.databaseUrl).pathname.slice(1);
  const background: CpuSource[] = [
    processCpu('mock', mock.pid),
    processCpu('worker', worker.pid),
    matchingProcessesCpu('postgres', new RegExp(`^postgres: .* ${database} `)),
    redisCpu('redis', service.rt.redis),
  ];
  const gatewayEntries = async () =>
    service.rt.db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int8 AS n FROM ledger_entries WHERE project_id = ${projectId} AND type = 'GATEWAY'`);
  const drain = () => waitUntil('the outboxes to drain to PostgreSQL', async () => (await outboxBacklog(service.rt.redis, redisPrefix)) === 0, settings.drainTimeoutMs, worker);

  const streamsOf = async (c: Contender, streams: number, label: string): Promise<ClientResult> => {
    const resultPath = join(logDir, `client-${label}.json`);
    const client = group.start({
      name: `load generator (${label})`,
      script: join(here, 'client.ts'),
      env: {
        ...env,
        NODE_ENV: 'production',
        STREAMS_ORIGIN: c.origin,
        STREAMS_COUNT: String(streams),
        STREAMS_HEADERS: JSON.stringify(c.headers),
        STREAMS_CUSTOMERS: JSON.stringify(customers),
        STREAMS_BODY: requestBody(c.model),
        STREAMS_EVENTS: String(settings.events),
        STREAMS_RESULT: resultPath,
      },
      logPath: join(logDir, `client-${label}.log`),
    });
    const exit = await client.exited;
    if (exit !== '0') throw new Error(`the load generator exited ${exit}: ${client.logTail()}`);
    return JSON.parse(readFileSync(resultPath, 'utf8')) as ClientResult;
  };

  console.log(`warm-up: ${settings.warmup} streams per target`);
  for (const c of contenders) {
    const r = await streamsOf(c, settings.warmup, `${c.name}-warmup`.replace(/ /g, '-'));
    if (r.failed > 0 || r.shortStreams > 0) throw new Error(`${c.name}: ${r.failed} failed, ${r.shortStreams} short in the warm-up: ${JSON.stringify(r.failures)}`);
  }
  await drain();

  const runs: StreamsRun[] = [];
  /** The gateway rounds on the monotonic clock in us, for bench/profile/summary.ts (BENCH_CPU_PROF_DIR). */
  const gatewayWindows: [number, number][] = [];
  const nowUs = () => Number(process.hrtime.bigint() / 1000n);
  for (let round = 1; round <= settings.rounds; round++) {
    const order = round % 2 === 1 ? contenders : [...contenders].reverse();
    for (const c of order) {
      await new Promise((resolve) => setTimeout(resolve, settings.pauseMs));
      const entriesBefore = c.name === 'gateway' ? await gatewayEntries() : 0;
      const rss = c.proc ? rssSampler(c.proc.pid) : null;
      const sources = c.proc ? [processCpu('proxy', c.proc.pid), ...background] : background;
      const from = nowUs();
      const { result, cpu } = await withCpu(sources, () => streamsOf(c, settings.streams, `${c.name}-${round}`.replace(/ /g, '-')));
      if (c.name === 'gateway') gatewayWindows.push([from, nowUs()]);
      const memory = rss?.stop() ?? null;
      let ledgerEntries: number | null = null;
      if (c.name === 'gateway') {
        await drain();
        ledgerEntries = (await gatewayEntries()) - entriesBefore;
      }
      const r: StreamsRun = { target: c.name, round, result, cpu, memory, ledgerEntries };
      runs.push(r);
      console.log(`  ${describe(r)}`);
      // The next target starts on a quiet machine: the worker has copied every entry.
      if (c.name === 'gateway') await drain();
    }
  }

  if (settings.cpuProfDir) {
    // Copy it beside the API's .cpuprofile as <file>.windows.json; requests are the streams.
    writeFileSync(join(settings.cpuProfDir, 'gateway-windows.json'), JSON.stringify({ windows: gatewayWindows, requests: settings.streams * gatewayWindows.length }));
  }
  const report = buildStreamsReport({ command, settings, runs, loadBefore, loadAfter: uptime(), redisUsed });
  console.log(`\n${report.markdown}\n`);
  if (settings.writeDocs) {
    writeSection(join(root, 'docs', 'PERFORMANCE.md'), 'streams', report.markdown);
    console.log('wrote docs/PERFORMANCE.md');
  }
  if (!report.billingComplete) throw new Error('a gateway stream was not billed (no cost trailer or no GATEWAY ledger entry; see the report)');
}

function describe(r: StreamsRun): string {
  const lat = [...r.result.latenciesMs].sort((a, b) => a - b);
  const at = (p: number) => lat[Math.min(lat.length - 1, Math.max(0, Math.ceil((p / 100) * lat.length) - 1))] ?? Number.NaN;
  const mem = r.memory ? `; RSS ${r.memory.idleMb.toFixed(0)} -> ${r.memory.peakMb.toFixed(0)} MB` : '';
  const billed = r.ledgerEntries !== null ? `; trailers ${r.result.costTrailers}, GATEWAY entries ${r.ledgerEntries}` : '';
  const first = [...r.result.firstEventMs].sort((a, b) => a - b);
  const firstAt = (p: number) => first[Math.min(first.length - 1, Math.max(0, Math.ceil((p / 100) * first.length) - 1))] ?? Number.NaN;
  return (
    `${r.target} round ${r.round}: ${r.result.completed}/${r.result.streams} done, first event p50 ${firstAt(50).toFixed(0)} p99 ${firstAt(99).toFixed(0)} ms, ` +
    `p50 ${at(50).toFixed(0)} ms, p99 ${at(99).toFixed(0)} ms, ` +
    `all done ${r.result.allDoneMs.toFixed(0)} ms, events ${r.result.events}; CPU s: ${Object.entries(r.cpu).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')}, ` +
    `load generator ${r.result.cpuS.toFixed(2)}${mem}${billed}${r.result.failed > 0 ? `; failures ${JSON.stringify(r.result.failures)}` : ''}`
  );
}

/** A streamed chat completion the mock answers with settings.events events, settings.chunkDelayMs apart. */
function requestBody(model: string): string {
  const directive = mockDirective({ output_tokens: settings.outputTokens, chunk_delay_ms: settings.chunkDelayMs });
  return JSON.stringify({
    model,
    messages: [{ role: 'user', content: `Summarize how metered billing works in one sentence. ${directive}` }],
    max_completion_tokens: 64,
    stream: true,
    stream_options: { include_usage: true },
  });
}

async function callApi(origin: string, method: 'PUT' | 'POST', path: string, key: string, body: unknown): Promise<void> {
  const res = await request(`${origin}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.body.text();
  if (res.statusCode >= 300) throw new Error(`${method} ${path} answered ${res.statusCode}: ${text}`);
}

await run.finish(main);
