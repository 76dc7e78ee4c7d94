/**
 * Redis key names. All keys of one customer share the hash tag {project:customer} so a
 * script touches a single cluster slot. Ids are URI-encoded inside the tag so that a
 * caller's `{` or `}` cannot change which part is the tag.
 */

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
  };
}

export function customerKeys(prefix: string, projectId: string, customerId: string): CustomerKeys {
  return customerKeysFromBase(customerBase(prefix, projectId, customerId));
}

/** The nine KEYS every customer script takes, in order (lua/includes/customer.lua). */
export function scriptKeys(k: CustomerKeys): string[] {
  return [k.meta, k.src, k.tx, k.dep, k.ttl, k.outbox, k.live, k.dead, k.spent];
}

/** Project-scope indexes: transaction id -> customer, deposit key -> customer. */
export function projectKeys(prefix: string, projectId: string) {
  const tag = `${prefix}p:{${encodeURIComponent(projectId)}}`;
  return { txIndex: `${tag}:txidx`, depositIndex: `${tag}:depidx` };
}

export function dirtySetKey(prefix: string): string {
  return `${prefix}dirty`;
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
