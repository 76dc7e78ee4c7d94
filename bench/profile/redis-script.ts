/**
 * Where Redis spends a deduct script, counted in instructions rather than timed:
 * `npx tsx bench/profile/redis-script.ts` starts a redis-server of its own under
 * `valgrind --tool=callgrind` (a few dozen times slower, but the count is the same
 * whatever else the machine does), funds one customer, runs PROFILE_WARMUP deducts, zeroes
 * the counters, runs PROFILE_DEDUCTS (2,000) deducts pipelined through the script layer
 * (lua/deduct-10.lua, or lua/bound_deduct-12.lua with PROFILE_BOUND=1), dumps the
 * counters and prints the instructions per deduct and the functions that spent them
 * (callgrind_annotate, inclusive). Compare two checkouts by running it in each: the
 * numbers repeat to the instruction for the same Redis and scripts.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newId } from '../../src/ids.js';
import { requestHash } from '../../src/ledger/service.js';
import { createRedis } from '../../src/redis/client.js';
import { bindingKeys, customerKeys, scriptKeys } from '../../src/redis/keys.js';
import { registerScripts, scriptApi, ScriptStatus, type CustomerCall } from '../../src/redis/scripts.js';
import { freePort, waitForPort } from '../lib/processes.js';

const deducts = Number(process.env.PROFILE_DEDUCTS ?? 2000);
const warmup = Number(process.env.PROFILE_WARMUP ?? 200);
const batch = 100;
const dir = mkdtempSync(join(tmpdir(), 'svc-redis-prof-'));
const port = await freePort();
const server = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${dir}/callgrind.out.%p`, 'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
await waitForPort(port, 120_000);
const redis = createRedis(`redis://127.0.0.1:${port}`);
const scripts = scriptApi(registerScripts(redis));
const projectId = 'proj_prof';
const callOn = (): CustomerCall => ({
  keys: scriptKeys(customerKeys('prof:', projectId, 'c1')), clockOffsetMs: 0, projectId, customerId: 'c1', entryIdBase: newId('le'), bindingReadAtMs: null,
});
const dep = await scripts.deposit(callOn(), {
  idempotencyKey: '', requestHash: requestHash(['deposit', 1e12, 'credits']), amount: 1e12, wallet: 'credits', label: 'p', startsAtMs: '', expiresAtMs: '',
  name: '0', email: '0', metadata: '0', description: '', sourceId: newId('src'),
});
if (dep[0] !== ScriptStatus.Ok) throw new Error(`deposit answered ${dep[0]}`);
const hash = requestHash(['deduct', 1, null, null, null]);
const args = (txid: string) => ({ transactionId: txid, amount: 1, requestHash: hash, walletFilter: '', entryWallet: '', businessType: '', description: '', admitted: '1' });
const bound = process.env.PROFILE_BOUND === '1';
const one = async (txid: string) => {
  const reply = bound
    ? await scripts.bound_deduct({ ...callOn(), bucket: bindingKeys('prof:', projectId, 't', txid) } as never, args(txid))
    : await scripts.deduct(callOn(), args(txid));
  if (reply[0] !== ScriptStatus.Ok) throw new Error(`deduct answered ${reply[0]}`);
};
const run = async (n: number, tag: string) => {
  for (let i = 0; i < n; i += batch) await Promise.all(Array.from({ length: Math.min(batch, n - i) }, (_, j) => one(`${tag}-${i + j}`)));
};
await run(warmup, 'w');
await redis.del(customerKeys('prof:', projectId, 'c1').outbox);
execFileSync('callgrind_control', ['-z', String(server.pid)]);
await run(deducts, 'm');
execFileSync('callgrind_control', ['-d', String(server.pid)]);
redis.disconnect();
server.kill('SIGTERM');
await new Promise((r) => server.once('exit', r));
const files = readdirSync(dir).filter((f) => f.startsWith('callgrind.out')).map((f) => join(dir, f)).sort();
const dump = files.find((f) => /\.\d+\.1$/.test(f)) ?? files[0];
const out = execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=99', dump], { encoding: 'utf8', maxBuffer: 64 << 20 });
const total = Number(/([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS/.exec(out)?.[1]?.replaceAll(',', '') ?? NaN);
console.log(`${dump}\ninstructions per deduct: ${Math.round(total / deducts)}`);
console.log(out.split('\n').filter((l) => /^\s*[\d,]+ \(/.test(l)).slice(0, Number(process.env.PROFILE_TOP ?? 45)).join('\n'));
