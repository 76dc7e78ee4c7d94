/**
 * A customer's balance alert and auto top-up settings (CONTRACT section 9): what PATCH
 * /v1/customers/{id} takes, how PostgreSQL keeps them (customers.alert_settings, migration
 * 015) and the copy the scripts read in the customer's meta hash (`al`,
 * lua/includes/alerts.lua). One module so that the three forms cannot drift apart:
 * reconcile's fold writes `al` from the row with the same function as PATCH does.
 */
import { z } from 'zod';
// zod with .openapi(): this module is also loaded without the HTTP layer (reconcile's fold, the CLI).
import '../schema/zod.js';
import { amount_credits_max } from '../ledger/amounts.js';

const credits = z.number().int().min(1).max(amount_credits_max);

export const autoTopUpSchema = z
  .object({
    below: credits.openapi({ description: 'A top-up is requested when available credits fall below this.' }),
    amount: credits.openapi({ description: 'Credits to request (`data.amount` of the event).' }),
    monthly_limit: credits.nullable().optional().openapi({ description: 'The most credits requested in a calendar month (UTC); none when absent or null.' }),
  })
  .strict()
  .refine((t) => t.monthly_limit == null || t.monthly_limit >= t.amount, {
    message: 'monthly_limit must be at least amount (no request could be made)',
    path: ['monthly_limit'],
  });

/** The two settings as PATCH takes them: undefined leaves one as it is, null clears it. */
export const alertSettingsPatchShape = {
  low_balance_threshold: credits.nullable().optional().openapi({ description: '`balance.low` fires when available credits go from at least this to below it. Null clears it.' }),
  auto_top_up: autoTopUpSchema.nullable().optional().openapi({ description: '`balance.top_up_requested` settings. Null clears them.' }),
};

/** The settings as answers show them and as PostgreSQL keeps them. */
export interface AlertSettings {
  low_balance_threshold: number | null;
  auto_top_up: { below: number; amount: number; monthly_limit: number | null } | null;
}

export const alertSettingsAnswerShape = {
  low_balance_threshold: z.number().int().nullable(),
  auto_top_up: z.object({ below: z.number().int(), amount: z.number().int(), monthly_limit: z.number().int().nullable() }).strict().nullable(),
};

const none: AlertSettings = { low_balance_threshold: null, auto_top_up: null };

/** The stored settings with a PATCH applied. */
export function patchAlertSettings(stored: AlertSettings | null, patch: { low_balance_threshold?: number | null; auto_top_up?: z.infer<typeof autoTopUpSchema> | null }): AlertSettings {
  const out = { ...(stored ?? none) };
  if (patch.low_balance_threshold !== undefined) out.low_balance_threshold = patch.low_balance_threshold;
  if (patch.auto_top_up !== undefined) {
    out.auto_top_up = patch.auto_top_up === null ? null : { below: patch.auto_top_up.below, amount: patch.auto_top_up.amount, monthly_limit: patch.auto_top_up.monthly_limit ?? null };
  }
  return out;
}

/**
 * The meta `al` value the scripts read: JSON {t, b, a, m}, integer strings, each absent
 * when not set; null when no setting is on (the field is then deleted). `s` is the stored
 * jsonb: a key the PATCHes never gave is absent, as null.
 */
export function alertMetaOf(s: Partial<AlertSettings> | null): string | null {
  const al: Record<string, string> = {};
  const threshold = s?.low_balance_threshold ?? null;
  const topUp = s?.auto_top_up ?? null;
  if (threshold !== null) al.t = String(threshold);
  if (topUp !== null) {
    al.b = String(topUp.below);
    al.a = String(topUp.amount);
    if (topUp.monthly_limit != null) al.m = String(topUp.monthly_limit);
  }
  return Object.keys(al).length === 0 ? null : JSON.stringify(al);
}

/** The settings of a meta `al` value (alertMetaOf's inverse), for the answers. */
export function alertSettingsOfMeta(raw: string | null | undefined): AlertSettings {
  if (!raw) return { ...none };
  const al = JSON.parse(raw) as { t?: string; b?: string; a?: string; m?: string };
  return {
    low_balance_threshold: al.t === undefined ? null : Number(al.t),
    auto_top_up: al.b === undefined || al.a === undefined ? null : { below: Number(al.b), amount: Number(al.a), monthly_limit: al.m === undefined ? null : Number(al.m) },
  };
}
