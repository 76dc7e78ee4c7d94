/**
 * What a reconcile run reports (src/reconcile/walk.ts): the report and its items, the
 * progress it gives as it goes, the limits a run keeps to, and the report's zod schema
 * (the documented answer of the admin job and the CLI's --json).
 */
import { z } from 'zod';
import '../schema/zod.js';

export interface DriftItem {
  project_id: string;
  customer_id: string;
  /**
   * What differs: `customer` (missing on one side), `meta.<field>`, `source` (missing on
   * one side) or `source.<field>`, `transaction` or `transaction.<field>`, `deposit` or
   * `deposit.<field>`, `ttl`, `txidx`, `depidx`, or `ledger.seq` (outbox entries whose
   * numbers PostgreSQL already holds for others: `redis` lists them, `expected` says
   * where they are renumbered from).
   */
  field: string;
  source?: string;
  transaction_id?: string;
  idempotency_key?: string;
  redis: unknown;
  expected: unknown;
}

/**
 * What a run found. The lists hold at most `items_max` entries each (report_items_max
 * unless the caller says otherwise), the first found; the `_total` counts cover all, so
 * that a run over a million drifted customers keeps a bounded report.
 */
export interface ReconcileReport {
  customers_checked: number;
  customers_with_drift: number;
  customers_repaired: number;
  drift_total: number;
  drift: DriftItem[];
  /**
   * Customers that could not be checked. `permanent`: their ledger does not fold (trying
   * again changes nothing); otherwise a store failed or the keys kept changing.
   */
  errors_total: number;
  errors: { project_id: string; customer_id: string; message: string; permanent: boolean }[];
  /**
   * What a fold found and kept rather than fail on: entries written on a Redis that had
   * forgotten earlier ones (renumbered after PostgreSQL's last), settlements or repeats
   * they made, and sources drawn beyond their total (shortfalls).
   */
  anomalies_total: number;
  anomalies: { project_id: string; customer_id: string; message: string }[];
  /**
   * Ledger entries PostgreSQL refused for good, parked in quarantine and not released:
   * holes in the ledger of record (docs/OPERATIONS.md, "Quarantined ledger entries").
   */
  quarantined_total: number;
  quarantined: QuarantinedItem[];
  /** The cap of each list. */
  items_max: number;
}

/** A quarantined entry as the report names it. */
export interface QuarantinedItem {
  project_id: string;
  customer_id: string;
  /** The quarantine row (`npm run quarantine -- show <id>`). */
  quarantine_id: number;
  /** The hole's seq; null when the entry does not name one. */
  seq: number | null;
  entry_id: string | null;
  error: string;
}

/** Where a run is: reported to `onProgress` at most every progress_interval_ms, and once at the end. */
export interface ReconcileProgress {
  customers_done: number;
  /**
   * The customers PostgreSQL holds in the run's scope when it starts (or the customers
   * given). The scan for customers only Redis holds comes after and may add to `done`.
   */
  customers_total: number;
  customers_with_drift: number;
  drift_total: number;
  errors_total: number;
  elapsed_ms: number;
}

/** Drift items, errors and anomalies a report lists at most, each (the counts cover all). */
export const report_items_max = 1_000;
/** Customers checked at once, each on a Redis connection of its own (WATCH is per connection). */
export const concurrency_default = 4;
export const concurrency_max = 64;
/** Customers read from PostgreSQL per query: reconcile walks them in pages of this many. */
export const customer_page_size = 500;

// The documented answer (src/openapi/).
const customerOf = { project_id: z.string(), customer_id: z.string() };
export const reconcileReportSchema = z
  .object({
    customers_checked: z.number().int(),
    customers_with_drift: z.number().int(),
    customers_repaired: z.number().int(),
    drift_total: z.number().int().openapi({ description: 'Differences found; `drift` lists the first `items_max`.' }),
    drift: z.array(
      z
        .object({
          ...customerOf,
          field: z.string().openapi({ description: 'What differs: `customer`, `meta.<field>`, `source[.<field>]`, `transaction[.<field>]`, `deposit[.<field>]`, `ttl`, `txidx`, `depidx` or `ledger.seq`.' }),
          source: z.string().optional(),
          transaction_id: z.string().optional(),
          idempotency_key: z.string().optional(),
          redis: z.unknown(),
          expected: z.unknown(),
        })
        .openapi('Drift'),
    ),
    errors_total: z.number().int(),
    errors: z.array(z.object({ ...customerOf, message: z.string(), permanent: z.boolean() }).strict()),
    anomalies_total: z.number().int(),
    anomalies: z.array(z.object({ ...customerOf, message: z.string() }).strict()),
    quarantined_total: z.number().int(),
    quarantined: z
      .array(
        z
          .object({
            ...customerOf,
            quarantine_id: z.number().int(),
            seq: z.number().int().nullable(),
            entry_id: z.string().nullable(),
            error: z.string(),
          })
          .strict(),
      )
      .openapi({ description: 'Ledger entries PostgreSQL refused for good, in quarantine: each seq a known hole in the ledger. A repair leaves these customers alone until they are released.' }),
    items_max: z.number().int().openapi({ description: 'The most entries each list holds (the first found); the `_total` counts cover all.' }),
  })
  .strict()
  .openapi('ReconcileReport');
