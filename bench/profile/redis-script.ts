/**
 * Where Redis spends a deduct script, or a gateway call, counted in instructions rather
 * than timed: `npx tsx bench/profile/redis-script.ts` starts a redis-server of its own under
 * `valgrind --tool=callgrind` (a few dozen times slower, but the count is the same
 * whatever else the machine does), funds one customer, runs PROFILE_WARMUP deducts, zeroes
 * the counters, runs PROFILE_DEDUCTS (2,000) deducts pipelined through the script layer
 * (lua/deduct-10.lua, or lua/bound_deduct-12.lua with PROFILE_BOUND=1), dumps the
 * counters and prints the instructions per deduct and the functions that spent them
 * (callgrind_annotate, inclusive). Compare two checkouts by running it in each: the
 * numbers repeat to the instruction for the same Redis and scripts.
 *
 * PROFILE_SCRIPT=gateway runs PROFILE_CALLS (1,000) gateway calls instead, with the
 * arguments src/gateway/billing.ts sends: the receipt index entry (lua/bind-2.lua) and the
 * hold (lua/gateway_hold-10.lua) as a Redis Cluster sends them, or with PROFILE_BOUND=1 the
 * one script a single Redis sends (lua/bound_gateway_hold-12.lua), then the settlement
 * (lua/gateway_settle-10.lua) with a usage record as the API writes it. Each script is
 * counted over all the calls in a phase of its own (all the holds, then all the
 * settlements), and the output gives the instructions per script and per call, with the
 * functions of each phase when PROFILE_TOP is set. The project's binding buckets hold a
 * thousand ids each first, as a day of calls leaves them.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { costOf, inputCostBound } from '../../src/gateway/pricing.js';
import { newId } from '../../src/ids.js';
import { BindStatus } from '../../src/ledger/bindings.js';
import { requestHash } from '../../src/ledger/service.js';
import { createRedis } from '../../src/redis/client.js';
import { binding_buckets, bindingKeys, bindingKeysOfBucket, customerKeys, scriptKeys } from '../../src/redis/keys.js';
import { registerScripts, scriptApi, ScriptStatus, type CustomerCall } from '../../src/redis/scripts.js';
import { freePort, waitForPort } from '../lib/processes.js';

const gateway = process.env.PROFILE_SCRIPT === 'gateway';
const bound = process.env.PROFILE_BOUND === '1';
const count = Number((gateway ? process.env.PROFILE_CALLS : process.env.PROFILE_DEDUCTS) ?? (gateway ? 1000 : 2000));
const warmup = Number(process.env.PROFILE_WARMUP ?? 200);
const top = Number(process.env.PROFILE_TOP ?? (gateway ? 0 : 45));
const batch = 100;
const dir = mkdtempSync(join(tmpdir(), 'svc-redis-prof-'));
const port = await freePort();
const server = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${dir}/callgrind.out.%p`, 'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
await waitForPort(port, 120_000);
const redis = createRedis(`redis://127.0.0.1:${port}`);
const scripts = scriptApi(registerScripts(redis));
const prefix = 'prof:';
const projectId = 'proj_prof';
const customerId = 'c1';
const wallet = 'credits';
const callOn = (): CustomerCall => ({
  keys: scriptKeys(customerKeys(prefix, projectId, customerId)), clockOffsetMs: 0, projectId, customerId, entryIdBase: newId('le'), bindingReadAtMs: null,
});
const dep = await scripts.deposit(callOn(), {
  idempotencyKey: '', requestHash: requestHash(['deposit', 1e12, wallet]), amount: 1e12, wallet, label: 'p', startsAtMs: '', expiresAtMs: '',
  name: '0', email: '0', metadata: '0', description: '', sourceId: newId('src'), requestFields: '',
});
if (dep[0] !== ScriptStatus.Ok) throw new Error(`deposit answered ${dep[0]}`);
const expect = (script: string, reply: [number, ...unknown[]], status: number = ScriptStatus.Ok) => {
  if (reply[0] !== status) throw new Error(`${script} answered ${reply[0]}`);
};

/** Runs `one` for each of `ids`, `batch` at a time, pipelined. */
const inBatches = async (ids: readonly string[], one: (id: string) => Promise<void>) => {
  for (let i = 0; i < ids.length; i += batch) await Promise.all(ids.slice(i, i + batch).map(one));
};

/** Counts the instructions Redis runs while `run` does: zeroed before, dumped after. Returns callgrind_annotate's output. */
const measure = async (run: () => Promise<void>): Promise<string> => {
  const before = new Set(readdirSync(dir));
  execFileSync('callgrind_control', ['-z', String(server.pid)]);
  await run();
  execFileSync('callgrind_control', ['-d', String(server.pid)]);
  const dump = readdirSync(dir).filter((f) => f.startsWith('callgrind.out') && !before.has(f)).sort().at(-1);
  if (dump === undefined) throw new Error('callgrind wrote no dump');
  return execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=99', join(dir, dump)], { encoding: 'utf8', maxBuffer: 64 << 20 });
};
const totalOf = (annotated: string) => Number(/([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS/.exec(annotated)?.[1]?.replaceAll(',', '') ?? NaN);
const functions = (annotated: string) => annotated.split('\n').filter((l) => /^\s*[\d,]+ \(/.test(l)).slice(0, top).join('\n');

if (!gateway) {
  const hash = requestHash(['deduct', 1, null, null, null]);
  const args = (txid: string) => ({ transactionId: txid, amount: 1, requestHash: hash, walletFilter: '', entryWallet: '', businessType: '', description: '', admitted: '1', keyBudget: '', requestFields: '' });
  const one = async (txid: string) => {
    expect('deduct', bound
      ? await scripts.bound_deduct({ ...callOn(), bucket: bindingKeys(prefix, projectId, 't', txid) } as never, args(txid))
      : await scripts.deduct(callOn(), args(txid)));
  };
  const ids = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}-${i}`);
  await inBatches(ids(warmup, 'w'), one);
  await redis.del(customerKeys(prefix, projectId, customerId).outbox);
  const out = await measure(() => inBatches(ids(count, 'm'), one));
  console.log(`instructions per deduct: ${Math.round(totalOf(out) / count)}`);
  console.log(functions(out));
} else {
  // A model as the gateway tests price it (per million tokens), a 2,000-byte request
  // without an output limit, and an answer of 450 input and 300 output tokens.
  const prices = { input: 1_500_000, output: 2_500_000, cacheRead: 300_000, cacheWrite: 3_750_000 };
  const usage = { input: 450, output: 300, cacheRead: 0, cacheWrite: 0 };
  const holdArgs = (txid: string) => ({
    transactionId: txid, wallet, inputCostBound: inputCostBound(2_000, prices), outputPrice: prices.output, outputTokens: 4_096, explicitMax: '0',
    holdTtlSeconds: 3_600, admitted: '1', answers: 1, idempotencyKey: '', keyBudget: '',
  });
  const record = () => JSON.stringify({
    id: newId('usage'), customer_id: customerId, trace_id: null, wallet, model: 'gpt-test', endpoint: 'chat_completions', stream: false, status: 'settled',
    input_tokens: usage.input, output_tokens: usage.output, cache_read_tokens: usage.cacheRead, cache_write_tokens: usage.cacheWrite, usage_estimated: false,
    cost_credits: costOf(usage, prices), latency_ms: 850,
    prices: {
      input_price_per_million_credits: prices.input, output_price_per_million_credits: prices.output,
      cache_read_price_per_million_credits: prices.cacheRead, cache_write_price_per_million_credits: prices.cacheWrite,
    },
    upstream_status: 200,
  });
  const index = async (txid: string) => {
    expect('bind', await scripts.bind(bindingKeys(prefix, projectId, 't', txid), { id: txid, owner: customerId, force: '1' }), BindStatus.New);
  };
  const hold = async (txid: string) => expect('gateway_hold', await scripts.gateway_hold(callOn(), holdArgs(txid)));
  const settle = async (txid: string) => {
    expect('gateway_settle', await scripts.gateway_settle(callOn(), { transactionId: txid, cost: costOf(usage, prices), usageRecord: record(), modelId: 'gpt-test' }));
  };
  const boundHold = async (txid: string) => {
    expect('bound_gateway_hold', await scripts.bound_gateway_hold({ ...callOn(), bucket: bindingKeys(prefix, projectId, 't', txid) }, holdArgs(txid)));
  };
  const phases: [string, (txid: string) => Promise<void>][] = bound
    ? [['bound_gateway_hold', boundHold], ['gateway_settle', settle]]
    : [['bind', index], ['gateway_hold', hold], ['gateway_settle', settle]];
  // The `t` buckets of a project with a day of calls: hash tables, as a real project's
  // are, not the small listpacks a fresh one has (a linear search per binding).
  await Promise.all(Array.from({ length: binding_buckets }, (_, b) =>
    redis.hset(bindingKeysOfBucket(prefix, projectId, 't', b).ids, Object.fromEntries(Array.from({ length: 1_000 }, (_, i) => [`gw_old${b}-${i}`, `${customerId}|0`])))));
  const calls = (n: number) => Array.from({ length: n }, () => newId('gw'));
  const warm = calls(warmup);
  for (const [, one] of phases) await inBatches(warm, one);
  await redis.del(customerKeys(prefix, projectId, customerId).outbox);
  const measured = calls(count);
  let perCall = 0;
  for (const [name, one] of phases) {
    const out = await measure(() => inBatches(measured, one));
    const per = Math.round(totalOf(out) / count);
    perCall += per;
    console.log(`${name}: ${per} instructions per call`);
    if (top > 0) console.log(functions(out));
  }
  console.log(`instructions per gateway call: ${perCall}`);
}
redis.disconnect();
server.kill('SIGTERM');
await new Promise((r) => server.once('exit', r));
