/**
 * A customer's profile as the API answers it, and the change of it (PATCH): one module for
 * the two ways in, PATCH /v1/customers/{id} with a project key (src/customers/profile.ts)
 * and PATCH /projects/{id}/customers/{customer} of the management operations (admin keys
 * and dashboard sessions, src/admin/operations/customers.ts), so that both change the same
 * things the same way. PostgreSQL is written first, after the customer's outbox is
 * drained (so that its row exists), and Redis, the copy the API and the scripts read,
 * second; a crash between the two leaves drift that reconcile repairs from PostgreSQL.
 */
import type { Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import { z } from 'zod';
import type { RedisClient } from '../redis/client.js';
import { storedJsonObject } from '../schema/json.js';
import { budgetSchema, type BudgetState } from '../ledger/budgets.js';
import { LedgerOutbox } from '../ledger/outbox.js';
import { createCustomerQueries, type LedgerQueries } from '../ledger/queries.js';
import type { ProjectScope } from '../ledger/requests.js';
import type { LedgerService } from '../ledger/service.js';
import { alertMetaOf, alertSettingsOfMeta, alertSettingsPatchShape, patchAlertSettings, type AlertSettings } from './alerts.js';
import { key_budgets_max, keyBudgetsPatchSchema, requireLiveProjectKeys, splitKeyBudgets, tooManyKeyBudgets, writeKeyBudgets } from './key-budgets.js';
import { customerNotFound } from '../errors/not-found.js';

const customer_name_chars_max = 256;
const customer_email_chars_max = 320;

/** The profile fields that POST /v1/customers takes and PATCH changes. */
export const customerPatchSchema = z.object({
  name: z.string().max(customer_name_chars_max).nullable().optional(),
  email: z.string().max(customer_email_chars_max).email().nullable().optional(),
  metadata: storedJsonObject.nullable().optional(),
});

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
      metadata: (view.profile.metadata === null ? {} : JSON.parse(view.profile.metadata)) as Record<string, unknown>,
      ...alertSettingsOfMeta(view.profile.alerts),
      created_at: new Date(Number(view.profile.created_at)).toISOString(),
      ...(withBudget ? { budget: view.budget, key_budgets: view.keyBudgets } : {}),
    };
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
