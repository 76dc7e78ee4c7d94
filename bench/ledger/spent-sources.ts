/**
 * Redis CPU per deduct script against the customer's history: one customer with 1 spent
 * deposit, one with `spent` (50,000) spent deposits, and the same many once their dead
 * sources were archived (lua/trim_sources-10.lua). Each has one live deposit to draw from.
 * The target: at most 40 us per deduct, the same for all three (a script reads only the
 * live sources it draws from).
 *
 * The setup goes straight to the scripts, pipelined: `spent` deposits of 1 credit, then
 * `spent` deducts of 1 credit, in batches. Then the deducts are timed in pipelined batches,
 * one customer at a time, reading Redis's own counters before and after: the FCALL time
 * that Redis measured for the scripts (INFO commandstats), and its whole process CPU
 * (INFO cpu, which on a shared Redis counts other clients too).
 *
 * Used by bench/ledger/run.ts; also runs alone against a Redis of its own (no other
 * clients): `npx tsx bench/ledger/spent-sources.ts` (BENCH_SPENT_SOURCES, BENCH_SPENT_DEDUCTS).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { RedisClient } from '../../src/redis/client.js';
import { newId } from '../../src/ids.js';
import { requestHash } from '../../src/ledger/service.js';
import { createRedis } from '../../src/redis/client.js';
import { customerKeys, scriptKeys } from '../../src/redis/keys.js';
import { registerScripts, scriptApi, ScriptStatus, type CustomerCall } from '../../src/redis/scripts.js';
import { startBenchRedis } from '../lib/bench-redis.js';
import { deleteByPrefix, redisCpuSeconds } from '../lib/redis.js';

export interface SpentSourcesOptions {
  redis: RedisClient;
  /** Key prefix of the run; its customers live under `<prefix>` and nowhere else. */
  prefix: string;
  /** Spent deposits of the customer with a history (50,000 for the target). */
  spent: number;
  /** Timed deducts per customer. */
  deducts: number;
  /** Scripts sent together (one pipelined write). */
  batchSize: number;
}

export interface SpentSourcesRow {
  name: string;
  /** Sources the customer's src hash still holds when timed. */
  sourcesInRedis: number;
  deducts: number;
  /** FCALL microseconds per deduct, as Redis measured them (INFO commandstats). */
  scriptUs: number;
  /** Redis process CPU microseconds per deduct (INFO cpu). */
  redisCpuUs: number;
  failures: number;
}

export interface SpentSourcesResult {
  rows: SpentSourcesRow[];
  setupS: number;
}

const projectId = 'proj_spent_sources';
const big_deposit_credits = 1_000_000_000_000;

/** Script calls (FCALL, and EVALSHA or EVAL of a checkout before functions) and microseconds so far (INFO commandstats). */
async function scriptStats(redis: RedisClient): Promise<{ calls: number; usec: number }> {
  const info = await redis.info('commandstats');
  let calls = 0;
  let usec = 0;
  for (const m of info.matchAll(/^cmdstat_(?:fcall|evalsha|eval):calls=(\d+),usec=(\d+)/gm)) {
    calls += Number(m[1]);
    usec += Number(m[2]);
  }
  return { calls, usec };
}

/** Runs `count` calls of `one`, `batchSize` at a time (auto-pipelined into one write each). */
async function inBatches(count: number, batchSize: number, one: (i: number) => Promise<void>): Promise<void> {
  for (let from = 0; from < count; from += batchSize) {
    await Promise.all(Array.from({ length: Math.min(batchSize, count - from) }, (_, j) => one(from + j)));
  }
}

export async function runSpentSources(o: SpentSourcesOptions): Promise<SpentSourcesResult> {
  const scripts = scriptApi(registerScripts(o.redis));
  // No binding led to these calls: the binding read time is none.
  const callOn = (customerId: string): CustomerCall => ({
    keys: scriptKeys(customerKeys(o.prefix, projectId, customerId)), clockOffsetMs: 0, projectId, customerId, entryIdBase: newId('le'),
    bindingReadAtMs: null,
  });
  const ok = (what: string, reply: [number, ...unknown[]]) => {
    if (reply[0] !== ScriptStatus.Ok) throw new Error(`${what} answered status ${reply[0]}`);
  };
  const deposit = async (customerId: string, amount: number) => {
    const hash = requestHash(['deposit', amount, 'credits']);
    ok('deposit', await scripts.deposit(callOn(customerId), {
      idempotencyKey: '', requestHash: hash, amount, wallet: 'credits', label: 'bench', startsAtMs: '', expiresAtMs: '',
      name: '0', email: '0', metadata: '0', description: '', sourceId: newId('src'), requestFields: '',
    }));
  };
  const deductHash = requestHash(['deduct', 1, null, null, null]);
  const deduct = (customerId: string, txid: string) =>
    scripts.deduct(callOn(customerId), {
      transactionId: txid, amount: 1, requestHash: deductHash, walletFilter: '', entryWallet: '', businessType: '', description: '', admitted: '1', keyBudget: '', requestFields: '',
    });

  // A customer with `spent` spent deposits, its outbox emptied (nothing persists it here).
  // Each deposit is followed by the deduct that spends it, in the same pipelined write, so
  // the live set stays small during the setup (a deposit walks the live set for its
  // wallet's total).
  const withHistory = async (customerId: string, spent: number) => {
    await inBatches(spent, o.batchSize, async (i) => {
      const deposited = deposit(customerId, 1);
      const deducted = deduct(customerId, `setup-${i}`);
      await deposited;
      ok('setup deduct', await deducted);
    });
    await deposit(customerId, big_deposit_credits);
    await o.redis.del(customerKeys(o.prefix, projectId, customerId).outbox);
  };

  const setupStarted = performance.now();
  await withHistory('one', 1);
  await withHistory('many', o.spent);
  await withHistory('archived', o.spent);
  const archived = await scripts.trim_sources(callOn('archived'), { retentionMs: 0, countMax: o.spent + 1 });
  if (Number(archived[4]) !== o.spent) throw new Error(`archived ${String(archived[4])} sources, not ${o.spent}`);
  const setupS = (performance.now() - setupStarted) / 1000;

  const rows: SpentSourcesRow[] = [];
  const timed = async (name: string, customerId: string) => {
    const runTag = randomBytes(4).toString('hex');
    const k = customerKeys(o.prefix, projectId, customerId);
    const sourcesInRedis = (await o.redis.zcard(k.live)) + (await o.redis.zcard(k.dead));
    let failures = 0;
    const statsBefore = await scriptStats(o.redis);
    const cpuBefore = await redisCpuSeconds(o.redis);
    await inBatches(o.deducts, o.batchSize, async (i) => {
      if ((await deduct(customerId, `t-${runTag}-${i}`))[0] !== ScriptStatus.Ok) failures++;
    });
    const cpu = (await redisCpuSeconds(o.redis)) - cpuBefore;
    const statsAfter = await scriptStats(o.redis);
    const calls = statsAfter.calls - statsBefore.calls;
    rows.push({
      name,
      sourcesInRedis,
      deducts: o.deducts,
      scriptUs: (statsAfter.usec - statsBefore.usec) / Math.max(1, calls),
      redisCpuUs: (cpu * 1e6) / o.deducts,
      failures,
    });
    await o.redis.del(customerKeys(o.prefix, projectId, customerId).outbox);
  };
  // Twice each, interleaved, so that a change of load on the machine shows as a
  // difference between the two rounds rather than between the customers.
  for (const round of [1, 2]) {
    await timed(`1 spent deposit, round ${round}`, 'one');
    await timed(`${o.spent} spent deposits, round ${round}`, 'many');
    await timed(`${o.spent} spent deposits archived, round ${round}`, 'archived');
  }
  return { rows, setupS };
}

export function spentSourcesTable(r: SpentSourcesResult): string[][] {
  return r.rows.map((row) => [
    row.name, String(row.sourcesInRedis), String(row.deducts), row.scriptUs.toFixed(1), row.redisCpuUs.toFixed(1), String(row.failures),
  ]);
}

export const spent_sources_headers = ['customer', 'sources in Redis', 'deducts', 'FCALL us/deduct', 'Redis CPU us/deduct', 'failures'];

async function main(): Promise<void> {
  const spent = Number(process.env.BENCH_SPENT_SOURCES ?? 50_000);
  const deducts = Number(process.env.BENCH_SPENT_DEDUCTS ?? 20_000);
  const logDir = mkdtempSync(join(tmpdir(), 'svc-bench-spent-'));
  const own = await startBenchRedis('none', logDir, 10_000);
  const redis = createRedis(own.url);
  const prefix = `bench:ss:${randomBytes(4).toString('hex')}:`;
  try {
    const r = await runSpentSources({ redis, prefix, spent, deducts, batchSize: 500 });
    console.log(`setup: ${r.setupS.toFixed(1)} s`);
    console.log(spent_sources_headers.join(' | '));
    for (const row of spentSourcesTable(r)) console.log(row.join(' | '));
  } finally {
    await deleteByPrefix(redis, prefix);
    redis.disconnect();
    await own.stop();
    rmSync(logDir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
