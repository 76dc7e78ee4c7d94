/**
 * What runs when a Redis generation is new (src/redis/generation.ts): finds the customers
 * whose ledger in PostgreSQL is ahead of this Redis and rebuilds them from it, so that
 * the operations Redis forgot are back (balances, stored results for replays, the
 * project indexes, TTL jobs) before any money operation runs.
 *
 * Which customers: those of the projects this Redis prefix serves (recorded by the
 * persist loop in redis_prefix_projects: several prefixes share a database) with entries
 * persisted in the last `windowMs`, whose PostgreSQL max(seq) is above the Redis meta
 * `seq`. A Redis that lost everything (no persistence, a new instance) has no baseline
 * marker, and then the window does not apply: every customer of the prefix is checked, so
 * a customer idle for longer than the window is not left empty; such a Redis then also
 * gets back what it held for customers it does not hold (src/reconcile/shared-keys.ts).
 * A customer that a Redis with its baseline lost longer ago than the window is left to
 * `npm run reconcile -- --repair`, the full scan (docs/OPERATIONS.md). On a fresh Redis
 * and an empty ledger this is two queries that find nothing.
 *
 * On a Redis Cluster a recovery covers one master (`scope`): the customers whose slot it
 * serves, and a baseline marker of its own that lives on it.
 */
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import type { Config } from '../config/index.js';
import { singleRedisScope, type RecoveryScope } from '../redis/generation.js';
import { customerKeys } from '../redis/keys.js';
import type { ReconcileReport } from './report.js';
import { restoreSharedKeys, type SharedKeysRuntime } from './shared-keys.js';
import { reconcile, type ReconcileRuntime } from './walk.js';

/** What a recovery uses: it rebuilds customers with reconcile, then may restore the shared keys. */
type RecoveryRuntime = ReconcileRuntime & SharedKeysRuntime;

const aheadRow = z.object({ project_id: z.string(), customer_id: z.string(), seq: z.number() });

/** Set once a recovery completed on this Redis; a Redis without it may have lost everything. */
export const recoveryBaselineKey = (prefix: string) => `${prefix}recovery:baseline`;
/** The baseline of one cluster master, under a hash tag whose slot it serves. */
const nodeRecoveryBaselineKey = (prefix: string, tag: string) => `${prefix}recovery:baseline:{${tag}}`;

export async function recoverForgotten(rt: RecoveryRuntime, windowMs: number, scope: RecoveryScope = singleRedisScope): Promise<ReconcileReport | null> {
  const prefix = rt.config.REDIS_PREFIX;
  const baselineKey = scope.tag === null ? recoveryBaselineKey(prefix) : nodeRecoveryBaselineKey(prefix, scope.tag);
  const hasBaseline = (await rt.redis.exists(baselineKey)) === 1;
  const since = hasBaseline ? sql.fragment`AND e.persisted_at > now() - make_interval(secs => ${windowMs / 1000})` : sql.fragment``;
  const rows = await rt.db.any(sql.type(aheadRow)`
    SELECT e.project_id, e.customer_id, max(e.seq) AS seq
    FROM redis_prefix_projects p
    JOIN ledger_entries e ON e.project_id = p.project_id
    WHERE p.prefix = ${prefix} ${since}
    GROUP BY e.project_id, e.customer_id`);
  const report = await rebuildAhead(rt, rows.filter((r) => scope.holds(customerKeys(prefix, r.project_id, r.customer_id).meta)));
  // Without its baseline this Redis may have lost every key: also those it held for the
  // customers of other masters (bindings, marks, the queue).
  if (!hasBaseline) await restoreSharedKeys(rt, scope);
  await rt.redis.set(baselineKey, new Date().toISOString());
  return report;
}

async function rebuildAhead(rt: ReconcileRuntime, rows: readonly z.infer<typeof aheadRow>[]): Promise<ReconcileReport | null> {
  const prefix = rt.config.REDIS_PREFIX;
  if (rows.length === 0) return null;
  const seqs = await Promise.all(rows.map((r) => rt.redis.hget(customerKeys(prefix, r.project_id, r.customer_id).meta, 'seq')));
  const ahead = rows.filter((r, i) => Number(seqs[i] ?? 0) < r.seq).map((r) => ({ projectId: r.project_id, customerId: r.customer_id }));
  if (ahead.length === 0) return null;
  rt.logger.warn({ customers: ahead.length }, 'Redis is behind the ledger in PostgreSQL; rebuilding those customers');
  const report = await reconcile(rt, { repair: true, customers: ahead });
  // A store that failed half way: the whole recovery runs again (what was repaired is no
  // longer behind). A ledger that does not fold stays an error to read; retrying would not help.
  const transient = report.errors.filter((e) => !e.permanent);
  if (transient.length > 0) throw new Error(`recovery failed for ${transient.length} customers: ${transient[0].message}`);
  for (const e of report.errors) rt.logger.error({ ...e }, 'recovery could not rebuild a customer; run reconcile');
  return report;
}

/** Records that this prefix serves these projects (once per process and project). */
export function projectRecorder(rt: { db: DatabasePool; config: Pick<Config, 'REDIS_PREFIX'> }): (projectIds: string[]) => Promise<void> {
  const known = new Set<string>();
  return async (projectIds) => {
    const fresh = [...new Set(projectIds)].filter((id) => !known.has(id));
    if (fresh.length === 0) return;
    await rt.db.query(sql.unsafe`
      INSERT INTO redis_prefix_projects (prefix, project_id)
      SELECT ${rt.config.REDIS_PREFIX}, id FROM ${sql.unnest([...fresh.map((id) => [id])], ['text'])} AS t(id)
      ON CONFLICT DO NOTHING`);
    for (const id of fresh) known.add(id);
  };
}
