/**
 * How Redis stores a customer's sources (lua/includes/customer.lua, "Sources"), read and
 * written the same way by the service, reconcile and the tests:
 * - `src` hash: `<id>` the static fields as JSON {w, l, t, s, e, q}; `<id>:u` used and
 *   `<id>:f` frozen as integers; `<id>:d` the meta seq when the source died.
 * - `live` zset: sources that may still give credits, scored by expiry ('+inf' for none),
 *   member `<creation seq on 15 digits>:<id>`, so that its order is the draw order.
 * - `dead` zset: id -> when it died (ms).
 * - `spent` zset: dead sources spent while active, `id|total|used|wallet` scored by
 *   expiry: they count in their wallet's totals (meta `wt:<w>`, `wu:<w>`) until then.
 * - meta `src_total` (every source's total, the deposit cap) and `src_archived`.
 */
import type { RedisClient } from '../redis/client.js';
import type { CustomerKeys } from '../redis/keys.js';

/** A whole source, every field a string, '' for no start or expiry (the deposit entry's `x.source`). */
export interface StoredSource {
  id: string;
  w: string;
  l: string;
  q: string;
  t: string;
  u: string;
  f: string;
  s: string;
  e: string;
}

export interface SourceState {
  id: string;
  wallet: string;
  label: string;
  seq: number;
  total: number;
  used: number;
  frozen: number;
  startsAtMs: number | null;
  expiresAtMs: number | null;
}

/** encode_source in lua/includes/customer.lua: every field a string. */
export function encodeSource(s: StoredSource): string {
  return JSON.stringify({ id: s.id, w: s.w, l: s.l, q: s.q, t: s.t, u: s.u, f: s.f, s: s.s, e: s.e });
}

export function toSourceState(s: StoredSource): SourceState {
  return {
    id: s.id,
    wallet: s.w,
    label: s.l,
    seq: Number(s.q),
    total: Number(s.t),
    used: Number(s.u),
    frozen: Number(s.f),
    startsAtMs: s.s === '' ? null : Number(s.s),
    expiresAtMs: s.e === '' ? null : Number(s.e),
  };
}

/** A source as the view script lists it (encode_source). */
export function decodeSource(raw: string): SourceState {
  return toSourceState(JSON.parse(raw) as StoredSource);
}

export function isActive(s: SourceState, nowMs: number): boolean {
  return (s.startsAtMs === null || s.startsAtMs <= nowMs) && (s.expiresAtMs === null || s.expiresAtMs > nowMs);
}

/** is_dead in customer.lua: nothing frozen, and spent or expired. */
export function isDead(s: SourceState, nowMs: number): boolean {
  return s.frozen <= 0 && (s.used >= s.total || (s.expiresAtMs !== null && s.expiresAtMs <= nowMs));
}

export function liveMember(s: StoredSource): string {
  return `${s.q.padStart(15, '0')}:${s.id}`;
}

export function liveScore(s: StoredSource): string {
  return s.e === '' ? 'inf' : s.e;
}

export function spentMember(s: StoredSource): string {
  return `${s.id}|${s.t}|${s.u}|${s.w}`;
}

/** The src hash fields of one source (create_source). */
export function sourceFields(s: StoredSource): Record<string, string> {
  return {
    [s.id]: JSON.stringify({ w: s.w, l: s.l, q: s.q, t: s.t, s: s.s, e: s.e }),
    [`${s.id}:u`]: s.u,
    [`${s.id}:f`]: s.f,
  };
}

/**
 * The sources of a src hash as read with HGETALL, by id; `died` holds the seq recorded at
 * death. A source whose static field is missing has only the fields found.
 */
export function sourcesOfHash(hash: Record<string, string>): Map<string, { source: Partial<StoredSource> & { id: string }; died: string | null }> {
  const out = new Map<string, { source: Partial<StoredSource> & { id: string }; died: string | null }>();
  const entry = (id: string) => {
    let e = out.get(id);
    if (!e) out.set(id, (e = { source: { id }, died: null }));
    return e;
  };
  for (const [field, value] of Object.entries(hash)) {
    const m = /^(.*):([ufd])$/.exec(field);
    if (m === null) {
      let st: Record<string, string>;
      try {
        st = JSON.parse(value) as Record<string, string>;
      } catch {
        st = {};
      }
      Object.assign(entry(field).source, { w: st.w, l: st.l, q: st.q, t: st.t, s: st.s, e: st.e });
    } else if (m[2] === 'd') {
      entry(m[1]).died = value;
    } else {
      entry(m[1]).source[m[2] as 'u' | 'f'] = value;
    }
  }
  return out;
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
 * Lays out a customer's sources (folded from its ledger) as the scripts keep them at
 * `nowMs`. A dead source is kept in Redis when Redis still holds it (with its death time
 * and seq) or when an entry that moved it is not in PostgreSQL yet (`persistedSeq` is
 * PostgreSQL's last seq); otherwise it counts as archived.
 */
export function sourceLayout(
  sources: Iterable<StoredSource>,
  lastSeq: Record<string, number>,
  nowMs: number,
  persistedSeq: number,
  redis: { present: ReadonlySet<string>; deadAt: Record<string, number>; died: Record<string, string>; archived: boolean },
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
    if (!isDead(st, nowMs)) {
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
    const match = /^[^|]*\|(\d+)\|(\d+)\|(.*)$/.exec(m);
    if (!match) continue;
    out[`wt:${match[3]}`] = (out[`wt:${match[3]}`] ?? 0) - Number(match[1]);
    out[`wu:${match[3]}`] = (out[`wu:${match[3]}`] ?? 0) - Number(match[2]);
  }
  return out;
}
