/**
 * Project key budgets for one customer (docs/API.md, "Budgets"): a project key serves many
 * customers, so its budget is per customer, set in that customer's settings
 * (PATCH /v1/customers/{id} `key_budgets`, merged by key id, null removes one). PostgreSQL
 * keeps the record (customers.key_budgets, migration 018); the customer's meta hash holds
 * the copy the scripts enforce (`bud_pk:<key id>`, lua/includes/budget.lua), read in the
 * same HMGET as the customer's own budget, so a call gains no round trip.
 */
import type { ChainableCommander } from 'ioredis';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors/catalogue.js';
import { budgetSchema, projectKeyBudgetField, projectKeyBudgetValue, type Budget } from '../ledger/budgets.js';

/** At most this many project key budgets per customer: each is a field the hold reads past. */
export const key_budgets_max = 100;

/** `key_budgets` of PATCH /v1/customers/{id}: key id -> budget, or null to remove it. */
export const keyBudgetsPatchSchema = z
  .record(z.string().min(1).max(64), budgetSchema.nullable())
  .refine((r) => Object.keys(r).length <= key_budgets_max, { message: `at most ${key_budgets_max} key ids in one request` });

/** A `key_budgets` patch split into what it sets and what it removes. */
export interface KeyBudgetsPatch {
  set: Record<string, Budget>;
  remove: string[];
}

export function splitKeyBudgets(given: Record<string, Budget | null>): KeyBudgetsPatch {
  const set: Record<string, Budget> = {};
  const remove: string[] = [];
  for (const [id, b] of Object.entries(given)) {
    if (b === null) remove.push(id);
    else set[id] = b;
  }
  return { set, remove };
}

/**
 * Refuses the first key id the patch sets that is not a live project key of the project
 * (400 invalid_request, param `key_budgets.<id>`). Removing takes any id: a key revoked
 * since still leaves its budget to remove.
 */
export async function requireLiveProjectKeys(db: DatabasePool, projectId: string, patch: KeyBudgetsPatch): Promise<void> {
  const ids = Object.keys(patch.set);
  if (ids.length === 0) return;
  const live = new Set(await db.anyFirst(sql.type(z.object({ id: z.string() }))`
    SELECT id FROM api_keys
    WHERE project_id = ${projectId} AND type = 'project' AND id = ANY(${sql.array(ids, 'text')})
      AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`));
  const bad = ids.find((id) => !live.has(id));
  if (bad === undefined) return;
  throw new ApiError('invalid_request', {
    param: `key_budgets.${bad}`,
    message:
      `key_budgets: ${bad} is not a live project key of this project (a project key's id, not revoked or expired); ` +
      'a customer-scoped key takes its budget on the key itself (PATCH /v1/admin/projects/{project_id}/keys/{key_id}). Nothing was changed.',
  });
}

/** The refusal of a patch that would leave the customer more than key_budgets_max key budgets. */
export function tooManyKeyBudgets(wouldHave: number): ApiError {
  return new ApiError('invalid_request', {
    param: 'key_budgets',
    message: `key_budgets: a customer takes at most ${key_budgets_max} project key budgets; this request would leave ${wouldHave}. Remove some (null) first. Nothing was changed.`,
  });
}

/** Queues the meta writes of a patch (after PostgreSQL took it): the counters (`bud_k:<id>`) stay, as for a cleared budget. */
export function writeKeyBudgets(tx: ChainableCommander, meta: string, patch: KeyBudgetsPatch): void {
  for (const [id, b] of Object.entries(patch.set)) tx.hset(meta, projectKeyBudgetField(id), projectKeyBudgetValue(b));
  if (patch.remove.length > 0) tx.hdel(meta, ...patch.remove.map(projectKeyBudgetField));
}
