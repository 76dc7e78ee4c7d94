/**
 * reconcile: compares every customer's Redis state with the state folded from its
 * PostgreSQL ledger (the system of record) and, with `repair`, rewrites Redis from the
 * fold. This is also the cold start after a Redis loss: a customer that PostgreSQL knows
 * and Redis does not is drift, and repair recreates it.
 *
 * Per customer: drain its outbox into PostgreSQL, WATCH its keys, fold the ledger plus
 * whatever the outbox holds by now (acknowledged operations all the same), add what Redis
 * holds by design and the ledger never sees (gateway calls in flight, see
 * withRedisOnlyState), compare, and end with MULTI/EXEC (the rewrite, or nothing). EXEC
 * fails when any of the keys changed after the WATCH, so neither the comparison nor the
 * rewrite can mix states from before and after a concurrent operation; such a customer
 * is simply tried again after a short random pause.
 *
 * A customer whose outbox entries clash with PostgreSQL's sequence numbers (Redis forgot
 * entries PostgreSQL has, then wrote new ones under the same numbers: the wedge) is
 * folded with those entries renumbered after PostgreSQL's last; `repair` inserts them so
 * renumbered and rebuilds the customer from the whole ledger. See docs/OPERATIONS.md.
 *
 * An entry PostgreSQL refused for good sits in quarantine (src/ledger/quarantine.ts): its
 * seq is a known hole, reported as `quarantined`. Redis applied it, so the fold takes it
 * from its stored fields when they parse; `repair` leaves such a customer's Redis alone
 * until an operator has released the entry.
 *
 * This module walks the customers and drives each one's check; the snapshot and the
 * comparison are src/reconcile/compare.ts, the rewrite and the rest of a repair
 * src/reconcile/repair.ts, the report src/reconcile/report.ts.
 */
import type { DatabasePool } from 'slonik';
import { isSeqClash, LedgerOutbox } from '../ledger/outbox.js';
import type { QuarantineQueries } from '../ledger/quarantine.js';
import { createClient, isCluster, type RedisClient } from '../redis/client.js';
import { scanKeys } from '../redis/scan.js';
import { customerBase, customerKeysFromBase, parseCustomerBase } from '../redis/keys.js';
import { Bindings } from '../ledger/bindings.js';
import { registerScripts } from '../redis/scripts.js';
import type { Queue } from 'bullmq';
import type { Logger } from 'pino';
import type { Config } from '../config/index.js';
import type { LedgerQueries } from '../ledger/queries.js';
import type { Clock } from '../ledger/clock.js';
import type { LedgerJobData } from '../ledger/expiry.js';
import { FoldError, foldCustomer, withRedisOnlyState, type FoldedCustomer } from './fold.js';
import {
  compare, dueRecords, indexDrift, layoutOf, ledgerAsOfSnapshot, quarantinedOf, watchAndReadSnapshot, withoutArchived, type RecordIds,
} from './compare.js';
import { anomaliesKey, archiveRecords, drainActive, queueRewrite, renumberClashes, repairOutsideKeys, type RepairContext } from './repair.js';
import {
  concurrency_default, concurrency_max, customer_page_size, report_items_max,
  type DriftItem, type QuarantinedItem, type ReconcileProgress, type ReconcileReport,
} from './report.js';
import { createReconcileQueries, type ReconcileQueries } from './queries.js';

/** Tries per customer when concurrent operations keep changing its keys. */
const attempts_max = 10;
/** Upper bound of the random pause before try n (times n), so busy customers get a quiet moment. */
const retry_pause_ms_max = 10;
const scan_count = 1_000;
const progress_interval_ms = 1_000;

export interface ReconcileRuntime {
  config: Pick<Config, 'REDIS_PREFIX' | 'REDIS_URL' | 'REDIS_RETENTION_SECONDS'>;
  redis: RedisClient;
  db: DatabasePool;
  ledgerQueries: LedgerQueries;
  ledgerQueue: Queue<LedgerJobData>;
  clock: Clock;
  logger: Logger;
}

function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * Customers whose keys Redis holds (of one project, or all), batch by batch as the scan of
 * every master finds them; a customer may come in several batches.
 */
async function scanRedisCustomers(
  redis: RedisClient,
  prefix: string,
  projectId: string | null,
  each: (found: [string, { projectId: string; customerId: string }][]) => Promise<void>,
): Promise<void> {
  const head = `${prefix}c:{${projectId === null ? '' : `${encodeURIComponent(projectId)}:`}`;
  await scanKeys(redis, `${globEscape(head)}*`, scan_count, async (keys) => {
    const found = new Map<string, { projectId: string; customerId: string }>();
    for (const key of keys) {
      const end = key.lastIndexOf('}:');
      const base = end > 0 ? key.slice(0, end + 1) : null;
      const ids = base === null ? null : parseCustomerBase(prefix, base);
      if (base !== null && ids) found.set(base, ids);
    }
    if (found.size > 0) await each([...found]);
  });
}

interface CustomerOutcome {
  drift: DriftItem[];
  anomalies: string[];
  /** The customer's keys were rewritten from the fold. */
  rewritten: boolean;
  /** The state folded from PostgreSQL alone; null when PostgreSQL has no such customer. */
  folded: FoldedCustomer | null;
  /** Records whose binding must name this customer (not archived, nor due for it). */
  bound: { tx: string[]; dep: string[] };
  /** Records archived from Redis (due, and absent): with a repair, their ids go into the Bloom filters. */
  archived: RecordIds;
  /** The customer's entries in quarantine. */
  quarantined: QuarantinedItem[];
}

/**
 * Drains, folds, compares and (with `repair`) rewrites one customer's keys; tries again
 * when an operation changed them meanwhile. The project index is not looked at here.
 *
 * One round trip WATCHes the keys and reads them (with the outbox); the ledger is read
 * after it. An entry written before the WATCH is then in the outbox as read, or was
 * deleted from it after the WATCH (the EXEC fails), or before, which a worker does only
 * once the entry is committed (so the later ledger read has it); an entry in both counts
 * once. Any write after the WATCH fails the EXEC. A customer whose outbox holds entries is
 * drained into PostgreSQL first and read again: not needed for the comparison, it keeps
 * PostgreSQL, the record, up to date (most customers have none, and skip the drain's
 * round trip).
 */
async function reconcileKeys(
  ctx: {
    conn: RedisClient; persist: LedgerOutbox; queries: ReconcileQueries; ledgerQueries: LedgerQueries; clockOffsetMs: number; retentionMs: number;
    quarantine: QuarantineQueries;
    /**
     * Whether any entry was in quarantine when the run started. When none was, only a
     * customer whose outbox this run drained (and so may have parked) reads it.
     */
    anyQuarantined: boolean;
  },
  base: string,
  ids: { projectId: string; customerId: string },
  repair: boolean,
): Promise<CustomerOutcome> {
  const k = customerKeysFromBase(base);
  let drained = false;
  /** EXECs failed so far: a busy customer gets a longer pause each time. */
  let changed = 0;
  for (let attempt = 0; attempt < attempts_max; attempt++) {
    if (changed > 0) await new Promise((r) => setTimeout(r, Math.random() * retry_pause_ms_max * changed));
    const { snap, redisMs } = await watchAndReadSnapshot(ctx.conn, k);
    if (snap.outbox.length > 0 && !drained) {
      drained = true;
      try {
        await ctx.persist.drain(base);
      } catch (err) {
        // A seq clash is handled below; anything else stops this customer.
        if (!isSeqClash(err)) throw err;
      }
      continue;
    }
    const [row, stored, parked] = await Promise.all([
      ctx.queries.customer(ids.projectId, ids.customerId),
      ctx.queries.entries(ids.projectId, ids.customerId),
      ctx.anyQuarantined || drained ? ctx.quarantine.open({ projectId: ids.projectId, customerId: ids.customerId }) : [],
    ]);
    const quarantined = quarantinedOf(ids, parked);
    const clash = renumberClashes(stored, snap.outbox);
    const outbox = snap.outbox.map((e) => clash?.renumbered.get(e.id) ?? e);
    const ledger = ledgerAsOfSnapshot(row, stored, [...quarantined.entries, ...outbox]);
    const anomalies: string[] = [];
    const folded = ledger.customer === null ? null : foldCustomer(ledger.customer, ledger.entries, { anomalies });
    const nowMs = redisMs + ctx.clockOffsetMs;
    const lastAt = new Map<string, number>();
    const due = folded === null ? { tx: new Set<string>(), dep: new Set<string>() } : dueRecords(folded, stored, outbox, redisMs - ctx.retentionMs, lastAt);
    const archived: RecordIds = { tx: new Set([...due.tx].filter((id) => snap.tx[id] === undefined)), dep: new Set([...due.dep].filter((key) => snap.dep[key] === undefined)) };
    const expected = folded === null ? null : withoutArchived(withRedisOnlyState(folded, snap), archived);
    const persistedSeq = stored.reduce((max, e) => Math.max(max, e.seq), 0);
    const layout = expected === null ? null : layoutOf(expected, snap, nowMs, persistedSeq);
    const drift = compare(ids, snap, expected, layout, nowMs);
    if (clash) {
      anomalies.unshift(`${clash.renumbered.size} entries written on a Redis that had forgotten entries in PostgreSQL, renumbered from seq ${clash.firstSeq}`);
      drift.push({ project_id: ids.projectId, customer_id: ids.customerId, field: 'ledger.seq', redis: clash.clashingSeqs, expected: `renumbered from ${clash.firstSeq}` });
    }
    // A customer with entries in quarantine is rewritten only once they are released: the
    // fold may lack what Redis applied.
    const rewrite = repair && expected !== null && drift.length > 0 && quarantined.items.length === 0;
    // The renumbered entries go to PostgreSQL before the rewrite that trims them from the
    // outbox: should the EXEC fail, the next attempt finds them in PostgreSQL by id.
    if (rewrite && clash) await ctx.ledgerQueries.insertEntries([...clash.renumbered.values()]);
    const m = ctx.conn.multi();
    if (rewrite) queueRewrite(m, k, expected, layout!, lastAt);
    if (rewrite && clash) {
      const trimmed = snap.outboxIds.filter((_, i) => clash.renumbered.has(snap.outbox[i].id));
      if (trimmed.length > 0) m.xdel(k.outbox, ...trimmed);
    }
    // Null: a watched key changed, so the snapshot may not match the ledger read.
    const bound = {
      tx: Object.keys(folded?.tx ?? {}).filter((id) => !due.tx.has(id)),
      dep: Object.keys(folded?.dep ?? {}).filter((key) => !due.dep.has(key)),
    };
    if ((await m.exec()) !== null) return { drift, anomalies, rewritten: rewrite, folded, bound, archived, quarantined: quarantined.items };
    changed++;
  }
  throw new Error(`the customer's keys kept changing over ${attempts_max} attempts`);
}


type CustomerIds = { projectId: string; customerId: string };

/**
 * The customers of a scope from PostgreSQL, in keyset order, a page of `pageSize` at a
 * time; the next page is read while the current one is checked. At most two pages are
 * held, whatever the number of customers.
 */
async function* customerPages(queries: ReconcileQueries, projectId: string | null, pageSize: number): AsyncGenerator<CustomerIds> {
  let next = queries.customerPage(projectId, null, pageSize);
  for (;;) {
    const page = await next;
    const full = page.length === pageSize;
    if (full) next = queries.customerPage(projectId, page[page.length - 1], pageSize);
    for (const row of page) yield { projectId: row.project_id, customerId: row.id };
    if (!full) return;
  }
}

/**
 * Checks (and with `repair` rewrites) every customer of the prefix, of one project, or
 * only the `customers` given (the CLI's --customer, the recovery after a Redis restart,
 * the persist loop's repair of a clashing customer).
 *
 * Customers come from PostgreSQL, in pages of customer_page_size (keyset order), so that
 * neither a project with a million customers nor a cluster makes one long read, and are
 * checked `concurrency` at a time, each lane on a Redis connection of its own. Nothing
 * grows with the number of customers: two pages, one customer per lane, and a report
 * whose lists stop at `itemsMax` (its counts go on). With `redisOnly` (the CLI and the
 * admin job, run by hand), an extra step then scans every master's keyspace
 * (src/redis/scan.ts) for customers Redis holds and PostgreSQL does not: they are
 * reported, never deleted. Nothing runs this scan on a timer.
 */
export async function reconcile(
  rt: ReconcileRuntime,
  opts: {
    projectId?: string;
    repair: boolean;
    customers?: CustomerIds[];
    redisOnly?: boolean;
    pageSize?: number;
    concurrency?: number;
    itemsMax?: number;
    onProgress?: (progress: ReconcileProgress) => void;
    /** Aborted: the lanes stop after their current customer and the partial report is returned. */
    signal?: AbortSignal;
  },
): Promise<ReconcileReport> {
  const prefix = rt.config.REDIS_PREFIX;
  const queries = createReconcileQueries(rt.db);
  const persist = new LedgerOutbox(rt.redis, rt.ledgerQueries, prefix, rt.logger);
  const bindings = new Bindings(rt.redis, registerScripts(rt.redis), prefix, null);
  const retentionMs = rt.config.REDIS_RETENTION_SECONDS * 1000;
  const itemsMax = opts.itemsMax ?? report_items_max;
  const concurrency = opts.concurrency ?? concurrency_default;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > concurrency_max) throw new Error(`concurrency must be an integer from 1 to ${concurrency_max}`);
  if (!Number.isInteger(itemsMax) || itemsMax < 0) throw new Error('itemsMax must be a non-negative integer');
  const report: ReconcileReport = {
    customers_checked: 0, customers_with_drift: 0, customers_repaired: 0,
    drift_total: 0, drift: [], errors_total: 0, errors: [], anomalies_total: 0, anomalies: [], quarantined_total: 0, quarantined: [], items_max: itemsMax,
  };
  const quarantine = rt.ledgerQueries.quarantine(prefix);
  const anyQuarantined = (await quarantine.openCount()) > 0;
  const keep = <T>(list: T[], items: T[]) => {
    for (const item of items) {
      if (list.length >= itemsMax) return;
      list.push(item);
    }
  };

  const startedAt = Date.now();
  let total = 0;
  let reportedAt = 0;
  const progress = (force: boolean) => {
    if (!opts.onProgress) return;
    const now = Date.now();
    if (!force && now - reportedAt < progress_interval_ms) return;
    reportedAt = now;
    opts.onProgress({
      customers_done: report.customers_checked, customers_total: total, customers_with_drift: report.customers_with_drift,
      drift_total: report.drift_total, errors_total: report.errors_total, elapsed_ms: now - startedAt,
    });
  };

  const organizations = new Map<string, string | null>();
  const repairContext: RepairContext = {
    redis: rt.redis, ledgerQueue: rt.ledgerQueue, clock: rt.clock, prefix,
    organizationOf: async (projectId) => {
      if (!organizations.has(projectId)) organizations.set(projectId, await queries.organizationOf(projectId));
      return organizations.get(projectId) ?? '';
    },
  };
  const checkCustomer = async (conn: RedisClient, base: string, ids: CustomerIds): Promise<void> => {
    let outcome: CustomerOutcome;
    try {
      outcome = await reconcileKeys(
        { conn, persist, queries, ledgerQueries: rt.ledgerQueries, clockOffsetMs: rt.clock.offsetMs(), retentionMs, quarantine, anyQuarantined },
        base, ids, opts.repair,
      );
    } catch (err) {
      await conn.unwatch().catch(() => undefined);
      const permanent = err instanceof FoldError;
      if (!permanent) rt.logger.error({ err, ...ids }, 'reconcile failed for a customer');
      report.errors_total++;
      keep(report.errors, [{ project_id: ids.projectId, customer_id: ids.customerId, message: (err as Error).message, permanent }]);
      // A hole is reported even when the customer could not be checked (a quarantined
      // entry whose fields do not fold may be why).
      const parked = await quarantine.open(ids).catch(() => []);
      const { items } = quarantinedOf(ids, parked);
      report.quarantined_total += items.length;
      keep(report.quarantined, items);
      return;
    }
    report.quarantined_total += outcome.quarantined.length;
    keep(report.quarantined, outcome.quarantined);
    report.anomalies_total += outcome.anomalies.length;
    keep(report.anomalies, outcome.anomalies.map((message) => ({ project_id: ids.projectId, customer_id: ids.customerId, message })));
    if (opts.repair && outcome.rewritten && outcome.anomalies.length > 0) {
      rt.logger.error({ ...ids, anomalies: outcome.anomalies }, 'reconcile kept ledger anomalies; see docs/OPERATIONS.md');
      await rt.redis.hset(anomaliesKey(prefix), base, JSON.stringify({ at: new Date().toISOString(), anomalies: outcome.anomalies }));
    }

    const { folded } = outcome;
    if (outcome.rewritten) await archiveRecords(bindings, ids, outcome.archived, folded);
    const drift = folded === null ? outcome.drift : [...outcome.drift, ...(await indexDrift(rt.redis, prefix, ids, outcome.bound, customerKeysFromBase(base).arch))];
    if (drift.length === 0) return;
    report.customers_with_drift++;
    report.drift_total += drift.length;
    keep(report.drift, drift);
    // Redis state without a PostgreSQL customer is reported, never deleted.
    if (!opts.repair || folded === null) return;

    await repairOutsideKeys(repairContext, base, ids, drift, folded, outcome.rewritten);
    rt.logger.info({ ...ids, drift: drift.length }, 'reconcile repaired a customer');
    report.customers_repaired++;
  };

  // WATCH belongs to a connection: the shared client is used by others and its MULTIs
  // would end our WATCH. One connection per lane, and no more lanes than customers given.
  const lanes = opts.customers ? Math.max(1, Math.min(concurrency, opts.customers.length)) : concurrency;
  const conns = Array.from({ length: lanes }, () => createClient(rt.config.REDIS_URL, isCluster(rt.redis), { enableAutoPipelining: false }));
  /**
   * Checks the customers of `source` on every lane; each lane takes the next customer
   * when it is done with one. A failure outside a customer's check (a store the report
   * cannot do without) stops every lane and is thrown.
   */
  const runLanes = async (source: AsyncIterator<CustomerIds> | Iterator<CustomerIds>): Promise<void> => {
    let failed = false;
    await Promise.all(conns.map(async (conn) => {
      try {
        while (!failed && !opts.signal?.aborted) {
          const next = await source.next();
          if (next.done) return;
          report.customers_checked++;
          await checkCustomer(conn, customerBase(prefix, next.value.projectId, next.value.customerId), next.value);
          progress(false);
        }
      } catch (err) {
        failed = true;
        throw err;
      }
    }));
  };
  try {
    if (opts.customers) {
      const given = new Map(opts.customers.map((ids) => [customerBase(prefix, ids.projectId, ids.customerId), ids]));
      total = given.size;
      await runLanes(given.values());
    } else {
      const projectId = opts.projectId ?? null;
      await drainActive(rt.redis, persist, prefix, projectId);
      total = await queries.countCustomers(projectId);
      progress(true);
      await runLanes(customerPages(queries, projectId, opts.pageSize ?? customer_page_size));
      if (opts.redisOnly && !opts.signal?.aborted) {
        // Bases met so far: a customer may come in several scan batches. Only customers
        // PostgreSQL lacks are kept, which is what drift there is to report.
        const seen = new Set<string>();
        await scanRedisCustomers(rt.redis, prefix, projectId, async (found) => {
          const fresh = found.filter(([base]) => !seen.has(base));
          if (fresh.length === 0) return;
          const known = new Set((await queries.existing(fresh.map(([, ids]) => ids))).map((r) => customerBase(prefix, r.project_id, r.id)));
          const unknown: CustomerIds[] = [];
          for (const [base, ids] of fresh) {
            if (known.has(base)) continue;
            seen.add(base);
            unknown.push(ids);
          }
          await runLanes(unknown.values());
        });
      }
    }
  } finally {
    for (const conn of conns) conn.disconnect();
  }
  progress(true);
  return report;
}
