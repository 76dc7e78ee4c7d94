/**
 * Redis's own limit for deducts: the deduct Lua script (lua/deduct-10.lua) called directly
 * as a Redis function (FCALL) in pipelined batches, without HTTP, auth, validation or the transaction
 * index. The API cannot go faster than this on the same Redis.
 *
 * Used by bench/ledger/run.ts; also runs alone: `npx tsx bench/ledger/script-only.ts`.
 */
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import type { RedisClient } from '../../src/redis/client.js';
import { loadConfig } from '../../src/config/index.js';
import { newId } from '../../src/ids.js';
import { requestHash } from '../../src/ledger/service.js';
import { createRedis } from '../../src/redis/client.js';
import { customerKeys, scriptKeys } from '../../src/redis/keys.js';
import { registerScripts, scriptApi, ScriptStatus, type CustomerCall, type ScriptApi } from '../../src/redis/scripts.js';
import { deleteByPrefix, redisCpuSeconds } from '../lib/redis.js';

export const deposit_credits = 1_000_000_000_000;

export interface ScriptOnlyOptions {
  redis: RedisClient;
  /** Key prefix of the run; its customers live under `<prefix>` and nowhere else. */
  prefix: string;
  customers: number;
  durationMs: number;
  /** Scripts sent together (one pipelined write); the next batch waits for all replies. */
  batchSize: number;
  /** Batches in flight at once, so Redis is not idle while the client reads replies. */
  inFlight: number;
}

export interface ScriptOnlyResult {
  ops: number;
  seconds: number;
  opsPerSecond: number;
  failures: number;
  batchSize: number;
  inFlight: number;
  /** Redis CPU seconds per wall second during the loop (1 = its main thread saturated). */
  redisBusy: number;
}

const projectId = 'proj_script_only';

/** ARGV[1..4] and the binding read time of a script call on a customer (no binding led here). */
function callOn(prefix: string, customerId: string): CustomerCall {
  const keys = scriptKeys(customerKeys(prefix, projectId, customerId));
  return { keys, clockOffsetMs: 0, projectId, customerId, entryIdBase: newId('le'), bindingReadAtMs: null };
}

async function fund(scripts: ScriptApi, prefix: string, customerId: string): Promise<void> {
  const hash = requestHash(['deposit', deposit_credits, 'credits']);
  const reply = await scripts.deposit(callOn(prefix, customerId), {
    idempotencyKey: '', requestHash: hash, amount: deposit_credits, wallet: 'credits', label: 'bench', startsAtMs: '', expiresAtMs: '',
    name: '0', email: '0', metadata: '0', description: '', sourceId: newId('src'), requestFields: '',
  });
  if (reply[0] !== ScriptStatus.Ok) throw new Error(`deposit for ${customerId} answered status ${reply[0]}`);
}

export async function runScriptOnly(o: ScriptOnlyOptions): Promise<ScriptOnlyResult> {
  const scripts = scriptApi(registerScripts(o.redis));
  const customerIds = Array.from({ length: o.customers }, (_, i) => `script-only-${i}`);
  for (const id of customerIds) await fund(scripts, o.prefix, id);
  const hash = requestHash(['deduct', 1, null, null, null]);
  const runTag = randomBytes(4).toString('hex');

  let ops = 0;
  let failures = 0;
  let next = 0;
  const deduct = async () => {
    const n = next++;
    const c = n % customerIds.length;
    const reply = await scripts.deduct(callOn(o.prefix, customerIds[c]), {
      transactionId: `so-${runTag}-${n}`, amount: 1, requestHash: hash, walletFilter: '', entryWallet: '', businessType: '', description: '', admitted: '1', keyBudget: '', requestFields: '',
    });
    if (reply[0] === ScriptStatus.Ok) ops++;
    else failures++;
  };

  const cpuBefore = await redisCpuSeconds(o.redis);
  const started = performance.now();
  const deadline = started + o.durationMs;
  // Each lane sends a batch in one tick (ioredis auto-pipelining makes it one write) and
  // waits for the whole batch before sending the next.
  const lane = async () => {
    while (performance.now() < deadline) {
      await Promise.all(Array.from({ length: o.batchSize }, deduct));
    }
  };
  await Promise.all(Array.from({ length: o.inFlight }, lane));
  const seconds = (performance.now() - started) / 1000;
  const redisBusy = ((await redisCpuSeconds(o.redis)) - cpuBefore) / seconds;
  return { ops, seconds, opsPerSecond: ops / seconds, failures, batchSize: o.batchSize, inFlight: o.inFlight, redisBusy };
}

async function main(): Promise<void> {
  const config = loadConfig();
  const prefix = `bench:so:${randomBytes(4).toString('hex')}:`;
  const redis = createRedis(config.REDIS_URL);
  try {
    const r = await runScriptOnly({ redis, prefix, customers: 8, durationMs: 3_000, batchSize: 100, inFlight: 2 });
    console.log(
      `script-only deduct: ${Math.round(r.opsPerSecond)} ops/s (${r.ops} ops in ${r.seconds.toFixed(2)} s, batches of ${r.batchSize}, ${r.inFlight} in flight, ${r.failures} failures, Redis busy ${Math.round(r.redisBusy * 100)}%)`,
    );
  } finally {
    await deleteByPrefix(redis, prefix);
    redis.disconnect();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
