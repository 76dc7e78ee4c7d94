/**
 * `npx tsx bench/profile/gateway.ts`: the API's CPU per gateway call and, optionally, a V8
 * CPU profile of it, nothing else measured. Starts the service as bench/lib/service.ts does,
 * the mock upstream (src/gateway/mock/main.ts) and the bare proxy (bench/gateway/bare-proxy.ts),
 * configures a model on the mock, funds a few customers, and drives POST /v1/chat/completions
 * (the bench:gateway request, bench/gateway/answers.ts) with autocannon at PROFILE_CONNECTIONS
 * (16): whole answers, then streamed, through the bare proxy and the gateway in turns of
 * PROFILE_BURST_S (4) seconds, PROFILE_DURATION_S (12) seconds each in all; the mock
 * answers at once, or after PROFILE_UPSTREAM_LATENCY_MS (bench:gateway's latency rounds wait 20). Prints CPU
 * microseconds per call of each process (from /proc). Short turns taken in rotation share
 * out whatever else runs on the machine, so the rows of one run compare; runs do not.
 *
 * PROFILE_BASE_DIR names a second checkout (another commit's tree with node_modules): its
 * API runs too, on the same Redis prefix, database and worker, and takes its turns as
 * "gateway (base)", for a before/after in one run. Both run compiled (each checkout's
 * dist/, built when stale), or both from source with BENCH_FROM_SOURCE=1.
 *
 * PROFILE_CPU=1 also runs the API with --cpu-prof (which costs CPU of its own: compare
 * microseconds between runs of the same setting only) and prints where its CPU went during
 * its turns under load (bench/profile/summary.ts); PROFILE_DIR (a fresh temporary folder)
 * keeps the .cpuprofile files. PROFILE_PHASES (whole,streamed) picks the phases.
 */
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkAnswer, requestBody } from '../gateway/answers.js';
import { processCpu, withCpu } from '../lib/cpu.js';
import { assertHealthy, runLoad } from '../lib/load.js';
import { freePort, waitForPort, type NodeProcess } from '../lib/processes.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { startBareProxy, startMock } from '../gateway/contenders.js';
import { createBenchRuntime, createPaidProject, serviceScript, startBenchService, type BenchServiceOptions } from '../lib/service.js';
import { printSummary, summarize } from './summary.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const env = process.env;
const profiling = env.PROFILE_CPU === '1';
const profDir = profiling ? (env.PROFILE_DIR ?? mkdtempSync(join(tmpdir(), 'svc-prof-'))) : undefined;
const settings = {
  ...benchEnvSettings(env),
  cpuProfDir: profDir,
  durationS: Number(env.PROFILE_DURATION_S ?? 12),
  burstS: Number(env.PROFILE_BURST_S ?? 4),
  warmupS: 2,
  connections: Number(env.PROFILE_CONNECTIONS ?? 16),
  phases: (env.PROFILE_PHASES ?? 'whole,streamed').split(',').map((p) => p.trim()),
  baseDir: env.PROFILE_BASE_DIR,
  customers: 8,
  upstreamLatencyMs: Number(env.PROFILE_UPSTREAM_LATENCY_MS ?? 0),
  startTimeoutMs: 30_000,
};
const run = createBenchRun({ logDirPrefix: 'svc-prof-gw-', runTimeoutMs: 600_000 });
const { tag, redisPrefix, group, logDir } = run;
const gatewayModel = 'bench-chat';
const upstreamModel = 'gpt-4o-mini';

interface Target {
  name: string;
  origin: string;
  model: string;
  proc: NodeProcess;
  headers(customer: string): Record<string, string>;
}

async function call(url: string, method: string, key: string, body: unknown): Promise<void> {
  const res = await fetch(url, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status >= 300) throw new Error(`${method} ${url} answered ${res.status}: ${await res.text()}`);
}

/** One answer through `t`, checked, before it is measured. */
async function verify(t: Target, customer: string, stream: boolean): Promise<void> {
  const res = await fetch(`${t.origin}/v1/chat/completions`, { method: 'POST', headers: t.headers(customer), body: requestBody(t.model, stream) });
  const problem = checkAnswer(stream, upstreamModel)(res.status, await res.text());
  if (problem !== null) throw new Error(`${t.name} (${stream ? 'streamed' : 'whole'}): ${problem}`);
}

/** Warnings and errors in an API's log: a run whose calls log them measures something else. */
function reportWarnings(proc: NodeProcess): void {
  const lines = readFileSync(proc.logPath, 'utf8').split('\n').filter((l) => /"level":(40|50|60)/.test(l));
  console.log(`${proc.name} log: ${lines.length} warnings or errors`);
  for (const l of lines.slice(0, 3)) console.log(`  ${l.slice(0, 300)}`);
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

async function main(): Promise<void> {
  const serviceOptions: BenchServiceOptions = { ...settings, root, group, logDir, redisPrefix };
  const bench = await createBenchRuntime(serviceOptions);
  run.runtime = bench.rt;
  const { api, apiUrl } = await startBenchService(serviceOptions, bench);

  const [mockPort, barePort, basePort] = [await freePort(), await freePort(), await freePort()];
  const upstreamKey = `sk-prof-${randomBytes(12).toString('hex')}`;
  const mockUrl = `http://127.0.0.1:${mockPort}/v1`;
  const contenders = { group, root, logDir, env, fromSource: settings.fromSource };
  const mock = startMock(contenders, mockPort, upstreamKey);
  const bare = startBareProxy(contenders, { name: 'bare proxy', port: barePort, mockUrl, log: 'bare-proxy.log' });
  const baseApi = settings.baseDir
    ? group.start({
        name: 'api (base)',
        script: serviceScript(settings.baseDir, 'src/web', settings.fromSource),
        env: { ...bench.env, PORT: String(basePort) },
        logPath: join(logDir, 'api-base.log'),
        cwd: settings.baseDir,
        nodeArgs: profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [],
      })
    : null;
  await waitForPort(mockPort, settings.startTimeoutMs, mock);
  await waitForPort(barePort, settings.startTimeoutMs, bare);
  if (baseApi) await waitForPort(basePort, settings.startTimeoutMs, baseApi);

  const { organizationId, projectId, projectKey } = await createPaidProject(bench.rt, `profile gateway ${tag}`);
  const { secret: adminKey } = await bench.rt.keyQueries.insertKey({ organizationId, projectId: null, type: 'admin' });
  await call(`${apiUrl}/v1/admin/projects/${projectId}/models/${gatewayModel}`, 'PUT', adminKey, {
    // PROFILE_PROVIDER=anthropic: the chat calls are translated to an Anthropic-format upstream (issue 22).
    provider: env.PROFILE_PROVIDER ?? 'openai',
    upstream_base_url: mockUrl,
    upstream_model: upstreamModel,
    upstream_api_key: upstreamKey,
    display_name: 'profile chat model',
    context_window: 128_000,
    max_output_tokens: 4_096,
    supports_streaming: true,
    input_price_per_million_credits: 150_000,
    output_price_per_million_credits: 600_000,
    cache_read_price_per_million_credits: 75_000,
    cache_write_price_per_million_credits: 0,
  });
  const customers = Array.from({ length: settings.customers }, (_, i) => `prof-${i}`);
  for (const c of customers) await call(`${apiUrl}/v1/customers/deposit`, 'POST', projectKey, { customer_id: c, amount: 1_000_000_000_000 });

  const json = { 'content-type': 'application/json' };
  const gatewayHeaders = (c: string) => ({ ...json, authorization: `Bearer ${projectKey}`, 'x-service-customer': c });
  const targets: Target[] = [
    { name: 'bare proxy', origin: `http://127.0.0.1:${barePort}`, model: upstreamModel, proc: bare, headers: () => ({ ...json, authorization: `Bearer ${upstreamKey}` }) },
    { name: 'gateway', origin: apiUrl, model: gatewayModel, proc: api, headers: gatewayHeaders },
  ];
  if (baseApi) targets.push({ name: 'gateway (base)', origin: `http://127.0.0.1:${basePort}`, model: gatewayModel, proc: baseApi, headers: gatewayHeaders });

  /** When each API was under load, for its profile's summary. */
  const windows = new Map<NodeProcess, [number, number][]>([[api, []]]);
  if (baseApi) windows.set(baseApi, []);
  const callsOf = new Map<NodeProcess, number>();
  for (const phase of settings.phases) {
    const stream = phase === 'streamed';
    const totals = new Map(targets.map((t) => [t.name, { cpuS: 0, calls: 0, rps: [] as number[], p50: [] as number[] }]));
    const load = (t: Target, durationS: number, warmupS: number) => {
      const body = requestBody(t.model, stream, settings.upstreamLatencyMs);
      let seq = 0;
      return runLoad({
        title: `${t.name} ${phase}`,
        url: t.origin,
        connections: settings.connections,
        durationS,
        warmupS,
        requests: [{ method: 'POST', path: '/v1/chat/completions', setupRequest: (req) => ({ ...req, headers: t.headers(customers[seq++ % customers.length]), body }) }],
      });
    };
    for (const t of targets) {
      await verify(t, customers[0], stream);
      assertHealthy(await load(t, settings.warmupS, 0));
    }
    const turns = Math.max(1, Math.round(settings.durationS / settings.burstS));
    for (let turn = 0; turn < turns; turn++) {
      // Reversed every other turn, so that no target always follows the same one.
      for (const t of turn % 2 === 0 ? targets : [...targets].reverse()) {
        const from = nowUs();
        const { result, cpu } = await withCpu([processCpu('proc', t.proc.pid)], () => load(t, settings.burstS, 0));
        windows.get(t.proc)?.push([from, nowUs()]);
        const m = assertHealthy(result);
        const total = totals.get(t.name)!;
        total.cpuS += cpu.proc;
        total.calls += m.totalWithWarmup;
        callsOf.set(t.proc, (callsOf.get(t.proc) ?? 0) + m.totalWithWarmup);
        total.rps.push(m.rps);
        total.p50.push(m.p50Ms);
      }
    }
    for (const [name, t] of totals) {
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
      console.log(
        `${name} ${phase}: CPU ${Math.round((t.cpuS / t.calls) * 1e6)} us/call over ${t.calls} calls; ` +
          `${Math.round(mean(t.rps))} req/s, p50 ${mean(t.p50).toFixed(2)} ms (means of ${t.rps.length} turns)`,
      );
    }
  }
  await group.stopAll();
  reportWarnings(api);
  if (baseApi) reportWarnings(baseApi);
  if (!profDir) return;
  for (const [proc, spans] of windows) {
    const file = readdirSync(profDir).find((f) => f.includes(`.${proc.pid}.`) && f.endsWith('.cpuprofile'));
    if (!file) throw new Error(`no profile of pid ${proc.pid} in ${profDir}`);
    // Kept beside the profile, where summary.ts finds them to summarize it again.
    writeFileSync(join(profDir, `${file}.windows.json`), JSON.stringify({ windows: spans, requests: callsOf.get(proc) }));
    const summary = summarize(join(profDir, file), Infinity, spans);
    console.log(`\n${proc.name}: ${join(profDir, file)}, its turns under load (${settings.phases.join(', ')})`);
    printSummary(summary, 40, callsOf.get(proc));
  }
}

void run.finish(main);
