/**
 * A customer's profile as the API answers it, its creation without a deposit and its
 * change (PATCH): one module for the two ways in, POST /v1/customers and PATCH
 * /v1/customers/{id} with a project key (src/customers/profile.ts) and POST
 * /projects/{id}/customers and PATCH /projects/{id}/customers/{customer} of the
 * management operations (admin keys and dashboard sessions,
 * src/admin/operations/customers.ts), so that both create and change the same things the
 * same way. PostgreSQL is written first (for PATCH after the customer's outbox is
 * drained, so that its row exists), and Redis, the copy the API and the scripts read,
 * second; a crash between the two leaves drift that reconcile repairs from PostgreSQL.
 */
import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import { z } from 'zod';
import type { RedisClient } from '../redis/client.js';
import { storedJsonObject } from '../schema/json.js';
import { budgetSchema, type BudgetState } from '../ledger/budgets.js';
import { LedgerOutbox } from '../ledger/outbox.js';
import { createCustomerQueries, type LedgerQueries } from '../ledger/queries.js';
import type { ProjectScope } from '../ledger/requests.js';
import { identifierSchema } from '../ledger/schemas.js';
import type { LedgerService } from '../ledger/service.js';
import { alertMetaOf, alertSettingsOfMeta, alertSettingsPatchShape, patchAlertSettings, type AlertSettings } from './alerts.js';
import { key_budgets_max, keyBudgetsPatchSchema, requireLiveProjectKeys, splitKeyBudgets, tooManyKeyBudgets, writeKeyBudgets } from './key-budgets.js';
import { customerNotFound } from '../errors/not-found.js';
import { ApiError } from '../errors/catalogue.js';

const customer_name_chars_max = 256;
const customer_email_chars_max = 320;

/** The profile fields that POST /v1/customers takes and PATCH changes. */
const customerPatchSchema = z.object({
  name: z.string().max(customer_name_chars_max).nullable().optional(),
  email: z.string().max(customer_email_chars_max).email().nullable().optional(),
  metadata: storedJsonObject.nullable().optional(),
});

/** What a creation takes (POST /v1/customers): the id, and the profile fields. */
export const customerCreateSchema = customerPatchSchema.extend({ customer_id: identifierSchema });
type CustomerCreate = z.infer<typeof customerCreateSchema>;

type StoredProfile = { name: string | null; email: string | null; metadata: Record<string, unknown> | null };

/** The metadata Redis holds (JSON text, or null for none) as a profile answers it: `{}` for none. */
export function storedMetadata(text: string | null): Record<string, unknown> {
  return (text === null ? {} : JSON.parse(text)) as Record<string, unknown>;
}

/** Metadata as a profile answers it: none and `{}` are the same. */
const metadataOf = (m: Record<string, unknown> | null | undefined) => (m == null ? {} : m);

/** The first field the request gives that the stored profile has otherwise, or null. */
function differingField(given: z.infer<typeof customerPatchSchema>, stored: StoredProfile): 'name' | 'email' | 'metadata' | null {
  for (const f of ['name', 'email'] as const) {
    if (given[f] !== undefined && given[f] !== stored[f]) return f;
  }
  if (given.metadata !== undefined && !isDeepStrictEqual(metadataOf(given.metadata), metadataOf(stored.metadata))) return 'metadata';
  return null;
}

/**
 * What PATCH takes: the profile fields, the alert settings (src/customers/alerts.ts), the
 * budget (null clears it) and project keys' budgets for this customer (docs/API.md,
 * "Budgets").
 */
export const customerUpdateSchema = customerPatchSchema.extend({
  ...alertSettingsPatchShape,
  budget: budgetSchema.nullable().optional(),
  key_budgets: keyBudgetsPatchSchema.optional(),
});
type CustomerUpdate = z.infer<typeof customerUpdateSchema>;

/** A profile as the API answers it; `budget` only when asked for. */
export interface CustomerProfile extends AlertSettings {
  id: string;
  name: string | null;
  email: string | null;
  metadata: Record<string, unknown>;
  created_at: string;
  budget?: BudgetState | null;
  key_budgets?: Record<string, BudgetState>;
}

export interface CustomerProfileDeps {
  ledger: LedgerService;
  redis: RedisClient;
  db: DatabasePool;
  ledgerQueries: LedgerQueries;
  prefix: string;
  logger: Logger;
}

export class CustomerProfiles {
  private readonly customers;
  private readonly outbox: LedgerOutbox;

  constructor(private readonly deps: CustomerProfileDeps) {
    this.customers = createCustomerQueries(deps.db);
    this.outbox = new LedgerOutbox(deps.redis, deps.ledgerQueries, deps.prefix, deps.logger);
  }

  /** The profile from the Redis copy, with the budgets and this period's counters when `withBudget`. */
  async profileOf(scope: ProjectScope, id: string, withBudget = false): Promise<CustomerProfile> {
    const view = await this.deps.ledger.view(scope, id);
    if (!view) throw customerNotFound(id);
    return {
      id,
      name: view.profile.name,
      email: view.profile.email,
      metadata: storedMetadata(view.profile.metadata),
      ...alertSettingsOfMeta(view.profile.alerts),
      created_at: new Date(Number(view.profile.created_at)).toISOString(),
      ...(withBudget ? { budget: view.budget, key_budgets: view.keyBudgets } : {}),
    };
  }

  /**
   * Creates a customer without a deposit (a creation already validated): `created` true
   * and its profile. An id that exists already (made by a deposit or an earlier
   * creation) answers `created` false with the profile as it is when every field given
   * matches it (a retried creation is safe), else 409 customer_exists naming the first
   * field that differs: nothing is changed (PATCH does).
   */
  async create(scope: ProjectScope, body: CustomerCreate, patchHint: string): Promise<{ created: boolean; profile: CustomerProfile }> {
    const { redis, ledger } = this.deps;
    const id = body.customer_id;
    await ledger.ready();
    const k = ledger.keys(scope, id);
    const existing = async () => {
      const p = await this.profileOf(scope, id);
      const differs = differingField(body, p);
      if (differs !== null) {
        throw new ApiError('customer_exists', {
          param: differs,
          message: `customer ${id} already exists with another ${differs}; ${patchHint} changes it (nothing was changed)`,
        });
      }
      return { created: false, profile: p };
    };
    if (await redis.hexists(k.meta, 'created_at')) return existing();
    const stored = await this.customers.createCustomer(scope.projectId, id, {
      name: body.name ?? null,
      email: body.email ?? null,
      metadata: body.metadata ?? null,
    });
    // PostgreSQL's row, new or left by a creation whose Redis write never happened, is
    // the profile: Redis gets it whole. A deposit that created the customer in Redis
    // meanwhile keeps its source; its profile gives way to the row (its own insert of the
    // row does nothing), so the two stores agree.
    const tx = redis.multi().hset(k.meta, 'created_at', String(stored.row.created_at));
    for (const field of ['name', 'email'] as const) {
      const v = stored.row[field];
      if (v === null) tx.hdel(k.meta, field);
      else tx.hset(k.meta, field, v);
    }
    if (stored.row.metadata === null) tx.hdel(k.meta, 'metadata');
    else tx.hset(k.meta, 'metadata', JSON.stringify(stored.row.metadata));
    await tx.exec();
    if (!stored.created) return existing();
    return { created: true, profile: await this.profileOf(scope, id) };
  }

  /**
   * Applies a PATCH (already validated) and answers the profile with its budget. Only the
   * fields given change; null clears one. An unknown customer is customer_not_found and
   * changes nothing.
   */
  async patch(scope: ProjectScope, id: string, patch: CustomerUpdate): Promise<CustomerProfile> {
    const { redis } = this.deps;
    const k = this.deps.ledger.keys(scope, id);
    if (!(await redis.hexists(k.meta, 'created_at'))) throw customerNotFound(id);
    const keyBudgets = patch.key_budgets === undefined ? undefined : splitKeyBudgets(patch.key_budgets);
    if (keyBudgets) await requireLiveProjectKeys(this.deps.db, scope.projectId, keyBudgets);
    await this.outbox.drain(k.base);
    const { low_balance_threshold, auto_top_up, key_budgets: _, ...profile } = patch;
    const alerts = low_balance_threshold === undefined && auto_top_up === undefined ? undefined : patchAlertSettings(null, { low_balance_threshold, auto_top_up });
    // Only the keys the request gives: the statement merges them into what is stored.
    const given = alerts && Object.fromEntries(Object.entries(alerts).filter(([f]) => (f === 'low_balance_threshold' ? low_balance_threshold : auto_top_up) !== undefined));
    const updated = await this.customers.updateProfile(scope.projectId, id, {
      ...profile, alerts: given, keyBudgets: keyBudgets && { ...keyBudgets, max: key_budgets_max },
    });
    if (!updated) throw customerNotFound(id);
    if ('keyBudgetsOver' in updated) throw tooManyKeyBudgets(updated.keyBudgetsOver);
    const tx = redis.multi();
    if (given) {
      const al = alertMetaOf(updated.alert_settings as AlertSettings | null);
      if (al === null) tx.hdel(k.meta, 'al');
      else tx.hset(k.meta, 'al', al);
    }
    for (const field of ['name', 'email'] as const) {
      const v = patch[field];
      if (v === null) tx.hdel(k.meta, field);
      else if (v !== undefined) tx.hset(k.meta, field, v);
    }
    if (patch.metadata === null) tx.hdel(k.meta, 'metadata');
    else if (patch.metadata !== undefined) tx.hset(k.meta, 'metadata', JSON.stringify(patch.metadata));
    // The budget's limit and period: the scripts keep its counters (lua/includes/budget.lua).
    if (patch.budget === null) tx.hdel(k.meta, 'bud_l', 'bud_p');
    else if (patch.budget !== undefined) tx.hset(k.meta, 'bud_l', String(patch.budget.limit), 'bud_p', patch.budget.period);
    if (keyBudgets) writeKeyBudgets(tx, k.meta, keyBudgets);
    await tx.exec();
    return this.profileOf(scope, id, true);
  }
}
