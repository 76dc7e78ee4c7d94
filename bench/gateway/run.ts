/**
 * `npm run bench:gateway`: what the model gateway adds to an LLM call, all in one run on
 * one mock upstream (src/gateway/mock/main.ts, a child process):
 *
 * (a) latency at one connection with the mock waiting a fixed 20 ms, the gateway and the
 *     mock called directly (and the bare proxy, for where the time goes) in interleaved
 *     rounds (bench/lib/interleaved.ts), whole and streamed answers;
 * (b) requests/s at many connections with the mock answering at once, through the gateway,
 *     directly, through a bare Express 5 pass-through proxy (bench/gateway/bare-proxy.ts)
 *     through the same proxy writing the API's access log (the price of that log), and
 *     through the Portkey gateway (@portkey-ai/gateway, run locally), whole and
 *     streamed, with CPU per request per process; and the same call as a Responses API
 *     call (`POST /v1/responses`), directly and through the gateway.
 *
 * The gateway is the real service: one API process (src/web.ts) and one worker
 * (workers/main.ts), a paid organization, a model configured through the management API,
 * funded customers; every call it answers is held, settled and persisted. Every contender's
 * answer is checked before it is measured, and the gateway's billing is checked after.
 * Prints markdown tables and writes them to docs/PERFORMANCE.md.
 *
 * Knobs (environment): BENCH_DURATION_S (8), BENCH_WARMUP_S (2), BENCH_CONNECTIONS (50),
 * BENCH_ROUNDS (2), BENCH_LATENCY_SAMPLES (1000), BENCH_API_LOG_LEVEL (info),
 * BENCH_CPU_PROF_DIR (a V8 CPU profile of the API process goes there), BENCH_WRITE_DOCS
 * (1; 0 leaves docs/PERFORMANCE.md alone), BENCH_DATABASE_URL, BENCH_REDIS_PERSISTENCE (shared;
 * none, everysec or always start the bench's own Redis with that persistence:
 * bench/lib/bench-redis.ts).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'slonik';
import { request } from 'undici';
import { z } from 'zod';
import { machineTicks, matchingProcessesCpu, processCpu, redisCpu, selfCpu, stealShare, withCpu, type CpuSource } from '../lib/cpu.js';
import { runInterleaved } from '../lib/interleaved.js';
import { assertHealthy, runLoad } from '../lib/load.js';
import { freePort, waitForPort, waitUntil, type NodeProcess } from '../lib/processes.js';
import { describeRedis } from '../lib/bench-redis.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { startBareProxy, startMock } from './contenders.js';
import { createBenchRuntime, createPaidProject, outboxBacklog, startBenchService, type BenchServiceOptions } from '../lib/service.js';
import { uptime, writeSection } from '../lib/report.js';
import { lease_report_ms } from '../../src/plans/leases.js';
import { api_paths, checkAnswer, requestBody, type Api } from './answers.js';
import { buildReport, cpuParts, type ContenderName, type CpuPart, type LatencyRun, type Measured } from './report.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const env = process.env;

const settings = {
  durationS: Number(env.BENCH_DURATION_S ?? 8),
  warmupS: Number(env.BENCH_WARMUP_S ?? 2),
  connections: Number(env.BENCH_CONNECTIONS ?? 50),
  rounds: Number(env.BENCH_ROUNDS ?? 2),
  latencySamples: Number(env.BENCH_LATENCY_SAMPLES ?? 1000),
  latencyRoundSize: 50,
  latencyWarmup: 50,
  latencyDelayMs: 20,
  customers: 8,
  depositCredits: 1_000_000_000_000,
  ...benchEnvSettings(env),
  startTimeoutMs: 30_000,
  drainTimeoutMs: 60_000,
  /** Hard stop for the whole run, setup and cleanup included (a normal run takes about 7 minutes). */
  runTimeoutMs: 900_000,
};

/** The model the gateway's project configures, and the mock's model behind it and the others. */
const gatewayModel = 'bench-chat';
const translatedModel = 'bench-chat-anthropic';
/** The same upstream model, of wire format `responses` (POST /v1/responses). */
const gatewayResponsesModel = 'bench-responses';
const upstreamModel = 'gpt-4o-mini';
/** Credits per million tokens (gpt-4o-mini's list prices), so every call costs something. */
const prices = { input: 150_000, output: 600_000, cacheRead: 75_000, cacheWrite: 0 };

const command = `${settings.redisPersistence === 'shared' ? '' : `BENCH_REDIS_PERSISTENCE=${settings.redisPersistence} `}npm run bench:gateway`;
const run = createBenchRun({ logDirPrefix: 'svc-bench-gw-', runTimeoutMs: settings.runTimeoutMs });
const { tag, redisPrefix, group, logDir } = run;

interface Contender {
  name: ContenderName;
  origin: string;
  /** The model named in the request body. */
  model: string;
  headers(customer: string): Record<string, string>;
  /** The customers its calls bill, one per request in turn (the gateway's contenders only). */
  pool?: string[];
  /** The process between the client and the mock; none when the mock is called directly. */
  proc: NodeProcess | null;
  /** The API called: chat completions unless said. */
  api?: Api;
}

async function main(): Promise<void> {
  const loadBefore = uptime();
  // Read before the children start: the code they run is the code of this moment.
  const code = codeState();
  console.log(`bench:gateway ${tag}; ${loadBefore}; ${code}`);

  const redisUrl = await run.startRedis(settings.redisPersistence, settings.startTimeoutMs);
  const serviceOptions: BenchServiceOptions = { ...settings, root, group, logDir, redisPrefix, redisUrl };
  const service = await createBenchRuntime(serviceOptions);
  run.runtime = service.rt;
  const redis = service.rt.redis;
  const redisUsed = await describeRedis(redis, settings.redisPersistence, run.ownRedis);
  console.log(redisUsed);
  const { api, worker, apiUrl } = await startBenchService(serviceOptions, service);

  const [mockPort, barePort, bareLoggedPort, portkeyPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const upstreamKey = `sk-bench-${randomBytes(12).toString('hex')}`;
  const mockUrl = `http://127.0.0.1:${mockPort}/v1`;
  const children = { group, root, logDir, env, fromSource: settings.fromSource };
  const mock = startMock(children, mockPort, upstreamKey);
  const bare = startBareProxy(children, { name: 'bare proxy', port: barePort, mockUrl, log: 'bare-proxy.log' });
  const bareLogged = startBareProxy(children, {
    name: 'bare proxy + access log', port: bareLoggedPort, mockUrl, log: 'bare-proxy-logged.log', extraEnv: { ACCESS_LOG: '1', LOG_LEVEL: settings.apiLogLevel },
  });
  // Without a Redis connection string Portkey caches nothing and keeps no state between calls.
  const { REDIS_CONNECTION_STRING: _unused, ...portkeyEnv } = env;
  const portkey = group.start({
    name: 'Portkey',
    script: join(root, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js'),
    args: [`--port=${portkeyPort}`, '--headless'],
    env: { ...portkeyEnv, NODE_ENV: 'production', PORTKEY_HOST: '127.0.0.1' },
    nodeArgs: ['--import', join(here, 'portkey-preload.ts')],
    logPath: join(logDir, 'portkey.log'),
  });
  console.log(
    `children: api ${api.pid}, worker ${worker.pid}, mock ${mock.pid}, bare proxy ${bare.pid}, bare proxy + access log ${bareLogged.pid}, Portkey ${portkey.pid}; logs in ${logDir}`,
  );
  for (const [port, proc] of [[mockPort, mock], [barePort, bare], [bareLoggedPort, bareLogged], [portkeyPort, portkey]] as const) {
    await waitForPort(port, settings.startTimeoutMs, proc);
  }

  const { organizationId, projectId, projectKey } = await createPaidProject(service.rt, `bench gateway ${tag}`);
  const { secret: adminKey } = await service.rt.keyQueries.insertKey({ organizationId, projectId: null, type: 'admin' });
  // Through the management API, as a customer of the service would configure it.
  const modelFields = {
    provider: 'openai',
    upstream_base_url: mockUrl,
    upstream_model: upstreamModel,
    upstream_api_key: upstreamKey,
    display_name: 'bench chat model',
    description: 'the mock upstream',
    context_window: 128_000,
    max_output_tokens: 4_096,
    supports_streaming: true,
    input_price_per_million_credits: prices.input,
    output_price_per_million_credits: prices.output,
    cache_read_price_per_million_credits: prices.cacheRead,
    cache_write_price_per_million_credits: prices.cacheWrite,
  };
  await callApi(apiUrl, 'PUT', `/v1/admin/projects/${projectId}/models/${gatewayModel}`, adminKey, modelFields);
  await callApi(apiUrl, 'PUT', `/v1/admin/projects/${projectId}/models/${gatewayResponsesModel}`, adminKey, { ...modelFields, wire_format: 'responses' });
  // The same mock model as an Anthropic-format one: the chat client's calls to it are
  // translated (issue 22), against a target of 0.9x the native path's req/s.
  await callApi(apiUrl, 'PUT', `/v1/admin/projects/${projectId}/models/${translatedModel}`, adminKey, {
    ...modelFields,
    provider: 'anthropic',
    display_name: 'bench chat model, Anthropic format',
    description: 'the mock upstream, called through the translation',
  });
  const customers = Array.from({ length: settings.customers }, (_, i) => `bench-${i}`);
  for (const c of customers) await callApi(apiUrl, 'POST', '/v1/customers/deposit', projectKey, { customer_id: c, amount: settings.depositCredits });
  // The same calls on customers with spend controls (issue 20: within 5% of the gateway without
  // them): a monthly budget and the alert settings, far from what the run spends, so that
  // every hold and settlement checks them and none fires.
  const controlled = Array.from({ length: settings.customers }, (_, i) => `bench-controlled-${i}`);
  for (const c of controlled) {
    await callApi(apiUrl, 'POST', '/v1/customers/deposit', projectKey, { customer_id: c, amount: settings.depositCredits });
    await callApi(apiUrl, 'PATCH', `/v1/customers/${c}`, projectKey, {
      budget: { limit: 100_000_000_000_000, period: 'month' },
      low_balance_threshold: 1_000,
      auto_top_up: { below: 1_000, amount: 1_000_000 },
    });
  }

  const json = { 'content-type': 'application/json' };
  const contenders: Contender[] = [
    { name: 'direct', origin: `http://127.0.0.1:${mockPort}`, model: upstreamModel, proc: null, headers: () => ({ ...json, authorization: `Bearer ${upstreamKey}` }) },
    {
      name: 'gateway',
      origin: apiUrl,
      model: gatewayModel,
      proc: api,
      headers: (customer) => ({ ...json, authorization: `Bearer ${projectKey}`, 'x-service-customer': customer }),
      pool: customers,
    },
    {
      name: 'gateway + spend controls',
      origin: apiUrl,
      model: gatewayModel,
      proc: api,
      headers: (customer) => ({ ...json, authorization: `Bearer ${projectKey}`, 'x-service-customer': customer }),
      pool: controlled,
    },
    {
      name: 'gateway, translated',
      origin: apiUrl,
      model: translatedModel,
      proc: api,
      headers: (customer) => ({ ...json, authorization: `Bearer ${projectKey}`, 'x-service-customer': customer }),
      pool: customers,
    },
    { name: 'bare proxy', origin: `http://127.0.0.1:${barePort}`, model: upstreamModel, proc: bare, headers: () => ({ ...json, authorization: `Bearer ${upstreamKey}` }) },
    {
      name: 'bare proxy + access log',
      origin: `http://127.0.0.1:${bareLoggedPort}`,
      model: upstreamModel,
      proc: bareLogged,
      headers: () => ({ ...json, authorization: `Bearer ${upstreamKey}` }),
    },
    {
      name: 'Portkey',
      origin: `http://127.0.0.1:${portkeyPort}`,
      model: upstreamModel,
      proc: portkey,
      headers: () => ({ ...json, authorization: `Bearer ${upstreamKey}`, 'x-portkey-provider': 'openai', 'x-portkey-custom-host': mockUrl }),
    },
    { name: 'direct, Responses API', origin: `http://127.0.0.1:${mockPort}`, model: upstreamModel, proc: null, api: 'responses', headers: () => ({ ...json, authorization: `Bearer ${upstreamKey}` }) },
    {
      name: 'gateway, Responses API',
      origin: apiUrl,
      model: gatewayResponsesModel,
      proc: api,
      api: 'responses',
      headers: (customer) => ({ ...json, authorization: `Bearer ${projectKey}`, 'x-service-customer': customer }),
      pool: customers,
    },
  ];
  const byName = (name: ContenderName) => contenders.find((c) => c.name === name)!;

  console.log('checking every contender answers the mock\'s answer');
  for (const c of contenders) for (const stream of [false, true]) await verify(c, stream, (c.pool ?? customers)[0]);

  const database = new URL(settings.databaseUrl).pathname.slice(1);
  const background: CpuSource[] = [
    processCpu('mock', mock.pid),
    processCpu('worker', worker.pid),
    matchingProcessesCpu('postgres', new RegExp(`^postgres: .* ${database} `)),
    redisCpu('redis', redis),
    selfCpu('load generator'),
  ];
  const billedOps = async () => (await service.rt.plans.organization(organizationId)).billable_ops;

  /** One autocannon run against one contender, with CPU per process and, for the gateway, what it billed. */
  const measure = async (c: Contender, stream: boolean, round: number): Promise<Measured> => {
    const body = requestBody(c.model, stream, 0, c.api);
    let seq = 0;
    const pool = c.pool ?? customers;
    const opsBefore = c.pool ? await billedOps() : 0;
    const sources = c.proc ? [processCpu('proxy', c.proc.pid), ...background] : background;
    const ticks = machineTicks();
    const { result, cpu, wallS } = await withCpu(sources, () =>
      runLoad({
        title: `${c.name} ${stream ? 'streamed' : 'whole'} round ${round}`,
        url: c.origin,
        connections: settings.connections,
        durationS: settings.durationS,
        warmupS: settings.warmupS,
        requests: [
          {
            method: 'POST',
            path: api_paths[c.api ?? 'chat'],
            // Every contender gets the same per-request work in the load generator.
            setupRequest: (req) => ({ ...req, headers: c.headers(pool[seq++ % pool.length]), body }),
          },
        ],
      }),
    );
    const steal = stealShare(ticks, machineTicks());
    const load = assertHealthy(result);
    const m: Measured = { contender: c.name, stream, round, load, cpu: { proxy: 0, ...cpu } as Record<CpuPart, number>, wallS, steal, billed: null };
    if (c.pool) {
      // The API process reports the operations it served within lease_report_ms: read after that.
      await new Promise((r) => setTimeout(r, 2 * lease_report_ms));
      m.billed = (await billedOps()) - opsBefore;
      const answered = load.totalWithWarmup - load.non2xx;
      // Every answered call was settled before its last byte went out; calls cut off when
      // the load stopped may be billed too (client_aborted), never the reverse.
      if (m.billed < answered) throw new Error(`${load.title}: ${answered} calls answered but only ${m.billed} billed`);
    }
    const perReq = (part: CpuPart) => `${part} ${Math.round((m.cpu[part] / load.totalWithWarmup) * 1e6)}`;
    console.log(
      `  ${load.title}: ${Math.round(load.rps)} req/s, p50 ${load.p50Ms.toFixed(2)} ms, p99 ${load.p99Ms.toFixed(2)} ms; ` +
        `CPU us/req: ${cpuParts.map(perReq).join(', ')}; steal ${Math.round(steal * 100)}%${m.billed !== null ? `; billed ${m.billed}` : ''}`,
    );
    return m;
  };

  console.log(`throughput: ${settings.connections} connections, mock without delay`);
  const throughput: Measured[] = [];
  const order: ContenderName[] = ['direct', 'gateway', 'gateway + spend controls', 'gateway, translated', 'bare proxy', 'bare proxy + access log', 'Portkey', 'direct, Responses API', 'gateway, Responses API'];
  for (const stream of [false, true]) {
    for (let round = 1; round <= settings.rounds; round++) {
      // Reversed every other round, so that no contender always runs first or last.
      const names = round % 2 === 1 ? order : [...order].reverse();
      for (const name of names) throughput.push(await measure(byName(name), stream, round));
    }
  }

  const backlogAfterLoad = await outboxBacklog(redis, redisPrefix);
  // The worker draining a backlog would compete with the latency rounds for the CPU.
  await waitUntil('the outboxes to drain to PostgreSQL', async () => (await outboxBacklog(redis, redisPrefix)) === 0, settings.drainTimeoutMs, worker);

  console.log(`latency: one connection, mock waiting ${settings.latencyDelayMs} ms, ${settings.latencySamples} samples each`);
  const latency: LatencyRun[] = [];
  // Only gateway calls reach the worker, Redis and PostgreSQL during these rounds.
  const latencySources = [processCpu('api', api.pid), processCpu('bare proxy', bare.pid), ...background.filter((b) => b.name !== 'load generator')];
  const callsEach = settings.latencySamples + settings.latencyWarmup;
  for (const stream of [false, true]) {
    let seq = 0;
    const ticks = machineTicks();
    const { result: results, cpu } = await withCpu(latencySources, () => runInterleaved({
      contenders: (['gateway', 'direct', 'bare proxy'] as const).map((name) => {
        const c = byName(name);
        return {
          name,
          origin: c.origin,
          path: '/v1/chat/completions',
          // One customer per request in turn, as in the throughput runs.
          headers: () => c.headers(customers[seq++ % customers.length]),
          body: requestBody(c.model, stream, settings.latencyDelayMs),
          check: checkAnswer(stream, upstreamModel),
        };
      }),
      samples: settings.latencySamples,
      roundSize: settings.latencyRoundSize,
      warmup: settings.latencyWarmup,
    }));
    const steal = stealShare(ticks, machineTicks());
    const perCall = (seconds: number, calls: number) => (seconds / calls) * 1e6;
    const cpuUs = {
      api: perCall(cpu.api, callsEach),
      worker: perCall(cpu.worker, callsEach),
      postgres: perCall(cpu.postgres, callsEach),
      redis: perCall(cpu.redis, callsEach),
      bareProxy: perCall(cpu['bare proxy'], callsEach),
      mock: perCall(cpu.mock, callsEach * 3),
    };
    for (const r of results) {
      console.log(`  ${stream ? 'streamed' : 'whole'} ${r.name}: p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms, max ${r.maxMs.toFixed(2)} ms`);
    }
    console.log(`  steal ${Math.round(steal * 100)}%`);
    latency.push({ stream, results, cpuUs, steal });
  }

  await waitUntil('the outboxes to drain to PostgreSQL', async () => (await outboxBacklog(redis, redisPrefix)) === 0, settings.drainTimeoutMs, worker);
  const records = await service.rt.db.many(sql.type(z.object({ status: z.string(), n: z.number() }))`
    SELECT status, count(*)::int8 AS n FROM usage_records WHERE project_id = ${projectId} GROUP BY status`);
  const usageRecords = Object.fromEntries(records.map((r) => [r.status, r.n]));
  const opsTotal = await billedOps();
  const loadAfter = uptime();

  const report = buildReport({
    command,
    codeState: code,
    settings,
    throughput,
    latency,
    usageRecords,
    opsTotal,
    backlogAfterLoad,
    loadBefore,
    loadAfter,
    redisUsed,
    ownRedis: run.ownRedis !== undefined,
  });
  console.log(`\n${report.markdown}\n`);
  if (settings.writeDocs) {
    writeSection(join(root, 'docs', 'PERFORMANCE.md'), 'gateway', report.markdown);
    console.log('wrote docs/PERFORMANCE.md');
  }
  if (!report.billingConsistent) throw new Error('the gateway billed a different number of calls than PostgreSQL recorded (see the report)');
  if (!report.allMet) console.log('some targets were not met (see the table)');
}

/** The commit measured, and the tracked files that differed from it when the run started. */
function codeState(): string {
  const git = (...args: string[]) => execFileSync('git', args, { cwd: root, encoding: 'utf8' });
  try {
    // Porcelain lines are `XY path`; the status letters may begin with a space.
    const changed = git('status', '--porcelain', '--untracked-files=no').split('\n').filter(Boolean).map((l) => l.slice(3));
    const commit = git('rev-parse', '--short', 'HEAD').trim();
    return changed.length === 0 ? `commit ${commit}` : `commit ${commit} with uncommitted changes to ${changed.map((f) => `\`${f}\``).join(', ')}`;
  } catch {
    return 'unknown (not a git checkout)';
  }
}

async function callApi(origin: string, method: 'PUT' | 'POST' | 'PATCH', path: string, key: string, body: unknown): Promise<void> {
  const res = await request(`${origin}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  });
  const text = await res.body.text();
  if (res.statusCode >= 300) throw new Error(`${method} ${path} answered ${res.statusCode}: ${text}`);
}

/**
 * One call before measuring: the mock's answer must come back, and the gateway must have
 * billed it (the cost header, or trailer when streamed), or the run stops here.
 */
async function verify(c: Contender, stream: boolean, customer: string): Promise<void> {
  const res = await request(`${c.origin}${api_paths[c.api ?? 'chat']}`, {
    method: 'POST',
    headers: c.headers(customer),
    body: requestBody(c.model, stream, 0, c.api),
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  });
  const text = await res.body.text();
  const what = `${c.name} (${stream ? 'streamed' : 'whole'})`;
  const problem = checkAnswer(stream, upstreamModel, c.api)(res.statusCode, text);
  if (problem !== null) throw new Error(`${what} did not relay the mock's answer: ${problem}`);
  if (c.pool !== undefined) {
    const cost = stream ? res.trailers['x-service-cost-credits'] : res.headers['x-service-cost-credits'];
    if (!(Number(cost) > 0)) throw new Error(`${what} answered without a cost (X-Service-Cost-Credits: ${String(cost)})`);
  }
  console.log(`  ${what}: ok`);
}

await run.finish(main);
