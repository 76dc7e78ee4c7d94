/**
 * `npx tsx bench/profile/ledger.ts`: a V8 CPU profile of the API process under deduct load,
 * nothing measured besides. Starts the service as bench/lib/service.ts does (with
 * --cpu-prof), funds a few customers, drives POST /v1/billing/deduct with autocannon for
 * PROFILE_DURATION_S (10) seconds at PROFILE_CONNECTIONS (16), stops the service so the
 * profile is written, and prints where the API's CPU went (bench/profile/summary.ts).
 * PROFILE_DIR (a fresh temporary folder) keeps the .cpuprofile files.
 */
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { assertHealthy, runLoad } from '../lib/load.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { createBenchRuntime, createPaidProject, startBenchService, type BenchServiceOptions } from '../lib/service.js';
import { printSummary, summarize } from './summary.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const env = process.env;
const profDir = env.PROFILE_DIR ?? mkdtempSync(join(tmpdir(), 'svc-prof-'));
const settings = {
  ...benchEnvSettings(env),
  cpuProfDir: profDir,
  durationS: Number(env.PROFILE_DURATION_S ?? 10),
  connections: Number(env.PROFILE_CONNECTIONS ?? 16),
  customers: 8,
  startTimeoutMs: 30_000,
};
const run = createBenchRun({ logDirPrefix: 'svc-prof-', runTimeoutMs: 120_000 });
const { tag, redisPrefix, group, logDir } = run;

async function post(url: string, key: string, body: unknown): Promise<void> {
  const res = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`POST ${url} answered ${res.status}: ${await res.text()}`);
}

async function main(): Promise<void> {
  const serviceOptions: BenchServiceOptions = { ...settings, root, group, logDir, redisPrefix };
  const bench = await createBenchRuntime(serviceOptions);
  run.runtime = bench.rt;
  const { api, apiUrl } = await startBenchService(serviceOptions, bench);
  const { projectKey: key } = await createPaidProject(bench.rt, `profile ${tag}`);
  const customers = Array.from({ length: settings.customers }, (_, i) => `prof-${i}`);
  for (const c of customers) await post(`${apiUrl}/v1/customers/deposit`, key, { customer_id: c, amount: 1_000_000_000_000 });
  let seq = 0;
  const load = await runLoad({
    title: 'deduct',
    url: apiUrl,
    connections: settings.connections,
    durationS: settings.durationS,
    warmupS: 1,
    requests: [
      {
        method: 'POST',
        path: '/v1/billing/deduct',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        setupRequest: (req) => {
          const n = seq++;
          return { ...req, body: JSON.stringify({ customer_id: customers[n % customers.length], transaction_id: `d-${tag}-${n}`, amount: 1 }) };
        },
      },
    ],
  });
  assertHealthy(load);
  console.log(`${load.totalWithWarmup} deducts`);
  await group.stopAll();
  const file = readdirSync(profDir).find((f) => f.includes(`.${api.pid}.`) && f.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no profile of pid ${api.pid} in ${profDir}`);
  console.log(`profile: ${join(profDir, file)}`);
  // The load's measured seconds only: start-up and setup are not the request path.
  printSummary(summarize(join(profDir, file), settings.durationS * 1000));
}

void run.finish(main);
