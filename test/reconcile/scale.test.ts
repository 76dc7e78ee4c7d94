/**
 * Reconcile at scale: `npm run reconcile` over RECONCILE_SCALE_CUSTOMERS customers of one
 * project (10,000 by default, which `npm test` and CI run; 100,000 for the figure in
 * docs/OPERATIONS.md) keeps a flat RSS, finds exactly the drift planted, and lists only the
 * first --list-max items of it (fewer than the drift planted at 10,000 already).
 *
 * The customers are copies of one real customer (a deposit through the API, persisted):
 * its PostgreSQL rows copied with generate_series, its Redis keys written again for each
 * copy with the ids replaced, so that every copy is a customer the comparison goes all
 * the way through for, and agrees. A few are then tampered with (their name in Redis) or
 * left without Redis state (missing there): the drift to find.
 *
 * The CLI runs as a child process from the build production runs (dist/), its VmRSS read
 * from /proc every rss_sample_ms, and its live heap (after a full collection) reported by
 * test/support/heap-probe.mjs every heap_probe_ms: the live heap is what says whether
 * memory grows with the customers; RSS, a garbage collector's sawtooth, is reported and
 * bounded loosely.
 */
import { execFileSync } from 'node:child_process';
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { customer_page_size } from '../../src/reconcile/report.js';
import { customerKeys } from '../../src/redis/keys.js';
import { p, svc, useTestService } from '../support/service.js';

const customers_n = Number(process.env.RECONCILE_SCALE_CUSTOMERS ?? 10_000);
/** The CLI's --concurrency (its default unless set). */
const concurrency = process.env.RECONCILE_SCALE_CONCURRENCY;
/** Every tampered_every-th customer has a wrong name in Redis; every missing_every-th has no Redis state. */
const tampered_every = 500;
const missing_every = 2_000;
/** Below the 20 customers with drift of a 10,000-customer run, so that the list is capped there too. */
const list_max = 10;
const rss_sample_ms = 100;
/**
 * A full collection per probe costs the CLI CPU (its CPU per customer rose by about half
 * with a probe every 250 ms at 10,000 customers), so the probes are as far apart as a run
 * of this size allows while each half still gets several: 200 ms at 10,000, 1 s from
 * 50,000 on.
 */
const heap_probe_ms = Math.min(1_000, Math.max(200, Math.round(customers_n / 50)));
/**
 * RSS is a sawtooth once warm: the heap fills with each customer's garbage and a major GC
 * empties it, 30-40 MB apart on this machine, and V8 sizes its heap over the first few
 * thousand customers. Which tooth a half of the run ends on is chance (CI saw the second
 * half's highest 26 MB above the first's, and 32 MB below it, on the same code), so RSS
 * gets a loose bound only: after the warm-up (warm_up_fraction of the customers, at least
 * warm_up_pages pages), at most rss_growth_max_bytes above the warm-up's highest.
 *
 * The live heap after a full collection has no sawtooth (it holds the pages in flight and
 * the report: 23.4-23.6 MiB all through a 10,000-customer run here), so it is held to a
 * slope: fitted by least squares over the probes after heap_warm_up_pages pages (code
 * compiled, pools filled), it may grow at most heap_slope_max_bytes per customer. A
 * planted leak of 1 KB per customer measured about 1,000 bytes per customer.
 */
const warm_up_fraction = 0.1;
const warm_up_pages = 10;
const rss_growth_max_bytes = 50 * 1024 * 1024;
const heap_warm_up_pages = 2;
const heap_slope_max_bytes = 200;
/** Customers whose Redis keys are written per batch (auto-pipelined by the client). */
const seed_batch = 2_000;

/** The slope of y over x of [x, y] points, by least squares. */
function leastSquaresSlope(points: [number, number][]): number {
  const n = points.length;
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  const sxy = points.reduce((a, [x, y]) => a + (x - mx) * (y - my), 0);
  const sxx = points.reduce((a, [x]) => a + (x - mx) ** 2, 0);
  return sxy / sxx;
}

const customerId = (i: number) => `c${String(i).padStart(6, '0')}`;
const keysOf = (id: string) => customerKeys(svc.rt.config.REDIS_PREFIX, p.projectId, id);
const isMissing = (i: number) => i % missing_every === 0;
const isTampered = (i: number) => !isMissing(i) && i % tampered_every === 0;

/** Copies the template customer `tmpl` to customers 1..n in PostgreSQL and Redis. */
async function seed(n: number): Promise<void> {
  const { db, redis } = svc.rt;
  const entry = await db.one(sql.unsafe`SELECT id, details FROM ledger_entries WHERE project_id = ${p.projectId} AND customer_id = 'tmpl'`);
  const entryId = entry.id as string;
  const sourceId = (entry.details as { account_id: string }[])[0].account_id;
  await db.query(sql.unsafe`
    INSERT INTO customers (project_id, id, name, email, metadata, created_at)
    SELECT project_id, 'c' || lpad(g::text, 6, '0'), name, email, metadata, created_at
    FROM customers, generate_series(1, ${n}) g WHERE project_id = ${p.projectId} AND id = 'tmpl'`);
  // Every id of the copy made its own: the customer's, the entry's and the source's.
  const swap = (col: string) => sql.unsafe`replace(replace(replace(${sql.identifier([col])}::text,
    '"tmpl"', '"c' || lpad(g::text, 6, '0') || '"'), ${entryId}, ${entryId} || 'x' || g), ${sourceId}, ${sourceId} || 'x' || g)::jsonb`;
  await db.query(sql.unsafe`
    INSERT INTO ledger_entries (id, project_id, customer_id, seq, type, transaction_id, amount, returned_amount, wallet, details,
      reason, business_type, description, state, result, extra, created_at, persisted_at)
    SELECT id || 'x' || g, project_id, 'c' || lpad(g::text, 6, '0'), seq, type, transaction_id || 'x' || g, amount, returned_amount, wallet, ${swap('details')},
      reason, business_type, description, state, ${swap('result')}, ${swap('extra')}, created_at, persisted_at
    FROM ledger_entries, generate_series(1, ${n}) g WHERE project_id = ${p.projectId} AND customer_id = 'tmpl'`);

  const tmpl = keysOf('tmpl');
  const meta = await redis.hgetall(tmpl.meta);
  const src = await redis.hgetall(tmpl.src);
  const live = await redis.zrange(tmpl.live, 0, -1, 'WITHSCORES');
  expect([Object.keys(meta).length > 0, Object.keys(src).length > 0, live.length]).toEqual([true, true, 2]);
  const swapped = (s: string, i: number) => s.replaceAll(sourceId, `${sourceId}x${i}`);
  for (let from = 1; from <= n; from += seed_batch) {
    const writes: Promise<unknown>[] = [];
    for (let i = from; i < Math.min(from + seed_batch, n + 1); i++) {
      if (isMissing(i)) continue;
      const k = keysOf(customerId(i));
      writes.push(redis.hset(k.meta, isTampered(i) ? { ...meta, name: 'tampered' } : meta));
      writes.push(redis.hset(k.src, Object.fromEntries(Object.entries(src).map(([f, v]) => [swapped(f, i), swapped(v, i)]))));
      writes.push(redis.zadd(k.live, live[1], swapped(live[0], i)));
    }
    await Promise.all(writes);
  }
}

/** CPU time the process has used (user and system), in ms; null once it has exited. */
async function cpuMs(pid: number): Promise<number | null> {
  try {
    const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1].split(' ');
    // utime and stime, fields 14 and 15 of the line, in clock ticks (100 per second on Linux).
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return null;
  }
}

async function vmRssBytes(pid: number): Promise<number | null> {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

const root = join(import.meta.dirname, '..', '..');

useTestService({ workers: true });
beforeAll(async () => {
  // A no-op when dist/ is newer than the sources (CI builds it before the tests).
  execFileSync(process.execPath, [join(root, 'scripts', 'build-if-stale.mjs')], { cwd: root, stdio: 'inherit' });
  const made = await svc.call('POST', '/v1/customers/deposit', { key: p.projectKey, body: { customer_id: 'tmpl', amount: 1000 } });
  expect(made.status).toBe(200);
  await svc.drained();
  await seed(customers_n);
}, 300_000);

afterAll(async () => {
  if (!svc) return;
  // Other files' reconciles are scoped to their own projects, but the rows are many: gone.
  await svc.rt.db.query(sql.unsafe`DELETE FROM ledger_entries WHERE project_id = ${p.projectId}`);
  await svc.rt.db.query(sql.unsafe`DELETE FROM sources WHERE project_id = ${p.projectId}`);
  await svc.rt.db.query(sql.unsafe`DELETE FROM customers WHERE project_id = ${p.projectId}`);
  for (let from = 1; from <= customers_n; from += seed_batch) {
    const dels: Promise<unknown>[] = [];
    for (let i = from; i < Math.min(from + seed_batch, customers_n + 1); i++) {
      const k = keysOf(customerId(i));
      dels.push(svc.rt.redis.del(k.meta), svc.rt.redis.del(k.src), svc.rt.redis.del(k.live));
    }
    await Promise.all(dels);
  }
}, 300_000);

describe(`reconcile of ${customers_n} customers`, () => {
  it('keeps a flat live heap and RSS, reports the progress on stderr and exactly the drift planted, capped in the list', async () => {
    const probe = join(root, 'test', 'support', 'heap-probe.mjs');
    const child = spawn(process.execPath, ['--expose-gc', '--import', probe, 'dist/src/cli/reconcile.js', '--project', p.projectId, '--json', '--list-max', String(list_max), '--skip-redis-scan', ...(concurrency ? ['--concurrency', concurrency] : [])], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: process.env.TEST_DATABASE_URL, REDIS_PREFIX: svc.rt.config.REDIS_PREFIX, QUEUE_PREFIX: svc.rt.config.QUEUE_PREFIX, LOG_LEVEL: 'warn', HEAP_PROBE_MS: String(heap_probe_ms) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    /** [customers done, VmRSS] every rss_sample_ms; [customers done, live heap] every heap_probe_ms. */
    const samples: [number, number][] = [];
    const heap: [number, number][] = [];
    const progressLines: string[] = [];
    const done = () => {
      const last = progressLines.at(-1);
      return last ? Number(/^reconcile: ([\d,]+)/.exec(last)![1].replace(/,/g, '')) : 0;
    };
    child.stdout.on('data', (b: Buffer) => (stdout += b));
    let partial = '';
    child.stderr.on('data', (b: Buffer) => {
      stderr += b;
      const lines = (partial + String(b)).split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        if (/^reconcile: [\d,]+\/[\d,]+ customers/.test(line)) progressLines.push(line);
        const probed = /^heap-probe: (\d+)$/.exec(line);
        if (probed) heap.push([done(), Number(probed[1])]);
      }
    });
    let cpuUsedMs = 0;
    const sampler = setInterval(() => {
      void cpuMs(child.pid!).then((ms) => (cpuUsedMs = ms ?? cpuUsedMs));
      void vmRssBytes(child.pid!).then((rss) => {
        if (rss !== null) samples.push([done(), rss]);
      });
    }, rss_sample_ms);
    const startedAt = Date.now();
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    const elapsedMs = Date.now() - startedAt;
    clearInterval(sampler);

    const missing = Math.floor(customers_n / missing_every);
    // missing_every is a multiple of tampered_every: a missing customer is not also tampered.
    const tampered = Math.floor(customers_n / tampered_every) - missing;
    expect(code, stderr).toBe(1);
    const report = JSON.parse(stdout);
    expect({ ...report, drift: report.drift.length }).toEqual({
      customers_checked: customers_n + 1, customers_with_drift: missing + tampered, customers_repaired: 0,
      drift_total: missing + tampered, drift: Math.min(list_max, missing + tampered),
      errors_total: 0, errors: [], anomalies_total: 0, anomalies: [], quarantined_total: 0, quarantined: [], items_max: list_max,
    });
    expect(new Set(report.drift.map((d: { field: string }) => d.field))).toEqual(new Set(['customer', 'meta.name']));
    // Progress on stderr: the total from the start, and the last line at the end.
    expect(progressLines.length).toBeGreaterThanOrEqual(2);
    expect(progressLines.at(-1)).toMatch(new RegExp(`^reconcile: ${(customers_n + 1).toLocaleString('en-US')}/${(customers_n + 1).toLocaleString('en-US')} customers \\(100%\\), ${(missing + tampered).toLocaleString('en-US')} with drift .*/s`));

    const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
    const warmAt = Math.max(warm_up_pages * customer_page_size, Math.floor(customers_n * warm_up_fraction));
    const warm = samples.filter(([n]) => n >= warmAt);
    const highest = (list: [number, number][]) => Math.max(...list.map(([, bytes]) => bytes));
    // The highest of the warm-up, or where it ends if higher: a sawtooth's top, not a trough.
    const baseline = Math.max(warm[0][1], highest(samples.filter(([n]) => n > 0 && n < warmAt)));
    const warmHeap = heap.filter(([n]) => n >= heap_warm_up_pages * customer_page_size && n <= customers_n);
    const slope = leastSquaresSlope(warmHeap);
    const rate = Math.round(((customers_n + 1) * 1000) / elapsedMs);
    console.log(`reconcile of ${customers_n + 1} customers: ${(elapsedMs / 1000).toFixed(1)} s with the process start, ${rate}/s; ` +
      `CPU of the CLI ${(cpuUsedMs / 1000).toFixed(1)} s (${((cpuUsedMs * 1000) / (customers_n + 1)).toFixed(0)} us per customer, start included); ` +
      `RSS until ${warmAt} done ${mib(baseline)}, highest after ${mib(highest(warm))}, highest overall ${mib(highest(samples))}; ` +
      `live heap after ${heap_warm_up_pages * customer_page_size} done ${mib(Math.min(...warmHeap.map(([, b]) => b)))} to ${mib(highest(warmHeap))}, ` +
      `${slope.toFixed(1)} bytes per customer (${warmHeap.length} probes); ` +
      `last progress: ${progressLines.at(-1)}`);
    expect(highest(warm) - baseline).toBeLessThan(rss_growth_max_bytes);
    // Probed often enough for a slope: a run too short for it proves nothing.
    expect(warmHeap.length).toBeGreaterThanOrEqual(6);
    expect(slope).toBeLessThan(heap_slope_max_bytes);
  }, Math.max(600_000, customers_n * 20));
});
