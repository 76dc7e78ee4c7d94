/**
 * A project's webhook endpoints in PostgreSQL: create, list, change, delete, and the
 * signing secret (`whsec_` and 24 random bytes in base64, as Standard Webhooks has it),
 * kept encrypted with the master key and shown only in the answer that creates it.
 */
import { randomBytes } from 'node:crypto';
import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { newId } from '../ids.js';
import { decryptSecret, encryptSecret } from '../keys/crypto.js';
import { timestamp } from '../schema/zod.js';

export const endpointSchema = z
  .object({
    id: z.string().openapi({ description: '`whk_...`' }),
    url: z.string(),
    events: z.array(z.string()).nullable().openapi({ description: 'The event types delivered; null: every type, those added later included.' }),
    description: z.string().nullable(),
    enabled: z.boolean(),
    disabled_reason: z.string().nullable().openapi({ description: 'Why the service disabled it (it kept failing), or null.' }),
    disabled_at: timestamp.nullable(),
    created_at: timestamp,
  })
  .strict()
  .openapi('WebhookEndpoint');

export type Endpoint = z.infer<typeof endpointSchema>;

const endpointRow = z.object({
  id: z.string(),
  project_id: z.string(),
  url: z.string(),
  events: z.array(z.string()).nullable(),
  description: z.string().nullable(),
  enabled: z.boolean(),
  disabled_reason: z.string().nullable(),
  disabled_at: z.number().nullable(),
  created_at: z.number(),
});
type EndpointRow = z.infer<typeof endpointRow>;

const columns = sql.fragment`id, project_id, url, events, description, enabled, disabled_reason, disabled_at, created_at`;

function endpointOf(r: EndpointRow): Endpoint {
  return {
    id: r.id,
    url: r.url,
    events: r.events,
    description: r.description,
    enabled: r.enabled,
    disabled_reason: r.disabled_reason,
    disabled_at: r.disabled_at === null ? null : new Date(r.disabled_at).toISOString(),
    created_at: new Date(r.created_at).toISOString(),
  };
}

export interface EndpointChange {
  url?: string;
  events?: string[] | null;
  description?: string | null;
  /** true also clears why the service disabled it. */
  enabled?: boolean;
}

/** What a delivery needs of its endpoint: where it goes, whether it may, and the secret to sign with. */
export interface DeliveryTarget {
  id: string;
  url: string;
  enabled: boolean;
  secret: string;
}

const targetRow = z.object({ id: z.string(), url: z.string(), enabled: z.boolean(), secret_encrypted: z.instanceof(Buffer) });

/** What stores endpoints: the master key seals their secrets. */
export function createEndpointQueries(db: CommonQueryMethods, masterKey: Buffer) {
  return {
    async create(projectId: string, e: { url: string; events: string[] | null; description: string | null }): Promise<Endpoint & { secret: string }> {
      const id = newId('whk');
      const secret = `whsec_${randomBytes(24).toString('base64')}`;
      const sealed = encryptSecret(masterKey, secret, id);
      const events = e.events === null ? null : sql.array(e.events, 'text');
      const row = await db.one(sql.type(endpointRow)`
        INSERT INTO webhook_endpoints (id, project_id, url, events, description, secret_encrypted)
        VALUES (${id}, ${projectId}, ${e.url}, ${events}, ${e.description}, ${sql.binary(sealed)})
        RETURNING ${columns}`);
      return { ...endpointOf(row), secret };
    },

    /** A project's endpoints, newest first. */
    async list(projectId: string): Promise<Endpoint[]> {
      const rows = await db.any(sql.type(endpointRow)`
        SELECT ${columns} FROM webhook_endpoints WHERE project_id = ${projectId} ORDER BY created_at DESC, id DESC`);
      return rows.map(endpointOf);
    },

    async find(projectId: string, id: string): Promise<Endpoint | null> {
      const row = await db.maybeOne(sql.type(endpointRow)`SELECT ${columns} FROM webhook_endpoints WHERE project_id = ${projectId} AND id = ${id}`);
      return row === null ? null : endpointOf(row);
    },

    /** The changed endpoint, or null when the project has none of this id. */
    async update(projectId: string, id: string, c: EndpointChange): Promise<Endpoint | null> {
      const sets = [sql.fragment`id = id`];
      if (c.url !== undefined) sets.push(sql.fragment`url = ${c.url}`);
      if (c.events !== undefined) sets.push(sql.fragment`events = ${c.events === null ? null : sql.array(c.events, 'text')}`);
      if (c.description !== undefined) sets.push(sql.fragment`description = ${c.description}`);
      if (c.enabled === true) sets.push(sql.fragment`enabled = true, disabled_reason = NULL, disabled_at = NULL`);
      if (c.enabled === false) sets.push(sql.fragment`enabled = false`);
      const row = await db.maybeOne(sql.type(endpointRow)`
        UPDATE webhook_endpoints SET ${sql.join(sets, sql.fragment`, `)}
        WHERE project_id = ${projectId} AND id = ${id} RETURNING ${columns}`);
      return row === null ? null : endpointOf(row);
    },

    /** What a delivery to the endpoint needs, its secret decrypted; null when it is gone. */
    async deliveryTarget(id: string): Promise<DeliveryTarget | null> {
      const row = await db.maybeOne(sql.type(targetRow)`SELECT id, url, enabled, secret_encrypted FROM webhook_endpoints WHERE id = ${id}`);
      if (row === null) return null;
      return { id: row.id, url: row.url, enabled: row.enabled, secret: decryptSecret(masterKey, row.secret_encrypted, row.id) };
    },

    /** Deletes the endpoint and its delivery log; false when there was none. */
    async remove(projectId: string, id: string): Promise<boolean> {
      const r = await db.query(sql.unsafe`DELETE FROM webhook_endpoints WHERE project_id = ${projectId} AND id = ${id}`);
      return r.rowCount > 0;
    },
  };
}

export type EndpointQueries = ReturnType<typeof createEndpointQueries>;

/** When an endpoint that keeps failing is disabled (config WEBHOOK_DISABLE_*). */
export interface DisableRule {
  /** This many finished deliveries in a row, the newest ones, all failed... */
  failedDeliveries: number;
  /** ...the oldest of them made at least this long ago. */
  failingMs: number;
}

/**
 * Disables the endpoint when its newest finished deliveries all failed every retry for
 * long enough (DisableRule); answers whether it did. Run when a delivery is marked failed.
 */
export async function disableWhenFailing(db: CommonQueryMethods, endpointId: string, rule: DisableRule): Promise<boolean> {
  const r = await db.query(sql.unsafe`
    WITH recent AS (
      SELECT status, created_at FROM webhook_deliveries
      WHERE endpoint_id = ${endpointId} AND status <> 'pending'
      ORDER BY finished_at DESC LIMIT ${rule.failedDeliveries}
    )
    UPDATE webhook_endpoints SET enabled = false, disabled_at = now(),
      disabled_reason = ${`its last ${rule.failedDeliveries} deliveries failed every retry`}
    WHERE id = ${endpointId} AND enabled
      AND (SELECT count(*) FROM recent WHERE status = 'failed') = ${rule.failedDeliveries}
      AND (SELECT min(created_at) FROM recent) <= now() - ${sql.interval({ seconds: rule.failingMs / 1000 })}`);
  return r.rowCount > 0;
}
