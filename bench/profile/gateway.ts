/**
 * `npx tsx bench/profile/gateway.ts`: the API's CPU per gateway call and, optionally, a V8
 * CPU profile of it, nothing else measured. Starts the service as bench/lib/service.ts does,
 * the mock upstream (src/gateway/mock/main.ts) and the bare proxy (bench/gateway/bare-proxy.ts),
 * configures a model on the mock, funds a few customers, and drives POST /v1/chat/completions
 * (the bench:gateway request, bench/gateway/answers.ts) with autocannon at PROFILE_CONNECTIONS
 * (16) for PROFILE_DURATION_S (10) seconds per phase: whole answers, then streamed, through
 * the gateway and through the bare proxy. Prints CPU microseconds per call of the API and of
 * the bare proxy for each phase (from /proc, warmup included).
 *
 * PROFILE_CPU=1 also runs the API with --cpu-prof (which costs CPU of its own: compare
 * microseconds between runs of the same setting only) and prints where its CPU went during
 * the last phase's gateway load (bench/profile/summary.ts); PROFILE_DIR (a fresh temporary folder)
 * keeps the .cpuprofile files. PROFILE_PHASES (whole,streamed) picks the phases.
 */
import { mkdtempSync, readdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkAnswer, requestBody } from '../gateway/answers.js';
import { processCpu, withCpu } from '../lib/cpu.js';
import { assertHealthy, runLoad } from '../lib/load.js';
import { freePort, waitForPort } from '../lib/processes.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { createBenchRuntime, createPaidProject, startBenchService, type BenchServiceOptions } from '../lib/service.js';
import { printSummary, summarize } from './summary.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const env = process.env;
const profiling = env.PROFILE_CPU === '1';
const profDir = profiling ? (env.PROFILE_DIR ?? mkdtempSync(join(tmpdir(), 'svc-prof-'))) : undefined;
const settings = {
  ...benchEnvSettings(env),
  cpuProfDir: profDir,
  durationS: Number(env.PROFILE_DURATION_S ?? 10),
  warmupS: 2,
  connections: Number(env.PROFILE_CONNECTIONS ?? 16),
  phases: (env.PROFILE_PHASES ?? 'whole,streamed').split(',').map((p) => p.trim()),
  customers: 8,
  startTimeoutMs: 30_000,
};
const run = createBenchRun({ logDirPrefix: 'svc-prof-gw-', runTimeoutMs: 300_000 });
const { tag, redisPrefix, group, logDir } = run;
const gatewayModel = 'bench-chat';
const upstreamModel = 'gpt-4o-mini';

async function call(url: string, method: string, key: string, body: unknown): Promise<void> {
  const res = await fetch(url, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status >= 300) throw new Error(`${method} ${url} answered ${res.status}: ${await res.text()}`);
}

/** One answer through `origin`, checked, before it is measured. */
async function verify(origin: string, headers: Record<string, string>, model: string, stream: boolean): Promise<void> {
  const res = await fetch(`${origin}/v1/chat/completions`, { method: 'POST', headers, body: requestBody(model, stream) });
  const problem = checkAnswer(stream, upstreamModel)(res.status, await res.text());
  if (problem !== null) throw new Error(`${origin} (${stream ? 'streamed' : 'whole'}): ${problem}`);
}

async function main(): Promise<void> {
  const serviceOptions: BenchServiceOptions = { ...settings, root, group, logDir, redisPrefix };
  const bench = await createBenchRuntime(serviceOptions);
  run.runtime = bench.rt;
  const { api, apiUrl } = await startBenchService(serviceOptions, bench);

  const [mockPort, barePort] = [await freePort(), await freePort()];
  const upstreamKey = `sk-prof-${randomBytes(12).toString('hex')}`;
  const mockUrl = `http://127.0.0.1:${mockPort}/v1`;
  const mock = group.start({
    name: 'mock',
    script: join(root, 'src', 'gateway', 'mock', 'main.ts'),
    env: { ...env, MOCK_UPSTREAM_PORT: String(mockPort), MOCK_UPSTREAM_HOST: '127.0.0.1', MOCK_LATENCY_MS: '0', MOCK_REQUIRE_KEY: upstreamKey },
    logPath: join(logDir, 'mock.log'),
  });
  const bare = group.start({
    name: 'bare proxy',
    script: join(root, 'bench', 'gateway', 'bare-proxy.ts'),
    env: { ...env, NODE_ENV: 'production', PORT: String(barePort), HOST: '127.0.0.1', UPSTREAM_BASE_URL: mockUrl },
    logPath: join(logDir, 'bare-proxy.log'),
  });
  await waitForPort(mockPort, settings.startTimeoutMs, mock);
  await waitForPort(barePort, settings.startTimeoutMs, bare);

  const { organizationId, projectId, projectKey } = await createPaidProject(bench.rt, `profile gateway ${tag}`);
  const { secret: adminKey } = await bench.rt.keyQueries.insertKey({ organizationId, projectId: null, type: 'admin' });
  await call(`${apiUrl}/v1/admin/projects/${projectId}/models/${gatewayModel}`, 'PUT', adminKey, {
    provider: 'openai',
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
  // The gateway last, so that the profile's last seconds are its load.
  const targets = [
    { name: 'bare proxy', origin: `http://127.0.0.1:${barePort}`, model: upstreamModel, proc: bare, headers: () => ({ ...json, authorization: `Bearer ${upstreamKey}` }) },
    { name: 'gateway', origin: apiUrl, model: gatewayModel, proc: api, headers: (c: string) => ({ ...json, authorization: `Bearer ${projectKey}`, 'x-service-customer': c }) },
  ];
  let profiledMs = 0;
  for (const phase of settings.phases) {
    const stream = phase === 'streamed';
    for (const t of targets) {
      await verify(t.origin, t.headers(customers[0]), t.model, stream);
      const body = requestBody(t.model, stream);
      let seq = 0;
      const t0 = Date.now();
      const { result, cpu } = await withCpu([processCpu('proc', t.proc.pid)], () =>
        runLoad({
          title: `${t.name} ${phase}`,
          url: t.origin,
          connections: settings.connections,
          durationS: settings.durationS,
          warmupS: settings.warmupS,
          requests: [{ method: 'POST', path: '/v1/chat/completions', setupRequest: (req) => ({ ...req, headers: t.headers(customers[seq++ % customers.length]), body }) }],
        }),
      );
      const load = assertHealthy(result);
      if (t.proc === api) profiledMs = Date.now() - t0;
      console.log(
        `${load.title}: ${Math.round(load.rps)} req/s, p50 ${load.p50Ms.toFixed(2)} ms; CPU ${Math.round((cpu.proc / load.totalWithWarmup) * 1e6)} us/call (${load.totalWithWarmup} calls)`,
      );
    }
  }
  await group.stopAll();
  if (!profDir) return;
  const file = readdirSync(profDir).find((f) => f.includes(`.${api.pid}.`) && f.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no profile of pid ${api.pid} in ${profDir}`);
  console.log(`profile: ${join(profDir, file)}`);
  // The last phase's gateway load only (its warmup included).
  console.log(`summary of the ${settings.phases.at(-1)} gateway phase`);
  printSummary(summarize(join(profDir, file), profiledMs));
}

void run.finish(main);
