/**
 * Redis key names. All keys of one customer share the hash tag {project:customer} so a
 * script touches a single cluster slot. Ids are URI-encoded inside the tag so that a
 * caller's `{` or `}` cannot change which part is the tag.
 */
import { createHash } from 'node:crypto';

export interface CustomerKeys {
  base: string;
  meta: string;
  src: string;
  tx: string;
  dep: string;
  ttl: string;
  outbox: string;
  /** Sources that may still give credits, in draw order (lua/includes/customer.lua). */
  live: string;
  /** Sources that can give nothing more, scored by when they died. */
  dead: string;
  /** Dead sources still counted in wallet totals, scored by expiry. */
  spent: string;
  /** Final records (and bindings of failed operations) waiting for their retention: zset, member kind:id, scored by when (Redis ms). */
  fin: string;
  /** Records whose binding is archived, waiting for the grace before they are deleted: zset scored by when they may go. */
  arch: string;
}

export function customerBase(prefix: string, projectId: string, customerId: string): string {
  return `${prefix}c:{${encodeURIComponent(projectId)}:${encodeURIComponent(customerId)}}`;
}

export function customerKeysFromBase(base: string): CustomerKeys {
  return {
    base,
    meta: `${base}:meta`,
    src: `${base}:src`,
    tx: `${base}:tx`,
    dep: `${base}:dep`,
    ttl: `${base}:ttl`,
    outbox: `${base}:outbox`,
    live: `${base}:live`,
    dead: `${base}:dead`,
    spent: `${base}:spent`,
    fin: `${base}:fin`,
    arch: `${base}:arch`,
  };
}

export function customerKeys(prefix: string, projectId: string, customerId: string): CustomerKeys {
  return customerKeysFromBase(customerBase(prefix, projectId, customerId));
}

/** The ten KEYS every customer script takes, in order (lua/includes/customer.lua). */
export function scriptKeys(k: CustomerKeys): string[] {
  return [k.meta, k.src, k.tx, k.dep, k.ttl, k.outbox, k.live, k.dead, k.spent, k.fin];
}

/**
 * Project-scope bindings: `t` transaction id -> customer (deduct, freeze, and the gateway's
 * call ids for receipts), `d` deposit idempotency key -> customer, `g` gateway
 * Idempotency-Key (JSON [customer, key]) -> the call's transaction id.
 */
export type BindingKind = 't' | 'd' | 'g';

/** Buckets per project and kind: ids spread over them by hash, each its own hash tag (slot). */
export const binding_buckets = 16;

/** The SHA-1 of an id, hex: picks its bucket here and its Bloom bits in lua/bind-2.lua. */
function idHash(id: string): string {
  return createHash('sha1').update(id, 'utf8').digest('hex');
}

/** The bucket of an id: the last 4 hex digits of its SHA-1 (the Bloom bits use the first 35). */
function bindingBucket(id: string): number {
  return parseInt(idHash(id).slice(36), 16) % binding_buckets;
}

export interface BindingKeys {
  /** hash: id -> `owner|bound at (Redis ms)`. */
  ids: string;
  /** string: Bloom filter of the ids archived from this bucket. */
  bloom: string;
}

export function bindingKeysOfBucket(prefix: string, projectId: string, kind: BindingKind, bucket: number): BindingKeys {
  const base = `${prefix}b:{${encodeURIComponent(projectId)}:${kind}${bucket}}`;
  return { ids: `${base}:ids`, bloom: `${base}:bloom` };
}

export function bindingKeys(prefix: string, projectId: string, kind: BindingKind, id: string): BindingKeys {
  return bindingKeysOfBucket(prefix, projectId, kind, bindingBucket(id));
}

/** Shards of the trim's due set: customers spread by hash so that a cluster spreads them too. */
export const trim_due_shards = 16;

/** zset: customer key base -> when its next trim is due (Redis ms). */
export function trimDueKey(prefix: string, shard: number): string {
  return `${prefix}trim:{${shard}}`;
}

export function trimDueKeyOf(prefix: string, base: string): string {
  return trimDueKey(prefix, parseInt(idHash(base).slice(0, 4), 16) % trim_due_shards);
}

/**
 * Shards of the dirty marks and of the active index: customers spread by a hash of their
 * key base, each shard a hash tag (a cluster slot) of its own, so that every master holds
 * some and no one set is a hot key.
 */
export const dirty_shards = 16;

/** A cheap string hash (FNV-1a, 32 bits): computed per operation by markDirty, so not SHA-1. */
export function shardOf(base: string, shards: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < base.length; i++) h = Math.imul(h ^ base.charCodeAt(i), 0x01000193);
  return (h >>> 0) % shards;
}

/** set: customer key bases whose outbox has entries to persist (OutboxMarks.markDirty, the persist loop). */
export function dirtyKey(prefix: string, shard: number): string {
  return `${prefix}dirty:{${shard}}`;
}

export function dirtyKeyOf(prefix: string, base: string): string {
  return dirtyKey(prefix, shardOf(base, dirty_shards));
}

/**
 * zset: customer key base -> until when (ms, service clock) it counts as active. An API
 * process adds a customer before its first script on it in a window (LedgerService.run);
 * the sweeper walks the members whose window is over, marks their non-empty outboxes
 * dirty and settles their overdue TTLs (workers/sweep.ts).
 */
export function activeKey(prefix: string, shard: number): string {
  return `${prefix}active:{${shard}}`;
}

export function activeKeyOf(prefix: string, base: string): string {
  return activeKey(prefix, shardOf(base, dirty_shards));
}

/**
 * zset, sharded as the dirty marks: customer key base -> when its next source expires (ms,
 * service clock). A deposit with `expires_at` adds it (ZADD LT) before its script
 * (OutboxMarks.markExpiring); the sweeper runs the expire script of the members due, which
 * writes the EXPIRE entries, and moves each to its next expiry or removes it
 * (workers/sweep.ts). Not written by the deposit script: it is in another slot.
 */
export function expiringKey(prefix: string, shard: number): string {
  return `${prefix}expiring:{${shard}}`;
}

export function expiringKeyOf(prefix: string, base: string): string {
  return expiringKey(prefix, shardOf(base, dirty_shards));
}

/** Parses project and customer back out of a customer base (for the sweeper). */
export function parseCustomerBase(prefix: string, base: string): { projectId: string; customerId: string } | null {
  const head = `${prefix}c:{`;
  if (!base.startsWith(head) || !base.endsWith('}')) return null;
  const inner = base.slice(head.length, -1);
  const colon = inner.indexOf(':');
  if (colon < 0) return null;
  return { projectId: decodeURIComponent(inner.slice(0, colon)), customerId: decodeURIComponent(inner.slice(colon + 1)) };
}

/**
 * The BullMQ job id of a freeze's TTL expiry: one job per transaction, so scheduling it
 * again (a replay, reconcile) adds nothing. Each part is URI-encoded, which leaves no `|`
 * and no `:` in it, so the `|`-joined id is injective (two different transactions never
 * share a job, whatever their ids contain) and has no `:`, which BullMQ refuses in ids.
 */
export function expiryJobId(projectId: string, customerId: string, transactionId: string): string {
  return ['expire', projectId, customerId, transactionId].map(encodeURIComponent).join('|');
}
