/**
 * Outbox entries that PostgreSQL refuses for good (src/ledger/write-refusals.ts), parked so that
 * they block nothing (migrations/011_persist_quarantine.sql).
 *
 * The outbox parks a refused entry here, with the stream entry's fields as Redis held them,
 * before it trims it. Its seq is then a hole in the ledger of record, known and counted:
 * /health (degraded), svc_persist_quarantined_entries, the reconcile report and the
 * dashboard's Reconcile screen name it until an operator releases it (`npm run quarantine`,
 * docs/OPERATIONS.md).
 */
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import type { OutboxEntry } from '../redis/codec.js';
import { sqlStateOf } from './write-refusals.js';

/** A row of persist_quarantine as the CLI and reconcile read it. */
const quarantineRow = z.object({
  id: z.number(),
  base: z.string(),
  stream_id: z.string(),
  project_id: z.string(),
  customer_id: z.string(),
  seq: z.number().nullable(),
  entry_id: z.string().nullable(),
  entry_type: z.string().nullable(),
  fields: z.array(z.instanceof(Buffer)),
  error: z.string(),
  sqlstate: z.string().nullable(),
  first_seen_at: z.number(),
  last_seen_at: z.number(),
  seen_count: z.number(),
  released_at: z.number().nullable(),
  release_note: z.string().nullable(),
});
export type QuarantineRow = z.infer<typeof quarantineRow>;

/** Text PostgreSQL can store: the descriptive columns of a parked entry (its bytes are kept exactly in `fields`). */
const storable = (s: string) => s.replaceAll('\u0000', '\uFFFD');

/** What the outbox parks for one entry. */
export interface ParkedEntry {
  base: string;
  streamId: string;
  projectId: string;
  customerId: string;
  entry: OutboxEntry | null;
  fields: Buffer[];
  error: unknown;
}

/** A seq the ledger can hold, or null. */
function seqOf(entry: OutboxEntry | null): number | null {
  const raw = entry?.seq;
  return typeof raw === 'string' && /^[1-9][0-9]{0,14}$/.test(raw) ? Number(raw) : null;
}

export function createQuarantineQueries(pool: DatabasePool, prefix: string) {
  const columns = sql.fragment`id, base, stream_id, project_id, customer_id, seq, entry_id, entry_type, fields, error, sqlstate,
    first_seen_at, last_seen_at, seen_count, released_at, release_note`;
  return {
    /** Parks entries (again: the same stream entry is seen once more, its error updated). */
    async park(parked: readonly ParkedEntry[]): Promise<void> {
      for (const p of parked) {
        const message = storable(p.error instanceof Error ? p.error.message : String(p.error)).slice(0, 4096);
        await pool.query(sql.unsafe`
          INSERT INTO persist_quarantine (redis_prefix, base, stream_id, project_id, customer_id, seq, entry_id, entry_type, fields, error, sqlstate)
          VALUES (${prefix}, ${storable(p.base)}, ${p.streamId}, ${storable(p.projectId)}, ${storable(p.customerId)}, ${seqOf(p.entry)},
                  ${typeof p.entry?.id === 'string' ? storable(p.entry.id) : null}, ${typeof p.entry?.type === 'string' ? storable(p.entry.type) : null},
                  ARRAY(SELECT decode(h, 'hex') FROM unnest(${sql.array(p.fields.map((f) => f.toString('hex')), 'text')}::text[]) WITH ORDINALITY AS f(h, i) ORDER BY i),
                  ${message}, ${sqlStateOf(p.error)})
          ON CONFLICT (redis_prefix, base, stream_id) DO UPDATE
            SET last_seen_at = now(), seen_count = persist_quarantine.seen_count + 1, error = EXCLUDED.error, sqlstate = EXCLUDED.sqlstate`);
      }
    },
    /** Entries parked and not released, of this service's prefix (of one project when given). */
    openCount(projectId?: string): Promise<number> {
      return pool.oneFirst(sql.type(z.object({ n: z.number() }))`
        SELECT count(*)::int8 AS n FROM persist_quarantine WHERE redis_prefix = ${prefix} AND released_at IS NULL
        ${projectId === undefined ? sql.fragment`` : sql.fragment`AND project_id = ${projectId}`}`);
    },
    /** Open entries by customer and seq (those without one last); of one customer when given. */
    open(filter: { projectId?: string; customerId?: string; limit?: number } = {}): Promise<readonly QuarantineRow[]> {
      const conditions = [
        sql.fragment`redis_prefix = ${prefix}`, sql.fragment`released_at IS NULL`,
        ...(filter.projectId === undefined ? [] : [sql.fragment`project_id = ${filter.projectId}`]),
        ...(filter.customerId === undefined ? [] : [sql.fragment`customer_id = ${filter.customerId}`]),
      ];
      return pool.any(sql.type(quarantineRow)`
        SELECT ${columns} FROM persist_quarantine WHERE ${sql.join(conditions, sql.fragment` AND `)}
        ORDER BY project_id, customer_id, seq NULLS LAST, id LIMIT ${filter.limit ?? 1000}`);
    },
    get(id: number): Promise<QuarantineRow | null> {
      return pool.maybeOne(sql.type(quarantineRow)`SELECT ${columns} FROM persist_quarantine WHERE redis_prefix = ${prefix} AND id = ${id}`);
    },
    /** Replaces one field's value of an open entry (the operator's fix). */
    async setField(id: number, name: string, value: Buffer): Promise<boolean> {
      const row = await this.get(id);
      if (row === null || row.released_at !== null) return false;
      const fields = [...row.fields];
      let found = false;
      for (let i = 0; i < fields.length; i += 2) {
        if (fields[i].toString('utf8') === name) [fields[i + 1], found] = [value, true];
      }
      if (!found) fields.push(Buffer.from(name, 'utf8'), value);
      await pool.query(sql.unsafe`
        UPDATE persist_quarantine
        SET fields = ARRAY(SELECT decode(h, 'hex') FROM unnest(${sql.array(fields.map((f) => f.toString('hex')), 'text')}::text[]) WITH ORDINALITY AS f(h, i) ORDER BY i)
        WHERE redis_prefix = ${prefix} AND id = ${id} AND released_at IS NULL`);
      return true;
    },
    async release(id: number, note: string): Promise<boolean> {
      const r = await pool.query(sql.unsafe`
        UPDATE persist_quarantine SET released_at = now(), release_note = ${storable(note)}
        WHERE redis_prefix = ${prefix} AND id = ${id} AND released_at IS NULL`);
      return r.rowCount === 1;
    },
  };
}

export type QuarantineQueries = ReturnType<typeof createQuarantineQueries>;
