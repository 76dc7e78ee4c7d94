/**
 * Key management for a project: creation within the plan's key limit, listing (never the
 * secret nor its hash) and revocation, which every API process learns at once over Redis.
 */
import type { RedisClient } from '../redis/client.js';
import { sql, type CommonQueryMethods, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { extended, timestamp } from '../schema/zod.js';
import { ApiError } from '../errors/catalogue.js';
import { newId } from '../ids.js';
import { displayPrefix, generateSecret, hashSecret } from '../keys/secrets.js';
import { publishKeyChange, type KeyCache } from '../keys/store.js';
import type { KeyUsage } from '../keys/usage.js';
import type { PlanService } from '../plans/service.js';
import { keysetOrder, toPage, type Page, type PageRequest } from './queries.js';
import { budgetStateSchema, keyBudgetOf, keyCountersField, type Budget } from '../ledger/budgets.js';
import { customerKeys } from '../redis/keys.js';

const projectKeyRow = z.object({
  id: z.string(),
  project_id: z.string(),
  type: z.enum(['project', 'customer']),
  name: z.string().nullable(),
  prefix: z.string(),
  customer_id: z.string().nullable(),
  allowed_models: z.array(z.string()).nullable(),
  expires_at: z.number().nullable(),
  revoked_at: z.number().nullable(),
  last_used_at: z.number().nullable(),
  created_at: z.number(),
  budget_limit: z.number().nullable(),
  budget_period: z.enum(['day', 'week', 'month', 'total']).nullable(),
  /** The key's budget counters in its customer's meta hash (lua/includes/budget.lua), read by list. */
  budget_counters: z.string().nullable().optional(),
});
export type ProjectKeyRow = z.infer<typeof projectKeyRow>;

export interface NewProjectKey {
  type: 'project' | 'customer';
  name: string | null;
  customerId: string | null;
  allowedModels: string[] | null;
  expiresAtMs: number | null;
  /** A customer-scoped key's spending budget (docs/API.md, "Budgets"). */
  budget: Budget | null;
}

const keyColumns = sql.fragment`id, project_id, type, name, prefix, customer_id, allowed_models, expires_at, revoked_at, last_used_at, created_at, budget_limit, budget_period`;

/** The API's view of a key: what the dashboard lists. */
export function keyEntry(k: ProjectKeyRow) {
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  return {
    id: k.id,
    type: k.type,
    prefix: k.prefix,
    name: k.name,
    project_id: k.project_id,
    customer_id: k.customer_id,
    allowed_models: k.allowed_models,
    expires_at: iso(k.expires_at),
    revoked_at: iso(k.revoked_at),
    last_used_at: iso(k.last_used_at),
    created_at: iso(k.created_at)!,
    budget: k.budget_limit === null || k.budget_period === null
      ? null
      : keyBudgetOf({ limit: k.budget_limit, period: k.budget_period }, k.budget_counters ?? null, Date.now()),
  };
}

/** A change refused because the project is deactivated (its records stay readable). */
export function projectDeactivated(projectId: string): ApiError {
  return new ApiError('project_deactivated', { message: `project ${projectId} is deactivated: its records can be read, nothing can be added or changed` });
}

export class KeyAdmin {
  constructor(
    private readonly db: DatabasePool,
    private readonly redis: RedisClient,
    private readonly prefix: string,
    private readonly plans: Pick<PlanService, 'limitsOf'>,
    /** This process's key cache: dropped from directly, without waiting for its own message. */
    private readonly cache: Pick<KeyCache, 'forget'>,
    /** This process's noted key uses, written before a list is read. */
    private readonly usage: Pick<KeyUsage, 'flush'>,
  ) {}

  /**
   * Creates a key and returns its secret, which is never stored. The project row is
   * locked while the project's unrevoked keys are counted and the new one inserted, so
   * concurrent creations at the limit admit exactly the free slots.
   */
  async create(organizationId: string, projectId: string, k: NewProjectKey): Promise<{ key: ProjectKeyRow; secret: string }> {
    const { keysPerProjectMax } = await this.plans.limitsOf(organizationId);
    const secret = generateSecret(k.type);
    const key = await this.db.transaction(async (tx) => {
      const locked = await tx.maybeOne(sql.type(z.object({ deactivated: z.boolean() }))`
        SELECT deactivated_at IS NOT NULL AS deactivated FROM projects WHERE id = ${projectId} AND organization_id = ${organizationId} FOR UPDATE`);
      if (!locked) throw new ApiError('not_found', { message: 'project not found' });
      if (locked.deactivated) throw projectDeactivated(projectId);
      if (k.allowedModels !== null) await this.checkModels(tx, projectId, k.allowedModels);
      if (keysPerProjectMax !== null) {
        const n = await tx.oneFirst(sql.type(z.object({ n: z.number() }))`
          SELECT count(*)::int8 AS n FROM api_keys WHERE project_id = ${projectId} AND revoked_at IS NULL`);
        if (n >= keysPerProjectMax) {
          throw new ApiError('plan_limit_reached', {
            message: `the plan allows ${keysPerProjectMax} API keys per project (revoked keys do not count); upgrade the plan or revoke a key`,
            extra: { limit: keysPerProjectMax },
          });
        }
      }
      return tx.one(sql.type(projectKeyRow)`
        INSERT INTO api_keys (id, organization_id, project_id, type, name, prefix, secret_hash, customer_id, allowed_models, expires_at, budget_limit, budget_period)
        VALUES (${newId('key')}, ${organizationId}, ${projectId}, ${k.type}, ${k.name}, ${displayPrefix(secret)},
                ${sql.binary(hashSecret(secret))}, ${k.customerId},
                ${k.allowedModels === null ? null : sql.array(k.allowedModels, 'text')},
                ${k.expiresAtMs === null ? null : sql.timestamp(new Date(k.expiresAtMs))}, ${k.budget?.limit ?? null}, ${k.budget?.period ?? null})
        RETURNING ${keyColumns}`);
    });
    return { key, secret };
  }

  /**
   * A customer key's allowed_models must name models of its project: a typo would
   * otherwise make a key that is refused every model (403 model_not_allowed) with nothing
   * saying why. 400 naming the first unknown entry (`allowed_models.2`). Inactive models
   * count: they are the project's, and may be activated again.
   */
  private async checkModels(tx: CommonQueryMethods, projectId: string, ids: readonly string[]): Promise<void> {
    const found = new Set(
      await tx.anyFirst(sql.type(z.object({ id: z.string() }))`
        SELECT id FROM models WHERE project_id = ${projectId} AND id = ANY (${sql.array([...ids], 'text')})`),
    );
    const i = ids.findIndex((id) => !found.has(id));
    if (i >= 0) {
      throw new ApiError('invalid_request', {
        param: `allowed_models.${i}`,
        message: `allowed_models.${i}: the project has no model ${JSON.stringify(ids[i])} (GET /v1/admin/projects/${projectId}/models lists them)`,
      });
    }
  }

  /**
   * A page of the project's keys. The uses this process noted and has not written yet are
   * written first (one UPDATE, when there are any): a key used here shows its last use at
   * once, not up to KEY_LAST_USED_FLUSH_MS later. Other processes' uses come with their flush.
   */
  async list(projectId: string, page: PageRequest): Promise<Page<ProjectKeyRow>> {
    await this.usage.flush();
    const k = keysetOrder(page);
    const rows = await this.db.any(sql.type(projectKeyRow)`
      SELECT ${keyColumns} FROM api_keys WHERE project_id = ${projectId} AND ${k.where} ${k.orderLimit}`);
    return toPage(await this.withBudgetCounters(rows), page.limit);
  }

  /** The rows, each customer-scoped key with a budget given its counters from its customer's hash (one pipeline). */
  private async withBudgetCounters(rows: readonly ProjectKeyRow[]): Promise<ProjectKeyRow[]> {
    const budgeted = rows.filter((r) => r.budget_limit !== null && r.customer_id !== null);
    if (budgeted.length === 0) return [...rows];
    const counters = await Promise.all(budgeted.map((r) => this.redis.hget(customerKeys(this.prefix, r.project_id, r.customer_id!).meta, keyCountersField(r.id))));
    const byId = new Map(budgeted.map((r, i) => [r.id, counters[i]]));
    return rows.map((r) => (byId.has(r.id) ? { ...r, budget_counters: byId.get(r.id) ?? null } : r));
  }

  /**
   * Sets or clears a customer-scoped key's budget (null clears it). Every API process drops
   * its cached copy of the key (the budget travels with the key record), as a revocation
   * does. Null when the key is not one of this project's.
   */
  async setBudget(projectId: string, keyId: string, budget: Budget | null): Promise<ProjectKeyRow | null> {
    const row = await this.db.maybeOne(sql.type(projectKeyRow.extend({ secret_hash: z.instanceof(Buffer) }))`
      UPDATE api_keys SET budget_limit = ${budget?.limit ?? null}, budget_period = ${budget?.period ?? null}
      WHERE id = ${keyId} AND project_id = ${projectId} AND type = 'customer'
      RETURNING ${keyColumns}, secret_hash`);
    if (!row) return null;
    const { secret_hash, ...key } = row;
    this.cache.forget(secret_hash);
    await publishKeyChange(this.redis, this.prefix, secret_hash);
    return (await this.withBudgetCounters([key]))[0];
  }

  /** The key's type, null when it is not one of this project's. */
  async typeOf(projectId: string, keyId: string): Promise<'project' | 'customer' | null> {
    return this.db.maybeOneFirst(sql.type(z.object({ type: z.enum(['project', 'customer']) }))`
      SELECT type FROM api_keys WHERE id = ${keyId} AND project_id = ${projectId}`);
  }

  /**
   * Revokes a key; revoking it again keeps the first revocation time. The change is
   * published even on a repeat, so a process that missed the first message drops its
   * cached copy now. Null when the key is not one of this project's.
   */
  async revoke(projectId: string, keyId: string): Promise<ProjectKeyRow | null> {
    const row = await this.db.maybeOne(sql.type(projectKeyRow.extend({ secret_hash: z.instanceof(Buffer) }))`
      UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
      WHERE id = ${keyId} AND project_id = ${projectId}
      RETURNING ${keyColumns}, secret_hash`);
    if (!row) return null;
    const { secret_hash, ...key } = row;
    this.cache.forget(secret_hash);
    await publishKeyChange(this.redis, this.prefix, secret_hash);
    return key;
  }
}

// The documented answers (src/openapi/).
export const keySchema = z
  .object({
    id: z.string(),
    type: z.enum(['project', 'customer']),
    prefix: z.string().openapi({ description: "The key's first characters, to tell keys apart." }),
    name: z.string().nullable(),
    project_id: z.string(),
    customer_id: z.string().nullable(),
    allowed_models: z.array(z.string()).nullable(),
    expires_at: timestamp.nullable(),
    revoked_at: timestamp.nullable(),
    last_used_at: timestamp.nullable(),
    created_at: timestamp,
    // Inline, not the BudgetState reference: a nullable reference loses its null in the document.
    budget: z.object(budgetStateSchema.shape).strict().nullable().openapi({ description: 'A customer-scoped key\'s spending budget with its counters (docs/API.md, "Budgets"), null when none is set.' }),
  })
  .strict()
  .openapi('Key');
export const createdKeySchema = extended(keySchema, { key: z.string().openapi({ description: 'The secret, shown only in this answer.' }) }).openapi('CreatedKey');
