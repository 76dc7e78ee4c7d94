/**
 * What a Redis that came back empty held for customers it does not hold itself, put back
 * by the recovery (src/reconcile/recovery.ts) once it has rebuilt its own customers.
 *
 * On a Redis Cluster a customer's keys live on one master, but several keys about it live
 * wherever their own hash tag puts them: the project's binding buckets and their Bloom
 * filters (`b:{P:Kn}`, one per kind and bucket), the shards of the dirty marks and of the
 * active index (`dirty:{n}`, `active:{n}`), the shard of the trim's due set (`trim:{n}`),
 * and the ledger queue (`{svcq}`: expiry jobs and the sweep schedule). A master that came
 * back empty lost those for the customers of every master, and reconcile's repair of its
 * own customers does not bring them back: the others are not behind the ledger. Left
 * lost, a consume or unfreeze of a freeze whose binding was there answers that there is
 * no such freeze, a replay of an archived deduct whose filter bits were there is applied
 * again, a gateway call retried with a settled call's Idempotency-Key is billed again, an
 * outbox whose marks were there waits for the customer's next operation, and no sweep
 * runs again until a worker restarts.
 *
 * So every customer of the prefix (from PostgreSQL, in pages) whose keys of that kind
 * this Redis holds gets back:
 * - the bindings of its records still in Redis (their binding was on this Redis before
 *   it emptied: the trim removes a binding only with its record, and a record waiting
 *   for deletion, in `arch`, stays unbound), and of operations refused within the
 *   retention (listed in `fin` without a record), HSETNX so that nothing bound since is
 *   overwritten; a gateway call's Idempotency-Key claim too, unless the API released the
 *   call (which freed the key);
 * - the Bloom filter bits of every id of its ledger in PostgreSQL that is not bound now,
 *   that is of the records archived from Redis (lua/unbind-2.lua with no owner adds an
 *   unbound id to the filter and leaves a bound one alone);
 * - its dirty mark when its outbox holds entries, its active mark (due when its first TTL
 *   is, else now) when it has entries or pending TTLs, and its trim due time when records
 *   wait in `fin` or `arch`;
 * - the sweep schedule, when this Redis holds the ledger queue;
 * - the webhook dispatch schedule and a job for every pending delivery (due when its log
 *   says), when this Redis holds the webhooks queue: deliveries resume now, not when a
 *   worker renews the schedule or the dispatcher finds them overdue.
 * On a single Redis that came back empty the repair rebuilt every customer already; the
 * walk then adds what the repair does not write: claims, bindings of refused operations,
 * the schedules, the delivery jobs. Lost expiry jobs are not queued again: the sweeper
 * settles those TTLs through the active index. A customer none of whose entries reached PostgreSQL
 * before the loss is not in the walk; its next operation marks it again, and
 * `reconcile --repair` finds it.
 */
import type { Queue } from 'bullmq';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import type { Config } from '../config/index.js';
import { Bindings, claimId } from '../ledger/bindings.js';
import type { Clock } from '../ledger/clock.js';
import { scheduleSweeps, type LedgerJobData } from '../ledger/expiry.js';
import { parseTransaction } from '../redis/codec.js';
import type { RedisClient } from '../redis/client.js';
import type { RecoveryScope } from '../redis/generation.js';
import { activeKeyOf, bindingKeys, customerKeys, dirtyKeyOf, expiringKeyOf, trimDueKeyOf, type BindingKind } from '../redis/keys.js';
import { registerScripts } from '../redis/scripts.js';
import { requeuePending } from '../webhooks/dispatch.js';
import { scheduleDispatch, type WebhookJobData } from '../webhooks/queue.js';

/** Customers read from PostgreSQL per page. */
const shared_keys_page_size = 500;
/** Customers whose Redis keys are read at once. */
const customers_at_once = 64;
/** Ids added to the filters per script call: one call must not hold Redis for long. */
const filter_ids_per_call = 1_000;

const customerRow = z.object({ project_id: z.string(), id: z.string() });
const idRow = z.object({ project_id: z.string(), customer_id: z.string(), type: z.string(), transaction_id: z.string(), ik: z.string().nullable(), gk: z.string().nullable() });

/** What restoring the shared keys uses. */
export interface SharedKeysRuntime {
  config: Pick<Config, 'REDIS_PREFIX' | 'SWEEP_INTERVAL_MS' | 'WEBHOOK_DISPATCH_INTERVAL_MS'>;
  redis: RedisClient;
  db: DatabasePool;
  ledgerQueue: Queue<LedgerJobData>;
  webhookQueue: Queue<WebhookJobData>;
  clock: Clock;
}

type Customer = z.infer<typeof customerRow>;
/** A binding to write: kind, id, owner. */
type Bound = [BindingKind, string, string];

export async function restoreSharedKeys(rt: SharedKeysRuntime, scope: RecoveryScope): Promise<void> {
  const prefix = rt.config.REDIS_PREFIX;
  const bindings = new Bindings(rt.redis, registerScripts(rt.redis), prefix, null);
  let after: Customer | null = null;
  for (;;) {
    const page: readonly Customer[] = await rt.db.any(sql.type(customerRow)`
      SELECT c.project_id, c.id FROM redis_prefix_projects p JOIN customers c ON c.project_id = p.project_id
      WHERE p.prefix = ${prefix} ${after === null ? sql.fragment`` : sql.fragment`AND (c.project_id, c.id) > (${after.project_id}, ${after.id})`}
      ORDER BY c.project_id, c.id LIMIT ${shared_keys_page_size}`);
    for (let i = 0; i < page.length; i += customers_at_once) {
      await Promise.all(page.slice(i, i + customers_at_once).map((c) => restoreCustomer(rt, scope, c)));
    }
    await restoreFilters(rt, scope, bindings, page);
    if (page.length < shared_keys_page_size) break;
    after = page[page.length - 1];
  }
  if (scope.holds(rt.ledgerQueue.toKey('repeat'))) await scheduleSweeps(rt.ledgerQueue, rt.config.SWEEP_INTERVAL_MS);
  if (scope.holds(rt.webhookQueue.toKey('repeat'))) {
    await scheduleDispatch(rt.webhookQueue, rt.config.WEBHOOK_DISPATCH_INTERVAL_MS);
    await requeuePending(rt.db, rt.webhookQueue, prefix);
  }
}

/** A customer's bindings and marks that live on this Redis, from its keys on whichever Redis holds them. */
async function restoreCustomer(rt: SharedKeysRuntime, scope: RecoveryScope, c: Customer): Promise<void> {
  const prefix = rt.config.REDIS_PREFIX;
  const k = customerKeys(prefix, c.project_id, c.id);
  const [tx, dep, fin, arch, outboxLength, firstTtl, firstExpiry] = await Promise.all([
    rt.redis.hgetall(k.tx), rt.redis.hkeys(k.dep), rt.redis.zrange(k.fin, 0, -1), rt.redis.zrange(k.arch, 0, -1), rt.redis.xlen(k.outbox), rt.redis.zrange(k.ttl, 0, 0, 'WITHSCORES'),
    rt.redis.zrangebyscore(k.live, '-inf', '9007199254740991', 'WITHSCORES', 'LIMIT', 0, 1),
  ]);
  const boundAt = Date.now();
  const writes = recordBindings(c.id, tx, new Set(dep), fin, new Set(arch))
    .map(([kind, id, owner]) => [bindingKeys(prefix, c.project_id, kind, id).ids, id, owner] as const)
    .filter(([key]) => scope.holds(key))
    .map(([key, id, owner]) => rt.redis.hsetnx(key, id, `${owner}|${boundAt}`));

  const now = Date.now() + rt.clock.offsetMs();
  const ttlDue = firstTtl.length === 2 ? Number(firstTtl[1]) : null;
  if (outboxLength > 0 && scope.holds(dirtyKeyOf(prefix, k.base))) writes.push(rt.redis.sadd(dirtyKeyOf(prefix, k.base), k.base));
  if ((outboxLength > 0 || ttlDue !== null) && scope.holds(activeKeyOf(prefix, k.base))) writes.push(rt.redis.zadd(activeKeyOf(prefix, k.base), 'GT', ttlDue ?? now, k.base));
  if (firstExpiry.length === 2 && scope.holds(expiringKeyOf(prefix, k.base))) writes.push(rt.redis.zadd(expiringKeyOf(prefix, k.base), 'LT', firstExpiry[1], k.base));
  if (fin.length + arch.length > 0 && scope.holds(trimDueKeyOf(prefix, k.base))) writes.push(rt.redis.zadd(trimDueKeyOf(prefix, k.base), 'LT', Date.now(), k.base));
  await Promise.all(writes);
}

/**
 * The bindings a customer's keys call for: every record in Redis but those whose binding
 * the trim archived (`arch`), the ids of refused operations still listed in `fin`, and
 * the Idempotency-Key claims of gateway calls the API did not release.
 */
function recordBindings(customerId: string, tx: Record<string, string>, dep: Set<string>, fin: string[], arch: Set<string>): Bound[] {
  const bound: Bound[] = [];
  for (const [id, raw] of Object.entries(tx)) {
    const record = parseTransaction(raw);
    if (arch.has(`${record.k === 'gateway' ? 'g' : 't'}:${id}`)) continue;
    bound.push(['t', id, customerId]);
    const freed = record.st === 'released' && record.by === 'api';
    if (record.k === 'gateway' && record.ik !== undefined && !freed) bound.push(['g', claimId(customerId, record.ik), id]);
  }
  for (const key of dep) if (!arch.has(`d:${key}`)) bound.push(['d', key, customerId]);
  for (const member of fin) {
    const id = member.slice(2);
    if (member.startsWith('d:') ? !dep.has(id) : tx[id] === undefined) bound.push([member.startsWith('d:') ? 'd' : 't', id, customerId]);
  }
  return bound;
}

/**
 * The filter bits of the archived ids of a page of customers: every id of their ledger
 * whose bucket this Redis holds, added only where it is not bound (after restoreCustomer,
 * bound means in Redis).
 */
async function restoreFilters(rt: SharedKeysRuntime, scope: RecoveryScope, bindings: Bindings, page: readonly Customer[]): Promise<void> {
  if (page.length === 0) return;
  const rows = await rt.db.any(sql.type(idRow)`
    SELECT DISTINCT e.project_id, e.customer_id, e.type, e.transaction_id, e.extra->>'ik' AS ik, e.extra->>'gk' AS gk
    FROM ledger_entries e
    JOIN unnest(${sql.array(page.map((c) => c.project_id), 'text')}::text[], ${sql.array(page.map((c) => c.id), 'text')}::text[]) AS w(project_id, customer_id)
      ON e.project_id = w.project_id AND e.customer_id = w.customer_id`);
  const ids = new Map<string, { projectId: string; kind: BindingKind; ids: Set<string> }>();
  const add = (projectId: string, kind: BindingKind, id: string) => {
    if (!scope.holds(bindingKeys(rt.config.REDIS_PREFIX, projectId, kind, id).ids)) return;
    const group = ids.get(`${kind}:${projectId}`) ?? { projectId, kind, ids: new Set<string>() };
    group.ids.add(id);
    ids.set(`${kind}:${projectId}`, group);
  };
  for (const r of rows) {
    if (r.type === 'DEPOSIT') {
      if (r.ik !== null) add(r.project_id, 'd', r.ik);
      continue;
    }
    add(r.project_id, 't', r.transaction_id);
    if (r.type === 'GATEWAY' && r.gk !== null) add(r.project_id, 'g', claimId(r.customer_id, r.gk));
  }
  for (const group of ids.values()) {
    const all = [...group.ids];
    for (let i = 0; i < all.length; i += filter_ids_per_call) await bindings.archive(group.projectId, group.kind, '', all.slice(i, i + filter_ids_per_call));
  }
}
