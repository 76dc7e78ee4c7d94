/**
 * `npx tsx bench/ab/api-cpu.ts <baseline-root>`: the API CPU per request of this checkout
 * against another checkout of the project (a `git worktree` of an earlier commit, say),
 * on a machine that is not quiet. Both API processes serve the same Redis prefix and
 * database (one worker, this checkout's); short load rounds alternate between them, so a
 * change of load on the machine hits both alike, and the median over the rounds is what
 * is compared. Throughput under such load says little; CPU microseconds per request of the
 * process under load say more, and the ratio between the two checkouts more still.
 *
 * Knobs: AB_ROUTE (deduct | pair | balance; deduct), AB_ROUNDS (6), AB_ROUND_S (3),
 * AB_CONNECTIONS (50), AB_RATE (unset: as fast as each serves; a number: that many requests
 * per second to each, so that both batch alike: the CPU per request of a process that
 * served fewer requests in a round is higher by itself, its script batches being smaller); BENCH_REDIS_PERSISTENCE=none gives the run a Redis of its own, so that
 * its CPU per request (counted too) is not other clients'. The baseline needs its own node_modules (a symlink to this one's
 * works when the dependencies are the same). Both API processes run compiled (each
 * checkout's dist/, built when stale), or both from source with BENCH_FROM_SOURCE=1, the
 * only way for a baseline older than the build (no scripts/build-if-stale.mjs).
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cpuDelta, cpuSeconds, redisCpu } from '../lib/cpu.js';
import { assertHealthy, runLoad } from '../lib/load.js';
import { freePort, waitForPort } from '../lib/processes.js';
import { benchEnvSettings, createBenchRun } from '../lib/run.js';
import { createBenchRuntime, createPaidProject, serviceScript, startBenchService, type BenchServiceOptions } from '../lib/service.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const baselineRoot = process.argv[2] ? resolve(process.argv[2]) : null;
const env = process.env;
const settings = {
  ...benchEnvSettings(env),
  route: env.AB_ROUTE ?? 'deduct',
  rounds: Number(env.AB_ROUNDS ?? 6),
  roundS: Number(env.AB_ROUND_S ?? 3),
  connections: Number(env.AB_CONNECTIONS ?? 50),
  rate: env.AB_RATE ? Number(env.AB_RATE) : undefined,
  customers: 8,
  startTimeoutMs: 30_000,
};
const run = createBenchRun({ logDirPrefix: 'svc-ab-', runTimeoutMs: 600_000 });
const { tag, redisPrefix, group, logDir } = run;

async function post(url: string, key: string, body: unknown): Promise<void> {
  const res = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`POST ${url} answered ${res.status}: ${await res.text()}`);
}

/** INFO commandstats as command -> [calls, usec]. */
async function commandStats(redis: { info(section: string): Promise<string> }): Promise<Map<string, [number, number]>> {
  const stats = new Map<string, [number, number]>();
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (m) stats.set(m[1]!, [Number(m[2]), Number(m[3])]);
  }
  return stats;
}

/** What Redis spent per request by command in one round: calls and microseconds. */
function perRequest(before: Map<string, [number, number]>, after: Map<string, [number, number]>, requests: number): string {
  const rows: [string, number, number][] = [];
  for (const [cmd, [calls, usec]] of after) {
    const [c0, u0] = before.get(cmd) ?? [0, 0];
    if (calls > c0) rows.push([cmd, (calls - c0) / requests, (usec - u0) / requests]);
  }
  rows.sort((x, y) => y[2] - x[2]);
  return rows.map(([cmd, calls, usec]) => `${cmd} ${calls.toFixed(2)} calls ${usec.toFixed(1)} us`).join('; ');
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  if (baselineRoot === null) throw new Error('usage: npx tsx bench/ab/api-cpu.ts <baseline-root>');
  if (!settings.fromSource && !existsSync(join(baselineRoot, 'scripts', 'build-if-stale.mjs'))) {
    throw new Error(`${baselineRoot} has no build (scripts/build-if-stale.mjs): compare both from source with BENCH_FROM_SOURCE=1`);
  }
  const redisUrl = await run.startRedis(settings.redisPersistence, settings.startTimeoutMs);
  const serviceOptions: BenchServiceOptions = { ...settings, root, group, logDir, redisPrefix, redisUrl };
  const bench = await createBenchRuntime(serviceOptions);
  run.runtime = bench.rt;
  const { api, apiUrl } = await startBenchService(serviceOptions, bench);
  const basePort = await freePort();
  const base = group.start({ name: 'baseline api', script: serviceScript(baselineRoot, 'src/web', settings.fromSource), env: { ...bench.env, PORT: String(basePort) }, logPath: join(logDir, 'baseline.log'), cwd: baselineRoot });
  await waitForPort(basePort, settings.startTimeoutMs, base);
  const contenders = [
    { name: 'baseline', pid: base.pid, url: `http://127.0.0.1:${basePort}`, cpuUs: [] as number[], redisUs: [] as number[], rps: [] as number[], stats: '' },
    { name: 'this checkout', pid: api.pid, url: apiUrl, cpuUs: [] as number[], redisUs: [] as number[], rps: [] as number[], stats: '' },
  ];
  const { projectKey: key } = await createPaidProject(bench.rt, `ab ${tag}`);
  const customers = Array.from({ length: settings.customers }, (_, i) => `ab-${i}`);
  for (const c of customers) await post(`${apiUrl}/v1/customers/deposit`, key, { customer_id: c, amount: 1_000_000_000_000 });
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  let seq = 0;
  const next = () => {
    const n = seq++;
    return { customer: customers[n % customers.length]!, tx: `ab-${tag}-${n}` };
  };
  const requests = () => {
    if (settings.route === 'balance') {
      return [{ method: 'GET' as const, path: `/v1/customers/${customers[0]}/balance`, headers: { authorization: `Bearer ${key}` } }];
    }
    if (settings.route === 'pair') {
      return [
        { method: 'POST' as const, path: '/v1/billing/freeze', headers, setupRequest: (req: Record<string, unknown>, ctx: Record<string, unknown>) => {
          const { customer, tx } = next();
          Object.assign(ctx, { customer, tx });
          return { ...req, body: JSON.stringify({ customer_id: customer, transaction_id: tx, amount: 1 }) };
        } },
        { method: 'POST' as const, path: '/v1/billing/consume', headers, setupRequest: (req: Record<string, unknown>, ctx: Record<string, unknown>) =>
          ({ ...req, body: JSON.stringify({ customer_id: ctx.customer, transaction_id: ctx.tx }) }) },
      ];
    }
    return [{ method: 'POST' as const, path: '/v1/billing/deduct', headers, setupRequest: (req: Record<string, unknown>) => {
      const { customer, tx } = next();
      return { ...req, body: JSON.stringify({ customer_id: customer, transaction_id: tx, amount: 1 }) };
    } }];
  };
  console.log(`A/B ${settings.route}: ${settings.rounds} rounds of ${settings.roundS} s per checkout at ${settings.connections} connections${settings.rate ? `, ${settings.rate} req/s` : ''}`);
  for (let round = 0; round < settings.rounds; round++) {
    // Alternate which goes first, so neither always follows the other.
    const order = round % 2 === 0 ? contenders : [...contenders].reverse();
    for (const c of order) {
      const redis = redisCpu('redis', bench.rt.redis);
      const redisBefore = await redis.read();
      const statsBefore = await commandStats(bench.rt.redis);
      const before = cpuSeconds(c.pid);
      const load = assertHealthy(await runLoad({ title: c.name, url: c.url, connections: settings.connections, durationS: settings.roundS, warmupS: 1, overallRate: settings.rate, requests: requests() as never }));
      const cpu = cpuSeconds(c.pid) - before;
      c.cpuUs.push((cpu / load.totalWithWarmup) * 1e6);
      c.redisUs.push((cpuDelta(redisBefore, await redis.read()) / load.totalWithWarmup) * 1e6);
      c.rps.push(load.rps);
      c.stats = perRequest(statsBefore, await commandStats(bench.rt.redis), load.totalWithWarmup);
      console.log(`  round ${round + 1} ${c.name}: ${Math.round(load.rps)} req/s, API CPU ${Math.round(c.cpuUs.at(-1)!)} us/req, Redis ${Math.round(c.redisUs.at(-1)!)} us/req`);
    }
  }
  for (const c of contenders) console.log(`Redis commands per request, last round of ${c.name}: ${c.stats}`);
  const [a, b] = contenders as [(typeof contenders)[0], (typeof contenders)[0]];
  console.log(`\nmedian API CPU us/req: baseline ${Math.round(median(a.cpuUs))}, this checkout ${Math.round(median(b.cpuUs))} ` +
    `(${(median(b.cpuUs) / median(a.cpuUs)).toFixed(3)}x); Redis ${Math.round(median(a.redisUs))} vs ${Math.round(median(b.redisUs))}; median req/s: ${Math.round(median(a.rps))} vs ${Math.round(median(b.rps))}`);
  // The two runs of a round are next to each other in time: their ratio sees the least of the machine's changing load.
  const ratios = a.cpuUs.map((x, i) => b.cpuUs[i]! / x).sort((x, y) => x - y);
  console.log(`per-round API CPU ratio (this checkout / baseline): median ${median(ratios).toFixed(3)}x, quartiles ${ratios[Math.floor(ratios.length / 4)]!.toFixed(3)}-${ratios[Math.floor((3 * ratios.length) / 4)]!.toFixed(3)}, all ${ratios.map((r) => r.toFixed(2)).join(' ')}`);
}

void run.finish(main);
