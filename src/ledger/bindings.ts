/**
 * Project-scope bindings (transaction id -> customer, deposit key -> customer, gateway
 * Idempotency-Key -> call), spread over `binding_buckets` buckets per project and kind,
 * each its own hash tag, with a Bloom filter of the ids archived from it (lua/bind-2.lua,
 * lua/unbind-2.lua). A binding read costs one command; only an id the filter has (an
 * archived one, or a false positive) costs a PostgreSQL lookup, which puts the archived
 * record back into its customer's keys (lua/restore-4.lua) and binds it again, so that
 * the customer script answers the replay or the conflict as it always did.
 *
 * On a single Redis the ledger's operations whose customer is known bind in their own
 * script instead (lua/includes/bound.lua runs the same step as lua/bind-2.lua); they come
 * here only for an id the filter has, which that script leaves as it was.
 */
import type { RedisClient } from '../redis/client.js';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { ledgerEntryRow } from './queries.js';
import { bindingKeys, customerKeys, type BindingKind } from '../redis/keys.js';
import { registerScripts, scriptApi, type ScriptApi, type Scripts } from '../redis/scripts.js';
import { foldCustomer, type EntryRow } from '../reconcile/fold.js';

export enum BindStatus {
  New = 0,
  Bound = 1,
  Archived = 3,
}

export interface Binding {
  status: BindStatus;
  /** The owner bound (New, Bound); null otherwise. */
  owner: string | null;
  /** Redis time (ms) of this read: the customer script checks it against its grace. */
  readAtMs: number;
}

/** The archived record of an id, folded from PostgreSQL; null when PostgreSQL has no entry of it. */
export interface ArchivedRecord {
  customerId: string;
  /** The record as the scripts store it in the customer's tx or dep hash. */
  value: string;
}

/** What PostgreSQL knows of archived ids (pgArchive). */
export interface Archive {
  /** The record of a transaction id or deposit key; null when PostgreSQL has no entry of it. */
  record(projectId: string, kind: 't' | 'd', id: string): Promise<ArchivedRecord | null>;
  /** The transaction id of the billed call that claimed a gateway Idempotency-Key; null for none. */
  claim(projectId: string, customerId: string, key: string): Promise<string | null>;
}

const entryRow = ledgerEntryRow.pick({ customer_id: true, seq: true, type: true, transaction_id: true, amount: true, wallet: true, details: true, reason: true, business_type: true, result: true, extra: true });

/**
 * Looks archived ids up in PostgreSQL. A record is folded as the scripts would hold it
 * (src/reconcile/fold.ts). Transaction ids through ledger_entries_tx, deposit keys through
 * ledger_entries_deposit_key, gateway keys through ledger_entries_gateway_key
 * (migrations/006).
 */
export function pgArchive(pool: DatabasePool): Archive {
  const record: Archive['record'] = async (projectId, kind, id) => {
    const rows = await pool.any(sql.type(entryRow)`
      SELECT customer_id, seq, type, transaction_id, amount, wallet, details, reason, business_type, result, extra
      FROM ledger_entries
      WHERE project_id = ${projectId}
        AND ${kind === 't' ? sql.fragment`transaction_id = ${id}` : sql.fragment`type = 'DEPOSIT' AND extra->>'ik' = ${id}`}
      ORDER BY customer_id, seq`);
    if (rows.length === 0) return null;
    // Transaction ids are unique in a project; a repeat written on a Redis that had
    // forgotten the first (reconcile's anomalies) keeps the first customer's record.
    const customerId = rows[0].customer_id;
    const entries: EntryRow[] = rows.filter((r) => r.customer_id === customerId).map((r) => ({ ...r, details: r.details, result: r.result }));
    const folded = foldCustomer({ name: null, email: null, metadata: null, created_at: 0 }, entries, { recordsOnly: true });
    const value = kind === 't' ? folded.tx[id] : folded.dep[id];
    return value === undefined ? null : { customerId, value };
  };
  const claim: Archive['claim'] = (projectId, customerId, key) =>
    pool.maybeOneFirst(sql.type(z.object({ transaction_id: z.string() }))`
      SELECT transaction_id FROM ledger_entries
      WHERE project_id = ${projectId} AND customer_id = ${customerId} AND type = 'GATEWAY' AND extra->>'gk' = ${key}
      ORDER BY seq LIMIT 1`);
  return { record, claim };
}

/** The binding id of a gateway Idempotency-Key: the customer's own (`g` buckets). */
export function claimId(customerId: string, key: string): string {
  return JSON.stringify([customerId, key]);
}

export class Bindings {
  constructor(
    private readonly redis: RedisClient,
    scripts: Scripts,
    private readonly prefix: string,
    readonly archived: Archive | null,
  ) {
    this.api = scriptApi(scripts);
  }

  private readonly api: ScriptApi;
  /** Scripts without the generation guard, made when first needed (dropIfOwner). */
  private direct: ScriptApi | null = null;

  /**
   * One binding command: binds `id` to `owner` ('' to read only). With `force` the Bloom
   * filter is not asked (PostgreSQL said the id has no entries).
   */
  async command(projectId: string, kind: BindingKind, id: string, owner: string, force = false): Promise<Binding> {
    const k = bindingKeys(this.prefix, projectId, kind, id);
    const [status, o, , readAt] = await this.api.bind(k, { id, owner, force: force ? '1' : '0' });
    return { status, owner: status === BindStatus.New || status === BindStatus.Bound ? o : null, readAtMs: Number(readAt) };
  }

  /**
   * Binds (or, with owner '', reads) a transaction id or deposit key. An id the filter
   * has is looked up in PostgreSQL: its record is restored into its customer's keys
   * and bound to that customer again; one PostgreSQL does not know (a false positive)
   * is bound as new (read only: reported absent).
   */
  async bind(projectId: string, kind: 't' | 'd', id: string, owner: string): Promise<Binding> {
    const b = await this.command(projectId, kind, id, owner);
    if (b.status !== BindStatus.Archived) return b;
    const record = this.archived ? await this.archived.record(projectId, kind, id) : null;
    if (record === null) return this.command(projectId, kind, id, owner, true);
    await this.restore(projectId, kind, id, record);
    return this.command(projectId, kind, id, record.customerId, true);
  }

  /** Writes an archived record back into its customer's keys, unless it is there. */
  async restore(projectId: string, kind: 't' | 'd', id: string, record: ArchivedRecord): Promise<void> {
    const c = customerKeys(this.prefix, projectId, record.customerId);
    await this.api.restore(c, { member: `${kind}:${id}`, record: record.value });
  }

  /** Removes a binding that nothing was done under (a gateway call that billed nothing). */
  async drop(projectId: string, kind: BindingKind, id: string): Promise<void> {
    await this.redis.hdel(bindingKeys(this.prefix, projectId, kind, id).ids, id);
  }

  /**
   * Removes a binding only while it names `owner` (lua/unclaim-1.lua): safe to send late,
   * after another owner may have bound the id. True when it was removed. Not behind the
   * generation guard, as drop is not: it applies nothing that a lost write could undo, and
   * while one cluster master is down (the guard refuses every script then) the bucket's
   * own master may answer, so that a retry of a gateway call that billed nothing finds
   * its key free once money is served again.
   */
  async dropIfOwner(projectId: string, kind: BindingKind, id: string, owner: string): Promise<boolean> {
    this.direct ??= scriptApi(registerScripts(this.redis));
    return (await this.direct.unclaim({ ids: bindingKeys(this.prefix, projectId, kind, id).ids }, { id, owner })) === 1;
  }

  /**
   * Archives bindings of `owner`: removed, and added to their buckets' Bloom filters.
   * Returns the latest Redis time (ms) at which one was removed (0 for none).
   */
  async archive(projectId: string, kind: BindingKind, owner: string, ids: string[]): Promise<number> {
    const byBucket = new Map<string, { keys: { ids: string; bloom: string }; ids: string[] }>();
    for (const id of ids) {
      const k = bindingKeys(this.prefix, projectId, kind, id);
      const group = byBucket.get(k.ids) ?? { keys: k, ids: [] };
      group.ids.push(id);
      byBucket.set(k.ids, group);
    }
    const times = await Promise.all([...byBucket.values()].map((g) => this.api.unbind(g.keys, { owner, ids: g.ids })));
    return times.reduce((a, b) => Math.max(a, Number(b)), 0);
  }
}

/**
 * The gateway's bindings, in one place: an Idempotency-Key claimed for a call (kind `g`,
 * field JSON [customer, key], owner the call's transaction id) and the call's
 * transaction id -> customer, which receipts read (kind `t`).
 */
export function gatewayBindings(bindings: Bindings, projectId: string) {
  return {
    /**
     * Claims a key for a call; returns the transaction id of the call that holds it. A
     * claim archived with its call (the trim) is answered from PostgreSQL, and stays
     * archived: only a replay of an old key pays that query.
     */
    async claimKey(customerId: string, key: string, transactionId: string): Promise<string> {
      const id = claimId(customerId, key);
      const b = await bindings.command(projectId, 'g', id, transactionId);
      if (b.status !== BindStatus.Archived) return b.owner ?? transactionId;
      const first = bindings.archived ? await bindings.archived.claim(projectId, customerId, key) : null;
      if (first !== null) return first;
      return (await bindings.command(projectId, 'g', id, transactionId, true)).owner ?? transactionId;
    },
    /** Nothing was billed under this key by this call: the same key may retry (unless another call holds it now). */
    freeKey: (customerId: string, key: string, transactionId: string) => bindings.dropIfOwner(projectId, 'g', claimId(customerId, key), transactionId),
    /** Names the call's customer for receipts (the id is new: written beside the hold). */
    indexCall: (transactionId: string, customerId: string) => bindings.command(projectId, 't', transactionId, customerId, true),
    /** The hold failed: no call to find. */
    unindexCall: (transactionId: string) => bindings.drop(projectId, 't', transactionId),
  };
}
