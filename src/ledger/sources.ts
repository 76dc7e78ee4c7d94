/**
 * A customer's sources as the scripts keep them (lua/includes/customer.lua, "Sources"):
 * the rules (active, dead), the reads, and the layout reconcile expects. The encoding of
 * each stored value is src/redis/codec.ts.
 * - `live` zset: sources that may still give credits, scored by expiry ('+inf' for none),
 *   in draw order.
 * - `dead` zset: id -> when it died (ms).
 * - `spent` zset: dead sources spent while active, scored by expiry: they count in their
 *   wallet's totals (meta `wt:<w>`, `wu:<w>`) until then.
 * - meta `src_total` (every source's total, the deposit cap) and `src_archived`.
 */
import type { RedisClient } from '../redis/client.js';
import type { CustomerKeys } from '../redis/keys.js';
import {
  liveMember, liveScore, parseSpentMember, sourceFields, sourcesOfHash, spentMember, toSourceState, type SourceState, type StoredSource,
} from '../redis/codec.js';

export function isActive(s: SourceState, nowMs: number): boolean {
  return (s.startsAtMs === null || s.startsAtMs <= nowMs) && (s.expiresAtMs === null || s.expiresAtMs > nowMs);
}

/** is_dead in customer.lua: nothing frozen, and spent or expired. */
function isDead(s: SourceState, nowMs: number): boolean {
  return s.frozen <= 0 && (s.used >= s.total || (s.expiresAtMs !== null && s.expiresAtMs <= nowMs));
}

/** Every source Redis holds for a customer (live and dead), by creation order. */
export async function readSources(redis: RedisClient, k: CustomerKeys): Promise<SourceState[]> {
  const hash = await redis.hgetall(k.src);
  return [...sourcesOfHash(hash).values()]
    .filter(({ source }) => source.w !== undefined)
    .map(({ source }) => toSourceState({ u: '0', f: '0', ...source } as StoredSource))
    .sort((a, b) => a.seq - b.seq);
}

/** The Redis state of a customer's sources, as the scripts would hold it. */
export interface SourceLayout {
  /** src hash fields. */
  src: Record<string, string>;
  /** live member -> score. */
  live: Record<string, string>;
  /** dead id -> died at (ms). */
  dead: Record<string, number>;
  /** spent member -> expiry (ms), only those not expired by `nowMs`. */
  spent: Record<string, number>;
  /** src_total and the wallet counters wt:<w>, wu:<w>; src_archived when set. */
  meta: Record<string, string>;
  /** Dead sources left out: PostgreSQL holds them and their last entry. */
  archived: string[];
}

/**
 * Whether a source that is dead by now would still wait in `live` for its EXPIRE entry:
 * it expired with credits left, the ledger holds no EXPIRE for it (`expired`), and Redis
 * holds it live, so the next script that looks writes the entry (retire in
 * lua/includes/customer.lua). A source Redis no longer holds live is laid out dead as
 * before (one that expired before EXPIRE entries existed stays without one).
 */
function awaitsExpireEntry(st: SourceState, nowMs: number, expired: Record<string, number>, redis: { present: ReadonlySet<string>; deadAt: Record<string, number> }): boolean {
  return st.expiresAtMs !== null && st.expiresAtMs <= nowMs && st.total - st.used > 0 && expired[st.id] === undefined
    && redis.present.has(st.id) && redis.deadAt[st.id] === undefined;
}

/**
 * Lays out a customer's sources (folded from its ledger) as the scripts keep them at
 * `nowMs`. A dead source is kept in Redis when Redis still holds it (with its death time
 * and seq) or when an entry that moved it is not in PostgreSQL yet (`persistedSeq` is
 * PostgreSQL's last seq); otherwise it counts as archived. `expired` lists the sources
 * whose EXPIRE entry the ledger holds (FoldedCustomer.expired).
 */
export function sourceLayout(
  sources: Iterable<StoredSource>,
  lastSeq: Record<string, number>,
  nowMs: number,
  persistedSeq: number,
  redis: { present: ReadonlySet<string>; deadAt: Record<string, number>; died: Record<string, string>; archived: boolean },
  expired: Record<string, number> = {},
): SourceLayout {
  const out: SourceLayout = { src: {}, live: {}, dead: {}, spent: {}, meta: {}, archived: [] };
  let total = 0;
  const counter = (field: string, delta: number) => {
    out.meta[field] = String(Number(out.meta[field] ?? 0) + delta);
  };
  for (const s of sources) {
    const st = toSourceState(s);
    total += st.total;
    counter(`wt:${s.w}`, 0);
    counter(`wu:${s.w}`, 0);
    if (!isDead(st, nowMs) || awaitsExpireEntry(st, nowMs, expired, redis)) {
      Object.assign(out.src, sourceFields(s));
      out.live[liveMember(s)] = liveScore(s);
      continue;
    }
    if (isActive(st, nowMs)) {
      counter(`wt:${s.w}`, st.total);
      counter(`wu:${s.w}`, st.used);
      if (st.expiresAtMs !== null) out.spent[spentMember(s)] = st.expiresAtMs;
    }
    if (redis.present.has(s.id) || (lastSeq[s.id] ?? 0) > persistedSeq) {
      Object.assign(out.src, sourceFields(s), { [`${s.id}:d`]: redis.died[s.id] ?? String(lastSeq[s.id] ?? 0) });
      out.dead[s.id] = redis.deadAt[s.id] ?? nowMs;
    } else {
      out.archived.push(s.id);
    }
  }
  if (total > 0) out.meta.src_total = String(total);
  if (out.archived.length > 0 || redis.archived) out.meta.src_archived = '1';
  return out;
}

/**
 * The wallet counters as Redis holds them, less the spent sources that expired by `nowMs`
 * and that no script has taken out yet (expire_spent runs lazily).
 */
export function effectiveCounters(meta: Record<string, string>, spent: Record<string, number>, nowMs: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(meta)) if (/^w[tu]:/.test(k)) out[k] = Number(v);
  for (const [m, at] of Object.entries(spent)) {
    if (at > nowMs) continue;
    const sm = parseSpentMember(m);
    if (!sm) continue;
    out[`wt:${sm.wallet}`] = (out[`wt:${sm.wallet}`] ?? 0) - sm.total;
    out[`wu:${sm.wallet}`] = (out[`wu:${sm.wallet}`] ?? 0) - sm.used;
  }
  return out;
}
